"""The board maintained by change equals the full computation after any sequence of writes.

Random sequences of inserts (signed keys from a few address ranges, imports, incomplete and
quarantined submissions, every verdict and evidence level, repeated and missing speedups),
hides, unhides, bans, unbans, cohorts accepted by maintainers and the store's clock moving
past probations and settle times (cohorts turning recent, then established: disputes), on
DuckDB and PostgreSQL. After every write the maintained boards (all views, a filtered one, one by
another grouping) must equal ``incremental.compute`` on the same snapshot, and the whole
sequence must have been followed from the change log (one rebuild: the first read).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import func, insert, select

from specserver.board import aggregate, groupkeys, incremental, newkeys
from specserver.store import changes, queries, tables
from tests.server.board.incremental_support import (
    CHIPS,
    INVENTED_CHIP,
    KEYS,
    LEVELS,
    LISTED_CHIPS,
    MERGING_CHIP,
    MIN_CONTRIBUTORS,
    ORIGINS,
    RULES,
    SPECS,
    START,
    VERDICTS,
    Store,
    _blind_hash,
    _check,
    _side_hash,
    operations,
    store_submission,
)
from tests.support.tiers import examples

# Each example replays up to 15 writes and checks every board after each (several seconds
# of CPU): the default tier tries 2 of the full tier's 12 sequences (3 cost it 37 s).
SETTINGS = settings(max_examples=examples(12, share=6), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@SETTINGS
@given(ops=operations)
def test_maintained_board_equals_the_full_computation_on_duckdb(duckdb_store: Store,
                                                                ops: list[tuple[Any, ...]]
                                                                ) -> None:
    _check(duckdb_store, ops)


@SETTINGS
@given(ops=operations)
def test_maintained_board_equals_the_full_computation_when_keys_clash_on_duckdb(
        duckdb_store: Store, ops: list[tuple[Any, ...]]) -> None:
    """Keys made to share their hashes (those of Apple M2 and Apple M4 rows, of spec_4 and
    spec_8): the maintained board, the full computation and the boards of the real hash
    are one board, whatever the order of the writes."""
    _check(duckdb_store, ops, _blind_hash)


@pytest.mark.postgres
@SETTINGS
@given(ops=operations)
def test_maintained_board_equals_the_full_computation_on_postgres(postgres_store: Store,
                                                                  ops: list[tuple[Any, ...]]
                                                                  ) -> None:
    _check(postgres_store, ops)


def test_a_write_that_bypassed_the_log_rebuilds(duckdb_store: Store) -> None:
    """An insert or an audit row the log did not see: the maintained board is not trusted."""
    store = duckdb_store
    store.reset()
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    filters, dimensions, view = SPECS[0]
    store.insert(0, "range-a", 0, CHIPS[0], "complete", [("spec_4", "confirmed", "log", 1.5)])
    with incremental.snapshot(store.engine) as conn:
        maintainer.board(conn, filters, dimensions, view)
    with store.engine.begin() as conn:  # a hide by hand: no log entry
        conn.execute(tables.submissions.update().values(hidden=True))
        conn.execute(insert(tables.audit_log).values(
            audit_id="a1", at=START, action="hide", target=store.ids[0], actor="hand"))
    with incremental.snapshot(store.engine) as conn:
        assert maintainer.board(conn, filters, dimensions, view).groups == []
    assert maintainer.rebuilds == 2


@pytest.mark.postgres
def test_concurrent_writers_on_postgres_are_followed_from_the_log(postgres_store: Store
                                                                  ) -> None:
    """Two writers (two replicas' worth of connections) store submissions at once while a
    reader keeps refreshing: the log's numbers follow commit order, so no refresh misses a
    change (a missed one would show as counts the log does not account for: a rebuild)."""
    import threading

    store = postgres_store
    store.reset()
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    filters, dimensions, view = SPECS[0]
    store.insert(0, "range-a", 0, CHIPS[0], "complete", [("spec_4", "confirmed", "log", 1.5)])
    lock = threading.Lock()  # only around the helper's id counter and clock
    failures: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for n in range(25):
                with lock:
                    sid_index = len(store.ids)
                    store.ids.append("")
                store_submission(
                    store.engine, f"00000000-0000-4000-9000-{sid_index:012d}",
                    KEYS[(offset + n) % len(KEYS)], ORIGINS[n % 3],
                    START + timedelta(hours=sid_index), CHIPS[n % 2], "complete",
                    [("spec_4", "confirmed", "log", 1.0 + n / 10)], 20.0)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        with incremental.snapshot(store.engine) as conn:
            maintainer.board(conn, filters, dimensions, view)
    for thread in threads:
        thread.join()
    assert not failures
    with incremental.snapshot(store.engine) as conn:
        maintained = maintainer.board(conn, filters, dimensions, view)
        assert maintained == incremental.compute(conn, filters, dimensions, view, RULES,
                                                 MIN_CONTRIBUTORS)
    assert sum(g.submissions for g in maintained.groups) == 51
    assert maintainer.rebuilds == 1 and maintainer.refreshes >= 2


def test_a_pruned_log_never_makes_a_wrong_board(duckdb_store: Store,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every logging transaction prunes, keeping the last few numbers: a reader one write behind
    follows the log; one further behind finds counts the log lost and rebuilds."""
    monkeypatch.setattr(changes, "PRUNE_EVERY", 1)
    monkeypatch.setattr(changes, "KEEP", 1)
    store = duckdb_store
    store.reset()
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    filters, dimensions, view = SPECS[0]

    def read() -> None:
        with incremental.snapshot(store.engine) as conn:
            assert maintainer.board(conn, filters, dimensions, view) == incremental.compute(
                conn, filters, dimensions, view, RULES, MIN_CONTRIBUTORS)

    drafts = [("spec_4", "confirmed", "log", 1.5)]
    store.insert(0, "range-a", 0, CHIPS[0], "complete", drafts)
    read()
    store.insert(1, "range-b", 1, CHIPS[0], "complete", drafts)
    read()  # one behind: its entry is kept
    assert (maintainer.rebuilds, maintainer.refreshes) == (1, 1)
    for key in (2, 3, 4, 5, 0):
        store.insert(key, "range-a", 1, CHIPS[0], "complete", drafts)
    read()  # five behind: the oldest of them were pruned (each prune sees the max before it)
    assert maintainer.rebuilds == 2
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(tables.board_changes)).scalar() == 3


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("postgres",
                                                             marks=pytest.mark.postgres)])
def test_the_store_restricted_to_every_contributor_reads_as_the_store(
        backend: str, duckdb_store: Store, request: pytest.FixtureRequest) -> None:
    """``sql.restricted_to`` copies only the columns the board reads: restricted to every
    contributor, every dimension's grouping, every filter, the counts and the arrivals read
    exactly what the store gives (a column missing from the copy would fail here)."""
    from specserver.board import sql
    from specserver.store import dimensions
    from tests.support import reference_rules

    store = duckdb_store if backend == "duckdb" else request.getfixturevalue("postgres_store")
    store.reset()
    for n, (key, origin) in enumerate([(0, "range-a"), (1, "range-a"), (2, None), (None, None),
                                       (3, "range-b")]):
        store.insert(key, origin, n, CHIPS[n % 2], "complete",
                     [("spec_4", VERDICTS[n], LEVELS[n], 1.0 + n / 4),
                      ("spec_8", "confirmed", "log", 2.0)])
    filters = [queries.Filters()] + [
        queries.Filters.of({name: value}) for name, value in (
            ("chip", CHIPS[0]), ("memory_gb", 24), ("protocol", "ollama-draft"),
            ("engine", "ollama"), ("draft", "spec_4"), ("target", "qwen3:14b"),
            ("os", "macos"), ("engine_version", "0.30.1"), ("ollama_version", "0.30.1"),
            ("verdicts", ("confirmed",)))
        if name in dimensions.FILTERS]
    with incremental.snapshot(store.engine) as conn:
        everyone = {changes.contributor_of(str(sid), key) for sid, key in conn.execute(
            select(tables.submissions.c.submission_id, tables.submissions.c.key_id))}

        def reads() -> list[Any]:
            # (in an order of their own: SQL groups come in any order)
            found: list[Any] = [sorted(newkeys.arrivals(conn), key=repr)]
            for name in aggregate.DIMENSIONS:
                found.append(sorted(reference_rules.contributor_results(
                    conn, queries.Filters(), [name], {"confirmed", "not_observed"}), key=repr))
            for chosen in filters:
                found.append(sorted(reference_rules.contributor_results(conn, chosen, ["chip"],
                                                            {"confirmed"}), key=repr))
                names, counts = sql.contributor_tallies(conn, chosen)
                found.append(sorted(zip(names, counts.tolist(), strict=True)))
            return found

        whole = reads()
        with sql.restricted_to(conn, everyone):
            assert reads() == whole
        assert reads() == whole  # and the shadows are gone
    assert len(filters) > 5


def test_a_refresh_that_fails_part_way_is_not_built_on(duckdb_store: Store,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A query failing in the middle of a refresh (the standing already moved, the boards
    not yet): the next read computes everything again instead of trusting half an update."""
    from specserver.board import sql

    store = duckdb_store
    store.reset()
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    filters, dimensions, view = SPECS[0]
    drafts = [("spec_4", "confirmed", "log", 1.5)]
    store.insert(0, "range-a", 0, CHIPS[0], "complete", drafts)
    with incremental.snapshot(store.engine) as conn:
        maintainer.board(conn, filters, dimensions, view)
    store.insert(1, "range-b", 300, CHIPS[0], "complete", drafts)
    original = sql.contributor_columns

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(sql, "contributor_columns", failing)
    with incremental.snapshot(store.engine) as conn, pytest.raises(RuntimeError):
        maintainer.board(conn, filters, dimensions, view)
    monkeypatch.setattr(sql, "contributor_columns", original)
    with incremental.snapshot(store.engine) as conn:
        assert maintainer.board(conn, filters, dimensions, view) == incremental.compute(
            conn, filters, dimensions, view, RULES, MIN_CONTRIBUTORS)
    assert maintainer.rebuilds == 2


def test_keys_sharing_a_hash_are_read_by_name(duckdb_store: Store,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """On DuckDB the board's rows name keys by a 64-bit hash of their ids. Should two key ids
    share one (made to here: every key's hash is the same), the maintainer sees it when it
    learns the keys' hashes and reads the rows by name, in the first computation and in
    every refresh: the boards are those of distinct hashes."""
    store = duckdb_store
    store.reset()
    drafts = [("spec_4", "confirmed", "log", 1.5), ("spec_8", "not_applied", None, 1.0)]
    for key, speedup in enumerate([1.25, 2.0, 3.5, 0.9]):
        store.insert(key, ORIGINS[key % 2], 30, CHIPS[key % 2], "complete",
                     [("spec_4", "confirmed", "log", speedup), drafts[1]])
    store.insert(None, None, 1, CHIPS[0], "complete", drafts)  # an imported row

    def boards(maintainer: incremental.Maintainer) -> list[incremental.Computed]:
        with incremental.snapshot(store.engine) as conn:
            return [maintainer.board(conn, *spec) for spec in SPECS]

    honest = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    expected = boards(honest)
    assert not honest._codes.clash
    real = newkeys.arrival_columns

    def one_hash(*args: Any, **kwargs: Any) -> newkeys.ArrivalColumns:
        found = real(*args, **kwargs)
        assert found.key_hashes is not None
        return dataclasses.replace(found, key_hashes=np.full(len(found), 7, np.uint64))

    monkeypatch.setattr(newkeys, "arrival_columns", one_hash)
    clashing = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    assert boards(clashing) == expected
    assert clashing._codes.clash
    store.insert(4, "range-a", 2, CHIPS[0], "complete", drafts)  # a new key, then a known one
    store.insert(1, "range-b", 2, CHIPS[1], "complete", drafts)
    assert boards(clashing) == boards(honest)
    assert clashing.refreshes == 1 and clashing.rebuilds == 1


def test_keys_sharing_a_hash_are_groups_of_their_own(duckdb_store: Store,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A chip whose DuckDB hash is Apple M2's, and Apple M2 and Apple M4 rows made to share
    their keys' hashes (and spec_4 and spec_8): each read finds the clash and tells those
    rows apart by value, in the first computation and in a refresh that reads both chips'
    rows again, and the boards are those of the real hash: no group takes another's rows
    or its label."""
    store = duckdb_store
    store.reset()
    for key, speedup in enumerate([1.25, 2.0, 3.5, 0.9]):
        store.insert(key, ORIGINS[key % 2], 30, CHIPS[key % 2], "complete",
                     [("spec_4", "confirmed", "log", speedup),
                      ("spec_8", "not_applied", None, 1.0)])
    clashed: list[int] = []
    real_read = groupkeys.GroupKeys.read

    def read(*args: Any, **kwargs: Any) -> groupkeys.GroupKeys:
        found = real_read(*args, **kwargs)
        clashed.append(sum(len(c) for c in found.clashing))
        return found

    monkeypatch.setattr(groupkeys.GroupKeys, "read", read)

    def boards(maintainer: incremental.Maintainer) -> list[incremental.Computed]:
        with incremental.snapshot(store.engine) as conn:
            return [maintainer.board(conn, *spec) for spec in SPECS]

    def real_boards() -> list[incremental.Computed]:
        with incremental.snapshot(store.engine) as conn:
            return [incremental.compute(conn, *spec, RULES, MIN_CONTRIBUTORS)
                    for spec in SPECS]

    expected = real_boards()
    assert not any(clashed)
    assert {g.key["chip"]["chip"] for g in expected[0].groups} == set(CHIPS)
    store.insert(5, "range-b", 1, MERGING_CHIP, "complete",
                 [("spec_4", "confirmed", "log", 9.0)])  # a real collision beside them
    clashed.clear()
    expected = real_boards()
    assert any(clashed)  # by the real hash
    assert {g.key["chip"]["chip"]: g.submissions for g in expected[0].groups} == {
        CHIPS[0]: 2, CHIPS[1]: 2, MERGING_CHIP: 1}
    with _side_hash(_blind_hash):
        blind = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
        assert boards(blind) == expected
        assert any(clashed)
        store.insert(4, "range-a", 2, CHIPS[1], "complete", [("spec_4", "confirmed", "log", 5.0)])
        store.insert(0, "range-a", 2, CHIPS[0], "complete", [("spec_4", "confirmed", "log", 1.5)])
        clashed.clear()
        refreshed = boards(blind)
        assert any(clashed)  # the refresh read both chips' rows again
    assert refreshed == real_boards()
    assert blind.refreshes == 1 and blind.rebuilds == 1


@pytest.mark.postgres
def test_rows_a_replica_of_the_version_before_wrote_count_on_postgres(postgres_store: Store
                                                                       ) -> None:
    """While a rolling upgrade replaces PostgreSQL replicas, those of the version before
    store rows without an id digest and without whether the submission reached a board
    (store version 12). The boards read from such rows are the boards of the same rows
    written now: a key still ages, a draft result still joins its submission."""
    store = postgres_store
    store.reset()
    for key, hours in enumerate([0, 30, 200, 1]):  # the first keys age, the last is new
        store.insert(key, ORIGINS[key % 2], hours, CHIPS[key % 2], "complete",
                     [("spec_4", "confirmed", "log", 1.25 + key / 4),
                      ("spec_8", "not_applied", None, 1.0)])

    def boards() -> list[incremental.Computed]:
        with incremental.snapshot(store.engine) as conn:
            return [incremental.compute(conn, *spec, RULES, MIN_CONTRIBUTORS)
                    for spec in SPECS]

    written_now = boards()
    assert any(g.contributors >= 2 for g in written_now[0].groups)
    with store.engine.begin() as conn:  # what a replica of the version before writes
        conn.execute(tables.submissions.update().values(id_digest=None, reaches_board=None))
        conn.execute(tables.summaries.update().values(id_digest=None))
    assert boards() == written_now


def test_a_dispute_is_followed_from_the_log_to_its_settlement(duckdb_store: Store) -> None:
    """Three established keys at 1.0x, three that graduated recently at 3.5x: the group is
    disputed (its median the established side's), a maintainer accepting one recent cohort
    moves it to the established side, and the settle time passing ends the dispute (all
    six established: what a maintainer who never looked lets stand); the maintained board
    equals the full computation at every step."""
    store = duckdb_store
    store.reset()
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    filters, dimensions, view = SPECS[0]

    def spec4() -> aggregate.GroupAggregate:
        with incremental.snapshot(store.engine) as conn:
            maintained = maintainer.board(conn, filters, dimensions, view)
            assert maintained == incremental.compute(conn, filters, dimensions, view, RULES,
                                                     MIN_CONTRIBUTORS)
        [group] = [g for g in maintained.groups if g.key["draft"]["config_name"] == "spec_4"]
        return group

    for key in range(3):
        store.insert(key, None, 1, CHIPS[0], "complete", [("spec_4", "confirmed", "log", 1.0)])
    store.apply(("later", 600))  # past probation (7 days) and settle time (14)
    assert spec4().dispute is None
    for key in range(3, 6):
        store.insert(key, None, 1, CHIPS[0], "complete", [("spec_4", "confirmed", "log", 3.5)])
    assert (spec4().median_speedup, spec4().contributors) == (1.0, 4)  # the block: one voice
    store.apply(("later", 200))  # they graduated, within the settle time: recent
    disputed = spec4()
    assert disputed.dispute == aggregate.Dispute(1.0, 3, 3.5, 3, tuple(sorted(KEYS[3:6])))
    assert (disputed.median_speedup, disputed.contributors) == (1.0, 3)
    assert disputed.submissions == 6 and disputed.outlier_contributors == 0
    store.apply(("accept", 3))
    accepted = spec4()
    assert accepted.dispute is not None and accepted.dispute.recent_contributors == 2
    assert accepted.dispute.established_contributors == 4
    store.apply(("later", 400))  # the settle time has passed for all three
    settled = spec4()
    assert settled.dispute is None and settled.median_speedup == 2.25
    assert maintainer.rebuilds == 1


def test_an_unlisted_chip_joins_the_board_when_a_second_range_corroborates_it(
        duckdb_store: Store) -> None:
    """Results on a chip outside the table from one range are apart (flagged); a key from
    a second range (MIN_CONTRIBUTORS) moves its groups onto the board; a key of the first
    range again, or a hidden result, does not count; the maintained board equals the full
    computation at every step, followed from the log."""
    store = duckdb_store
    store.reset()
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS, listed_chips=LISTED_CHIPS)
    filters, dimensions, view = SPECS[0]
    draft = [("spec_4", "confirmed", "log", 1.5)]

    def read() -> incremental.Computed:
        with incremental.snapshot(store.engine) as conn:
            maintained = maintainer.board(conn, filters, dimensions, view)
            assert maintained == incremental.compute(conn, filters, dimensions, view, RULES,
                                                     MIN_CONTRIBUTORS, LISTED_CHIPS)
        return maintained

    def chips(groups: list[aggregate.GroupAggregate]) -> set[Any]:
        return {g.key["chip"]["chip"] for g in groups}

    store.insert(0, ORIGINS[0], 1, CHIPS[0], "complete", draft)
    store.insert(1, ORIGINS[0], 1, INVENTED_CHIP, "complete", draft)
    store.insert(2, ORIGINS[0], 1, INVENTED_CHIP, "complete", draft)  # the same range
    store.insert(3, ORIGINS[1], 1, INVENTED_CHIP, "quarantined", draft)  # hidden
    found = read()
    assert chips(found.groups) == {CHIPS[0]} and chips(found.apart) == {INVENTED_CHIP}
    assert [g.uncorroborated for g in found.apart] == [True]
    assert found.apart[0].submissions == 2
    store.insert(4, ORIGINS[1], 1, INVENTED_CHIP, "complete", draft)
    found = read()
    assert chips(found.groups) == {CHIPS[0], INVENTED_CHIP} and found.apart == []
    assert not any(g.uncorroborated for g in found.groups)
    assert maintainer.rebuilds == 1
