"""Old home of the ingestion test helpers, kept only for test_ingest_rules.py and
test_ingest_fast.py, which are being rewritten elsewhere; delete this module when they move
and import from ``tests.support.signed`` / ``tests.support.served`` instead."""

from tests.support.served import URL, Served, error_of, settings_for
from tests.support.signed import payload_dict, sign_bytes, sign_dict, signer, valid_body

__all__ = ["URL", "Served", "error_of", "payload_dict", "settings_for", "sign_bytes",
           "sign_dict", "signer", "valid_body"]
