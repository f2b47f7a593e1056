"""Generate the published JSON Schema files from the models.

Run ``python -m specschema.jsonschema_export schema/jsonschema`` to regenerate;
tests fail when the committed files are stale.

``submission.v1.schema.json`` is published and frozen (v1 is the same models without the
v2 fields; tests pin its hash): only the current version's file is generated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from specschema.models import SCHEMA_VERSION, Submission

ENVELOPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "specatlas DSSE envelope",
    "type": "object",
    "additionalProperties": False,
    "required": ["payloadType", "payload", "signatures"],
    "properties": {
        # The wire's name from before the rename to specatlas: signatures cover it.
        "payloadType": {"const": "application/vnd.specbench.submission.v1+json"},
        "payload": {"type": "string", "contentEncoding": "base64"},
        "signatures": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["keyid", "publicKey", "sig"],
                "properties": {
                    "keyid": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    "publicKey": {"type": "string", "contentEncoding": "base64"},
                    "sig": {"type": "string", "contentEncoding": "base64"},
                },
            },
        },
    },
}


def generated_files() -> dict[str, str]:
    submission = Submission.model_json_schema()
    submission["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    submission["description"] = (
        f"specatlas submission, schema_version {SCHEMA_VERSION} (version 1 is read too)"
    )
    return {
        f"submission.v{SCHEMA_VERSION}.schema.json":
            json.dumps(submission, indent=2, sort_keys=True) + "\n",
        "envelope.v1.schema.json": json.dumps(ENVELOPE_SCHEMA, indent=2, sort_keys=True) + "\n",
    }


def write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in generated_files().items():
        (folder / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "schema/jsonschema"))
