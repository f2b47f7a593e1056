"""From bytes to a Submission and back: strict parse, schema validation, serialization."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from specschema.errors import PayloadSchemaError
from specschema.models import Submission
from specschema.strictjson import loads_strict


def schema_error_paths(exc: ValidationError) -> list[dict[str, str]]:
    return [
        {"path": ".".join(str(p) for p in err["loc"]) or "$", "message": err["msg"]}
        for err in exc.errors(include_url=False)[:50]
    ]


def parse_submission(payload: bytes) -> Submission:
    """Strict JSON first (PayloadParseError), then the wire models (PayloadSchemaError)."""
    loads_strict(payload)
    try:
        return Submission.model_validate_json(payload)
    except ValidationError as exc:
        paths = schema_error_paths(exc)
        first = paths[0]
        raise PayloadSchemaError(
            f"submission does not match the schema: {first['path']}: {first['message']}",
            details=paths,
        ) from None


# The v2 fields, left out of a v1 submission's bytes (a v1 submission holds only their
# defaults: models.v1_violations), so that v1 bytes are what they were before v2.
_V2_ONLY: dict[str, Any] = {
    "engine": {"runtime", "build"},
    "engine_log": True,
    "models": {"__all__": {"format"}},
    "configs": {"__all__": {
        "speculation": {"mean_accepted_len", "launches", "refusal", "diverged_at"},
        "trials": {"__all__": {"counters", "block", "diverged_at", "started_s", "load_1m",
                               "client_cpu_s"}},
    }},
}
# Fields added to v2 later, left out of a v2 submission's bytes while none of its configs
# uses them, so that a v2 submission made before them keeps its bytes too.
_NO_FLAGS: dict[str, Any] = {"speculation": {"launches": {"__all__": {"flags"}}}}
_NO_ROUNDS: set[str] = {"rounds", "accepted_per_position"}
_LATER_TRIAL_FIELDS = ("block", "started_s", "load_1m", "client_cpu_s")


def _later_fields_unused(submission: Submission) -> dict[str, Any] | None:
    configs = submission.configs
    unused: dict[str, Any] = {}
    trials: dict[str, Any] = {}
    for field in _LATER_TRIAL_FIELDS:
        if all(getattr(t, field) is None for c in configs for t in c.trials):
            trials[field] = True
    counters = [t.counters for c in configs for t in c.trials if t.counters is not None]
    unused_counters: set[str] = set()
    if all(x.rounds is None and x.accepted_per_position is None for x in counters):
        unused_counters |= _NO_ROUNDS
    if all(x.drafted_past_end is None for x in counters):
        unused_counters.add("drafted_past_end")
    if unused_counters:
        trials["counters"] = unused_counters
    if trials:
        unused["trials"] = {"__all__": trials}
    if all(not launch.flags for c in configs for launch in c.speculation.launches):
        unused.update(_NO_FLAGS)
    return {"configs": {"__all__": unused}} if unused else None


def submission_bytes(submission: Submission) -> bytes:
    """The payload bytes a client signs (compact JSON, UTF-8)."""
    exclude = _V2_ONLY if submission.schema_version == 1 else _later_fields_unused(submission)
    return submission.model_dump_json(exclude_none=False, exclude=exclude).encode("utf-8")
