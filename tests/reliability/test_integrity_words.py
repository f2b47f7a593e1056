"""Words that say what was checked: self-consistent invented per-trial counters
reached the levels ``log`` (3.1x) and ``engine_api`` (2.5x), and the page said "confirmed:
speculation seen" under a "log" / "API" badge. The server never sees an engine: it checks
the counters' arithmetic against the trials and timings.

The same submissions (consistent counters from a log on Ollama, from the API on
llama-server) are posted; every public view (the board page, /v1/leaderboard, each
submission's page and API view) is searched for "seen", and the level words must say who
reported and what the server checked. DuckDB and PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from specschema.conclusion import LEVEL_BADGES
from specschema.evidence import LEVELS
from tests.reliability.apps import STORES, app_on
from tests.reliability.test_integrity_evidence import llama_server_dict, post, v2_dict
from tests.support.inprocess import InProcessClient

SEEN = re.compile(r"\b(seen|saw|showed)\b", re.IGNORECASE)


@pytest.fixture(params=STORES)
def client(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessClient]:
    with app_on(request.param, tmp_path, new_key_probation_days=0) as app, \
            InProcessClient(app) as c:
        yield c


def _visible_text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_no_public_view_says_seen_and_levels_say_who_reported_what(
        client: InProcessClient) -> None:
    ids = []
    for seed, speedup in ((1, 3.1), (2, 3.1), (3, 3.1)):  # invented, consistent log counters
        response = post(client, v2_dict(seed, speedup), seed)
        assert response.status_code == 201, response.text
        ids.append(response.json()["submission_id"])
    response = post(client, llama_server_dict(300), 300)  # counters "from the API"
    assert response.status_code == 201, response.text
    ids.append(response.json()["submission_id"])

    board = client.get("/v1/leaderboard").json()
    levels = {level for g in board["groups"] for level, n in g["evidence"].items() if n}
    assert {"log", "engine_api"} <= levels  # the attack still reaches those levels ...
    # ... and the API says what that means: reported by the client, checked by the server
    assert set(board["evidence_levels"]) == set(LEVELS)
    for level in ("log", "engine_api"):
        words = board["evidence_levels"][level]
        assert words["client_reported"].startswith("the client reports")
        assert "the server checked" in words["server_checked"]
    home = client.get("/").text
    assert f">{LEVEL_BADGES['log']} " in home and f">{LEVEL_BADGES['engine_api']} " in home

    views = {"page": _visible_text(home), "leaderboard": client.get("/v1/leaderboard").text}
    for sid in ids:
        views[f"/submissions/{sid}"] = _visible_text(client.get(f"/submissions/{sid}").text)
        views[f"/v1/submissions/{sid}"] = client.get(f"/v1/submissions/{sid}").text
    said = {name: sorted({m.group(0) for m in SEEN.finditer(text)})
            for name, text in views.items()}
    assert {name: words for name, words in said.items() if words} == {}
