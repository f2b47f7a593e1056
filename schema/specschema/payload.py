"""From bytes to a Submission and back: strict parse, schema validation, serialization."""

from __future__ import annotations

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
            f"submission does not match schema v1: {first['path']}: {first['message']}",
            details=paths,
        ) from None


def submission_bytes(submission: Submission) -> bytes:
    """The payload bytes a client signs (compact JSON, UTF-8)."""
    return submission.model_dump_json(exclude_none=False).encode("utf-8")
