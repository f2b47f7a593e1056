"""Marks that compose: ``Apple M`` + U+0323 + ``2`` was stored as a new chip ``Apple Ṃ2``.
NFKC composes the M and the dot below into one real letter (U+1E42), so the rule against a
mark left over on a Latin letter never saw it, and UTS #39 skeletons keep marks, so the
skeleton was not Apple M2's. The lookalike rule now also compares the composed name's
letters without their marks (``names.unmarked``): decomposed or precomposed, an accented
spelling of a known chip or model is refused; an accented name of a chip nobody knows is
still a name.

Each spelling is a real signed POST against the in-process app on a tmp DuckDB file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specserver.ingest import names
from tests.reliability.apps import app_on
from tests.reliability.hostile import dict_bytes, payload_dict, signed, signing_key
from tests.reliability.storecount import app_engine, count_rows
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
CHIP = "Apple M2"
MODEL = "qwen3:14b"  # hardnumbers-m2's target, in known_models.json

# (label, spelling): each renders as Apple M2 with a dot, an accent or a hook somewhere.
CHIP_SPELLINGS: list[tuple[str, str]] = [
    ("decomposed_dot_below_on_m", "Apple M\u03232"),  # the review's: NFKC makes it U+1E42
    ("precomposed_dot_below_on_m", "Apple \u1e422"),
    ("precomposed_dot_below_on_e", "Appl\u1eb9 M2"),  # was listed as not covered
    ("decomposed_acute_on_e", "Apple\u0301 M2"),
    ("precomposed_acute_on_a_lower", "\u00e1pple m2"),
    ("decomposed_grave_on_a", "A\u0300pple M2"),
]
MODEL_SPELLINGS: list[tuple[str, str]] = [
    ("precomposed_acute", "qw\u00e9n3:14b"),
    ("decomposed_acute", "qwe\u0301n3:14b"),
    ("decomposed_dot_below_and_case", "QWE\u0323N3:14B"),
]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[InProcessClient]:
    with app_on("duckdb", tmp_path) as app, InProcessClient(app) as c:
        yield c


def _with_chip(seed: int, chip: str) -> bytes:
    data = payload_dict(seed)
    data["fingerprint"]["chip"] = chip
    return signed(dict_bytes(data), signing_key(seed))


def _with_model(seed: int, model: str) -> bytes:
    data: dict[str, Any] = payload_dict(seed)
    assert data["configs"][0]["model"] == MODEL
    for config in data["configs"]:
        if config["model"] == MODEL:
            config["model"] = model
    for entry in data["models"]:
        if entry["name"] == MODEL:
            entry["name"] = model
    return signed(dict_bytes(data), signing_key(seed))


def _chips(client: InProcessClient) -> set[str]:
    board = client.get("/v1/leaderboard", params={"group_by": "chip",
                                                  "view": "noise_floor"}).json()
    return {g["key"]["chip"]["chip"] for g in board["groups"]}


@pytest.mark.parametrize(("label", "spelling"), CHIP_SPELLINGS,
                         ids=[s[0] for s in CHIP_SPELLINGS])
def test_an_accented_spelling_of_a_known_chip_is_refused(client: InProcessClient, label: str,
                                                         spelling: str) -> None:
    assert client.post(URL, content=_with_chip(1, CHIP)).status_code == 201
    engine = app_engine(client.app)
    before = count_rows(engine)
    response = client.post(URL, content=_with_chip(2, spelling))
    error = assert_error_shape(response)
    assert response.status_code == 422, (label, response.text)
    problem = error["details"][0]
    assert (problem["rule"], problem["path"]) == ("names_printable", "fingerprint.chip")
    assert "lookalike of the known chip 'Apple M2'" in problem["message"], problem
    assert count_rows(engine) == before
    assert _chips(client) == {CHIP}


@pytest.mark.parametrize(("label", "spelling"), MODEL_SPELLINGS,
                         ids=[s[0] for s in MODEL_SPELLINGS])
def test_an_accented_spelling_of_a_known_model_is_refused(client: InProcessClient, label: str,
                                                          spelling: str) -> None:
    response = client.post(URL, content=_with_model(3, spelling))
    error = assert_error_shape(response)
    assert response.status_code == 422, (label, response.text)
    assert any(f"lookalike of the known model '{MODEL}'" in d["message"]
               for d in error["details"]), error


def test_accented_names_nobody_knows_are_still_names(client: InProcessClient) -> None:
    for seed, chip in enumerate(("Caf\u00e9 GPU", "Caf\u0065\u0301 GPU X"), start=10):
        response = client.post(URL, content=_with_chip(seed, chip))
        assert response.status_code == 201, response.text
    # stored composed (NFKC): the decomposed é is the precomposed one
    assert {"Caf\u00e9 GPU", "Caf\u00e9 GPU X"} <= _chips(client)


def test_the_rule_compares_the_composed_form_and_its_letters() -> None:
    assert names.unmarked("Apple \u1e422") == "Apple M2"
    assert names.unmarked("Apple M\u03232") == "Apple M2"
    assert names.skeletons("Apple M2") == (names.skeleton("Apple M2"),)
    marked = names.skeletons("Apple \u1e422")
    assert marked[0] != names.skeleton("Apple M2")  # UTS #39 keeps the mark
    assert marked[1] == names.skeleton("Apple M2")
    assert names.name_problem("Apple M2 \u00c9dition", chip=True) is None  # not a known one
    assert names.name_problem("\u041a\u043b\u0430\u0441\u0442\u0435\u0440 7", chip=True) is None
