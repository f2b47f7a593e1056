"""The board's per-contributor rows as columns, and its rules over them.

After its first step (``sql.contributor_columns``: one row per group and contributor) the
board at a million submissions holds ~400,000 rows. Kept as Python objects they cost
seconds to build and, since one write touches contributors in most groups, seconds to
fold and aggregate again after every write. Here each group's rows are numpy columns
(contributor codes, the three medians, the counts), and the rules that follow the first
step run over columns:

- the keys' standing (``Standing``: each contributor's cohort, which cohorts are new, when
  each arrived; ``newkeys`` forms it) is one array per fact, indexed by contributor code;
- ``group_aggregate`` applies, per group, rule 5 of ``newkeys`` (arrived together), its
  fold (cohorts as one voice, new cohorts as one block) and ``aggregate``'s rules 3, 4, 7
  and 8 (medians across contributors, percentiles from ``min_contributors``, the robust
  spread, disputes: ``groupstats``).

Every value is computed with the same IEEE operations in the same order as
``specschema.stats`` does on Python floats (a median is the middle value or the mean of the
middle pair; a percentile interpolates linearly: ``groupstats``), so the result is the same
to the last bit; ``tests/server/board/test_columns.py`` holds it equal to the rules written
row by row.
A missing value (a contributor without a speedup) is NaN here; no stored speedup is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

from specschema.evidence import LEVELS
from specserver.board.aggregate import (
    LEVEL_FIELDS,
    Dispute,
    GroupAggregate,
    GroupKey,
    KeyValue,
)
from specserver.board.groupstats import (
    Sides,
    median_present,
    median_sorted,
    outliers,
    percentile_sorted,
    present_sorted,
)
from specserver.board.groupstats import segment_medians as segment_medians  # sql's
from specserver.store import VERDICTS

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Hashes = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]
KeyTuple = tuple[KeyValue, ...]

# The value columns (NaN: none) and the count columns of a contributor's row.
VALUE_FIELDS = ("speedup", "speedup_wall", "baseline_tps")
COUNT_FIELDS = ("submissions", *VERDICTS, *LEVEL_FIELDS)
_VERDICT_SLICE = slice(1, 1 + len(VERDICTS))
_LEVEL_SLICE = slice(1 + len(VERDICTS), len(COUNT_FIELDS))
NAT = np.iinfo(np.int64).min  # "no time" in an int64 time column (numpy's NaT, as int64)


class Codes:
    """Contributor names to dense integer codes and back (one set per maintainer), and,
    for keys, DuckDB's 64-bit ``hash`` of their ids to codes: ``sql.contributor_columns``
    can then name a key's rows by that number, and ~1,000,000 rows at a million submissions
    need no string each. The hash of a key id is learnt from the keys' arrivals
    (``newkeys.arrival_columns``), which list every key of the snapshot; two key ids with
    one hash (``clash``: a 64-bit collision, which no rule may rely on never happening)
    turn that off for good."""

    def __init__(self) -> None:
        self._index: dict[str, int] | None = {}  # None: to be built from ``names``
        self.names: list[str] = []
        self.clash = False
        self._hashes = np.zeros(0, np.uint64)  # ascending
        self._hashed = np.zeros(0, np.int64)  # the code of each of ``_hashes``

    def __len__(self) -> int:
        return len(self.names)

    @property
    def index(self) -> dict[str, int]:
        """Name to code. Built when first needed after ``encode(..., distinct=True)``: a
        cold board's keys are coded without it, and its first refresh builds it."""
        if self._index is None:
            self._index = dict(zip(self.names, range(len(self.names)), strict=True))
        return self._index

    def code(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.names)
            self.names.append(name)
        return found

    def encode(self, names: Sequence[str], distinct: bool = False) -> Ints:
        """The names' codes, new names coded in order of first appearance. In bulk (a cold
        board codes ~800,000 names): the dictionary work runs in C, one pass when every
        name is known. ``distinct``: the names are known to be all different."""
        listed = names if isinstance(names, list) else list(names)
        if distinct and not self.names:  # the first names of all: coded in their order
            self.names.extend(listed)
            self._index = None
            return np.arange(len(listed), dtype=np.int64)
        index = self.index
        if not index:  # the first names of all (a cold board's keys): no lookups
            first = dict.fromkeys(listed)
            if len(first) == len(listed):
                index.update(zip(first, range(len(first)), strict=True))
                self.names.extend(first)
                return np.arange(len(listed), dtype=np.int64)
        found = list(map(index.get, listed))
        if None in found:
            fresh = list(dict.fromkeys(n for n, c in zip(listed, found, strict=True)
                                       if c is None))
            start = len(self.names)
            index.update(zip(fresh, range(start, start + len(fresh)), strict=True))
            self.names.extend(fresh)
            found = list(map(index.__getitem__, listed))
        return np.array(found, dtype=np.int64)

    def learn_hashes(self, codes: Ints, hashes: Hashes) -> None:
        """DuckDB's hash of the names of ``codes`` (keys), aligned."""
        merged = np.concatenate([self._hashes, hashes])
        order = np.argsort(merged, kind="stable")
        merged, coded = merged[order], np.concatenate([self._hashed, codes])[order]
        same = merged[1:] == merged[:-1]
        if (same & (coded[1:] != coded[:-1])).any():
            self.clash = True
        first = np.r_[True, ~same] if len(merged) else np.zeros(0, np.bool_)
        self._hashes, self._hashed = merged[first], coded[first]

    def of_hashes(self, hashes: Hashes) -> Ints:
        """The codes of keys named by their hash (every one learnt: ``learn_hashes``)."""
        if not len(hashes):
            return np.zeros(0, np.int64)
        at = np.searchsorted(self._hashes, hashes)
        inside = at < len(self._hashes)
        if not inside.all() or not (self._hashes[at[inside]] == hashes).all():
            raise LookupError("a key's hash was not learnt from the keys' arrivals")
        return self._hashed[at]


@dataclass
class Rows:
    """Per-contributor rows (of one group, or of several with ``group``) as columns."""

    codes: Ints  # contributor codes
    values: Floats  # [n, 3]: VALUE_FIELDS, NaN for none
    counts: Ints  # [n, len(COUNT_FIELDS)]

    def __len__(self) -> int:
        return len(self.codes)

    def without(self, drop: Bools) -> Rows:
        keep = ~drop
        return Rows(self.codes[keep], self.values[keep], self.counts[keep])

    @staticmethod
    def joined(parts: Sequence[Rows]) -> Rows:
        if len(parts) == 1:
            return parts[0]
        return Rows(np.concatenate([p.codes for p in parts]),
                    np.concatenate([p.values for p in parts]),
                    np.concatenate([p.counts for p in parts]))


@dataclass
class Reduced:
    """``sql.contributor_columns``'s answer: each row's group (an index into ``keys``)
    and its contributor: a name, or (``key_hashes``, where the name is None) a key's hash
    (``Codes.learn_hashes``)."""

    keys: list[KeyTuple]
    group: Ints
    names: Sequence[str | None]
    values: Floats
    counts: Ints
    key_hashes: Hashes | None = None

    def coded(self, codes: Codes) -> Ints:
        if self.key_hashes is None:
            return codes.encode(self.names)  # type: ignore[arg-type]  # all names
        named = np.fromiter((n is not None for n in self.names), np.bool_, len(self.names))
        coded = np.empty(len(self.names), np.int64)
        coded[~named] = codes.of_hashes(self.key_hashes[~named])
        if named.any():
            coded[named] = codes.encode([n for n in self.names if n is not None])
        return coded

    def by_group(self, codes: Codes) -> dict[KeyTuple, Rows]:
        """The rows split by group, contributors coded."""
        coded = self.coded(codes)
        if not len(coded):
            return {}
        order = np.argsort(self.group, kind="stable")
        group = self.group[order]
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        ends = np.r_[starts[1:], len(group)]
        coded, values, counts = coded[order], self.values[order], self.counts[order]
        return {self.keys[int(group[s])]: Rows(coded[s:e], values[s:e], counts[s:e])
                for s, e in zip(starts.tolist(), ends.tolist(), strict=True)}


def group_numbers(keys: Iterable[KeyTuple]) -> tuple[list[KeyTuple], Ints]:
    """Rows' group keys as numbers: the distinct keys in order of first appearance, and
    each row's index among them (``Reduced.keys`` and ``Reduced.group``)."""
    index: dict[KeyTuple, int] = {}
    group = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64)
    return list(index), group


def float_column(column: object) -> Floats:
    """A fetched numeric column (numpy, masked where NULL) as float64 with NaN for NULL."""
    if isinstance(column, np.ma.MaskedArray):
        return np.asarray(np.ma.filled(column.astype(np.float64), np.nan), dtype=np.float64)
    return np.asarray(column, dtype=np.float64)


def time_column(column: object) -> Ints:
    """A fetched timestamp column as int64 microseconds since the epoch, ``NAT`` for NULL."""
    if isinstance(column, np.ma.MaskedArray):
        column = column.filled(np.datetime64("NaT"))
    return np.asarray(column, dtype="datetime64[us]").astype(np.int64)


def micros(value: datetime | timedelta | None) -> int:
    """A datetime (naive UTC) or a timedelta in int64 microseconds (``NAT`` for None)."""
    if value is None:
        return int(NAT)
    if isinstance(value, timedelta):
        return value // _MICROSECOND
    return (value - _EPOCH) // _MICROSECOND


def when(value: int) -> datetime:
    """int64 microseconds since the epoch as a naive UTC datetime (the store's kind)."""
    return _EPOCH + timedelta(microseconds=value)


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


# --- the keys' standing, as arrays by contributor code ------------------------------------


@dataclass
class Standing:
    """Each contributor's cohort (its own code when it has none: an imported row, a key
    the rules do not know, or rules that are off), whether each cohort is new or a recent
    graduate (``newkeys`` rule 6), and when each arrived (``NAT``: unknown). Indexed by
    contributor code; ``fit`` grows them. ``names``: the codes' names (``Codes.names``),
    to name a dispute's recent cohorts."""

    cohort: Ints
    new: Bools
    arrived: Ints
    recent: Bools
    names: Sequence[str] = ()

    @classmethod
    def empty(cls) -> Standing:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.bool_), np.zeros(0, np.int64),
                   np.zeros(0, np.bool_))

    def fit(self, size: int) -> None:
        """Room for ``size`` codes: a code not seen before is its own cohort, not new."""
        have = len(self.cohort)
        if size <= have:
            return
        grow = max(size, 2 * have) - have
        self.cohort = np.concatenate([self.cohort, np.arange(have, have + grow)])
        self.new = np.concatenate([self.new, np.zeros(grow, np.bool_)])
        self.recent = np.concatenate([self.recent, np.zeros(grow, np.bool_)])
        self.arrived = np.concatenate([self.arrived, np.full(grow, NAT, np.int64)])


# --- one group: rule 5, the fold, the statistics ------------------------------------------


def _merge(values: Floats, counts: Ints, slots: Ints) -> tuple[Floats, Ints]:
    """Rows that share a slot made one: the median of their values (each column, missing
    ones left out), the sum of their counts. The slots' order is the slots' ascending."""
    order = np.argsort(slots, kind="stable")
    slots, values, counts = slots[order], values[order], counts[order]
    starts = np.flatnonzero(np.r_[True, slots[1:] != slots[:-1]])
    sizes = np.diff(np.r_[starts, len(slots)])
    merged = values[starts].copy()
    for at in np.flatnonzero(sizes > 1).tolist():
        start, size = int(starts[at]), int(sizes[at])
        for column in range(values.shape[1]):
            merged[at, column] = median_present(values[start:start + size, column])
    return merged, np.add.reduceat(counts, starts, axis=0)


def arrived_together(cohorts: Ints, standing: Standing, window_us: int,
                     min_contributors: int, distinct: bool = False) -> bool:
    """Rule 5 for one group whose rows' cohorts are ``cohorts`` (``distinct``: known to be
    all different): more than half of its cohorts (imported rows each their own) arrived
    within one window."""
    units = cohorts if distinct else np.unique(cohorts)
    if len(units) < max(min_contributors, 2):
        return False
    times = standing.arrived[units]
    times = np.sort(times[times != NAT])
    if not len(times):
        return False
    first_inside = np.searchsorted(times, times - window_us, side="left")
    most = int((np.arange(len(times)) - first_inside).max()) + 1
    return 2 * most > len(units)


def fold(rows: Rows, standing: Standing, alone: bool | None = None) -> tuple[Floats, Ints]:
    """One group's rows folded (``newkeys``, rules 1 and 3): each cohort's keys one row,
    every new cohort together one more (the block of new keys). Values and counts.
    ``alone``: every row is known to be its own cohort (the common case, no merging)."""
    cohorts = standing.cohort[rows.codes]
    new = standing.new[cohorts]
    if alone is None:
        alone = bool((cohorts == rows.codes).all())
    if alone and not new.any():
        return rows.values, rows.counts
    settled = ~new
    values, counts = rows.values[settled], rows.counts[settled]
    kept = cohorts[settled]
    if not alone and len(np.unique(kept)) < len(kept):
        values, counts = _merge(values, counts, kept)
    if new.any():
        block_values, block_counts = _merge(rows.values[new], rows.counts[new], cohorts[new])
        merged, summed = _merge(block_values, block_counts,
                                np.zeros(len(block_values), np.int64))
        values = np.concatenate([values, merged])
        counts = np.concatenate([counts, summed])
    return values, counts


def _sides(rows: Rows, cohorts: Ints, standing: Standing, alone: bool, pooled: float
           ) -> tuple[Sides, Bools] | None:
    """The group's established and recent voices' speedups (``groupstats``) and which rows
    are recent; None unless both sides have one."""
    recent = standing.recent[cohorts]
    established = ~recent & ~standing.new[cohorts]
    if not recent.any() or not established.any():
        return None
    settled, young = (present_sorted(fold(rows.without(~side), standing, alone)[0][:, 0])
                      for side in (established, recent))
    return (Sides(settled, young, pooled), recent) if len(settled) and len(young) else None


def group_aggregate(key: GroupKey, rows: Rows, standing: Standing, window_us: int,
                    min_contributors: int) -> GroupAggregate:
    """One group of the board from its per-contributor rows (``newkeys`` rules 1, 3, 5 and
    6; ``aggregate`` rules 3, 4, 7 and 8)."""
    cohorts = standing.cohort[rows.codes]
    alone = bool((cohorts == rows.codes).all())  # a group's codes are distinct
    together = arrived_together(cohorts, standing, window_us, min_contributors, alone)
    values, counts = fold(rows, standing, alone)
    sums = counts.sum(axis=0).tolist() if len(counts) else [0] * len(COUNT_FIELDS)
    per_contributor = present_sorted(values[:, 0])
    present = len(per_contributor)
    sides = (_sides(rows, cohorts, standing, alone, median_sorted(per_contributor))
             if present else None)
    dispute: Dispute | None = None
    if sides is not None and sides[0].disputed():
        named = {standing.names[c] for c in cohorts[sides[1]].tolist()} if standing.names else ()
        dispute = Dispute(median_sorted(sides[0].established), len(sides[0].established),
                          median_sorted(sides[0].recent), len(sides[0].recent),
                          tuple(sorted(named)))
        values, _ = fold(rows.without(sides[1]), standing, alone)  # without the recent side
        per_contributor = present_sorted(values[:, 0])
        present = len(per_contributor)
    enough = present >= min_contributors
    median = median_sorted(per_contributor) if present else None
    mad: float | None = None
    flagged = 0
    if enough and median is not None:
        mad, flagged = outliers(per_contributor, median,
                                sides[0].established if sides is not None else None)
    wall, baseline = (median_present(values[:, 1]), median_present(values[:, 2]))
    return GroupAggregate(
        key=key,
        submissions=int(sums[0]),
        contributors=len(values),
        median_speedup=median,
        p25_speedup=percentile_sorted(per_contributor, 0.25) if enough else None,
        p75_speedup=percentile_sorted(per_contributor, 0.75) if enough else None,
        min_speedup=float(per_contributor[0]) if present else None,
        max_speedup=float(per_contributor[-1]) if present else None,
        median_speedup_wall=None if math.isnan(wall) else wall,
        median_baseline_tps=None if math.isnan(baseline) else baseline,
        few_results=not enough,
        verdicts=dict(zip(VERDICTS, sums[_VERDICT_SLICE], strict=True)),
        evidence=dict(zip(LEVELS, sums[_LEVEL_SLICE], strict=True)),
        mad_speedup=mad,
        outlier_contributors=flagged,
        arrived_together=together,
        dispute=dispute,
    )


def membership(codes: Iterable[int], size: int) -> Bools:
    """A lookup array: True at each of ``codes`` (``size``: the codes there are)."""
    found = np.zeros(size, np.bool_)
    found[np.fromiter(codes, dtype=np.int64)] = True
    return found
