"""The first screen's predicted column is GET /v1/predict's answer for the chosen machine, at
each config's own depth, and says why where there is none (http/page/forecasts.py)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from specschema.breakdown import domain_results
from specschema.crowd import ALL_DOMAINS
from specschema.domains import DOMAINS
from specserver.board import aggregate
from specserver.http.page import forecasts
from specserver.http.page.machine import NO_PREDICTION
from tests.support.crowd import (
    M2,
    M3_PRO,
    RADEON,
    RTX,
    cost_probe,
    map_result,
    signed_probe,
    signed_result,
    target_of,
)
from tests.support.served import Served, settings_for

TARGET = target_of(map_result(0, M2))
SMALL = {"new_key_probation_days": 0, "cohort_window_hours": 0}  # a small deployment
ROW = re.compile(r'<tr class="candidate".*?<span class="draft">(.*?)</span>.*?'
                 r'<td class="num predicted">(.*?)</td>', re.S)


def _text(markup: str) -> str:
    """The cell's words, its parts (lines, a folded reason) one space apart."""
    parts = re.sub(r"<br>|</summary>", " ", markup)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", parts)).split())


def _predicted(page: str) -> dict[str, str]:
    return {_text(name): _text(cell) for name, cell in ROW.findall(page)}


@pytest.fixture()
def served(tmp_path: Path) -> Any:
    with Served(settings_for(tmp_path, **SMALL)) as app:
        for seed, machine in enumerate([RTX, M3_PRO, RADEON, M2]):
            response = app.client.post("/v1/submissions",
                                       content=signed_result(seed, machine, seed),
                                       peer=(f"198.51.{100 + seed}.7", 40000))
            assert response.status_code == 201, response.text
        yield app


def test_the_predicted_column_is_the_forecast_at_each_configs_depth(served: Served) -> None:
    served.client.post("/v1/probes", content=signed_probe(cost_probe(TARGET, M2), 9))
    machine = {"chip": "Apple M2", "memory_gb": "24", "engine": "llama-server",
               "target": TARGET.name}
    page = served.get("/", params=machine).text
    shown = _predicted(page)
    answer = served.get("/v1/predict", params={**machine, "target": TARGET.digest}).json()
    overall = {c["candidate"]["spec_type"]: c for c in answer["candidates"]
               if c["domain"] == ALL_DOMAINS}
    # ngram_simple_m8 copies up to 8 tokens: the forecast's row at depth 8.
    row = next(r for r in overall["ngram-simple"]["predictions"] if r["depth"] == 8)
    assert shown["ngram_simple_m8"] == (f"{row['predicted']:.2f}x "
                                        f"{row['low']:.2f}–{row['high']:.2f}x")
    mod = overall["ngram-mod"]
    depth = overall["ngram-mod"]["candidate"]["depth"]
    row = next(r for r in mod["predictions"] if r["depth"] == depth)
    assert shown["ngram_mod_16"].startswith(f"{row['predicted']:.2f}x ")
    # MTP: refused, and the page says why in the forecast's words.
    assert shown["mtp_n3"] == f"not predicted {overall['draft-mtp']['why_not_predicted']}"
    assert "draft layers" in shown["mtp_n3"]


def test_without_a_probe_of_this_machine_the_page_says_what_is_missing(
        served: Served) -> None:
    page = served.get("/", params={"chip": "Apple M2", "target": TARGET.name}).text
    shown = _predicted(page)
    assert set(shown) == {"ngram_simple_m8", "ngram_mod_16", "mtp_n3"}
    assert all(cell.startswith("not predicted ") for cell in shown.values())
    assert "no cost curve" in shown["ngram_simple_m8"]


def test_a_candidate_the_forecast_does_not_name_has_no_prediction_yet() -> None:
    key = {"protocol": {"protocol_id": "llamacpp-map", "protocol_version": 1,
                        "protocol_sha256": "0" * 64},  # not a shipped protocol's hash
           "engine": {"engine": "llama-server"},
           "draft": {"config_name": "ngram_simple_m8", "mechanism": "server_launch",
                     "draft_model": None, "draft_digest": None}}
    answer: dict[str, Any] = {"candidates": []}
    assert forecasts.prediction(key, answer).why == NO_PREDICTION
    assert forecasts.prediction(key, None).why == NO_PREDICTION
    refused = forecasts.prediction(key, "two model files are named 'm'")
    assert (refused.why, refused.reason) == ("not predicted", "two model files are named 'm'")


DOMAIN_HEAD = re.compile(r'<th class="num domain" data-domain="(\w+)">')
DOMAIN_CELL = re.compile(r'<td class="num domain[^"]*" data-domain="(\w+)">(.*?)</td>', re.S)


def test_kinds_of_work_are_columns_where_the_board_is_split_by_them(served: Served) -> None:
    """A column per kind of work the candidates were measured on, in the domain table's
    order, each cell the median of the contributors' results on that domain's trials (here
    one contributor on this chip: its own per-domain result); none where the board's
    dimension table has no kind-of-work dimension."""
    page = served.get("/", params={"chip": "Apple M2", "target": TARGET.name}).text
    heads, cells = DOMAIN_HEAD.findall(page), DOMAIN_CELL.findall(page)
    if "domain" not in aggregate.DIMENSIONS:
        assert heads == [] and cells == []
        return
    mine = map_result(3, M2)  # the fixture's Apple M2 result (seed 3)
    config = next(c for c in mine.configs if c.name == "ngram_simple_m8")
    expected = {r.domain: r.speedup_tps for r in domain_results(mine, config)}
    assert heads == [d for d in DOMAINS if d in expected]
    rows = {_text(name): row for name, row in re.findall(
        r'<tr class="candidate".*?<span class="draft">(.*?)</span>(.*?)</tr>', page, re.S)}
    shown = {d: _text(c) for d, c in DOMAIN_CELL.findall(rows["ngram_simple_m8"])}
    assert shown == {d: f"{v:.2f}x few results" for d, v in expected.items()
                     if v is not None}
