"""What the leaderboard page shows, read from one state of the store, and what one
computation of it leaves for the next.

``page_data`` reads the page's boards, filter menus, recent submissions and newest receipt
on one connection: one state of the store, whose data version labels the page (its ETag,
``http/caching.py``). Under steady ingest the page is recomputed up to once a second, and
at 1M submissions two of its reads cost more than the boards maintained by change: the
eight filter menus (~0.35 s of CPU) and the recent list (~0.11 s, a scan of the whole
table for the newest rows). ``PageReuse`` keeps what makes them cheap:

- the menus (``queries.most_common_values``, one statement for all of them) are reused
  for ``page_menu_reuse_s`` seconds as long as no moderation action came between: the
  values of new submissions may be that late in them, a withdrawn submission's never are
  (a hidden submission's names leave every public view at once). See ``page_version``
  for why the page's ETag stays exact when they lag.
- where each recent list ended (``queries.recent_submissions``): the next computation of
  that list reads only the rows received since, and gets the same list.
- the chosen machine's forecasts (the first screen's predicted column, ``forecasts.py``:
  0.36-0.56 s of CPU each at 100,000 submissions, ``bench/predict_cost.py``), on the
  menus' terms: reused for ``page_menu_reuse_s`` seconds unless a moderation action came
  between, and named in the page's version while they lag.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from specserver.board import Board, ReadService, aggregate, newkeys
from specserver.http.page import machine
from specserver.store import dimensions, moderation_version, queries

# The filters with a menu on the page, and its label (the dimension table's).
MENUS = {name: spec.menu for name, spec in dimensions.FILTERS.items() if spec.menu}
DIMENSIONS = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)
# The page's speedup board never merges confirmed and not-observed results into one median.
SPEED_DIMENSIONS = aggregate.leaderboard_dimensions((*aggregate.DEFAULT_GROUP_BY, "verdict"))
# The candidates' measured speedups per kind of work (the first screen): the speedup board
# split by the domain dimension as well, where the store's dimension table has one, once
# "your machine" is chosen (a board of one target on one chip is small; the whole board by
# domain would not be). The forecasts wait for the same choice.
DOMAIN = machine.DOMAIN
DOMAIN_NEEDS = machine.REQUIRED
RECENT = 15  # submissions in the page's recent list
# The chosen machine's forecast for the engine families given, on a connection.
Forecaster = Callable[[Connection, Sequence[str]], dict[str, Any]]


@dataclass(frozen=True)
class PageData:
    """What the leaderboard page shows for one set of filters, from one state of the store
    (the menus possibly from an earlier one: ``menus_version``)."""

    speed: Board
    unverified: Board
    noise: Board
    menus: dict[str, list[Any]]
    menus_version: str  # the data version of the state the menus were read from
    recent: list[dict[str, Any]]
    newest: datetime | None  # the newest stored submission's receipt: how recent the page is
    domains: Board | None = None  # confirmed groups per kind of work (``by_domain``)
    # The forecast for the chosen machine per engine family (``forecasts.answers``), once
    # a machine and a target are chosen: the first screen's predicted column.
    forecasts: dict[str, Any] | None = None
    forecasts_version: str | None = None  # the data version they were computed at


@dataclass(frozen=True)
class _Held:
    """Something read at data version ``version``, kept for the next computations."""

    version: str
    read_at: float  # PageReuse.clock() when read
    values: Any


class PageReuse:
    """The menus and recent-list bounds one computation of the page's data leaves for the
    next (the module doc); at most ``keep`` recent-list bounds, by filters."""

    def __init__(self, menu_reuse_s: float, keep: int = 256,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.menu_reuse_s = menu_reuse_s
        self.keep = keep
        self.clock = clock
        self._menus: dict[int, _Held] = {}  # by the menus' cut
        # The chosen machines' forecasts, by (filters, engines): at most ``keep``.
        self._forecasts: OrderedDict[tuple[queries.Filters, tuple[str, ...]], _Held] = (
            OrderedDict())
        self._bounds: OrderedDict[tuple[queries.Filters, int], datetime] = OrderedDict()
        self._lock = threading.Lock()
        self.menu_reads = 0  # menus read from the store (tests count them)
        self.forecast_reads = 0  # forecasts computed (tests count them)

    def _reusable(self, held: _Held, version: str) -> bool:
        if held.version == version:
            return True
        return (moderation_version(held.version) == moderation_version(version)
                and self.clock() - held.read_at < self.menu_reuse_s)

    def menus(self, conn: Connection, version: str, cut: int
              ) -> tuple[str, dict[str, list[Any]]]:
        """The menus (``cut`` values each) and the data version they were read at: those
        kept, when they may still be shown at ``version``; else read on ``conn``."""
        with self._lock:
            held = self._menus.get(cut)
        if held is not None and self._reusable(held, version):
            return held.version, held.values
        values = queries.most_common_values(conn, list(MENUS), cut)
        with self._lock:
            self._menus[cut] = _Held(version, self.clock(), values)
            self.menu_reads += 1
        return version, values

    def forecasts(self, conn: Connection, version: str, filters: queries.Filters,
                  engines: Sequence[str], forecaster: Forecaster
                  ) -> tuple[str, dict[str, Any]]:
        """The chosen machine's forecasts and the data version they were computed at:
        those kept, on the menus' terms; else computed on ``conn`` (a forecast costs
        about as much as the rest of the page: ``bench/predict_cost.py``)."""
        key = (filters, tuple(engines))
        with self._lock:
            held = self._forecasts.get(key)
        if held is not None and self._reusable(held, version):
            return held.version, held.values
        values = forecaster(conn, engines)
        with self._lock:
            self._forecasts[key] = _Held(version, self.clock(), values)
            self._forecasts.move_to_end(key)
            while len(self._forecasts) > self.keep:
                self._forecasts.popitem(last=False)
            self.forecast_reads += 1
        return version, values

    def recent(self, conn: Connection, filters: queries.Filters, limit: int
               ) -> list[dict[str, Any]]:
        """``queries.list_submissions``' first page for ``filters``, bounded by where the
        last read of the same list ended."""
        key = (filters, limit)
        with self._lock:
            since = self._bounds.get(key)
        items, bound = queries.recent_submissions(conn, filters, limit, since)
        with self._lock:
            if bound is None:
                self._bounds.pop(key, None)
            else:
                self._bounds[key] = bound
                self._bounds.move_to_end(key)
                while len(self._bounds) > self.keep:
                    self._bounds.popitem(last=False)
        return items


def page_data(reads: ReadService, reuse: PageReuse, conn: Connection, version: str,
              filters: queries.Filters, menu_cut: int, forecaster: Forecaster | None = None
              ) -> PageData:
    """The page's boards, menus and recent submissions on ``conn`` (at ``version``);
    ``forecaster``: the chosen machine's forecast for the engines given, on ``conn``."""
    menus_version, menus = reuse.menus(conn, version, menu_cut)
    # Each group's acceptance per draft position once a machine and a target are chosen:
    # ~0.35 s of CPU for one chip's board at a million results, against ~1.4 s for the
    # whole board's, paid at every recomputation of the page (BENCHMARKS.md).
    chosen = all(filters.get(n) is not None for n in DOMAIN_NEEDS)
    data = PageData(
        speed=reads.compute_board(conn, version, filters, SPEED_DIMENSIONS, "speedup",
                                  chosen),
        # The unverified rows (not observed, unstable) stand beside the confirmed ones, each
        # its own row and never in a confirmed row's median (aggregate rule 5).
        unverified=reads.compute_board(conn, version, filters, SPEED_DIMENSIONS, "unverified"),
        noise=reads.compute_board(conn, version, filters, DIMENSIONS, "noise_floor"),
        menus=menus,
        menus_version=menus_version,
        recent=reuse.recent(conn, filters, RECENT),
        newest=newkeys.newest_receipt(conn),
        domains=by_domain(reads, conn, version, filters),
    )
    if forecaster is None or any(filters.get(n) is None for n in DOMAIN_NEEDS):
        return data
    engines = {str(g.key["engine"]["engine"])
               for board in (data.speed, data.unverified, data.noise) for g in board.groups}
    forecasts_version, found = reuse.forecasts(conn, version, filters, sorted(engines),
                                               forecaster)
    return dataclasses.replace(data, forecasts=found, forecasts_version=forecasts_version)


def by_domain(reads: ReadService, conn: Connection, version: str, filters: queries.Filters
              ) -> Board | None:
    """The confirmed groups per kind of work once a machine and a target are chosen; None
    before, or while the dimension table has no kind-of-work dimension."""
    if DOMAIN not in aggregate.DIMENSIONS or any(filters.get(n) is None for n in DOMAIN_NEEDS):
        return None
    return reads.compute_board(conn, version, filters, [*SPEED_DIMENSIONS, DOMAIN], "speedup")


def page_version(version: str, data: PageData) -> str:
    """The version that labels a page body (its ETag) computed at data ``version``.

    Conditional GETs are right only if one ETag always stands for one body: a 304 tells
    the client that the body it holds is the one it would get, and remembered bodies are
    served by ETag. A page's body is a function of the state its boards, recent list and
    newest receipt were read from (``version``) and of the state its menus were read from
    (``data.menus_version``), nothing else that varies (the settings and the URL aside,
    which the ETag covers too). Labelled by ``version`` alone, a process whose menus lag
    and another whose menus do not (a replica, or this one after a restart or after the
    menus were read again) would serve different bodies under one ETag. So menus that lag
    add their own version to the label, and both states together fix the body on every
    replica: the menus of one state are the same everywhere (``most_common_values``
    orders ties by value). Menus read from ``version`` itself leave the label as the
    boards' version alone, as before menus could lag. The chosen machine's forecasts are
    kept on the same terms, and label the page the same way when they lag."""
    label = version if data.menus_version == version else (
        f"{version} menus {data.menus_version}")
    if data.forecasts_version in (None, version):
        return label
    return f"{label} forecasts {data.forecasts_version}"
