"""The board's rules over columns equal the rules written row by row, to the last bit.

``columns.group_aggregate`` (rule 5 of newkeys, its fold, the group's statistics) against
``tests/support/reference_rules.py`` on random groups and standings, and
``newkeys.form_cohorts`` (through ``newkeys.cohorts``) against the reference cohorts on
random arrivals with ties, ranges and keys that never aged.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specserver.board import columns, groupstats, newkeys
from specserver.board.columns import NAT, Codes, Standing
from tests.support import reference_rules
from tests.support.reference_board import ContributorResult
from tests.support.tiers import examples

T0 = datetime(2026, 11, 1, 12, 0, 0)
NAMES = [f"k{i}" for i in range(8)] + ["imported:x", "imported:y"]
# Few distinct values, so that ties, equal medians and a zero MAD all happen.
VALUES = st.one_of(st.none(), st.sampled_from([0.5, 0.9, 1.0, 1.0 + 1e-15, 1.1, 1.25, 2.0,
                                               3.5, 7.0]), st.floats(0.1, 10.0))


def contributor_row(key: tuple[str, ...], name: str, draw: st.DrawFn) -> ContributorResult:
    counts = draw(st.lists(st.integers(0, 3), min_size=14, max_size=14))
    return ContributorResult(key, name, draw(st.integers(1, 4)), draw(VALUES), draw(VALUES),
                             draw(VALUES), *counts)


@st.composite
def groups_and_standing(draw: st.DrawFn) -> tuple[list[ContributorResult],
                                                  newkeys.Standing, int, timedelta]:
    members = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=len(NAMES),
                            unique=True))
    rows = [contributor_row(("g",), name, draw) for name in members]
    keys = [n for n in NAMES if not n.startswith("imported:")]
    heads = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=4, unique=True))
    cohort_of = {k: draw(st.sampled_from(heads)) for k in keys
                 if draw(st.booleans()) or k in heads}
    for head in heads:
        cohort_of[head] = head
    new = frozenset(h for h in heads if draw(st.booleans()))
    recent = frozenset(h for h in heads if h not in new and draw(st.booleans()))
    arrived = {h: T0 + timedelta(hours=draw(st.sampled_from([0, 1, 20, 24, 25, 60])))
               for h in heads if draw(st.integers(0, 4))}
    min_contributors = draw(st.integers(1, 4))
    window = timedelta(hours=draw(st.sampled_from([0, 1, 24])))
    return rows, newkeys.Standing(cohort_of, new, arrived, recent), min_contributors, window


def as_columns(rows: list[ContributorResult], held: newkeys.Standing
               ) -> tuple[columns.Rows, Standing]:
    codes = Codes()
    coded = codes.encode([r.contributor for r in rows])
    for name in (*held.cohort_of, *held.cohort_of.values()):
        codes.encode([name])
    standing = Standing.empty()
    standing.fit(len(codes))
    for key, cohort in held.cohort_of.items():
        standing.cohort[codes.index[key]] = codes.index[cohort]
    for cohort in held.new:
        standing.new[codes.index[cohort]] = True
    for cohort in held.recent:
        standing.recent[codes.index[cohort]] = True
    standing.names = codes.names
    for cohort, at in held.arrived.items():
        standing.arrived[codes.index[cohort]] = columns.micros(at)
    values = np.array([[np.nan if v is None else v for v in r[3:6]] for r in rows])
    counts = np.array([(r.submissions, *r[6:]) for r in rows], dtype=np.int64)
    return columns.Rows(coded, values, counts), standing


@settings(max_examples=examples(400), deadline=None)
@given(case=groups_and_standing())
def test_a_group_over_columns_equals_the_rules_row_by_row(
        case: tuple[list[ContributorResult], newkeys.Standing, int, timedelta]) -> None:
    rows, held, min_contributors, window = case
    [expected] = reference_rules.board_groups(rows, ["chip"], held, window, min_contributors)
    found, standing = as_columns([r._replace(key=("g",)) for r in rows], held)
    got = columns.group_aggregate({"chip": {"chip": "g"}}, found, standing,
                                  columns.micros(window), min_contributors)
    assert got == expected
    # the same floats, not merely equal ones (-0.0, NaN never appear)
    for name in ("median_speedup", "p25_speedup", "p75_speedup", "mad_speedup",
                 "median_speedup_wall", "median_baseline_tps"):
        assert repr(getattr(got, name)) == repr(getattr(expected, name))


arrival = st.tuples(
    st.sampled_from([None, "r1", "r2"]),
    st.sampled_from([0, 0, 1, 5, 23, 24, 25, 48, 200]),  # hours after T0 (ties on purpose)
    st.one_of(st.none(), st.sampled_from([0, 2, 30, 100, 170])),  # aged, hours after arrival
)


@settings(max_examples=examples(300), deadline=None)
@given(found=st.lists(arrival, min_size=0, max_size=14),
       window=st.sampled_from([0, 1, 24]), probation=st.sampled_from([0.0, 1.0, 7.0]),
       cap=st.sampled_from([0, 1, 2]))
def test_cohorts_over_columns_equal_the_rules_row_by_row(
        found: list[tuple[str | None, int, int | None]], window: int, probation: float,
        cap: int) -> None:
    arrivals = [newkeys.Arrival(f"key-{(i * 7) % 13:02d}-{i}", T0 + timedelta(hours=h), o,
                                None if a is None else T0 + timedelta(hours=h + a))
                for i, (o, h, a) in enumerate(found)]
    rules = newkeys.CohortRules.of(probation, window, cap)
    assert newkeys.cohorts(arrivals, rules) == reference_rules.cohorts(arrivals, rules)


def test_folding_merges_a_cohort_and_the_new_ones_per_group() -> None:
    """Rule 1 and 3 on one group: two keys of one established cohort are one voice (the
    median of their medians), new cohorts together one more, the block."""
    rows = [ContributorResult(("g",), name, 1, speedup, speedup, 20.0, confirmed=1)
            for name, speedup in (("old1", 1.0), ("old2", 2.0), ("new1", 3.0),
                                  ("new2", 5.0), ("imported:z", 9.0))]
    held = newkeys.Standing({"old1": "old1", "old2": "old1", "new1": "new1", "new2": "new2"},
                            frozenset({"new1", "new2"}), {})
    found, standing = as_columns(rows, held)
    values, counts = columns.fold(found, standing)
    assert sorted(values[:, 0].tolist()) == [1.5, 4.0, 9.0]
    assert sorted(counts[:, 0].tolist()) == [1, 2, 2]


def test_no_time_is_the_smallest_int64() -> None:
    """``NAT`` is numpy's NaT as int64: a NULL timestamp fetched as datetime64 reads so."""
    assert np.array([None], dtype="datetime64[us]").astype(np.int64)[0] == NAT
    assert columns.micros(None) == NAT


@pytest.mark.parametrize("names", [["a", "b", "a"], [], ["b"] * 3])
def test_codes_are_dense_and_stable(names: list[str]) -> None:
    codes = Codes()
    codes.encode(["z"])
    coded = codes.encode(names).tolist()
    assert [codes.names[c] for c in coded] == names
    assert codes.encode(names).tolist() == coded
    assert sorted(set(codes.index.values())) == list(range(len(codes)))


@settings(max_examples=examples(300), deadline=None)
@given(segments=st.lists(st.lists(st.tuples(VALUES, VALUES), min_size=1, max_size=9),
                         min_size=0, max_size=12))
def test_segment_medians_are_each_segments_median_to_the_last_bit(
        segments: list[list[tuple[float | None, float | None]]]) -> None:
    """The sorted rows' reduction (``sql.contributor_columns`` on DuckDB) takes each
    contributor's medians per segment of rows: equal to the median of the values present,
    as the rules take it (``_median_present``; tested against the row rules above)."""
    rows = [[np.nan if v is None else v for v in pair] for seg in segments for pair in seg]
    values = np.array(rows, dtype=np.float64).reshape(-1, 2)
    starts = np.cumsum([0] + [len(seg) for seg in segments[:-1]]).astype(np.int64)
    if not segments:
        starts = np.zeros(0, np.int64)
    found = groupstats.segment_medians(values, starts)
    assert found.shape == (len(segments), 2)
    at = 0
    for index, seg in enumerate(segments):
        for column in range(2):
            expected = groupstats.median_present(values[at:at + len(seg), column])
            assert repr(float(found[index, column])) == repr(expected)
        at += len(seg)


def test_codes_learn_key_hashes_and_notice_two_keys_sharing_one() -> None:
    codes = Codes()
    keys = codes.encode(["k1", "k2", "k3"])
    codes.learn_hashes(keys, np.array([30, 10, 20], dtype=np.uint64))
    codes.learn_hashes(keys[:1], np.array([30], dtype=np.uint64))  # known again: fine
    assert not codes.clash
    assert codes.of_hashes(np.array([20, 30, 30, 10], dtype=np.uint64)).tolist() == [
        keys[2], keys[0], keys[0], keys[1]]
    with pytest.raises(LookupError):
        codes.of_hashes(np.array([15], dtype=np.uint64))
    later = codes.encode(["k4"])
    codes.learn_hashes(later, np.array([5], dtype=np.uint64))  # a new key, learnt later
    assert codes.of_hashes(np.array([5, 10], dtype=np.uint64)).tolist() == [later[0], keys[1]]
    assert not codes.clash
    codes.learn_hashes(codes.encode(["k5"]), np.array([20], dtype=np.uint64))
    assert codes.clash  # k5 and k3 share a hash: rows must be read by name from now on
    fresh = Codes()
    fresh.learn_hashes(fresh.encode(["a", "b"]), np.array([7, 7], dtype=np.uint64))
    assert fresh.clash  # within one batch too


def test_codes_of_distinct_names_build_their_index_when_first_needed() -> None:
    codes = Codes()
    assert codes.encode(["b", "a", "c"], distinct=True).tolist() == [0, 1, 2]
    assert codes.encode(["c", "d", "a"]).tolist() == [2, 3, 1]  # the index, built now
    assert codes.index == {"b": 0, "a": 1, "c": 2, "d": 3}
    later = Codes()
    later.encode(["x"])
    assert later.encode(["y", "x"], distinct=True).tolist() == [1, 0]  # not the first names
