"""A real speculation-map result (a llama-server run of Gemma 3 270M, recorded in
tests/fixtures/map_results/) on a local board, on DuckDB and PostgreSQL: it shows under
each of its six domains and under its speculative types, with the speedups the page's
rule computes from its signed trials, and its engine's refusal is no speedup."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from specschema import Submission
from specschema.breakdown import acceptance_of, domain_results
from specschema.domains import DOMAINS
from specschema.payload import parse_submission
from tests.server.board.acceptance_reference import across_contributors
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import sign_dict

RESULT = (Path(__file__).resolve().parents[2] / "fixtures" / "map_results"
          / "gemma-270m-llamacpp-map.json")
SPECULATING = {"ngram_simple_m8": ("ngram-simple", 8), "ngram_mod_16": ("ngram-mod", 16)}


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _recorded() -> tuple[dict[str, Any], Submission]:
    """The recorded result, made now (the server refuses old ones)."""
    data = json.loads(RESULT.read_text(encoding="utf-8"))
    data["created_at"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return data, parse_submission(json.dumps(data).encode())


def test_a_real_map_result_shows_under_its_domains_and_mechanisms(store_url: str,
                                                                 tmp_path: Path) -> None:
    data, sub = _recorded()
    verdicts = {c.name: c.speculation.observed for c in sub.configs}
    assert verdicts == {"no_spec": "not_applied", "ngram_simple_m8": "confirmed",
                        "ngram_mod_16": "confirmed", "mtp_n3": "incompatible"}
    # One contributor, as a small deployment counts: its chip (the machine that recorded
    # it) is in no table, and one range corroborates it only where the minimum is 1.
    with Served(settings_for(tmp_path, database_url=store_url, new_key_probation_days=0,
                             min_contributors=1)) as served:
        response = served.post(sign_dict(data, 7))
        assert response.status_code == 201, response.text
        board = served.get("/v1/leaderboard", params={"group_by": "domain,spec_type,depth",
                                                      "limit": "500",
                                                      "acceptance": "true"}).json()
        by_type = served.get("/v1/aggregates", params={"group_by": "spec_type",
                                                       "acceptance": "true"}).json()
        code_edit = served.get("/v1/leaderboard", params={"domain": "code_edit"}).json()
    groups = {(g["key"]["draft"]["config_name"], g["key"]["domain"]["domain"]): g
              for g in board["groups"]}
    # each speculating config under each of the six domains, with its type and depth
    assert set(groups) == {(name, d) for name in SPECULATING for d in DOMAINS}
    configs = {c.name: c for c in sub.configs}
    for name, (kind, depth) in SPECULATING.items():
        per_domain = {r.domain: r for r in domain_results(sub, configs[name])}
        for domain in DOMAINS:
            group = groups[(name, domain)]
            assert (group["key"]["spec_type"]["spec_type"],
                    group["key"]["depth"]["depth"]) == (kind, depth)
            found = per_domain[domain]
            assert found.speedup_tps is not None
            assert group["median_speedup"] == pytest.approx(found.speedup_tps, rel=1e-12)
            assert group["submissions"] == group["contributors"] == 1
            # its acceptance per position: that domain's trials' (llama-server's /metrics)
            assert found.acceptance is not None
            expected = across_contributors([(found.acceptance.rounds or 0,
                                             found.acceptance.per_position or ())])
            assert expected is not None and len(expected.per_position) == depth
            assert group["acceptance_per_position"] == pytest.approx(
                list(expected.per_position), rel=1e-12)
            assert group["label"].startswith("llamacpp-map v1 · sha256-a5fd3b62230aa5ec.gguf")
    # the engine refused MTP: counted (once: the counts are the filters', per config),
    # never a speedup on any board
    assert board["verdict_counts"]["incompatible"] == 1
    assert board["verdict_counts"]["confirmed"] == len(SPECULATING)
    assert not any(g["key"]["spec_type"]["spec_type"] == "draft-mtp" for g in by_type["groups"])
    # under its mechanism, over all domains: the config's own speedup and acceptance
    for group in by_type["groups"]:
        name = next(n for n, (kind, _) in SPECULATING.items()
                    if kind == group["key"]["spec_type"]["spec_type"])
        summary = acceptance_of(configs[name].trials)
        assert summary is not None and summary.per_position is not None
        assert group["acceptance_per_position"] == pytest.approx(list(summary.per_position),
                                                                 rel=1e-12)
    assert {g["key"]["draft"]["config_name"] for g in code_edit["groups"]} == set(SPECULATING)
    assert code_edit["filters"]["domain"] == "code_edit"
