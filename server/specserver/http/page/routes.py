"""The server-rendered page: the leaderboard per protocol and a page per submission.

Plain HTML and inline SVG from ``templates/page.html`` and ``templates/style.css`` (string.Template;
every value is escaped here), so it works offline, without a CDN and without JavaScript.
Filters travel in the query string through an ordinary GET form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from html import escape
from importlib import resources
from string import Template
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from specschema.conclusion import (
    LEVEL_BADGES,
    LEVEL_CHECKS,
    OUTCOME_WORDS,
    VERDICT_WORDS,
    interval_method_words,
    outcome_of,
)
from specschema.engines import ENGINES, descriptor
from specschema.protocol import find_protocol, headline_of, interval_of, shipped_protocols
from specschema.protocol_text import shown_description
from specserver.board import GroupAggregate, Snapshot, aggregate
from specserver.http.caching import board_conditional, conditional
from specserver.http.deps import Reads
from specserver.http.page import breakdown, charts, result
from specserver.http.page.data import MENUS, PageData, PageReuse, page_data, page_version
from specserver.http.params import choice, integer, one, parse_filters, query_params
from specserver.ingest import chip_is_known, target_unsized_reason
from specserver.settings import ServerSettings
from specserver.store import dimensions, queries, redaction

router = APIRouter(include_in_schema=False)

PAGE_FILTERS = dimensions.PAGE_FILTERS


@cache
def _asset(name: str) -> str:
    folder = resources.files("specserver.http.page") / "templates"
    return (folder / name).read_text(encoding="utf-8")


def render_page(title: str, body: str) -> str:
    return Template(_asset("page.html")).substitute(
        title=escape(title), css=_asset("style.css"), body=body)


def _num(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


# How a board row's ratio is styled and named. Only a confirmed ratio is an effect of
# speculation; a not-observed one could be anything (nothing showed that speculation ran);
# a noise-floor ratio is the run-to-run difference with no speculation applied.
ROW_VERDICTS = {"confirmed": "confirmed: reported counters consistent",
                "not_observed": "not observed: unverified",
                "unstable": "unstable: baseline blocks disagree"}


def group_outcome(group: GroupAggregate) -> str | None:
    """A confirmed group's outcome (specschema.conclusion.outcome_of): by the interquartile
    range of its contributors, or by its whole range while it has few results (one
    contributor: that result's side of 1.0x). None without a median."""
    if group.median_speedup is None:
        return None
    if group.few_results or group.p25_speedup is None or group.p75_speedup is None:
        return outcome_of(group.min_speedup, group.max_speedup)
    return outcome_of(group.p25_speedup, group.p75_speedup)


# The outcome's CSS class: the colour of the ratio, the bar and the words.
OUTCOME_CLASS = {"faster": "faster", "slower": "slower", "no_clear_difference": "unclear"}


def _row_kind(group: GroupAggregate, style: str) -> str:
    """The row's colour: its outcome when confirmed ("effect"), else neutral."""
    if style != "effect":
        return style
    found = group_outcome(group)
    return OUTCOME_CLASS[found] if found is not None else "unverified"


def _outcome_words(group: GroupAggregate, style: str) -> str:
    """The row's verdict in words: what the ratio says and whether it is speculation's."""
    if style == "noise":
        return "noise: not applied"
    if style == "unverified":
        # Unverified holds two verdicts: no counters at all, and counters whose baseline
        # moved too much to compare (unstable). Say which this group holds.
        unstable = group.verdicts.get("unstable", 0)
        if unstable and unstable == sum(group.verdicts.values()):
            return "unverified: unstable (baseline blocks disagree)"
        if unstable:
            return "unverified: no counters, or an unstable baseline"
        return "unverified: no counters reported"
    found = group_outcome(group)
    return "no ratio" if found is None else OUTCOME_WORDS[found]  # "few results": Spread


def _ratio_cell(value: float | None, kind: str) -> str:
    """``kind``: the outcome's class (faster / slower / unclear), "unverified" or "noise"."""
    if value is None:
        return '<td class="num ratio">–</td>'
    return f'<td class="num ratio {kind}">{value:.2f}x</td>'


def _verdict_counts(counts: dict[str, int]) -> str:
    """``confirmed 12 · not observed 2``: plain words, one short line (no wall of badges)."""
    return " · ".join(f'<span class="count" data-verdict="{escape(v)}">'
                      f"{escape(VERDICT_WORDS.get(v, v.replace('_', ' ')))} {n}</span>"
                      for v, n in counts.items() if n)


# Evidence levels on a board row, strongest first (specschema.evidence.LEVELS), worded by
# specschema.conclusion.LEVEL_BADGES, titled by what the client reported and what the
# server checked (LEVEL_CHECKS); a speedup board row never holds "reported" or
# "implausible" confirmed results (aggregate rule 6).
_LEVEL_TITLES: dict[str, str] = {level: f"{reported}; {checked}"
                                 for level, (reported, checked) in LEVEL_CHECKS.items()}


def _evidence_counts(counts: dict[str, int]) -> str:
    """``log counters, reported 4``: plain words in one short line, each titled with what
    the client reported and what the server checked."""
    return " · ".join(f'<span class="count" data-evidence="{escape(level)}" '
                      f'title="{escape(_LEVEL_TITLES.get(level, level))}">'
                      f"{escape(LEVEL_BADGES.get(level, level))} {n}</span>"
                      for level, n in counts.items() if n)


def _key(group: GroupAggregate, dimension: str) -> str:
    return group.part_label(dimension)


def _row_verdict(group: GroupAggregate) -> str | None:
    """The verdict of a group split by verdict (the page's speedup board), else None."""
    value = group.key.get("verdict", {}).get("verdict")
    return None if value is None else str(value)


def _row_style(group: GroupAggregate, noise: bool) -> str:
    if noise:
        return "noise"
    return "effect" if _row_verdict(group) == "confirmed" else "unverified"


def _chart_label(group: GroupAggregate) -> tuple[str, str]:
    """(the label as shown, cut to the chart's label column; the whole label)."""
    config = str(group.key["draft"]["config_name"])
    tail = f"{_key(group, 'memory_gb')} · {config}" + (
        " · unverified" if _row_verdict(group) in aggregate.VIEW_VERDICTS["unverified"] else "")
    chip = _key(group, "chip")
    return charts.fit_parts(chip, tail), f"{chip} · {tail}"


def _outliers(group: GroupAggregate) -> str:
    """A mark for contributors far from the rest (aggregate rule 7: kept, flagged)."""
    count = group.outlier_contributors
    if not count:
        return ""
    plural = "s" if count > 1 else ""
    return (' <span class="outliers" title="contributors whose median is far from the rest '
            f'(robust score above 3.5)">{count} outlier{plural}</span>')


def _new_chip(group: GroupAggregate) -> str:
    """The API's ``chip_known: false`` on the page: a chip outside known_chips.json."""
    chip = group.key.get("chip", {}).get("chip")
    if chip is None or chip_is_known(str(chip)):
        return ""
    return (' <span class="new-chip" title="not in the list of chips the maintainers know: '
            'check the name">new chip</span>')


def _unsized(group: GroupAggregate) -> str:
    """A mark for a target the server cannot size (ingest/plausibility.py): not established."""
    reason = target_unsized_reason(group.key.get("target"))
    if reason is None:
        return ""
    return f' <span class="unsized" title="{escape(reason)}">size unknown: not checked</span>'


def _arrived_together(group: GroupAggregate) -> str:
    """A mark for a group most of whose contributors appeared at once (board/newkeys.py)."""
    if not group.arrived_together:
        return ""
    return (' <span class="arrived" title="most of these contributors first submitted '
            'within one day of each other">arrived together</span>')


# Sortable columns: the header's words and the aggregate's sort (specserver.board.aggregate
# SORTS); the first click sorts the way a reader most often wants (largest first).
SORTABLE = {"speedup": "speedup", "contributors": "contributors", "baseline": "baseline_tps",
            "config": "key"}


@dataclass(frozen=True)
class Sorting:
    """The board's sort and the links that change it (server-side: no JavaScript)."""

    sort: str  # an aggregate.SORTS name
    query: dict[str, str]  # the page's filters, kept in the links

    def header(self, label: str, column: str, css: str = "", note: str = "") -> str:
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
        klass = f' class="{css} sortable"' if css else ' class="sortable"'
        return (f'<th{klass} aria-sort="{state}" data-sort="{escape(name)}">'
                f'<a href="/?{escape(urlencode(params))}">{escape(label)}{arrow}</a>'
                + (f'<br><span class="muted">{escape(note)}</span>' if note else "") + "</th>")


DEFAULT_SORTING = Sorting(aggregate.DEFAULT_SORT, {})


def board_table(groups: Sequence[GroupAggregate], board: str, *, noise: bool = False,
                sorting: Sorting = DEFAULT_SORTING) -> str:
    """One row per group, seven columns that fit 960 px (the table also scrolls inside its
    own box, never the page): what was run, on what, the outcome in words with the
    evidence under it, the ratio in the outcome's colour, its spread, the voices behind it
    and the baseline's speed."""
    ratio_label = "Run-to-run ratio" if noise else "Median speedup"
    head = ("<tr>" + sorting.header("Draft config", "config")
            + "<th>Machine</th>" + ("" if noise else "<th>Outcome</th>")
            + sorting.header(ratio_label, "speedup", "num",
                             "no speculation applied" if noise else "")
            + '<th class="num">Spread</th>'
            + sorting.header("Contributors", "contributors", "num")
            + sorting.header("Baseline tok/s", "baseline", "num")
            + ("<th>Verdicts</th>" if noise else "") + "</tr>")
    rows = []
    for group in groups:
        style = _row_style(group, noise)
        kind = _row_kind(group, style)
        if group.few_results:
            iqr = '<span class="few">few results</span>'
        else:
            iqr = (f'<span class="iqr">IQR {_num(group.p25_speedup)}–'
                   f"{_num(group.p75_speedup)}x</span>")
        spread = (f"{iqr}<br><span class=\"muted\">range {_num(group.min_speedup)}–"
                  f"{_num(group.max_speedup)}x</span>{_outliers(group)}")
        verdict = _row_verdict(group) or ""
        outcome = "" if noise else (
            f'<td class="outcome {kind}" data-verdict="{escape(verdict)}">'
            f"{escape(_outcome_words(group, style))}<br>"
            f'<span class="evidence">{escape(ROW_VERDICTS.get(verdict, verdict or "merged"))}'
            f" ({_evidence_counts(group.evidence)})</span></td>")
        plural = "s" if group.submissions != 1 else ""
        rows.append(
            f'<tr class="group" data-board="{escape(board)}" data-style="{style}" '
            f'data-outcome="{kind}">'
            f'<td class="config"><span class="draft">{result.text(_key(group, "draft"))}</span>'
            f'<br><span class="muted"><span class="target">{result.text(_key(group, "target"))}'
            f'</span>{_unsized(group)} · <span class="engine">'
            f'{result.text(_key(group, "engine"))}</span></span></td>'
            f'<td class="machine"><span class="chip">{result.text(_key(group, "chip"))}</span>'
            f"{_new_chip(group)}"
            f'<br><span class="muted memory">{escape(_key(group, "memory_gb"))}</span></td>'
            f"{outcome}{_ratio_cell(group.median_speedup, kind)}"
            f'<td class="num spread">{spread}</td>'
            f'<td class="num contributors">{group.contributors}{_arrived_together(group)}'
            f'<br><span class="muted">{group.submissions} submission{plural}</span></td>'
            f'<td class="num baseline">{_num(group.median_baseline_tps, 1)}</td>'
            + (f'<td class="verdicts">{_verdict_counts(group.verdicts)}</td>' if noise
               else "") + "</tr>")
    return (f'<div class="scroll"><table class="board" data-board="{escape(board)}">{head}'
            f'{"".join(rows)}</table></div>')


def board_chart(groups: Sequence[GroupAggregate], board: str, title: str, noise: bool) -> str:
    bars = []
    for group in groups:
        shown, whole = _chart_label(group)
        kind = _row_kind(group, _row_style(group, noise))
        bars.append(charts.Bar(shown, group.median_speedup, group.p25_speedup,
                               group.p75_speedup, group.contributors,
                               None if noise else kind, full_label=whole))
    return charts.speedup_chart(bars, title=title, noise=noise, board=board)


def _sum_verdicts(groups: Sequence[GroupAggregate]) -> dict[str, int]:
    total = dict.fromkeys(queries.VERDICTS, 0)
    for group in groups:
        for verdict, count in group.verdicts.items():
            total[verdict] = total.get(verdict, 0) + count
    return total


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


def paging_note(groups: Sequence[GroupAggregate], shown: int, paging: Paging,
                protocol_id: str) -> str:
    """"Groups 26-50 of 2,000 ..." with the links to the pages before and after."""
    total = len(groups)
    if total <= paging.per_page and paging.page == 1:
        return ""
    start = (paging.page - 1) * paging.per_page
    thin = sum(1 for g in groups if g.contributors < paging.min_contributors)
    where = (f"groups {start + 1}–{start + shown} of {total}" if shown
             else f"no groups on page {paging.page} (this board has {total})")
    links = []
    if paging.page > 1:
        links.append(f'<a rel="prev" href="{escape(paging.link(paging.page - 1, protocol_id))}">'
                     "previous groups</a>")
    if start + paging.per_page < total:
        links.append(f'<a rel="next" href="{escape(paging.link(paging.page + 1, protocol_id))}">'
                     f"next {paging.per_page} groups</a>")
    folded = (f"; the {thin} with fewer than {paging.min_contributors} contributors come last"
              if thin else "")
    return (f'<p class="note paging">Showing {where}{folded}. {" · ".join(links)}</p>')


def _counter_sources() -> str:
    """Every engine's counter sources, as the board legend names them."""
    return "; ".join(f"{d.label}: {' or '.join(d.counter_sources.values())}"
                     for d in ENGINES.values())


def _api_engines() -> str:
    return " or ".join(d.label for d in ENGINES.values() if "engine_api" in d.counter_sources)


LEGEND = ('<p class="legend">Bars: the median decode speedup across contributors (draft tok/s '
          "÷ baseline tok/s), whiskers the interquartile range, the dashed line 1.0x. Colour "
          'by outcome: <span class="faster">faster</span>, <span class="unclear">no clear '
          'difference</span>, <span class="slower">slower</span>; grey: unverified (no '
          "counters reported) or noise.</p>")


def new_keys_note(probation_days: float, min_contributors: int) -> str:
    """One line where new keys are pooled: why a fresh board reads "few results"."""
    if probation_days <= 0:
        return ""
    return (f'<p class="note new-keys">Keys newer than {probation_days:g} days count together '
            "as one contributor per group until they age (keys are free, so new ones are "
            f"pooled): a new board shows few contributors, and the interquartile range needs "
            f"{min_contributors}.</p>")


def protocol_section(protocol_id: str, speed: list[GroupAggregate],
                     noise: list[GroupAggregate], paging: Paging | None = None,
                     sorting: Sorting = DEFAULT_SORTING, pooled: str = "") -> str:
    """``pooled``: the new-keys line (``new_keys_note``), under each board's table."""
    protocol = shipped_protocols().get(protocol_id)
    parts = [f'<section class="protocol" id="protocol-{escape(protocol_id)}">',
             f"<h2>{escape(protocol_id)}"
             f"{f' v{protocol.version}' if protocol else ''}</h2>"]
    if protocol is not None:
        parts.append(f'<p class="note">{escape(shown_description(protocol))}</p>')
    board = f"speedup-{protocol_id}"
    parts.append("<h3>Speedup board</h3>")
    if speed:
        parts.append(LEGEND)
        parts.append('<details class="more rule"><summary>How this board is made</summary>'
                     '<p class="note speedup-rule">Median decode speedup (draft tok/s ÷ '
                     "baseline tok/s) by chip; bars show the median across contributors, "
                     "whiskers the interquartile range, the dashed line 1.0x. Each group is "
                     "split by verdict: <strong>confirmed</strong> rows are those whose "
                     "submissions report the engine's acceptance counters "
                     f"({escape(_counter_sources())}), which the server checked against the "
                     "trials and timings (it never sees the engine itself; coloured by "
                     "outcome: faster, no clear difference or slower); <strong>not "
                     "observed</strong> rows are unverified: the engine "
                     "could speculate but no counters were reported, so their ratio is shown in "
                     "grey and is not attributed to speculation. The API "
                     "(<code>/v1/leaderboard</code>) merges the two into one median unless "
                     "asked with <code>group_by=verdict</code>. A confirmed result counts only "
                     "when its counters are consistent with its trials (evidence "
                     f"<em>engine API</em>: {escape(_api_engines())}'s own counters, or "
                     "<em>log</em>); "
                     "counters that are only reported, or that cannot explain the measured "
                     "speedup, keep a result off this board (see each submission's page). "
                     f"Verdicts: {_verdict_counts(_sum_verdicts(speed))}</p></details>")
        shown = section_page(speed, paging) if paging else speed
        parts.append(board_chart(shown, board, f"Speedup by chip, {protocol_id}", noise=False))
        parts.append(board_table(shown, board, sorting=sorting))
        parts.append(pooled)
        if paging:
            parts.append(paging_note(speed, len(shown), paging, protocol_id))
    else:
        parts.append('<p class="muted">No draft configs with a confirmed or not-observed '
                     "speculation verdict match these filters.</p>")
    if noise:
        floor = f"noise-{protocol_id}"
        parts.append("<h3>Noise floor (A/A): run-to-run difference, no speculation applied</h3>")
        parts.append('<p class="note noise-rule">Draft configs the engine did not apply '
                     "(verdict <em>not applied</em>): the same computation measured twice. "
                     "Their ratio is not a speedup or a slowdown; its spread around 1.0x is the "
                     "smallest effect the speedup board can resolve. "
                     f"Verdicts: {_verdict_counts(_sum_verdicts(noise))}</p>")
        shown = section_page(noise, paging) if paging else noise
        parts.append(board_chart(shown, floor, f"Noise floor, {protocol_id}", noise=True))
        parts.append(board_table(shown, floor, noise=True, sorting=sorting))
        parts.append(pooled)
        if paging:
            parts.append(paging_note(noise, len(shown), paging, protocol_id))
    parts.append("</section>")
    return "".join(parts)


def _select(name: str, label: str, values: Sequence[Any], chosen: Any,
            cut_at: int | None = None) -> str:
    values = list(values)
    if chosen is not None and str(chosen) not in map(str, values):
        values.append(chosen)  # a rare value, below the menu's cut, chosen through the URL
    options = ['<option value="">any</option>'] + [
        f'<option value="{escape(str(v))}"{" selected" if str(v) == str(chosen) else ""}>'
        f"{escape(str(v))}</option>" for v in values]
    if cut_at is not None and len(values) >= cut_at:
        options.append(f"<option disabled>(the {cut_at} most common; others by URL)</option>")
    return f'<label>{escape(label)}<select name="{name}">{"".join(options)}</select></label>'


def filter_form(filters: queries.Filters, menus: dict[str, list[Any]],
                cut_at: int | None = None) -> str:
    """A menu per filter that has one (``MENUS``), of the values visible submissions have."""
    fields = [_select(name, label, menus[name], filters.get(name), cut_at)
              for name, label in MENUS.items()]
    return (f'<form class="filters" method="get" action="/">{"".join(fields)}'
            '<button type="submit">Apply</button> <a href="/">reset</a></form>')


def _uncounted(draft: dict[str, Any]) -> str:
    """", not counted: <level> counters" for a confirmed draft kept off the board."""
    level = draft.get("evidence")
    if draft.get("observed") != "confirmed" or aggregate.on_board("confirmed", level):
        return ""
    return f", not counted: {escape(str(level or 'unassessed'))} counters"


def recent_table(items: Sequence[dict[str, Any]]) -> str:
    rows = []
    for item in items:
        drafts = ", ".join(
            f"{escape(d['config_name'])} {_num(d['speedup_tps'])}x "
            f"({escape(VERDICT_WORDS.get(d['observed'], str(d['observed']).replace('_', ' ')))}"
            f"{_uncounted(d)})"
            for d in item["drafts"])
        rows.append(
            f'<tr><td><a href="/submissions/{escape(item["submission_id"])}">'
            f'{escape(item["submission_id"][:8])}</a></td>'
            f'<td>{escape(str(item["received_at"])[:16].replace("T", " "))}</td>'
            f'<td>{escape(item["protocol_id"])}</td><td>{result.text(item["chip"])}</td>'
            f'<td>{escape(str(item["memory_gb"]))}</td>'
            f"<td>{result.text(_engine(item))}</td>"
            f"<td>{drafts}</td></tr>")
    return ("<table><tr><th>Submission</th><th>Received (UTC)</th><th>Protocol</th><th>Chip</th>"
            f"<th>GB</th><th>Engine</th><th>Drafts</th></tr>{''.join(rows)}</table>")


def contribute_line(base_url: str) -> str:
    """How to add a result, with this server's own URL (``settings.public_base_url``)."""
    run = f"specsubmit run --server {base_url}"
    return ('<p class="contribute"><strong>Add your result:</strong> from a checkout of the '
            "project's repository, <code>pipx install ./client --preinstall ./schema</code> "
            "(no package index holds it yet), then "
            f"<code>{escape(run)}</code> (Ollama; for llama-server: "
            f"<code>{escape(run)} --engine llama-server --protocol llamacpp-draft</code>). "
            "It shows exactly what it would send and asks before sending.</p>")


def _by_protocol(groups: Sequence[GroupAggregate], sort: str = aggregate.DEFAULT_SORT
                 ) -> dict[str, list[GroupAggregate]]:
    found: dict[str, list[GroupAggregate]] = {}
    for group in aggregate.sort_groups(groups, sort):
        found.setdefault(str(group.key["protocol"]["protocol_id"]), []).append(group)
    return found


@router.get("/", response_class=HTMLResponse)
def home(request: Request, reads: Reads) -> Response:
    params = query_params(request, (*PAGE_FILTERS, "page", "sort"))
    filters = parse_filters(params)
    settings: ServerSettings = request.app.state.settings
    paging = Paging(integer(one(params, "page"), "page", 1, 10**6) or 1, settings.page_groups,
                    reads.min_contributors,
                    {name: value for name in PAGE_FILTERS
                     if (value := one(params, name)) is not None})
    menu_cut = settings.page_menu_values
    sort = choice(one(params, "sort"), "sort", aggregate.SORTS) or aggregate.DEFAULT_SORT
    sorting = Sorting(sort, dict(paging.query))
    if sort != aggregate.DEFAULT_SORT:
        paging = Paging(paging.page, paging.per_page, paging.min_contributors,
                        {**paging.query, "sort": sort})
    pooled = new_keys_note(settings.new_key_probation_days, reads.min_contributors)
    base_url = settings.public_base_url.rstrip("/")  # never the Host header (cached page)
    # The last computed page data, at once (board/leaderboard.py): boards and the recent
    # list of one state of the store, the menus of that one or of one a little older
    # (http/page/data.py); the versions of both label the page.
    reuse: PageReuse = request.app.state.page_reuse
    key = ("page", filters, menu_cut)
    snapshot = reads.latest(key, lambda conn, version: page_data(reads, reuse, conn, version,
                                                                 filters, menu_cut))

    def build(of: Snapshot[PageData]) -> Response:
        data = of.value
        speed = _by_protocol([*data.speed.groups, *data.unverified.groups], sort)
        noise = _by_protocol(data.noise.groups, sort)
        counts = data.speed.verdict_counts
        protocols = [p for p in shipped_protocols() if p in speed or p in noise]
        parts = ["<h1>Speculative decoding leaderboard</h1>", contribute_line(base_url),
                 filter_form(filters, data.menus, menu_cut),
                 f'<p class="note">Draft results matching these filters: '
                 f"{_verdict_counts(counts) or 'none'}; by evidence: "
                 f"{_evidence_counts(data.speed.evidence_counts) or 'none'}. "
                 "Each contributor counts once per group "
                 f"(their median first); interquartile ranges need "
                 f"{reads.min_contributors} contributors.</p>",
                 freshness_line(data.newest)]
        if not protocols:
            parts.append('<p class="empty">No results match these filters yet: the command '
                         "above adds one.</p>")
        parts += [protocol_section(p, speed.get(p, []), noise.get(p, []), paging, sorting,
                                   pooled)
                  for p in protocols]
        parts.append("<h2>Recent submissions</h2>" + recent_table(data.recent))
        return HTMLResponse(render_page("specbench leaderboard", "".join(parts)))

    return board_conditional(request, key, snapshot, build,
                             lambda of: page_version(of.version, of.value))


def freshness_line(newest: datetime | None) -> str:
    """How recent the board is, in words. Only the store's own times, so the same data
    version gives the same bytes on every replica (one ETag, one body)."""
    if newest is None:
        return ""
    return ('<p class="note freshness">These boards count the results received up to '
            f"{escape(_when(newest))}. They are recomputed beside the reads: a result received "
            "later shows once the next computation ends.</p>")


# --- one submission -----------------------------------------------------------------------


def _when(value: Any) -> str:
    """An ISO timestamp as 'YYYY-MM-DD HH:MM UTC' (the store keeps UTC)."""
    return "–" if value is None else f"{str(value)[:16].replace('T', ' ')} UTC"


def _engine(row: dict[str, Any]) -> str:
    """"Ollama 0.30.1" or "llama-server b6123 (ggml, <build>)": the engine that ran."""
    name = descriptor(row["engine"]).label
    extra = ", ".join(str(v) for v in (row.get("engine_runtime"), row.get("engine_build")) if v)
    return f"{name} {row['engine_version']}" + (f" ({extra})" if extra else "")


def _few_trials(summaries: Sequence[Any]) -> str:
    """"wide with 6 trials" with the count this run has (per config), not a fixed five."""
    counts = sorted({s.trials for s in summaries if s.trials})
    if not counts:
        return "no trials"
    if len(counts) == 1:
        return f"wide with {counts[0]} trials"
    return f"wide with {counts[0]}–{counts[-1]} trials per config"


def _client(row: dict[str, Any]) -> str:
    """"specsubmit 0.1.0"; a hidden submission's name is redacted, and says so."""
    if row.get("client_name") is None and "client_name" in row.get("redacted", ()):
        return f"{row['client_version']} (name redacted: hidden submission)"
    return f"{row['client_name']} {row['client_version']}"


def _subtitle(row: dict[str, Any]) -> str:
    machine = ", ".join(str(v) for v in (
        row["chip"], f"{row['memory_gb']} GB" if row["memory_gb"] is not None else None,
        row["os"]) if v)
    signer = (f"signed by key {str(row['key_id'])[:12]}…" if row["key_id"]
              else "imported reference result, unsigned")
    return (f"{row['protocol_id']} v{row['protocol_version']} · target {row['target_model']} · "
            f"{machine or 'machine not reported'} · {_engine(row)} · {signer} · "
            f"received {_when(row['received_at'])}")


def _protocol_words(row: dict[str, Any]) -> str | None:
    """The shipped protocol's description as shown (``specschema.protocol_text``); None for
    a protocol this server does not ship."""
    protocol = find_protocol(str(row["protocol_id"]), int(row["protocol_version"]),
                             str(row["protocol_sha256"]))
    return None if protocol is None else shown_description(protocol)


def _history_table(history: Sequence[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{escape(_when(h['at']))}</td><td>{escape(str(h['action']))}</td>"
        f"<td><code>{result.text(h['target'])}</code></td>"
        f"<td>{result.text(h['reason'])}</td><td>{result.text(h['actor'])}</td></tr>"
        for h in history)
    return ("<table class=\"history\"><tr><th>When</th><th>Action</th><th>On</th><th>Reason</th>"
            f"<th>By</th></tr>{rows}</table>")


def verify_snippet(base_url: str, submission_id: str, key_id: str) -> str:
    """Python that re-verifies the stored envelope with specschema; tests run it verbatim.

    ``base_url`` is ``settings.public_base_url``, never the request's Host header: the page
    is cached for every visitor under an ETag that ignores Host, so one request with
    ``Host: attacker.example`` made everyone's snippet fetch from there. The
    snippet also checks that the envelope it fetched is this submission's, so a server or
    proxy cannot pass off another validly signed envelope. Values are JSON string
    literals, which are Python string literals too."""
    url = f"{base_url}/v1/submissions/{submission_id}/envelope"
    return (
        "import json, urllib.request\n"
        "from specschema.envelope import verify_envelope\n"
        "from specschema.payload import parse_submission\n\n"
        f"url = {json.dumps(url)}\n"
        "envelope = json.load(urllib.request.urlopen(url))\n"
        "verified = verify_envelope(envelope)  # raises SignatureInvalid if a byte changed\n"
        f"assert verified.key_id == {json.dumps(key_id)}, \"signed by another key\"\n"
        "submission = parse_submission(verified.payload)\n"
        f"assert str(submission.submission_id) == {json.dumps(submission_id)}, "
        "\"another submission's envelope\"\n"
        'print("verified", submission.submission_id, "signed by", verified.key_id)\n'
    )


# How a redacted model name reads on the page (the view holds null there).
HIDDEN_TEXT = "(hidden)"


def _page_parts(view: queries.SubmissionView) -> tuple[dict[str, Any], dict[str, Any]]:
    """The submission row and its parts as the page reads them, from the one public view
    (already redacted when hidden): the summaries baseline first, a redacted model name
    as ``HIDDEN_TEXT`` (the page names models in its title and tables)."""
    def shown(row: dict[str, Any], *names: str) -> dict[str, Any]:
        hidden = [n for n in names if n in row.get("redacted", ()) and row.get(n) is None]
        return {**row, **dict.fromkeys(hidden, HIDDEN_TEXT)}

    fingerprint = view.fingerprint["json"] if view.fingerprint is not None else None
    summaries = sorted(view.summary, key=lambda s: (s["role"], s["config_name"]))
    return shown(view.submission, "target_model"), {
        "fingerprint": fingerprint,
        "configs": [shown(c, "model") for c in view.configs],
        "summaries": [shown(s, "model") for s in summaries],
        "trials": view.trials,
    }


def submission_body(base_url: str, view: queries.SubmissionView) -> str:
    """The conclusion first, then the article-style table, then the details, collapsed."""
    row, parts = _page_parts(view)
    history = view.moderation
    sid = row["submission_id"]
    summaries = result.summaries_of(parts["summaries"])
    evidence = result.evidence_of(parts["configs"])
    baseline = next((s.name for s in summaries if s.role == "baseline"), None)
    version = str(row["engine_version"])
    out = [f'<h1>Submission <code class="sid">{escape(sid)}</code></h1>',
           f'<p class="subtitle">{escape(_subtitle(row))}</p>']
    if row["hidden"]:
        out.append('<p class="banner">Hidden by a maintainer: not counted on the leaderboard.'
                   "</p>")
    if row["key_banned"]:
        out.append('<p class="banner">This contributor key is banned: its results are not '
                   "counted.</p>")
    headline = headline_of(str(row["protocol_id"]), int(row["protocol_version"]),
                           str(row["protocol_sha256"]))
    out.append(result.conclusion_section(summaries, evidence, version, bool(row["complete"]),
                                         row.get("engine_log"), row["engine"], headline))
    out.append("<h2>Results</h2>")
    shipped = find_protocol(str(row["protocol_id"]), int(row["protocol_version"]),
                            str(row["protocol_sha256"]))
    out.append(result.results_table(summaries, evidence, parts["trials"], version,
                                    result.levels_of(parts["summaries"]), row["engine"],
                                    row.get("engine_log"),
                                    len(shipped.prompts or ()) or 1 if shipped else 1))
    signed = breakdown.submitted(view.envelope)
    if signed is not None:
        out.append(breakdown.domain_section(signed, {c.name: c.observed
                                                     for c in summaries}))
    method = interval_method_words(
        interval_of(str(row["protocol_id"]), int(row["protocol_version"]),
                    str(row["protocol_sha256"])),
        blocked=any(s.blocks for s in summaries))
    out.append('<p class="note">Computed by this server from the submitted trials, not taken '
               "from the client: decode tok/s is generated tokens ÷ decode time; <em>vs "
               f"baseline</em> is {escape(method)} ({escape(_few_trials(summaries))}). A ratio "
               "whose verdict is <em>not applied</em> is run-to-run noise, not an effect of "
               "speculation.</p>")
    if row["note"]:
        out.append(f'<p class="note">Note from the run: {escape(str(row["note"]))}</p>')
    out.append("<h2>Details</h2>")
    out.append(result.details("The run", result.facts([
        ("Protocol", f"{row['protocol_id']} v{row['protocol_version']} "
                     f"(sha256 {str(row['protocol_sha256'])[:12]}…)"),
        ("What the protocol measures", _protocol_words(row)),
        ("Target model", row["target_model"]), ("Chip", row["chip"]),
        ("Memory", None if row["memory_gb"] is None else f"{row['memory_gb']} GB"),
        ("OS", row["os"]), ("Engine", _engine(row)), ("Backend", row["backend"]),
        ("Client", _client(row)),
        ("Run at", _when(row["created_at"])), ("Received", _when(row["received_at"])),
        ("All trials measured", row["complete"]),
        ("Source", "signed by the contributor" if row["source"] == "signed"
         else "imported reference result"),
        ("Contributor key", row["key_id"] or "none (unsigned import)"),
    ]), name="run"))
    out.append(result.details("Machine fingerprint (as sent)", result.facts(
        result.flatten("", parts["fingerprint"] or {})), name="fingerprint"))
    out.append(result.details(f"Trials ({len(parts['trials'])}, in run order)",
                              result.trials_table(parts["trials"], baseline), name="trials"))
    out.append(result.details("Raw stored fields", '<p class="note">The stored rows under '
                              "their column names, as in the export.</p>" + result.raw_fields(
                                  parts["configs"], parts["summaries"]), name="raw"))
    out.append("<h2>Moderation history</h2>")
    if history:
        out.append(_history_table(history))
    else:
        out.append('<p class="muted">No moderation actions.</p>')
    out.append("<h2>Verify the signature yourself</h2>")
    if row["key_id"]:
        out.append('<p class="note">The server keeps the exact bytes that were signed. With '
                   "<code>specschema</code> installed (<code>pip install specschema</code>):</p>")
        out.append(f'<pre class="verify">{escape(verify_snippet(base_url, sid, row["key_id"]))}'
                   "</pre>")
    else:
        out.append('<p class="note">Imported reference result: unsigned. Its source is recorded '
                   f"as: {escape(str(row['source_note']))}. The stored source file is at "
                   f'<a href="/v1/submissions/{escape(sid)}/envelope">/v1/submissions/'
                   f"{escape(sid)}/envelope</a>.</p>")
    out.append(f'<p class="note">Machine-readable: <a href="/v1/submissions/{escape(sid)}">'
               f"/v1/submissions/{escape(sid)}</a> · all submissions like this one: "
               f'<a href="/?{escape(urlencode({"chip": row["chip"] or ""}))}">same chip</a></p>')
    return "".join(out)


@router.get("/submissions/{submission_id}", response_class=HTMLResponse)
def submission_page(submission_id: str, request: Request, reads: Reads) -> Response:
    query_params(request, ())
    version = reads.version()

    def build() -> Response:
        with reads.engine.connect() as conn:
            view = queries.submission_view(conn, submission_id)
        if view is None:
            body = (f"<h1>Not found</h1><p>No submission <code>{escape(submission_id)}"
                    '</code>. <a href="/">Back to the leaderboard</a>.</p>')
            return HTMLResponse(render_page("not found", body), status_code=404)
        view = redaction.redact_view(view)  # hidden: no free text, as in the JSON route
        base_url = request.app.state.settings.public_base_url.rstrip("/")  # not Host
        return HTMLResponse(render_page(f"submission {submission_id[:8]}",
                                        submission_body(base_url, view)))

    return conditional(request, version, build)
