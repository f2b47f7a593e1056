"""The engine as a dimension, through the real ingest path.

Two submissions go in through ``POST /v1/submissions``: a v1 hardnumbers-m2 result from
Ollama (the seed's qwen2.5 drafts, which Ollama cannot apply: ``not_applied``, noise floor)
and a v2 llamacpp-draft result from llama-server (the same drafts really applied, counters
from the engine's own API: ``confirmed``, measured). Both are built with
``specschema.examples`` the way the rest of tests/server builds them; the llama-server one
carries the build string the real binary of tests/fixtures/llama_server/version.txt prints.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from specschema.capability import submission_verdicts
from specschema.engines import engine_names
from specschema.payload import parse_submission
from specserver.store import tables
from tests.support.served import Served, error_of, settings_for
from tests.support.signed import payload_dict, sign_dict

OLLAMA_VERSION = "0.30.1"
LLAMA_VERSION = "b1"
LLAMA_BUILD = "0.5.0-dev (build 1, commit 0c1e570)"  # tests/fixtures/llama_server/version.txt


def ollama_v1() -> dict[str, Any]:
    return payload_dict(7, "hardnumbers-m2", engine_version=OLLAMA_VERSION,
                        created_at=datetime.now().astimezone())


def llama_server_v2(seed: int = 8) -> dict[str, Any]:
    # v1: the protocol that still asked for the seed's qwen2.5 drafts on llama-server
    from specschema.protocol_files import all_protocols

    v1 = next(p for p in all_protocols() if (p.id, p.version) == ("llamacpp-draft", 1))
    data = payload_dict(seed, v1, engine_version=LLAMA_VERSION, counters_seen=True,  # type: ignore[arg-type]
                        schema_version=2, runtime="ggml", created_at=datetime.now().astimezone(),
                        draft_speedups={"draft_qwen2.5_0.5b_n8": 1.6,
                                        "draft_qwen2.5_1.5b_n8": 1.4,
                                        "draft_qwen3_0.6b_n8": 1.8, "draft_qwen3_0.6b_n3": 1.5,
                                        "draft_qwen3_1.7b_n8": 1.7})
    data["engine"].update(name="llama-server", build=LLAMA_BUILD)
    for config in data["configs"]:  # llama-server's counters come from its own API
        for trial in config["trials"]:
            if trial.get("counters"):
                trial["counters"]["source"] = "engine_api"
        if config["speculation"].get("counters_source"):
            config["speculation"]["counters_source"] = "engine_api"
    submission = parse_submission(json.dumps(data).encode())
    for config, verdict in zip(data["configs"], submission_verdicts(submission), strict=True):
        config["speculation"]["observed"] = verdict
    return data


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with Served(settings_for(tmp_path_factory.mktemp("engine"))) as app:
        for key_seed, data in enumerate((ollama_v1(), llama_server_v2())):
            response = app.post(sign_dict(data, key_seed))
            assert response.status_code == 201, response.text
        yield app


def _engines(groups: list[dict[str, Any]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for g in groups:
        found.setdefault(g["key"]["engine"]["engine"], set()).add(
            g["key"]["draft"]["config_name"])
    return found


def test_the_seeds_drafts_stand_side_by_side_under_each_engine(served: Any) -> None:
    noise = served.get("/v1/leaderboard", params={"view": "noise_floor"}).json()
    speed = served.get("/v1/leaderboard").json()
    assert "engine" in speed["group_by"]
    # Under Ollama the seed's drafts are not applied: only on the noise floor.
    assert {g["key"]["protocol"]["protocol_id"] for g in noise["groups"]} == {"hardnumbers-m2"}
    assert set(_engines(noise["groups"])) == {"ollama"}
    assert all(g["verdicts"]["not_applied"] == 1 for g in noise["groups"])
    assert any("qwen2.5" in (g["key"]["draft"]["draft_model"] or "") for g in noise["groups"])
    # Under llama-server the same drafts are measured: on the speedup board, confirmed.
    assert {g["key"]["protocol"]["protocol_id"] for g in speed["groups"]} == {"llamacpp-draft"}
    assert _engines(speed["groups"]) == {"llama-server": {
        "draft_qwen2.5_0.5b_n8", "draft_qwen2.5_1.5b_n8", "draft_qwen3_0.6b_n8",
        "draft_qwen3_0.6b_n3", "draft_qwen3_1.7b_n8"}}
    seed = next(g for g in speed["groups"]
                if g["key"]["draft"]["config_name"] == "draft_qwen2.5_0.5b_n8")
    assert seed["verdicts"]["confirmed"] == 1 and seed["evidence"]["engine_api"] == 1
    assert seed["median_speedup"] == pytest.approx(1.6, rel=0.1)


def test_group_by_engine_and_engine_version(served: Any) -> None:
    body = served.get("/v1/aggregates", params={"group_by": "engine",
                                                "view": "noise_floor"}).json()
    assert [g["key"] for g in body["groups"]] == [{"engine": {"engine": "ollama"}}]
    body = served.get("/v1/aggregates", params={"group_by": "engine_version"}).json()
    assert [g["key"] for g in body["groups"]] == [
        {"engine_version": {"engine": "llama-server", "engine_version": LLAMA_VERSION}}]
    # ollama_version is Ollama's release only: null for the llama-server rows.
    body = served.get("/v1/aggregates", params={"group_by": "ollama_version"}).json()
    assert [g["key"] for g in body["groups"]] == [{"ollama_version": {"ollama_version": None}}]
    body = served.get("/v1/aggregates", params={"group_by": "ollama_version",
                                                "view": "noise_floor"}).json()
    assert [g["key"] for g in body["groups"]] == [
        {"ollama_version": {"ollama_version": OLLAMA_VERSION}}]


def test_filters_by_engine_and_engine_version(served: Any) -> None:
    def protocols(**params: str) -> set[str]:
        subs = served.get("/v1/submissions", params=params).json()["items"]
        return {s["protocol_id"] for s in subs}

    assert protocols() == {"hardnumbers-m2", "llamacpp-draft"}
    assert protocols(engine="ollama") == {"hardnumbers-m2"}
    assert protocols(engine="llama-server") == {"llamacpp-draft"}
    assert protocols(engine_version=LLAMA_VERSION) == {"llamacpp-draft"}
    assert protocols(engine_version=OLLAMA_VERSION) == {"hardnumbers-m2"}
    assert protocols(ollama_version=OLLAMA_VERSION) == {"hardnumbers-m2"}
    board = served.get("/v1/leaderboard", params={"engine": "ollama"}).json()
    assert board["groups"] == [] and board["filters"]["engine"] == "ollama"
    assert board["verdict_counts"]["not_applied"] > 0  # the Ollama drafts, off this board


@pytest.mark.parametrize("name, value, allowed", [
    ("engine", "vllm", list(engine_names())),  # every described engine (specschema.engines)
    ("engine_version", "9.9.9", sorted([OLLAMA_VERSION, LLAMA_VERSION])),
    # A llama-server build is no Ollama version: ollama_version never matches it.
    ("ollama_version", LLAMA_VERSION, [OLLAMA_VERSION]),
])
def test_unknown_engine_values_are_refused_listing_the_allowed(
        served: Any, name: str, value: str, allowed: list[str]) -> None:
    for url in ("/v1/leaderboard", "/v1/submissions", "/v1/export"):
        response = served.get(url, params={name: value})
        assert response.status_code == 422, (url, response.text)
        error = error_of(response)
        assert error["code"] == f"unknown_{name}"
        assert sorted(error["details"]["allowed"]) == sorted(allowed)


def test_submissions_carry_the_engine_and_v1_clients_keep_ollama_version(served: Any) -> None:
    items = served.get("/v1/submissions").json()["items"]
    by_protocol = {i["protocol_id"]: i for i in items}
    ollama, llama = by_protocol["hardnumbers-m2"], by_protocol["llamacpp-draft"]
    assert (ollama["engine"], ollama["engine_version"], ollama["ollama_version"]) == (
        "ollama", OLLAMA_VERSION, OLLAMA_VERSION)
    assert (llama["engine"], llama["engine_version"], llama["ollama_version"]) == (
        "llama-server", LLAMA_VERSION, None)
    assert (llama["engine_runtime"], llama["engine_build"]) == ("ggml", LLAMA_BUILD)
    for item, version, ollama_version in ((ollama, OLLAMA_VERSION, OLLAMA_VERSION),
                                          (llama, LLAMA_VERSION, None)):
        row = served.get(f"/v1/submissions/{item['submission_id']}").json()["submission"]
        assert (row["engine_version"], row["ollama_version"]) == (version, ollama_version)
    page = served.get(f"/submissions/{llama['submission_id']}").text
    assert f"llama-server {LLAMA_VERSION} (ggml, {LLAMA_BUILD})" in page


def test_the_export_has_the_engine_columns(served: Any) -> None:
    text = served.get("/v1/export", params={"format": "csv"}).text
    rows = list(csv.DictReader(io.StringIO(text)))
    engines = {(r["protocol_id"], r["engine"], r["engine_version"], r["ollama_version"],
                r["engine_runtime"], r["engine_build"]) for r in rows}
    assert engines == {("hardnumbers-m2", "ollama", OLLAMA_VERSION, OLLAMA_VERSION, "", ""),
                       ("llamacpp-draft", "llama-server", LLAMA_VERSION, "", "ggml",
                        LLAMA_BUILD)}
    only = served.get("/v1/export", params={"format": "jsonl", "engine": "llama-server"}).text
    lines = [json.loads(line) for line in only.splitlines() if line]
    assert lines and {(x["engine"], x["ollama_version"]) for x in lines} == {
        ("llama-server", None)}


def test_the_page_shows_the_engine_in_the_form_and_the_boards(served: Any) -> None:
    page = served.get("/").text
    assert '<select name="engine">' in page and '<select name="engine_version">' in page
    # Each group row names its engine once, in the row's first cell.
    cells = page.count('<span class="engine">')
    assert page.count('<span class="engine">llama-server</span>') == 5  # speedup board rows
    assert page.count('<span class="engine">ollama</span>') >= 1  # noise floor rows
    assert cells == page.count('<tr class="group"')
    filtered = served.get("/", params={"engine": "llama-server"}).text
    assert '<span class="engine">ollama</span>' not in filtered
    assert filtered.count('<span class="engine">llama-server</span>') == 5
    assert served.get("/", params={"engine": "vllm"}).status_code == 422


def test_the_openapi_documents_the_engine_filters(served: Any) -> None:
    spec = served.get("/openapi.json").json()
    for path in ("/v1/leaderboard", "/v1/submissions", "/v1/export"):
        documented = {p["name"]: p for p in spec["paths"][path]["get"]["parameters"]}
        assert documented["engine"]["schema"]["enum"] == list(engine_names())
        assert "engine_version" in documented


def test_a_row_stored_before_wire_v2_counts_as_ollama(tmp_path: Path) -> None:
    """Store version 3 added engine_name as a nullable column: older rows hold null."""
    with Served(settings_for(tmp_path)) as app:
        assert app.post(sign_dict(ollama_v1())).status_code == 201
        with app.store.engine.begin() as conn:
            conn.execute(update(tables.submissions).values(engine_name=None))
        (item,) = app.get("/v1/submissions", params={"engine": "ollama"}).json()["items"]
        assert (item["engine"], item["ollama_version"]) == ("ollama", OLLAMA_VERSION)
        noise = app.get("/v1/leaderboard", params={"view": "noise_floor"}).json()
        assert noise["groups"] and set(_engines(noise["groups"])) == {"ollama"}


def test_a_hidden_submissions_engine_build_is_redacted(tmp_path: Path) -> None:
    """The build string is free text the sender chose: hidden, it is withheld like the note."""
    data = llama_server_v2()
    with Served(settings_for(tmp_path)) as app:
        assert app.post(sign_dict(data)).status_code == 201
        with app.store.engine.begin() as conn:
            conn.execute(update(tables.submissions).values(hidden=True, hidden_reason="test"))
        sid = data["submission_id"]
        row = app.get(f"/v1/submissions/{sid}").json()["submission"]
        assert row["engine_build"] is None and "engine_build" in row["redacted"]
        assert row["engine_version"] == LLAMA_VERSION  # a version, not free text
        assert LLAMA_BUILD not in app.get(f"/submissions/{sid}").text


def test_the_llama_server_page_names_llama_server_and_its_api_never_ollama(served: Any) -> None:
    items = served.get("/v1/submissions").json()["items"]
    llama = next(i for i in items if i["protocol_id"] == "llamacpp-draft")
    page = served.get(f"/submissions/{llama['submission_id']}").text
    assert "Ollama" not in page.split('<h2>Details</h2>')[0]  # conclusion, table, evidence
    assert (f"llama-server {LLAMA_VERSION} can honor this request (the client starts "
            "llama-server with the config&#x27;s speculative flags)") in page
    assert ("speculated (counters from llama-server&#x27;s own API (timings.draft_n, "
            "draft_n_accepted))") in page
    assert "server log" not in page
    ollama = next(i for i in items if i["protocol_id"] == "hardnumbers-m2")
    page = served.get(f"/submissions/{ollama['submission_id']}").text
    assert f"Ollama {OLLAMA_VERSION} cannot honor this request" in page


def test_the_board_legend_names_each_engines_counter_source(served: Any) -> None:
    page = served.get("/").text
    assert "Ollama&#x27;s log showed" not in page
    assert ("the engine's acceptance counters (Ollama: the llama-server lines of "
            "Ollama&#x27;s server "
            "log or the MLX runner lines of Ollama&#x27;s server log; llama-server: "
            "llama-server&#x27;s own API") in page


def test_a_refusal_names_the_engine_that_ran() -> None:
    from datetime import timedelta

    from specserver.ingest import checks, rules

    data = llama_server_v2()
    data["configs"][1]["speculation"]["engine_can_honor"] = False
    submission = parse_submission(json.dumps(data).encode())
    ctx = rules.RuleContext(checks.check_protocol(submission), datetime.now().astimezone(),
                             timedelta(days=30), timedelta(minutes=5))
    found = [v.message for v in rules.violations(submission, ctx)
             if v.path.endswith("engine_can_honor")]
    assert found == [f"server_launch on llama-server {LLAMA_VERSION}: engine_can_honor is True"]
