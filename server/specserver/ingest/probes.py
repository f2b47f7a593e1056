"""A cost probe's checks and its row, as one pure step: body bytes in, ``ProbeRow`` out.

The same steps as a submission's where they apply (``ingest.checks``): the envelope's form
and signature, of the probe's own payload type (a submission's signature is never a
probe's, nor the reverse); strict JSON and the wire model (``specschema.probe``); a
created_at neither in the future nor older than the maximum age; names in their canonical
spelling (``ingest.names``), so that a probe's chip is the chip its owner's results name.
The sender's address range is added by the server process, which knows the address.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from specschema.crowd import cost_unit
from specschema.envelope import verify_envelope
from specschema.errors import SpecSchemaError
from specschema.probe import PROBE_PAYLOAD_TYPE, parse_probe
from specserver.errors import Invalid, SpecServerError, signed_refusal
from specserver.ingest.checks import parse_envelope_json
from specserver.ingest.names import canonical_chip, canonical_model, canonical_optional
from specserver.ingest.rows import canonical_quant
from specserver.store import probes as stored

__all__ = ["check_probe"]


def _naive_utc(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)


def check_probe(body: bytes, *, received_at: datetime, max_age: timedelta,
                max_future_skew: timedelta) -> stored.ProbeRow:
    """Checks and row of one probe; raises ``specserver.errors`` / ``specschema.errors``
    (a refusal after the signature verified names its key: ``signed_refusal``)."""
    verified = verify_envelope(parse_envelope_json(body), PROBE_PAYLOAD_TYPE)
    try:
        return _probe_row(body, verified.payload, verified.key_id, received_at, max_age,
                          max_future_skew)
    except (SpecServerError, SpecSchemaError) as exc:
        raise signed_refusal(exc, verified.key_id) from None


def _probe_row(body: bytes, payload: bytes, key_id: str, received_at: datetime,
               max_age: timedelta, max_future_skew: timedelta) -> stored.ProbeRow:
    probe = parse_probe(payload)
    created = probe.created_at
    if created > received_at + max_future_skew:
        raise Invalid(f"created_at {created.isoformat()} is in the future",
                      code="inconsistent")
    if created < received_at - max_age:
        raise Invalid(f"created_at {created.isoformat()} is older than {max_age.days} days",
                      code="inconsistent")
    sizes = [p.tokens for p in probe.points]
    if len(set(sizes)) != len(sizes):
        raise Invalid("points: a size of k is measured twice", code="inconsistent")
    fp, engine, target = probe.fingerprint, probe.engine, probe.target
    return stored.ProbeRow({
        "probe_id": str(probe.probe_id), "key_id": key_id,
        "received_at": _naive_utc(received_at), "created_at": _naive_utc(created),
        "envelope_sha256": hashlib.sha256(body).hexdigest(), "envelope": body,
        "origin_hash": None, "chip": canonical_chip(fp.chip), "memory_gb": fp.memory_gb,
        "os_name": fp.os.name, "engine_name": engine.name, "engine_version": engine.version,
        "engine_build": canonical_optional(engine.build),
        "backend": canonical_optional(engine.backend),
        "target_model": canonical_model(target.name), "target_digest": target.digest,
        "target_quant": canonical_quant(target.quantization),
        "target_size_bytes": target.size_bytes, "threads": probe.threads,
        "context_tokens": probe.context_tokens,
        "samples": stored.samples_text(cost_unit(probe).samples), "hidden": False,
        "measured": probe.measured,
    })
