"""ingest."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specserver.ingest.names import (
        canonical_chip,
        canonical_model_optional,
        chip_is_known,
        known_chips,
    )
    from specserver.ingest.plausibility import target_unsized_reason
    from specserver.ingest.prepare import CheckLimits, Prepared, prepare_submission, receipt_json
    from specserver.ingest.probes import check_probe
    from specserver.ingest.workers import CheckPool

_LAZY: dict[str, str] = {
    "CheckLimits": "specserver.ingest.prepare",
    "CheckPool": "specserver.ingest.workers",
    "Prepared": "specserver.ingest.prepare",
    "canonical_chip": "specserver.ingest.names",
    "check_probe": "specserver.ingest.probes",
    "canonical_model_optional": "specserver.ingest.names",
    "chip_is_known": "specserver.ingest.names",
    "known_chips": "specserver.ingest.names",
    "prepare_submission": "specserver.ingest.prepare",
    "receipt_json": "specserver.ingest.prepare",
    "target_unsized_reason": "specserver.ingest.plausibility",
}

__all__ = [
    "CheckLimits",
    "CheckPool",
    "Prepared",
    "canonical_chip",
    "canonical_model_optional",
    "check_probe",
    "chip_is_known",
    "known_chips",
    "hardnumbers",
    "prepare_submission",
    "receipt_json",
    "target_unsized_reason",
]

__getattr__ = lazy_names(__name__, _LAZY)
