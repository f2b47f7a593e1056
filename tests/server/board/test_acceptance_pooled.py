"""A board's acceptance per draft position, pooled in the database, equals its first
definition (``acceptance_reference``: every row read, pooled per voice in Python, the median
across voices), on DuckDB and PostgreSQL: for random stored results (keys, imports, verdicts,
the store's clock ending probations) with random counts on the configs and per kind of work
(counts missing, zero rounds, empty, uneven and zero-reaching lists), random voices
(cohorts, the block of new keys, recent graduates) and random disputed groups, and with the
voices and disputes the maintained board itself finds. A disputed group counts its
established side alone (rule 8)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, insert, update

from specschema.breakdown import position_rates
from specserver.board import aggregate, incremental
from specserver.board.acceptance import disputed_keys, group_acceptance
from specserver.board.keystanding import NEW_KEYS_VOICE, Voices
from specserver.board.leaderboard import ReadService
from specserver.store import queries, tables
from tests.server.board.acceptance_reference import across_contributors, reference_acceptance
from tests.server.board.incremental_support import (
    CHIPS,
    KEYS,
    MIN_CONTRIBUTORS,
    RULES,
    START,
    Store,
    store_submission,
)
from tests.support.tiers import examples

# Each example writes a store of up to 30 results and pools every spec's acceptance three
# ways, on DuckDB about 2 s of CPU: the default tier tries 5 of the full tier's 40.
SETTINGS = settings(max_examples=examples(40, share=8), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
SPECS: list[incremental.Spec] = [
    *[(queries.Filters(), tuple(aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY,
                                                                 view)), view)
      for view in aggregate.VIEWS],
    (queries.Filters(), ("draft",), "speedup"),
    (queries.Filters(), (), "speedup"),  # one group of everything
    # per kind of work: the rows of domain_results, "unspecified" where a config has none
    (queries.Filters(), ("domain", "draft"), "speedup"),
    (queries.Filters.of({"domain": "code"}), ("domain",), "noise_floor"),
]
DOMAINS = ["code", "math"]

# few values, zeros often: pooled counts that reach 0 part way, voices that tie
listed = st.lists(st.sampled_from([0, 0, 1, 2, 3, 13, 40]), max_size=5)
counts = st.tuples(st.sampled_from([None, 0, 1, 3, 20, 20, 60, 60]),
                   st.one_of(st.none(), listed, listed, listed))
Counts = tuple[int | None, list[int] | None]
# A stored draft result: its contributor (KEYS, or an import), the hours since the one
# before, its chip, config and verdict, its counts and its kinds of work's.
result = st.tuples(st.integers(0, len(KEYS)), st.sampled_from([0, 0, 24, 200]),
                   st.sampled_from(CHIPS), st.sampled_from(["spec_4", "spec_8"]),
                   st.sampled_from(["confirmed", "confirmed", "confirmed", "not_applied"]),
                   counts, st.lists(counts, max_size=len(DOMAINS)))
Result = tuple[int, int, str, str, str, Counts, list[Counts]]
contributors = st.sampled_from([*KEYS, "imported:00000000-0000-4000-8000-000000000003"])


@st.composite
def voices(draw: st.DrawFn) -> Voices:
    """Who speaks for whom as a standing says it: some contributors another's voice (a
    cohort's first key, the block of new keys), some voices recent; a recent voice is
    recent for every contributor it speaks for, its own first key included."""
    moved = draw(st.dictionaries(contributors, st.sampled_from([*KEYS[:2], NEW_KEYS_VOICE]),
                                 max_size=6))
    recent = draw(st.sets(st.sampled_from([*KEYS[:3], NEW_KEYS_VOICE])))
    recent.discard(NEW_KEYS_VOICE)  # the block of new keys is never a recent graduate
    for head in recent:
        moved.setdefault(head, head)
    spoken = {name: moved.get(name, name) for name in [*moved, *recent]}
    names = sorted(spoken)
    return Voices(names, [spoken[n] for n in names], [spoken[n] in recent for n in names])



def _text(found: list[int] | None) -> str | None:
    return None if found is None else "[" + ",".join(map(str, found)) + "]"


def _store_results(store: Store, results: list[Result], later_hours: int) -> None:
    """Each result a submission of its own (with its kinds of work), each key from its own
    address range; then the store's clock ``later_hours`` on (probations end)."""
    store.reset()
    with store.engine.begin() as conn:
        conn.execute(delete(tables.domain_results))
    at = START
    for i, (who, hours, chip, config, verdict, (rounds, found), domains) in enumerate(
            results):
        at += timedelta(hours=hours)
        sid = f"00000000-0000-4000-8000-{i:012d}"
        key = KEYS[who] if who < len(KEYS) else None
        store_submission(store.engine, sid, key, None if key is None else f"range-{who}",
                         at, chip, "complete", [(config, verdict, "log", 1.25)], 20.0)
        with store.engine.begin() as conn:
            conn.execute(update(tables.summaries).where(
                tables.summaries.c.submission_id == sid, tables.summaries.c.role == "draft"
            ).values(rounds=rounds, accepted_per_position=_text(found)))
            for domain, (rounds, found) in zip(DOMAINS, domains, strict=False):
                conn.execute(insert(tables.domain_results).values(
                    submission_id=sid, config_name=config, domain=domain, trials=1,
                    speedup_tps=1.25, baseline_tps=20.0, rounds=rounds,
                    accepted_per_position=_text(found)))
    store_submission(store.engine, f"00000000-0000-4000-8000-{len(results):012d}", None,
                     None, at + timedelta(hours=later_hours), CHIPS[0], "incomplete", [], 20.0)


def _check(store: Store, results: list[Result], later_hours: int, drawn_voices: Voices,
           disputed_share: int) -> None:
    _store_results(store, results, later_hours)
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    with incremental.snapshot(store.engine) as conn:
        for filters, dimensions, view in SPECS:
            verdicts = aggregate.VIEW_VERDICTS[view]
            # each contributor alone
            plain = reference_acceptance(conn, filters, dimensions, verdicts)
            assert group_acceptance(conn, filters, dimensions, verdicts) == plain
            # drawn voices, and every group disputed or one in ``disputed_share``
            disputed = {key for i, key in enumerate(sorted(plain, key=repr))
                        if i % max(disputed_share, 1) == 0}
            assert group_acceptance(conn, filters, dimensions, verdicts, drawn_voices,
                                    disputed) == reference_acceptance(
                conn, filters, dimensions, verdicts, drawn_voices, disputed)
            # the maintained board's own voices and disputes
            board = maintainer.board(conn, filters, dimensions, view)
            found, standing = disputed_keys(board.groups), maintainer.voices()
            assert group_acceptance(conn, filters, dimensions, verdicts, standing, found) == \
                reference_acceptance(conn, filters, dimensions, verdicts, standing, found)


DRAWN = {"results": st.lists(result, min_size=8, max_size=30),
         "later_hours": st.sampled_from([0, 100, 400]), "spoken": voices(),
         "disputed_share": st.integers(0, 3)}


@SETTINGS
@given(**DRAWN)
def test_pooled_acceptance_equals_the_reference_on_duckdb(
        duckdb_store: Store, results: list[Result], later_hours: int,
        spoken: Voices, disputed_share: int) -> None:
    _check(duckdb_store, results, later_hours, spoken, disputed_share)


@pytest.mark.postgres
@SETTINGS
@given(**DRAWN)
def test_pooled_acceptance_equals_the_reference_on_postgres(
        postgres_store: Store, results: list[Result], later_hours: int,
        spoken: Voices, disputed_share: int) -> None:
    _check(postgres_store, results, later_hours, spoken, disputed_share)


def _disputed_store(store: Store) -> dict[str, tuple[int, list[int]]]:
    """Four established keys near 1.1x and one recent graduate at 3x on one config, each
    key its own address range; each key's counts, by key."""
    store.reset()
    given_counts = {KEYS[0]: (40, [30, 20]), KEYS[1]: (50, [45, 40]),
                    KEYS[2]: (30, [15, 5]), KEYS[3]: (60, [30, 10]),
                    KEYS[4]: (20, [20, 20])}
    speedups = {KEYS[0]: 1.05, KEYS[1]: 1.1, KEYS[2]: 1.12, KEYS[3]: 1.15, KEYS[4]: 3.0}
    newest = START + timedelta(days=60)
    for i, key in enumerate(given_counts):
        # established: arrived 50 days before the store's clock; recent: graduated 3 days
        # ago (7 days of probation), inside the 14 days of settling (RULES)
        at = newest - timedelta(days=10 if key == KEYS[4] else 50)
        store_submission(store.engine, f"00000000-0000-4000-8000-{i:012d}", key,
                         f"range-{i}", at, CHIPS[0], "complete",
                         [("spec_4", "confirmed", "log", speedups[key])], 20.0)
    # the store's clock: its newest receipt (an incomplete import, on no board)
    store_submission(store.engine, "00000000-0000-4000-8000-000000000099", None, None,
                     newest, CHIPS[0], "incomplete", [], 20.0)
    with store.engine.begin() as conn:
        for i, (_, (rounds, found)) in enumerate(given_counts.items()):
            conn.execute(update(tables.summaries).where(
                tables.summaries.c.submission_id == f"00000000-0000-4000-8000-{i:012d}",
                tables.summaries.c.role == "draft").values(
                    rounds=rounds, accepted_per_position=_text(found)))
    return given_counts


@pytest.mark.parametrize("which", ["duckdb", "postgres"])
def test_a_disputed_group_counts_its_established_side_alone(
        which: str, request: pytest.FixtureRequest) -> None:
    if which == "postgres":
        request.applymarker(pytest.mark.postgres)
    store: Store = request.getfixturevalue(f"{which}_store")
    given_counts = _disputed_store(store)
    dims = ("draft",)
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS)
    with incremental.snapshot(store.engine) as conn:
        board = maintainer.board(conn, queries.Filters(), dims, "speedup")
        [group] = board.groups
        assert group.dispute is not None and group.dispute.recent_contributors == 1
        found = group_acceptance(conn, queries.Filters(), dims,
                                 aggregate.VIEW_VERDICTS["speedup"], maintainer.voices(),
                                 disputed_keys(board.groups))
    [accepted] = found.values()

    def profile(key: str) -> tuple[int, tuple[float, ...]]:
        rounds, listed = given_counts[key]
        rates = position_rates(rounds, listed)
        assert rates is not None
        return rounds, rates
    established = across_contributors([profile(k) for k in KEYS[:4]])
    everyone = across_contributors([profile(k) for k in KEYS[:5]])
    assert established is not None and everyone is not None
    assert accepted == established
    assert accepted.contributors == (4, 4) and accepted.rounds == 180
    assert accepted != everyone  # the recent graduate would have moved it
    # and as the read service computes a board with acceptance=true
    reads = ReadService(store.engine, min_contributors=MIN_CONTRIBUTORS, probation_days=7.0,
                        cohort_window_hours=24.0, graduations_per_day=1, settle_days=14.0)
    served = reads.cold_board(queries.Filters(), dims, "speedup", with_acceptance=True)
    assert served.acceptance is not None
    assert list(served.acceptance.values()) == [established]
