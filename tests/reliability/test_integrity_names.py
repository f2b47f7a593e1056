"""Lookalike names: seven spellings of one chip that rendered alike formed seven
groups. Now the invisible and mixed-script ones are refused (422 naming the field) and the
rest are stored canonical, so the board shows one group.

Each attack is a real signed POST against the in-process app on a tmp DuckDB file (and a
private PostgreSQL schema); the spellings are the issue's list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specschema.examples import example_submission
from specserver.ingest import names
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import dict_bytes, payload_dict, signed, signing_key
from tests.reliability.storecount import app_engine, count_rows
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
CHIP = "Apple M2"

# (label, spelling of "Apple M2", refused?) -- the seven, plus a wholly Cyrillic one.
SPELLINGS: list[tuple[str, str, bool]] = [
    ("cyrillic_a", "\u0410pple M2", True),  # CYRILLIC CAPITAL LETTER A
    ("zero_width_space", "Apple\u200b M2", True),
    ("nbsp", "Apple\u00a0M2", False),
    ("trailing_space", "Apple M2 ", False),
    ("lower_case", "apple m2", False),
    ("rtl_override", "\u202eApple M2", True),
    ("cr_lf", "Apple M2\r\n", True),
    ("all_cyrillic_lookalike", "\u0410\u0440\u0440\u04cf\u0435 \u041c2", True),
    ("fullwidth", "\uff21pple M2", False),  # FULLWIDTH LATIN CAPITAL LETTER A -> NFKC "A"
]


@pytest.fixture(params=STORES)
def client(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessClient]:
    with app_on(request.param, tmp_path) as app, InProcessClient(app) as c:
        yield c


def _body(seed: int, chip: str, **fields: Any) -> bytes:
    data = payload_dict(seed)
    data["fingerprint"]["chip"] = chip
    for path, value in fields.items():
        where = data
        *parents, last = path.split(".")
        for part in parents:
            where = where[int(part)] if isinstance(where, list) else where[part]
        where[last] = value
    return signed(dict_bytes(data), signing_key(seed))


def _chip_groups(client: InProcessClient) -> list[tuple[str | None, bool | None]]:
    board = client.get("/v1/leaderboard", params={"group_by": "chip", "view": "noise_floor"}).json()
    return sorted({(g["key"]["chip"]["chip"], g.get("chip_known")) for g in board["groups"]},
                  key=repr)


def test_lookalike_spellings_form_one_group_or_are_refused(client: InProcessClient) -> None:
    assert client.post(URL, content=_body(1, CHIP)).status_code == 201  # the honest one
    engine = app_engine(client.app)
    outcomes: dict[str, tuple[int, str | None]] = {}
    for seed, (label, spelling, refused) in enumerate(SPELLINGS, start=2):
        before = count_rows(engine)
        response = client.post(URL, content=_body(seed, spelling))
        if refused:
            error = assert_error_shape(response)
            assert response.status_code == 422, (label, response.text)
            assert error["code"] == "inconsistent"
            assert error["details"][0]["rule"] == "names_printable", error
            assert error["details"][0]["path"] == "fingerprint.chip", error
            assert "fingerprint.chip" in error["message"]
            assert count_rows(engine) == before, label  # nothing stored
        else:
            assert response.status_code == 201, (label, response.text)
        outcomes[label] = (response.status_code, response.json().get("error", {}).get("message"))
    # Before: every spelling its own group. After: one group, the known spelling.
    assert _chip_groups(client) == [(CHIP, True)]
    listed = client.get(URL, params={"limit": 50}).json()["items"]
    assert {item["chip"] for item in listed} == {CHIP}
    print("\nlookalike chip names:")
    for label, (status, message) in outcomes.items():
        print(f"  {label:<24} {status}  {message or ''}")


def test_a_chip_not_in_the_table_shows_as_new(client: InProcessClient) -> None:
    body = _body(40, "Apple M9 Hyper")
    assert client.post(URL, content=body).status_code == 201
    assert client.post(URL, content=_body(41, "  apple   m2  ")).status_code == 201
    assert _chip_groups(client) == [("Apple M2", True), ("Apple M9 Hyper", False)]


@pytest.mark.parametrize(("path", "value"), [
    ("engine.backend", "100%\u200bGPU"),
    ("client.name", "specsubmit\u202e"),
    ("models.0.name", "qwen3:14b\u2028"),
    ("fingerprint.cpu.name", "Apple \u041c2"),
    ("note", "fine note\u202egnp.exe"),
])
def test_control_and_format_characters_are_refused_in_any_name(
        client: InProcessClient, path: str, value: str) -> None:
    response = client.post(URL, content=_body(50, CHIP, **{path: value}))
    error = assert_error_shape(response)
    assert response.status_code == 422
    assert {d["path"] for d in error["details"]} >= {path}, error


def test_a_note_may_keep_its_line_breaks_and_scripts(client: InProcessClient) -> None:
    note = "Измерено на M2.\nSecond line\tok"
    response = client.post(URL, content=_body(60, CHIP, note=note))
    assert response.status_code == 201, response.text
    sid = response.json()["submission_id"]
    assert client.get(f"{URL}/{sid}").json()["submission"]["note"] == note


# --- the pure functions ---------------------------------------------------------------------


def test_known_chips_are_mapped_from_their_aliases() -> None:
    assert names.canonical_chip("geforce rtx 4090") == "NVIDIA GeForce RTX 4090"
    assert names.canonical_chip("RTX\u00a04090") == "NVIDIA GeForce RTX 4090"
    assert names.canonical_chip("Radeon RX 7900 XTX") == "AMD Radeon RX 7900 XTX"
    assert names.canonical_chip("APPLE M4 MAX") == "Apple M4 Max"
    assert names.canonical_chip("My  Homebrew  NPU ") == "My Homebrew NPU"
    assert not names.chip_is_known("My Homebrew NPU")
    assert names.chip_is_known("Apple M1 Ultra")


def test_every_known_chip_is_unambiguous_and_printable() -> None:
    entries = names.known_chips()
    assert len(entries) >= 40
    for entry in entries:
        for spelling in (entry["name"], *entry.get("aliases", ())):
            assert names.name_problem(spelling, chip=True) is None
            assert names.canonical(spelling) == spelling
        assert entry["memory_bandwidth_gbs"] > 0 and entry["source"].startswith("https://")
    assert len({e["name"] for e in entries}) == len(entries)


def test_mixed_scripts_are_refused_but_single_foreign_scripts_are_not() -> None:
    assert names.name_problem("\u0410pple M2") is not None  # Cyrillic A in a Latin name
    assert names.name_problem("\u0391pple M2") is not None  # Greek Alpha
    assert names.name_problem("Кластер 7") is None  # a Cyrillic name, not a known chip
    assert names.name_problem("Apple M2 日本") is None  # Latin with CJK is no lookalike
    assert names.name_problem("\u0410\u0440\u0440\u04cf\u0435 \u041c2", chip=True) is not None
    assert names.name_problem("Apple\u034fM2") is not None  # combining grapheme joiner
    assert names.name_problem("Apple M2\ufe0f") is not None  # variation selector


def test_the_example_submission_is_untouched() -> None:
    # The canonical form of every name in an honest submission is the name itself.
    sub = example_submission("hardnumbers-m2", seed=1)
    data = json.loads(sub.model_dump_json())
    assert names.canonical(data["fingerprint"]["chip"]) == data["fingerprint"]["chip"]


# --- the second round of lookalikes, by the Unicode standard (UTS #39) -------------

# Each renders as (or like) "Apple M2" / a known chip; each is refused, the ASCII ones too.
SECOND_ROUND: list[tuple[str, str]] = [
    ("cherokee_capitals", "\u13aa\u13e2\u13e2\u13de\u13ac \u13b72"),  # ᎪᏢᏢᏞᎬ Ꮇ2
    ("cherokee_a", "\u13aapple M2"),
    ("lisu", "\ua4eepple \ua4df2"),  # ꓮpple ꓟ2
    ("armenian_o", "Apple M2 Pr\u0585"),  # ARMENIAN SMALL LETTER OH in "Pro"
    ("braille_blank", "Apple\u2800M2"),  # BRAILLE PATTERN BLANK as the space
    ("combining_dot", "Apple M2\u0307"),
    ("capital_i_for_l", "AppIe M2"),  # ASCII
    ("digit_one_for_l", "App1e M2"),  # ASCII
]


@pytest.mark.parametrize(("label", "spelling"), SECOND_ROUND, ids=[s[0] for s in SECOND_ROUND])
def test_second_round_lookalikes_are_refused(client: InProcessClient, label: str,
                                             spelling: str) -> None:
    assert client.post(URL, content=_body(1, CHIP)).status_code == 201
    engine = app_engine(client.app)
    before = count_rows(engine)
    response = client.post(URL, content=_body(2, spelling))
    error = assert_error_shape(response)
    assert response.status_code == 422, (label, response.text)
    assert error["details"][0]["rule"] == "names_printable", error
    assert error["details"][0]["path"] == "fingerprint.chip", error
    assert count_rows(engine) == before
    assert _chip_groups(client) == [(CHIP, True)]
    print(f"\n{label}: {error['details'][0]['message']}")


def _v2_body(seed: int, **engine: Any) -> bytes:
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             schema_version=2, counters_seen=True)
    data = json.loads(sub.model_dump_json())
    data["engine"].update(engine)
    return signed(dict_bytes(data), signing_key(seed))


def test_engine_build_goes_through_the_name_rules(client: InProcessClient) -> None:
    response = client.post(URL, content=_v2_body(70, build="b5123\u202egnp.exe"))
    error = assert_error_shape(response)
    assert response.status_code == 422, response.text
    assert {d["path"] for d in error["details"]} == {"engine.build"}
    assert client.post(URL, content=_v2_body(71, build="b5123 (0b0e0c1)")).status_code == 201


@pytest.mark.parametrize("path", ["models.0.name", "configs.0.model"])
def test_a_lookalike_of_a_known_model_is_refused(client: InProcessClient, path: str) -> None:
    data = payload_dict(80)
    target = data["configs"][0]["model"]
    assert target == "qwen3:14b"  # hardnumbers-m2's target, in known_models.json
    for config in data["configs"]:
        config["model"] = "qwen3:l4b" if path == "configs.0.model" else target
    for model in data["models"]:
        if model["name"] == target and path == "models.0.name":
            model["name"] = "qwen3:l4b"
    response = client.post(URL, content=signed(dict_bytes(data), signing_key(80)))
    error = assert_error_shape(response)
    assert response.status_code == 422
    assert any("lookalike of the known model 'qwen3:14b'" in d["message"]
               for d in error["details"]), error


def test_the_page_shows_a_new_chip_as_new(client: InProcessClient) -> None:
    assert client.post(URL, content=_body(90, "Apple M9 Hyper")).status_code == 201
    assert client.post(URL, content=_body(91, CHIP)).status_code == 201
    page = client.get("/").text
    marked = set(re.findall(r'<span class="chip">([^<]*)</span> <span class="new-chip"', page))
    assert marked == {"Apple M9 Hyper"}, marked


def test_honest_foreign_and_symbol_names_still_pass() -> None:
    assert names.name_problem("Кластер 7", chip=True) is None
    assert names.name_problem("Apple M2 日本", chip=True) is None
    assert names.name_problem("Intel® Core™ i7-12700H @ 2.30GHz", chip=True) is None
    assert names.name_problem("Café GPU", chip=True) is None  # a composed é is one letter
    assert names.name_problem("\u0410\u0440\u0440\u04cf\u0435 \u041c2", chip=True) is not None
    assert names.skeleton("AppIe M2") == names.skeleton("apple m2")
