"""The speculation map on the board, on DuckDB and PostgreSQL: the speculative type, the
depth and the kind of work as dimensions and filters of the public reads, and each
group's acceptance per draft position (per contributor, then the median across them)."""

from __future__ import annotations

import csv
import io
import json
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from specschema import Submission
from specschema.breakdown import acceptance_of, domain_results
from specschema.domains import DOMAINS
from specschema.examples import example_submission
from specserver.board.acceptance import acceptance_words
from specserver.store import tables
from tests.server.board.acceptance_reference import across_contributors
from tests.server.store.test_acceptance_store import _post, map_result
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _groups(served: Served, path: str, **params: str) -> list[dict[str, Any]]:
    response = served.get(path, params={"limit": "500", **params})
    assert response.status_code == 200, response.text
    groups: list[dict[str, Any]] = response.json()["groups"]
    return groups


def _serve_map(store_url: str, tmp_path: Path, probation_days: float) -> Any:
    """Two contributors' llamacpp-map results (one of them twice), and a seed protocol's."""
    maps = [map_result(9400), map_result(9401), map_result(9402)]
    seed = example_submission("ollama-draft", seed=9403, schema_version=2, blocks=True,
                              engine_version="0.30.1", counters_seen=True,
                              created_at=datetime.now().astimezone(),
                              draft_speedups={"spec_4": 1.3, "spec_8": 1.2})
    with Served(settings_for(tmp_path, database_url=store_url,
                             new_key_probation_days=probation_days)) as served:
        for sub, key in zip(maps, (1, 2, 2), strict=True):
            _post(served, sub, key)
        _post(served, seed, 3)
        # as if each key had sent from its own address range: each its own voice
        # (keys of one range are one cohort, newkeys.py)
        sub_table = tables.submissions
        with served.store.engine.begin() as conn:
            conn.execute(update(sub_table).values(origin_hash=sub_table.c.key_id))
        yield served, maps, seed


@pytest.fixture
def served_map(store_url: str, tmp_path: Path) -> Any:
    """Without probation: each key its own voice."""
    yield from _serve_map(store_url, tmp_path, 0.0)


def _profile(subs: list[Submission], domain: str | None) -> tuple[int, tuple[float, ...]]:
    """The pooled rounds and a_i of ngram_simple_m8's trials (of ``domain``) in ``subs``."""
    def domain_of(sub: Submission, index: int) -> str:
        names = [r.domain for r in domain_results(sub, sub.configs[0])]
        return names[index % len(names)]

    trials = [t for sub in subs for c in sub.configs if c.name == "ngram_simple_m8"
              for t in c.trials if domain is None or domain_of(sub, t.index) == domain]
    found = acceptance_of(trials)
    assert found is not None and found.per_position is not None
    assert found.rounds is not None
    return found.rounds, found.per_position


def _ngram_group(served: Served, **params: str) -> dict[str, Any]:
    return next(g for g in _groups(served, "/v1/aggregates", acceptance="true", **params)
                if g["key"]["spec_type"]["spec_type"] == "ngram-simple")


def test_grouped_by_domain_each_map_result_counts_per_domain(served_map: Any) -> None:
    served, maps, _ = served_map
    groups = _groups(served, "/v1/aggregates", group_by="domain,spec_type,depth")
    by_key = {(g["key"]["domain"]["domain"], g["key"]["spec_type"]["spec_type"],
               g["key"]["depth"]["depth"]): g for g in groups}
    # every domain of the prompt set for each speculating type, and the seed's drafts
    assert {(d, t, n) for d, t, n in by_key if d != "unspecified"} == {
        (d, t, n) for d in DOMAINS
        for t, n in (("ngram-simple", 8), ("ngram-mod", 16), ("draft-mtp", 3))}
    assert {(t, n) for d, t, n in by_key if d == "unspecified"} == {(None, 4), (None, 8)}
    # a domain's speedup: each contributor's median over their results, then across them
    for domain in DOMAINS:
        group = by_key[(domain, "ngram-simple", 8)]
        per_result = [next(r.speedup_tps for r in domain_results(sub, config)
                           if r.domain == domain)
                      for sub in maps for config in sub.configs
                      if config.name == "ngram_simple_m8"]
        expected = statistics.median([per_result[0], statistics.median(per_result[1:])])
        assert group["median_speedup"] == pytest.approx(expected, rel=1e-12)
        assert group["contributors"] == 2 and group["submissions"] == 3
        assert group["median_speedup_wall"] is None  # no wall-time speedup per domain
        assert group["label"] == f"{DOMAINS[domain].label} · ngram-simple · depth 8"
    # the seed protocol's results: under "unspecified", with their configs' own speedups
    assert by_key[("unspecified", None, 4)]["label"] == "unspecified · not named · depth 4"
    assert by_key[("unspecified", None, 4)]["median_speedup"] is not None


def test_the_filters_keep_a_domain_a_type_or_a_depth(served_map: Any) -> None:
    served, maps, seed = served_map
    code = _groups(served, "/v1/leaderboard", domain="code_edit", group_by="domain")
    assert code and {g["key"]["domain"]["domain"] for g in code} == {"code_edit"}
    assert {g["key"]["draft"]["config_name"] for g in code} == {"ngram_simple_m8",
                                                                "ngram_mod_16", "mtp_n3"}
    # filtered by domain without grouping by it: the domain's figures all the same
    plain = _groups(served, "/v1/leaderboard", domain="code_edit", group_by="protocol")
    assert sorted(g["median_speedup"] for g in plain) == sorted(
        g["median_speedup"] for g in code)
    unspecified = _groups(served, "/v1/leaderboard", domain="unspecified")
    assert {g["key"]["protocol"]["protocol_id"] for g in unspecified} == {"ollama-draft"}
    deep = _groups(served, "/v1/leaderboard", depth="16")
    assert {g["key"]["draft"]["config_name"] for g in deep} == {"ngram_mod_16"}
    mod = _groups(served, "/v1/aggregates", spec_type="ngram-mod", group_by="spec_type")
    assert [g["key"]["spec_type"]["spec_type"] for g in mod] == ["ngram-mod"]
    # the list and the export keep one row per config: the configs measured on the domain
    listed = served.get("/v1/submissions", params={"domain": "math"}).json()["items"]
    assert {item["submission_id"] for item in listed} == {str(s.submission_id) for s in maps}
    rows = list(csv.DictReader(io.StringIO(served.get(
        "/v1/export", params={"format": "csv", "domain": "unspecified"}).text)))
    assert {r["submission_id"] for r in rows} == {str(seed.submission_id)}
    deep_rows = [json.loads(line) for line in served.get(
        "/v1/export", params={"format": "jsonl", "depth": "16"}).text.splitlines()]
    assert {(r["config_name"], r["spec_type"], r["depth"]) for r in deep_rows} == {
        ("ngram_mod_16", "ngram-mod", 16)}
    assert len(deep_rows) == len(maps)
    # values no result has, or outside the list: 422 with what there is
    for name, value in (("domain", "poetry"), ("depth", "99"), ("spec_type", "draft-eagle3")):
        refused = served.get("/v1/leaderboard", params={name: value})
        assert refused.status_code == 422, (name, refused.text)
        assert refused.json()["error"]["code"] == f"unknown_{name}"


def test_a_group_shows_its_acceptance_per_position(served_map: Any) -> None:
    served, maps, _ = served_map
    for domain in (None, "translation"):
        params = {"group_by": "spec_type"} if domain is None else {
            "group_by": "spec_type,domain", "domain": domain}
        group = _ngram_group(served, **params)
        # per contributor (key 2's two results pooled), then the median at each position
        expected = across_contributors([_profile(maps[:1], domain),
                                        _profile(maps[1:], domain)])
        assert expected is not None
        assert group["acceptance_per_position"] == pytest.approx(
            list(expected.per_position), rel=1e-12)
        assert group["acceptance_contributors"] == list(expected.contributors)
        assert set(expected.contributors) == {2}
        assert group["acceptance_rounds"] == expected.rounds
        assert group["acceptance_words"] == acceptance_words(expected)
        assert group["acceptance_words"].startswith("accepted at draft position 1st ")
    # the seed protocol's results reported no per-position counts: said so, not zeros
    seed_group = next(g for g in _groups(served, "/v1/aggregates", group_by="protocol",
                                         acceptance="true")
                      if g["key"]["protocol"]["protocol_id"] == "ollama-draft")
    assert seed_group["acceptance_per_position"] is None
    assert seed_group["acceptance_words"].startswith("no per-position counts")
    # computed only when asked for: the default reads carry none of it
    plain = _groups(served, "/v1/aggregates", group_by="spec_type")
    assert plain and not any(name.startswith("acceptance") for g in plain for name in g)
    refused = served.get("/v1/aggregates", params={"acceptance": "yes"})
    assert refused.status_code == 422


def test_new_keys_are_one_voice_in_the_acceptance_too(store_url: str, tmp_path: Path) -> None:
    """Under probation every new key is one block on the board (newkeys.py): one voice
    for the speedup and for the acceptance alike, its results pooled."""
    for served, maps, _ in _serve_map(store_url, tmp_path, 30.0):
        group = _ngram_group(served, group_by="spec_type")
        assert group["contributors"] == 1
        expected = across_contributors([_profile(maps, None)])
        assert expected is not None
        assert group["acceptance_per_position"] == pytest.approx(
            list(expected.per_position), rel=1e-12)
        assert group["acceptance_contributors"] == [1] * len(expected.per_position)
