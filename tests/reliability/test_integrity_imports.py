"""Import squatting: the reference import's submission id is uuid5 of the public
file, so anyone could post a signed submission under it first and the maintainer's import
then failed with a misleading 409. Now signed ids may not be version-5 UUIDs (the imports'
namespace), and every 409 says who holds the id.

The file is the real published Hard Numbers results file (tests/server/data, provenance
beside it); the posts are real signed envelopes against the in-process app.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specschema import key_id_of
from specschema.examples import example_submission
from specserver.ingest import hardnumbers
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import dict_bytes, payload_dict, signed, signing_key
from tests.reliability.storecount import app_engine, count_rows
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.boardfill import insert_submission
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
TOKEN = "t" * 40
FIXTURE = Path(__file__).parents[1] / "server" / "data" / "hardnumbers_spec_decode_m2.json"
IMPORT = {"chip": "Apple M2", "memory_gb": 24, "ollama_version": "0.12.8", "os": "macos",
          "source": "github.com/Pitambarmahato/hardnumbers-experiments"}


@pytest.fixture(params=STORES)
def client(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessClient]:
    with app_on(request.param, tmp_path, admin_token=TOKEN) as app, InProcessClient(app) as c:
        yield c


def _import_id() -> str:
    content = FIXTURE.read_bytes()
    imported = hardnumbers.build_submission(content, chip="Apple M2", memory_gb=24,
                                            ollama_version="0.12.8", os_name="macos",
                                            source=IMPORT["source"])
    return imported.submission_id


def _import(client: InProcessClient) -> Any:
    body = {**IMPORT, "content": FIXTURE.read_text("utf-8")}
    return client.post("/admin/v1/import-hardnumbers", content=json.dumps(body).encode(),
                       headers={"Authorization": f"Bearer {TOKEN}",
                                "Content-Type": "application/json"})


def test_a_signed_post_cannot_take_the_import_id(client: InProcessClient) -> None:
    squat_id = _import_id()
    data = payload_dict(7)
    data["submission_id"] = squat_id
    engine = app_engine(client.app)
    before = count_rows(engine)
    response = client.post(URL, content=signed(dict_bytes(data), signing_key(7)))
    error = assert_error_shape(response)
    assert response.status_code == 422
    assert error["details"][0]["rule"] == "submission_id_not_reserved"
    assert count_rows(engine) == before
    # Before: the squat was stored (201) and the import below got a 409. After:
    imported = _import(client)
    assert imported.status_code == 201, imported.text
    assert imported.json()["submission_id"] == squat_id
    view = client.get(f"{URL}/{squat_id}").json()
    assert view["submission"]["source"] == "imported"
    again = _import(client)
    assert again.status_code == 409
    assert assert_error_shape(again)["details"]["held_by"] == "import"


def test_a_squat_stored_before_the_rule_gets_a_409_naming_its_key(
        client: InProcessClient) -> None:
    squatter = signing_key(8)
    sub = example_submission("hardnumbers-m2", seed=8)
    sub = sub.model_copy(update={"submission_id": uuid.UUID(_import_id())})
    insert_submission(app_engine(client.app), sub, squatter)  # as an older server stored it
    response = _import(client)
    error = assert_error_shape(response)
    assert response.status_code == 409
    assert error["code"] == "id_held_by_signed"
    holder = key_id_of(bytes(squatter.verify_key))
    assert error["details"] == {"submission_id": _import_id(), "held_by": "signed",
                                "key_id": holder}
    assert holder in error["message"]


def test_a_signed_conflict_names_the_key_that_holds_the_id(client: InProcessClient) -> None:
    first = payload_dict(9)
    assert client.post(URL, content=signed(dict_bytes(first), signing_key(9))).status_code == 201
    other = payload_dict(10)
    other["submission_id"] = first["submission_id"]
    response = client.post(URL, content=signed(dict_bytes(other), signing_key(10)))
    error = assert_error_shape(response)
    assert response.status_code == 409
    holder = key_id_of(bytes(signing_key(9).verify_key))
    assert error["details"] == {"submission_id": first["submission_id"], "held_by": "signed",
                                "key_id": holder}
    assert holder in error["message"]
