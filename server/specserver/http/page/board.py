"""The leaderboard's sections as the templates draw them (pure: board groups in, plain data
out; ``templates/board.html`` writes the markup).

A section per protocol: the speedup board (confirmed rows coloured by outcome, unverified
rows neutral beside them, never in one median) and the noise floor (not applied: the
run-to-run difference, never a speedup), each a chart and a table, cut into pages where one
key could mint groups without end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

from markupsafe import Markup

from specschema.conclusion import LEVEL_BADGES, LEVEL_CHECKS
from specschema.engines import ENGINES
from specschema.protocol_files import shipped_protocols
from specschema.verdicts import (
    BY_NAME,
    ORDER,
    OUTCOME_STYLE,
    OUTCOME_WORDS,
    Board,
    drawn,
    listed_on,
    outcome_of,
    unresolved_words,
    unverified_words,
    verdict_of,
)
from specserver.board import GroupAcceptance, GroupAggregate, KeyTuple, aggregate
from specserver.http.page import charts
from specserver.http.page.positions import Positions, positions_of
from specserver.ingest import chip_is_known, target_unsized_reason
from specserver.store import queries

# A board's acceptance per draft position by group key, when it was read with it.
Accepted = Mapping[KeyTuple, GroupAcceptance] | None

# The outcome's CSS class: the colour of the ratio, the bar and the words (the verdict
# table's; how each verdict's row is named and styled is too, ``specschema.verdicts``).
OUTCOME_CLASS = OUTCOME_STYLE

# Evidence levels on a board row, strongest first (specschema.evidence.LEVELS), worded by
# specschema.conclusion.LEVEL_BADGES, titled by what the client reported and what the
# server checked (LEVEL_CHECKS); a speedup board row never holds "reported" or
# "implausible" confirmed results (aggregate rule 6).
LEVEL_TITLES: dict[str, str] = {level: f"{reported}; {checked}"
                                for level, (reported, checked) in LEVEL_CHECKS.items()}


def group_spread(group: GroupAggregate) -> tuple[str, float | None, float | None]:
    """The spread a confirmed group's outcome is judged by, named: the interquartile range
    of its contributors, or its whole range while it has few results (one contributor:
    that result's side of 1.0x)."""
    if group.few_results or group.p25_speedup is None or group.p75_speedup is None:
        return "range", group.min_speedup, group.max_speedup
    return "IQR", group.p25_speedup, group.p75_speedup


def group_outcome(group: GroupAggregate) -> str | None:
    """A confirmed group's outcome (specschema.verdicts.outcome_of) by ``group_spread``;
    None without a median."""
    if group.median_speedup is None:
        return None
    _, low, high = group_spread(group)
    return outcome_of(low, high)


def row_verdict(group: GroupAggregate) -> str | None:
    """The verdict of a group split by verdict (the page's speedup board), else None."""
    value = group.key.get("verdict", {}).get("verdict")
    return None if value is None else str(value)


def row_style(group: GroupAggregate, noise: bool) -> str:
    """"effect" (confirmed: its outcome is its colour), "unverified" or "noise": the verdict
    table's style of the verdicts the row holds, neutral when they differ."""
    if noise:
        return "noise"
    styles = {verdict_of(v).style for v, n in held_verdicts(group).items() if n}
    return styles.pop() if len(styles) == 1 else "unverified"


def row_kind(group: GroupAggregate, style: str) -> str:
    """The row's colour: its outcome when confirmed ("effect"), else neutral."""
    if style != "effect":
        return style
    found = group_outcome(group)
    return OUTCOME_CLASS[found] if found is not None else "unverified"


def outcome_words(group: GroupAggregate, style: str) -> str:
    """The row's verdict in words: what the ratio says and whether it is speculation's."""
    if style == "noise":
        return "noise: not applied"
    if style == "unverified":
        # What the group holds, said as it is: its verdicts (no counters, or counters with
        # a baseline that moved: unstable) and whether its results reported counters.
        held = group.verdicts if any(group.verdicts.values()) else held_verdicts(group)
        return unverified_words(held, group.evidence)
    found = group_outcome(group)
    if found is None:
        return "no ratio"
    if found == "no_clear_difference":  # it speculated; its spread cannot tell which way
        name, low, high = group_spread(group)
        if low is not None and high is not None:
            return unresolved_words(low, high, f"contributors' {name}")
    return OUTCOME_WORDS[found]  # "few results": Spread


@dataclass(frozen=True)
class Count:
    """One ``verdict 12`` or ``log counters 4`` of a row's counts line."""

    name: str  # the verdict or evidence level
    words: str
    count: int
    title: str = ""


def verdict_counts(counts: dict[str, int]) -> list[Count]:
    """Each verdict held, in the verdict table's order (any other after them)."""
    ordered = [v for v in ORDER if v in counts] + [v for v in counts if v not in BY_NAME]
    return [Count(v, verdict_of(v).words, counts[v]) for v in ordered if counts[v]]


def evidence_counts(counts: dict[str, int]) -> list[Count]:
    return [Count(level, LEVEL_BADGES.get(level, level), n, LEVEL_TITLES.get(level, level))
            for level, n in counts.items() if n]


def sum_verdicts(groups: Sequence[GroupAggregate]) -> dict[str, int]:
    total = dict.fromkeys(queries.VERDICTS, 0)
    for group in groups:
        for verdict, count in group.verdicts.items():
            total[verdict] = total.get(verdict, 0) + count
    return total


# Sortable columns: the header's words and the aggregate's sort (specserver.board.aggregate
# SORTS); the first click sorts the way a reader most often wants (largest first).
SORTABLE = {"speedup": "speedup", "contributors": "contributors", "baseline": "baseline_tps",
            "config": "key"}


@dataclass(frozen=True)
class Header:
    """A sortable column's header: its link sorts by it, the other way when it already does."""

    label: str
    name: str  # the aggregate's sort name
    href: str
    state: str  # aria-sort: ascending, descending, none
    arrow: str
    css: str = ""
    note: str = ""


@dataclass(frozen=True)
class Sorting:
    """The board's sort and the links that change it (server-side: no JavaScript)."""

    sort: str  # an aggregate.SORTS name
    query: dict[str, str]  # the page's filters, kept in the links

    def header(self, label: str, column: str, css: str = "", note: str = "") -> Header:
        name = SORTABLE[column]
        current = self.sort.lstrip("-") == name
        descending = self.sort.startswith("-")
        if name == "key":
            target = "key"
        elif current:
            target = name if descending else f"-{name}"
        else:
            target = f"-{name}"
        params = {**self.query, "sort": target}
        params.pop("page", None)
        state = ("descending" if descending else "ascending") if current else "none"
        arrow = (" ▼" if descending else " ▲") if current and name != "key" else ""
        return Header(label, name, "/?" + urlencode(params), state, arrow, css, note)


DEFAULT_SORTING = Sorting(aggregate.DEFAULT_SORT, {})


@dataclass(frozen=True)
class Paging:
    """Which page of each board section the page shows, and the links to the others."""

    page: int  # 1-based
    per_page: int  # settings.page_groups
    min_contributors: int
    query: dict[str, str]  # the page's filters, to keep in the links

    def link(self, page: int, protocol_id: str) -> str:
        params = {**self.query, "protocol": protocol_id}
        if page > 1:
            params["page"] = str(page)
        return "/?" + urlencode(params)


def section_page(groups: Sequence[GroupAggregate], paging: Paging) -> list[GroupAggregate]:
    """The groups of one board section on this page. A section that fits on one page is
    shown whole, in its order. A longer one (one key can mint groups without end)
    is cut into pages of ``per_page``, the groups with at least ``min_contributors`` first:
    a flood of one-contributor groups cannot push the established ones off the first page."""
    if len(groups) <= paging.per_page and paging.page == 1:
        return list(groups)

    def established(g: GroupAggregate) -> bool:
        return (g.contributors >= paging.min_contributors
                and target_unsized_reason(g.key.get("target")) is None)

    ordered = ([g for g in groups if established(g)]
               + [g for g in groups if not established(g)])
    start = (paging.page - 1) * paging.per_page
    return ordered[start:start + paging.per_page]


@dataclass(frozen=True)
class PagingNote:
    """"Showing groups 26-50 of 2,000 ..." and the links to the pages before and after."""

    where: str
    folded: str
    previous: str | None  # the link, or None on the first page
    next: str | None
    per_page: int


def paging_note(groups: Sequence[GroupAggregate], shown: int, paging: Paging,
                protocol_id: str) -> PagingNote | None:
    total = len(groups)
    if total <= paging.per_page and paging.page == 1:
        return None
    start = (paging.page - 1) * paging.per_page
    thin = sum(1 for g in groups if g.contributors < paging.min_contributors)
    where = (f"groups {start + 1}–{start + shown} of {total}" if shown
             else f"no groups on page {paging.page} (this board has {total})")
    folded = (f"; the {thin} with fewer than {paging.min_contributors} contributors come last"
              if thin else "")
    return PagingNote(
        where, folded,
        paging.link(paging.page - 1, protocol_id) if paging.page > 1 else None,
        paging.link(paging.page + 1, protocol_id) if start + paging.per_page < total else None,
        paging.per_page)


def counter_sources() -> str:
    """Every engine's counter sources, as the board's rule names them."""
    return "; ".join(f"{d.label}: {' or '.join(d.counter_sources.values())}"
                     for d in ENGINES.values())


def api_engines() -> str:
    return " or ".join(d.label for d in ENGINES.values() if "engine_api" in d.counter_sources)


def new_keys_note(probation_days: float, min_contributors: int) -> str:
    """One line where new keys are pooled: why a fresh board reads "few results"."""
    if probation_days <= 0:
        return ""
    return (f"Keys newer than {probation_days:g} days count together as one contributor per "
            "group until they age (keys are free, so new ones are pooled): a new board shows "
            f"few contributors, and the interquartile range needs {min_contributors}.")


@dataclass(frozen=True)
class Row:
    """One group of a board's table, in the words and classes its cells show."""

    group: GroupAggregate
    style: str  # effect / unverified / noise
    kind: str  # the colour: faster / slower / unclear / unverified / noise
    verdict: str  # "" on a board not split by verdict
    outcome: str  # the outcome in words
    evidence: str  # the verdict's evidence in words
    draft: str
    target: str
    engine: str
    chip: str
    memory: str
    unsized: str | None  # why the target cannot be sized (not checked), else None
    new_chip: bool  # a chip outside known_chips.json
    verdicts: list[Count] = field(default_factory=list)
    evidence_levels: list[Count] = field(default_factory=list)
    positions: Positions | None = None  # its acceptance per draft position, when read


def board_rows(groups: Sequence[GroupAggregate], noise: bool,
               accepted: Accepted = None) -> list[Row]:
    rows = []
    for group in groups:
        style = row_style(group, noise)
        verdict = row_verdict(group) or ""
        chip = group.key.get("chip", {}).get("chip")
        rows.append(Row(
            group, style, row_kind(group, style), verdict, outcome_words(group, style),
            verdict_of(verdict).row or verdict or "merged", group.part_label("draft"),
            group.part_label("target"), group.part_label("engine"), group.part_label("chip"),
            group.part_label("memory_gb"), target_unsized_reason(group.key.get("target")),
            chip is not None and not chip_is_known(str(chip)),
            verdict_counts(group.verdicts), evidence_counts(group.evidence),
            positions_of(group, accepted)))
    return rows


def chart_label(group: GroupAggregate) -> tuple[str, str]:
    """(the label as shown, cut to the chart's label column; the whole label)."""
    config = str(group.key["draft"]["config_name"])
    tail = f"{group.part_label('memory_gb')} · {config}" + (
        " · unverified" if row_style(group, False) == "unverified" else "")
    chip = group.part_label("chip")
    return charts.fit_parts(chip, tail), f"{chip} · {tail}"


def held_verdicts(group: GroupAggregate) -> dict[str, int]:
    """The verdicts a group holds: its row's verdict where the board is split by verdict,
    else its counts."""
    verdict = row_verdict(group)
    return {verdict: group.submissions} if verdict is not None else dict(group.verdicts)


def board_chart(groups: Sequence[GroupAggregate], board: str, title: str, noise: bool
                ) -> Markup:
    drawn_on: Board = "noise_floor" if noise else "speedup"
    bars = []
    for group in groups:
        shown, whole = chart_label(group)
        style = row_style(group, noise)
        kind = row_kind(group, style)
        if not drawn(held_verdicts(group), drawn_on):  # its row, never a bar
            bars.append(charts.Bar(shown, None, None, None, group.contributors, kind,
                                   full_label=whole))
            continue
        bars.append(charts.Bar(shown, group.median_speedup, group.p25_speedup,
                               group.p75_speedup, group.contributors,
                               None if noise else kind, full_label=whole))
    return Markup(charts.speedup_chart(bars, title=title, noise=noise, board=board))


@dataclass(frozen=True)
class Table:
    """One board of a section: its chart, its rows and what the template says around them."""

    board: str  # "speedup-<protocol>" or "noise-<protocol>"
    noise: bool
    chart: Markup
    rows: list[Row]
    headers: dict[str, Header]
    verdicts: list[Count]
    paging: PagingNote | None


def _table(groups: Sequence[GroupAggregate], board: str, title: str, noise: bool,
           paging: Paging | None, sorting: Sorting, protocol_id: str,
           accepted: Accepted = None) -> Table:
    shown = section_page(groups, paging) if paging else list(groups)
    ratio = "Run-to-run ratio" if noise else "Median speedup"
    headers = {"config": sorting.header("Draft config", "config"),
               "speedup": sorting.header(ratio, "speedup", "num",
                                         "no speculation applied" if noise else ""),
               "contributors": sorting.header("Contributors", "contributors", "num"),
               "baseline": sorting.header("Baseline tok/s", "baseline", "num")}
    return Table(board, noise, board_chart(shown, board, title, noise),
                 board_rows(shown, noise, accepted), headers,
                 verdict_counts(sum_verdicts(groups)),
                 paging_note(groups, len(shown), paging, protocol_id) if paging else None)


def uncorroborated_table(groups: Sequence[GroupAggregate], sorting: Sorting = DEFAULT_SORTING,
                         limit: int | None = None) -> Table | None:
    """The speedup board's groups of chips kept apart until corroborated (board/chips.py):
    the first ``limit`` (the page's groups per section), as one key can name chips without
    end; the API lists them all."""
    if not groups:
        return None
    ordered = aggregate.sort_groups(groups, aggregate.DEFAULT_SORT)
    return _table(ordered[:limit] if limit else ordered, "uncorroborated",
                  "Speedup on chips not yet corroborated", False, None, sorting, "")


@dataclass(frozen=True)
class Legend:
    """What a section's legend and rules say about verdicts and outcomes, in the verdict
    table's words (``specschema.verdicts``): a new verdict changes no template."""

    outcomes: tuple[tuple[str, str], ...]  # (CSS class, words) per outcome, faster first
    listed: str  # the verdicts the speedup board lists
    unverified: str  # each verdict listed in grey, and what its rows are
    noise: str  # the noise floor's verdicts


def legend() -> Legend:
    unverified = listed_on("unverified")
    words = {**OUTCOME_WORDS,
             "no_clear_difference": "speedup not resolved (its spread includes 1.00x)"}
    return Legend(
        tuple((OUTCOME_STYLE[o], words[o]) for o in ("faster", "no_clear_difference", "slower")),
        ", ".join(v.words for v in (*listed_on("speedup"), *unverified)),
        "; ".join(f"{v.words}: {v.legend}" for v in unverified),
        ", ".join(v.words for v in listed_on("noise_floor")))


LEGEND = legend()


@dataclass(frozen=True)
class Section:
    """A protocol's part of the page: its speedup board and its noise floor."""

    protocol_id: str
    version: int | None  # None: a protocol this server does not ship
    description: str | None
    speed: Table | None
    noise: Table | None
    legend: Legend = LEGEND


def protocol_section(protocol_id: str, speed: Sequence[GroupAggregate],
                     noise: Sequence[GroupAggregate], paging: Paging | None = None,
                     sorting: Sorting = DEFAULT_SORTING, accepted: Accepted = None) -> Section:
    protocol = shipped_protocols().get(protocol_id)
    return Section(
        protocol_id, protocol.version if protocol else None,
        protocol.description if protocol else None,
        _table(speed, f"speedup-{protocol_id}", f"Speedup by chip, {protocol_id}", False,
               paging, sorting, protocol_id, accepted) if speed else None,
        _table(noise, f"noise-{protocol_id}", f"Noise floor, {protocol_id}", True,
               paging, sorting, protocol_id) if noise else None)


def by_protocol(groups: Sequence[GroupAggregate], sort: str = aggregate.DEFAULT_SORT
                ) -> dict[str, list[GroupAggregate]]:
    found: dict[str, list[GroupAggregate]] = {}
    for group in aggregate.sort_groups(groups, sort):
        found.setdefault(str(group.key["protocol"]["protocol_id"]), []).append(group)
    return found
