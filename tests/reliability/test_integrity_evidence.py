"""Forged counters: "confirmed" only meant that the client filled in drafted and
accepted, and an engine version of ``-2+3`` still confirmed. Now every config carries an
evidence level (specschema.evidence) and a confirmed result reaches the speedup board only
with counters consistent with its trials (``engine_api`` or ``log``); the rest is stored,
shown with its reason on its page and in the exports, counted in ``evidence_counts``, and
kept off the board.

Every attack is a real signed POST against the in-process app on a tmp DuckDB file (and a
private PostgreSQL schema), next to five honest contributors posted the same way.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specschema.capability import engine_can_honor, submission_verdicts
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.payload import parse_submission, submission_bytes
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import dict_bytes, signed, signing_key
from tests.reliability.storecount import app_engine, count_rows
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
M2 = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")
HONEST = [1.05, 1.08, 1.10, 1.12, 1.15]


@pytest.fixture(params=STORES)
def client(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessClient]:
    with app_on(request.param, tmp_path) as app, InProcessClient(app) as c:
        yield c


def v2_dict(seed: int, speedup: float) -> dict[str, Any]:
    """An honest v2 Ollama run (log read, per-trial counters 240 drafted / 180 accepted)."""
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.34.1", machine=M2,
                             target="gemma4:mtp", counters_seen=True, schema_version=2,
                             runtime="ggml", draft_speedups={"spec_4": speedup,
                                                             "spec_8": speedup})
    return json.loads(submission_bytes(sub))  # type: ignore[no-any-return]


def rederive(data: dict[str, Any]) -> dict[str, Any]:
    """The verdicts the one rule derives, as an attacker's client would send them."""
    for config, verdict in zip(data["configs"], submission_verdicts(
            parse_submission(json.dumps(data).encode())), strict=True):
        config["speculation"]["observed"] = verdict
    return data


def set_counters(data: dict[str, Any], drafted: int, accepted: int) -> None:
    for config in data["configs"]:
        if config["role"] != "draft":
            continue
        for trial in config["trials"]:
            trial["counters"].update(drafted=drafted, accepted=accepted)
        count = len(config["trials"])
        config["speculation"].update(drafted_tokens=drafted * count,
                                     accepted_tokens=accepted * count)


def log_not_read(seed: int) -> dict[str, Any]:
    """Invented counters on an Ollama whose log the client says it never read."""
    data = v2_dict(seed, 3.0)
    data["engine_log"] = "not_given"
    return data


def three_x_at_ten_percent(seed: int) -> dict[str, Any]:
    data = v2_dict(seed, 3.0)
    set_counters(data, drafted=200, accepted=20)  # 10 % of what was drafted
    return data


def unparseable_version(seed: int) -> dict[str, Any]:
    data = v2_dict(seed, 3.0)
    data["engine"]["version"] = "-2+3"
    for config in data["configs"]:
        config["speculation"]["engine_can_honor"] = engine_can_honor(
            config["speculation"]["mechanism"], "-2+3")
    return rederive(data)


def sums_do_not_add_up(seed: int) -> dict[str, Any]:
    data = v2_dict(seed, 3.0)
    data["configs"][1]["speculation"]["drafted_tokens"] += 1
    return data


def api_counters_on_ollama(seed: int) -> dict[str, Any]:
    data = v2_dict(seed, 3.0)
    for config in data["configs"][1:]:
        config["speculation"]["counters_source"] = "engine_api"
        for trial in config["trials"]:
            trial["counters"]["source"] = "engine_api"
    return data


# (attack, what the server does: a stored level or a refusal naming the rule)
STORED = [(log_not_read, "reported"), (three_x_at_ten_percent, "implausible"),
          (unparseable_version, "reported")]
REFUSED = [(sums_do_not_add_up, "counters_consistent"),
           (api_counters_on_ollama, "counters_consistent")]


def post(client: InProcessClient, data: dict[str, Any], seed: int) -> Any:
    return client.post(URL, content=signed(dict_bytes(data), signing_key(seed)))


def spec4_group(client: InProcessClient) -> dict[str, Any]:
    board = client.get("/v1/leaderboard", params={"chip": "Apple M2", "draft": "spec_4"}).json()
    assert len(board["groups"]) == 1, board
    return {**board["groups"][0], "evidence_counts": board["evidence_counts"]}


def honest_board(client: InProcessClient) -> dict[str, Any]:
    for seed, speedup in enumerate(HONEST, start=1):
        response = post(client, v2_dict(seed, speedup), seed)
        assert response.status_code == 201, response.text
    return spec4_group(client)


@pytest.mark.parametrize(("attack", "level"), STORED, ids=[a.__name__ for a, _ in STORED])
def test_forged_counters_are_stored_but_never_confirmed_on_the_board(
        client: InProcessClient, attack: Any, level: str) -> None:
    before = honest_board(client)
    assert before["evidence"]["log"] == len(HONEST) and before["submissions"] == len(HONEST)
    ids = []
    for seed in range(100, 110):  # ten fresh keys, each with the attack
        data = attack(seed)
        assert data["configs"][1]["speculation"]["observed"] == "confirmed"  # as sent
        response = post(client, data, seed)
        assert response.status_code == 201, response.text  # stored, never silently dropped
        ids.append(response.json()["submission_id"])
    after = spec4_group(client)
    # The ten are on no board: the group holds the honest five, its median theirs.
    assert after["submissions"] == len(HONEST)
    assert after["verdicts"]["confirmed"] == len(HONEST)
    assert min(HONEST) <= after["median_speedup"] <= max(HONEST)
    assert after["evidence"] == before["evidence"]
    # ... but counted (the board's filters select spec_4: one draft config each).
    assert after["evidence_counts"][level] == len(ids)
    items = client.get(URL, params={"chip": "Apple M2"}).json()["items"]
    stored = {i["submission_id"]: i for i in items}
    for sid in ids:
        drafts = stored[sid]["drafts"]
        assert {d["observed"] for d in drafts} == {"confirmed"}
        assert {d["evidence"] for d in drafts} == {level}
        assert all(d["evidence_reason"] for d in drafts)
    page = client.get(f"/submissions/{ids[0]}").text
    assert f'data-evidence="{level}"' in page and "not counted" in page
    assert f"not counted: {level} counters" in client.get("/").text  # recent submissions
    rows = list(csv.DictReader(io.StringIO(client.get("/v1/export").text)))
    assert {r["evidence"] for r in rows if r["submission_id"] == ids[0]
            and r["role"] == "draft"} == {level}


@pytest.mark.parametrize(("attack", "rule"), REFUSED, ids=[a.__name__ for a, _ in REFUSED])
def test_counters_that_contradict_their_trials_are_refused(
        client: InProcessClient, attack: Any, rule: str) -> None:
    engine = app_engine(client.app)
    before = count_rows(engine)
    response = post(client, attack(200), 200)
    error = assert_error_shape(response)
    assert response.status_code == 422 and error["message"].startswith(f"{rule}:"), error
    assert count_rows(engine) == before


def llama_server_dict(seed: int) -> dict[str, Any]:
    """A v2 llama-server run whose counters come from its own API (timings.draft_n)."""
    sub = example_submission("llamacpp-draft", seed=seed, machine=M2, counters_seen=True,
                             schema_version=2, runtime="ggml", engine_version="0.5.0-dev")
    data: dict[str, Any] = json.loads(submission_bytes(sub))
    data["engine"]["name"] = "llama-server"
    data["engine_log"] = None
    for config in data["configs"]:
        if config["speculation"]["counters_source"] is not None:
            config["speculation"]["counters_source"] = "engine_api"
        for trial in config["trials"]:
            if trial["counters"] is not None:
                trial["counters"]["source"] = "engine_api"
    return rederive(data)


def test_llama_server_api_counters_rank_above_log_counters(client: InProcessClient) -> None:
    honest_board(client)  # log-scraped counters on Ollama
    response = post(client, llama_server_dict(300), 300)
    assert response.status_code == 201, response.text
    board = client.get("/v1/leaderboard", params={"chip": "Apple M2"}).json()
    by_protocol: dict[str, set[str]] = {}
    for group in board["groups"]:
        found = {level for level, n in group["evidence"].items() if n}
        by_protocol.setdefault(group["key"]["protocol"]["protocol_id"], set()).update(found)
    assert by_protocol["llamacpp-draft"] == {"engine_api"}
    assert by_protocol["ollama-draft"] == {"log"}
    page = client.get(f"/submissions/{response.json()['submission_id']}").text
    assert 'data-evidence="engine_api"' in page and "llama-server&#x27;s own API" in page
    home = client.get("/").text  # the board's Evidence column names each group's level
    # each speedup row names its evidence under its outcome, in plain words
    assert re.search(r'<td class="outcome [a-z]+" [^>]*>[^<]*<br><span class="evidence">[^<]*'
                     r'<span class="count" data-evidence="engine_api"[^>]*>API counters', home)
    assert re.search(r'<span class="evidence">[^<]*<span class="count" data-evidence="log"[^>]*>'
                     r"log counters", home)
