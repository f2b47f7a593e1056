"""What ``incremental.Maintainer`` holds and updates: per board, each group's
per-contributor rows and aggregate (``HeldBoard``); per set of filters, the draft results'
counts per verdict and evidence level (``Tallies``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specschema.evidence import LEVELS
from specserver.board import aggregate, columns
from specserver.board.aggregate import GroupAggregate, KeyValue, View
from specserver.board.columns import Bools, Codes, Ints, Rows, Standing
from specserver.store import queries

Spec = tuple[queries.Filters, tuple[str, ...], View]  # a board: filters, dimensions, view
KeyTuple = tuple[KeyValue, ...]


class Tallies:
    """Draft results per verdict and evidence level of one set of filters, in total and,
    once a refresh has needed them, per contributor (a row per code): what a refresh
    subtracts for the contributors it reads again. A first read needs the totals alone
    (``sql.draft_totals``, a third of the per-contributor query's time at a million
    submissions); the first refresh reads the per-contributor counts in full, on its own
    snapshot, and takes its totals from them."""

    def __init__(self, total: Ints) -> None:
        self.per: Ints | None = None
        self.total = total

    def start(self, codes: Codes, found: tuple[Sequence[str], Ints]) -> None:
        """Per-contributor counts from the whole store (this snapshot): the totals too."""
        names, counts = found
        coded = codes.encode(names)
        self.per = np.zeros((len(codes), counts.shape[1]), np.int64)
        self.per[coded] = counts
        self.total = counts.sum(axis=0)

    def fit(self, size: int) -> None:
        per = self.per
        if per is not None and size > len(per):
            grow = max(size, 2 * len(per)) - len(per)
            self.per = np.concatenate([per, np.zeros((grow, per.shape[1]), np.int64)])

    def update(self, codes: Codes, touched: Ints, fresh: tuple[Sequence[str], Ints]) -> None:
        """The contributors ``touched`` read again (``fresh``: their counts now)."""
        assert self.per is not None, "per-contributor counts before a refresh"
        names, counts = fresh
        coded = codes.encode(names)
        self.fit(len(codes))
        per = self.per
        self.total -= per[touched].sum(axis=0)
        per[touched] = 0
        per[coded] = counts
        self.total += counts.sum(axis=0)

    def verdicts(self) -> dict[str, int]:
        return dict(zip(queries.VERDICTS, self.total[:len(queries.VERDICTS)].tolist(),
                        strict=True))

    def levels(self) -> dict[str, int]:
        return dict(zip(LEVELS, self.total[len(queries.VERDICTS):].tolist(), strict=True))


class HeldBoard:
    """One board's per-contributor rows by group and each group's aggregate."""

    def __init__(self, spec: Spec, rows: dict[KeyTuple, Rows]) -> None:
        self.filters, self.dimensions, self.view = spec
        self.rows = rows
        self.groups: dict[KeyTuple, GroupAggregate] = {}
        self._shown: list[GroupAggregate] | None = None

    def aggregate(self, key: KeyTuple, standing: Standing, window_us: int,
                  min_contributors: int) -> None:
        rows = self.rows.get(key)
        if rows is None or not len(rows):
            self.rows.pop(key, None)
            self.groups.pop(key, None)
            return
        self.groups[key] = columns.group_aggregate(
            aggregate.key_dict(self.dimensions, key), rows, standing, window_us,
            min_contributors)

    def update(self, touched: Bools, fresh: Mapping[KeyTuple, Rows], restanded: Bools | None,
               standing: Standing, window_us: int, min_contributors: int) -> None:
        """``touched`` (by code): contributors whose rows are read again, ``fresh`` their
        rows now; ``restanded`` (by code): contributors whose standing changed."""
        dirty: set[KeyTuple] = set()
        for key, rows in self.rows.items():
            drop = touched[rows.codes]
            if drop.any():
                self.rows[key] = rows.without(drop)
                dirty.add(key)
            elif restanded is not None and restanded[rows.codes].any():
                dirty.add(key)
        for key, rows in fresh.items():
            held = self.rows.get(key)
            self.rows[key] = rows if held is None else Rows.joined([held, rows])
            dirty.add(key)
        for key in dirty:
            self.aggregate(key, standing, window_us, min_contributors)
        if dirty:
            self._shown = None

    def shown(self) -> list[GroupAggregate]:
        if self._shown is None:
            self._shown = aggregate.distinct_labels(
                aggregate.sort_groups(list(self.groups.values()), "key"))
        return self._shown
