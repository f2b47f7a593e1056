"""The aggregation rules, as pure functions over plain rows."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specschema.stats import median, percentile
from specserver.board.aggregate import leaderboard_dimensions, sort_groups, view_of
from tests.support.reference_board import DraftResult, aggregate, in_view, verdict_counts

_counter = iter(range(10**9))


def row(speedup: float | None, key_id: str | None = "alice", *, chip: str = "Apple M2",
        memory_gb: int | None = 24, verdict: str = "confirmed", baseline: float | None = 20.0,
        config: str = "spec_4", wall: float | None = None,
        evidence: str | None = "log") -> DraftResult:
    return DraftResult(
        submission_id=f"sub-{next(_counter)}", key_id=key_id, protocol_id="ollama-draft",
        protocol_version=1, protocol_sha256="a" * 64, target_model="qwen3.5:9b-mtp",
        target_digest=None, chip=chip, memory_gb=memory_gb, ollama_version="0.30.1",
        os="macos", backend="100% GPU", config_name=config, draft_model=None,
        mechanism="draft_num_predict", verdict=verdict, speedup_tps=speedup,
        speedup_wall=wall if wall is not None else speedup, baseline_tps=baseline,
        evidence=evidence,
    )


def one_group(rows, min_contributors=3):
    groups = aggregate(rows, ["chip"], min_contributors)
    assert len(groups) == 1
    return groups[0]


def test_one_contributor_cannot_dominate():
    rows = [row(3.0, "spammer") for _ in range(100)]
    rows += [row(1.0, "a"), row(1.1, "b"), row(1.2, "c")]
    group = one_group(rows)
    assert group.submissions == 103
    assert group.contributors == 4
    assert group.median_speedup == pytest.approx((1.1 + 1.2) / 2)
    assert group.max_speedup == 3.0
    # Without the rule the spammer would set the median.
    assert median([r.speedup_tps for r in rows]) == 3.0


def test_each_contributor_is_reduced_to_their_median_first():
    rows = [row(1.0, "a"), row(2.0, "a"), row(9.0, "a"), row(1.5, "b"), row(1.7, "c")]
    group = one_group(rows)
    per_contributor = [2.0, 1.5, 1.7]
    assert group.median_speedup == median(per_contributor)
    assert group.p25_speedup == percentile(per_contributor, 0.25)
    assert group.p75_speedup == percentile(per_contributor, 0.75)
    assert (group.min_speedup, group.max_speedup) == (1.5, 2.0)


def test_imported_rows_without_key_count_as_their_own_contributors():
    rows = [row(0.95, None), row(0.90, None), row(1.0, None)]
    group = one_group(rows)
    assert group.contributors == 3
    assert group.few_results is False
    assert group.median_speedup == 0.95


def test_percentiles_only_with_enough_contributors():
    few = one_group([row(1.2, "a"), row(1.4, "b"), row(1.3, "a")])
    assert few.few_results is True
    assert few.p25_speedup is None and few.p75_speedup is None
    assert few.median_speedup == median([1.25, 1.4])
    enough = one_group([row(1.2, "a"), row(1.4, "b")], min_contributors=2)
    assert enough.few_results is False and enough.p25_speedup == pytest.approx(1.25)


def test_median_baseline_and_wall_are_per_contributor_too():
    rows = [row(1.1, "a", baseline=10.0, wall=1.0), row(1.1, "a", baseline=10.0, wall=1.0),
            row(1.1, "a", baseline=10.0, wall=1.0), row(1.3, "b", baseline=30.0, wall=2.0)]
    group = one_group(rows)
    assert group.median_baseline_tps == 20.0
    assert group.median_speedup_wall == 1.5


def test_rows_without_speedup_count_but_do_not_move_statistics():
    group = one_group([row(None, "a", baseline=None), row(1.2, "b")])
    assert group.submissions == 2 and group.contributors == 2
    assert group.median_speedup == 1.2 and group.median_baseline_tps == 20.0


def test_views_split_by_verdict():
    rows = [row(1.2, verdict="confirmed"), row(1.1, verdict="not_observed"),
            row(1.0, verdict="not_applied"), row(1.3, verdict="unknown"),
            # wire v2: a speculating baseline, synthetic acceptance, MLX: on no board
            row(1.02, verdict="baseline_speculated"), row(3.0, verdict="synthetic"),
            row(1.01, verdict="cannot_compare"), row(2.5, verdict="unstable"),
            row(4.0, verdict="a_verdict_added_later"),
            # a draft the engine could not run (no trials, so no ratio): on no board
            row(None, verdict="incompatible")]
    assert [view_of(r.verdict) for r in rows] == ["speedup", "unverified", "noise_floor", None,
                                                  None, None, None, "unverified", None, None]
    # The speedup board holds confirmed rows only: no not-observed or unstable ratio is part
    # of a speedup median (the 3.24x + 1.00x -> 2.12x merge of a real run cannot happen).
    assert [r.verdict for r in in_view(rows, "speedup")] == ["confirmed"]
    assert [r.verdict for r in in_view(rows, "unverified")] == ["not_observed", "unstable"]
    assert [r.verdict for r in in_view(rows, "noise_floor")] == ["not_applied"]
    assert verdict_counts(rows[:8] + rows[9:]) == {
        "confirmed": 1, "not_observed": 1, "not_applied": 1, "unknown": 1,
        "baseline_speculated": 1, "synthetic": 1, "cannot_compare": 1, "unstable": 1,
        "incompatible": 1}
    group = one_group(in_view(rows, "speedup"))
    assert group.median_speedup == 1.2
    assert group.verdicts == {"confirmed": 1, "not_observed": 0, "not_applied": 0, "unknown": 0,
                              "baseline_speculated": 0, "synthetic": 0, "cannot_compare": 0,
                              "unstable": 0, "incompatible": 0}


def test_the_unverified_view_is_always_split_by_verdict():
    from specserver.board.aggregate import view_dimensions

    rows = [row(1.1, verdict="not_observed"), row(2.5, verdict="unstable")]
    dims = leaderboard_dimensions(["chip"], "unverified")
    assert "verdict" in dims and "verdict" not in leaderboard_dimensions(["chip"])
    groups = aggregate(in_view(rows, "unverified"), dims)
    assert sorted(g.median_speedup for g in groups) == [1.1, 2.5]  # never one median
    assert view_dimensions(["chip"], "unverified") == ["chip", "verdict"]
    assert view_dimensions(["chip"], "speedup") == ["chip"]


def test_grouping_keys_and_composite_dimensions():
    rows = [row(1.1, chip="Apple M2", memory_gb=24), row(1.2, chip="Apple M2", memory_gb=16),
            row(1.3, chip="Apple M2", memory_gb=24, config="spec_8"),
            row(1.4, chip="Apple M3", memory_gb=None)]
    dims = leaderboard_dimensions(["chip", "memory_gb"])
    assert dims == ["protocol", "target", "draft", "engine", "chip", "memory_gb"]
    groups = aggregate(rows, dims)
    assert len(groups) == 4
    first = groups[0]
    assert first.key["protocol"] == {"protocol_id": "ollama-draft", "protocol_version": 1,
                                     "protocol_sha256": "a" * 64}
    assert first.key["draft"]["config_name"] == "spec_4"
    labels = [g.label(dims) for g in groups]
    assert "ollama-draft v1 · qwen3.5:9b-mtp · spec_4 · ollama · Apple M3 · ? GB" in labels
    assert [g.key["memory_gb"]["memory_gb"] for g in aggregate(rows, ["memory_gb"])] == [
        16, 24, None]
    assert len(aggregate(rows, [])) == 1


def test_unknown_dimension_and_sort_are_refused():
    with pytest.raises(ValueError, match="colour"):
        aggregate([row(1.0)], ["chip", "colour"])
    with pytest.raises(ValueError, match="fastest"):
        sort_groups([], "fastest")


def test_sorting_puts_missing_values_last():
    rows = [row(1.1, chip="A"), row(None, chip="B"), row(1.5, chip="C"), row(0.9, chip="D")]
    groups = aggregate(rows, ["chip"])
    assert [g.key["chip"]["chip"] for g in sort_groups(groups, "-speedup")] == ["C", "A", "D", "B"]
    assert [g.key["chip"]["chip"] for g in sort_groups(groups, "speedup")] == ["D", "A", "C", "B"]
    assert [g.key["chip"]["chip"] for g in sort_groups(groups, "key")] == ["A", "B", "C", "D"]


speedups = st.floats(min_value=0.2, max_value=5.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(per_contributor=st.lists(st.lists(speedups, min_size=1, max_size=6), min_size=1,
                                max_size=8),
       repeat=st.integers(min_value=1, max_value=20))
def test_repeating_a_contributor_never_changes_the_group(per_contributor, repeat):
    rows = [row(s, f"key-{i}") for i, values in enumerate(per_contributor) for s in values]
    base = one_group(rows)
    flooded = rows + [dataclasses.replace(r, submission_id=f"{r.submission_id}-{n}")
                      for n in range(repeat) for r in rows if r.key_id == "key-0"]
    again = one_group(flooded)
    assert again.contributors == base.contributors == len(per_contributor)
    assert again.median_speedup == base.median_speedup
    assert again.p25_speedup == base.p25_speedup and again.p75_speedup == base.p75_speedup
    assert again.min_speedup <= again.median_speedup <= again.max_speedup


# --- the SQL first step equals the pure one -----------------------------------------------


def _fill_for_sql_vs_pure(engine):
    """The store the SQL and pure reductions are compared on (what is stored does not
    depend on the hashes the board reads groups by)."""
    from sqlalchemy import update

    from specschema.examples import EXAMPLE_MACHINES, example_submission
    from specserver.store import tables
    from tests.support.boardfill import fill, insert_submission, key

    fill(engine, 14, contributors=5)
    for seed in range(3):
        insert_submission(engine, example_submission("hardnumbers-m2", seed=300 + seed,
                                                     machine=EXAMPLE_MACHINES[seed % 2]), None)
    insert_submission(engine, example_submission("ollama-draft", seed=9999, engine_version="x"),
                      key(1))  # unreadable version: verdict unknown
    # Two llama-server results: the engine and its version are dimensions, and
    # ollama_version is null on their rows; one stored as before wire v2 (engine_name null).
    for seed in range(2):
        llama = example_submission("llamacpp-draft", seed=500 + seed, engine_version="b1",
                                   schema_version=2, runtime="ggml", counters_seen=True)
        insert_submission(engine, llama.model_copy(update={"engine": llama.engine.model_copy(
            update={"name": "llama-server", "build": "commit 0c1e570"})}), key(2))
    # Map results (a prompt set: one row per domain of each draft config) of two keys, so
    # that the domain, the speculative type and the depth have groups of their own.
    for seed in range(3):
        mapped = example_submission("llamacpp-map", seed=600 + seed, engine_version="b1",
                                    schema_version=2, runtime="ggml", counters_seen=True,
                                    blocks=True, draft_speedups={"ngram_simple_m8": 1.4})
        insert_submission(engine, mapped.model_copy(update={"engine": mapped.engine.model_copy(
            update={"name": "llama-server", "build": "commit 0c1e570"})}), key(3 + seed % 2))
    with engine.begin() as conn:
        conn.execute(update(tables.submissions).where(
            tables.submissions.c.protocol_id == "hardnumbers-m2").values(engine_name=None))
        # unstable rows (baseline blocks that disagree): the unverified view, with not_observed
        conn.execute(update(tables.summaries).where(
            tables.summaries.c.config_name == "spec_8").values(observed="unstable"))


def _sql_vs_pure(engine, by_key_hash=False):
    from specschema.domains import DOMAINS
    from specschema.evidence import LEVELS
    from specserver.board import sql as board_sql
    from specserver.board.aggregate import VIEW_VERDICTS, on_board
    from specserver.store import VERDICTS, queries
    from tests.support import reference_rules
    from tests.support.reference_board import draft_results, evidence_counts, reduce_contributors
    from tests.support.reference_rules import aggregate_contributors

    cases = [["protocol", "target", "draft", "engine", "chip", "memory_gb"], ["chip"],
             ["os", "verdict"], ["ollama_version", "backend", "draft"], ["engine"],
             ["engine_version", "draft"], ["engine", "engine_version", "ollama_version"], [],
             ["spec_type", "depth"], ["domain"], ["domain", "spec_type", "chip"],
             ["protocol", "target", "draft", "engine", "domain"]]
    named: set[str] = set()  # the contributors of every case: keys and imported rows
    with engine.connect() as conn:
        rows = draft_results(conn, queries.Filters())
        per_domain = draft_results(conn, queries.Filters(), per_domain=True)
        assert {r.domain for r in per_domain} == {*DOMAINS, "unspecified"}
        assert {r.spec_type for r in rows} >= {"ngram-simple", "draft-mtp", None}
        assert {r.depth for r in rows} >= {8, 16, 3, None}
        assert {r.verdict for r in rows} >= {"confirmed", "not_applied", "unknown", "unstable"}
        assert {(r.engine, r.ollama_version is None) for r in rows} == {
            ("ollama", False), ("llama-server", True)}
        for dims in cases:
            for verdicts in (*VIEW_VERDICTS.values(), frozenset({"unknown"})):
                sql = reference_rules.contributor_results(conn, queries.Filters(), dims,
                                                          verdicts, by_key_hash)
                pure = reduce_contributors([r for r in (per_domain if "domain" in dims
                                                        else rows) if r.verdict in verdicts
                                            and on_board(r.verdict, r.evidence)], dims)
                by_key = {(c.key, c.contributor): c for c in pure}
                assert len(sql) == len(pure)
                named.update(item.contributor for item in sql)
                for item in sql:
                    expected = by_key[(item.key, item.contributor)]
                    assert item.submissions == expected.submissions
                    assert (item.confirmed, item.not_observed, item.not_applied, item.unknown,
                            item.unstable) == (
                        expected.confirmed, expected.not_observed, expected.not_applied,
                        expected.unknown, expected.unstable)
                    assert item.evidence() == expected.evidence()
                    for name in ("speedup", "speedup_wall", "baseline_tps"):
                        got, want = getattr(item, name), getattr(expected, name)
                        assert (got is None) == (want is None)
                        assert got is None or got == pytest.approx(want, rel=1e-12)
                from_sql = aggregate_contributors(sql, dims)
                from_pure = aggregate_contributors(pure, dims)
                assert [g.key for g in from_sql] == [g.key for g in from_pure]
                assert [g.contributors for g in from_sql] == [g.contributors for g in from_pure]
        assert {n.startswith("imported:") for n in named} == {True, False}
        totals = board_sql.draft_totals(conn, queries.Filters()).tolist()
        assert dict(zip(VERDICTS, totals, strict=False)) == verdict_counts(rows)
        assert dict(zip(LEVELS, totals[len(VERDICTS):], strict=True)) == evidence_counts(rows)


def _one_hash(secret, columns):
    """Every key part's hash the same: every group clashes."""
    from sqlalchemy import literal_column

    return literal_column("7") if columns else literal_column("0")


def _first_field_hash(secret, columns):
    """A part's hash of its first field alone: parts that differ after it clash, the others
    do not (the board reads some groups by hash and some by value)."""
    from sqlalchemy import func, literal_column

    return func.hash(columns[0]) if columns else literal_column("0")


@pytest.fixture(scope="module")
def sql_vs_pure_template(tmp_path_factory):
    """The filled DuckDB store, built once (its inserts are most of the cost); each test
    reads its own copy."""
    from tests.support.boardfill import new_engine

    path = tmp_path_factory.mktemp("sql-vs-pure") / "store.duckdb"
    engine = new_engine(path)
    _fill_for_sql_vs_pure(engine)
    engine.dispose()
    return path


@pytest.mark.parametrize("by_key_hash", [False, True], ids=["keys by id", "keys by hash"])
@pytest.mark.parametrize("hashed", [None, _one_hash, _first_field_hash],
                         ids=["groups by hash", "every hash clashes", "some hashes clash"])
def test_sql_reduction_matches_the_pure_rules_on_duckdb(sql_vs_pure_template, tmp_path,
                                                        monkeypatch, by_key_hash, hashed):
    """On DuckDB groups are told apart by hashes of their keys' parts (board/groupkeys.py);
    made to clash here (a DuckDB hash collision is found in microseconds), the groups read
    are still the keys' own, with the same rows and medians."""
    import shutil

    from sqlalchemy import create_engine

    from specserver.board import groupkeys

    if hashed is not None:
        monkeypatch.setattr(groupkeys, "side_hash", hashed)
    shutil.copy(sql_vs_pure_template, tmp_path / "store.duckdb")
    engine = create_engine(f"duckdb:///{tmp_path / 'store.duckdb'}")
    try:
        _sql_vs_pure(engine, by_key_hash)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_sql_reduction_matches_the_pure_rules_on_postgres(postgres_url):
    from sqlalchemy import create_engine

    from specserver.store import tables

    engine = create_engine(postgres_url)
    tables.metadata.create_all(engine)
    try:
        _fill_for_sql_vs_pure(engine)
        _sql_vs_pure(engine)
    finally:
        engine.dispose()
