"""The OpenAPI document describes the POST body with the published envelope schema itself
(schema/jsonschema/envelope.v1.schema.json), not a hand copy that can drift from it."""

from __future__ import annotations

import json
from pathlib import Path

from specserver.http.app import create_app
from tests.support.served import settings_for

PUBLISHED = (Path(__file__).resolve().parents[3] / "schema" / "jsonschema"
             / "envelope.v1.schema.json")


def test_the_post_body_schema_is_the_published_envelope_schema(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path))
    body = app.openapi()["paths"]["/v1/submissions"]["post"]["requestBody"]
    documented = body["content"]["application/json"]["schema"]
    published = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    published.pop("$schema")
    assert documented == published
