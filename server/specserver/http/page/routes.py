"""The server-rendered page: the leaderboard per protocol and a page per submission.

Plain HTML and inline SVG from ``templates/page.html`` and ``templates/style.css`` (string.Template;
every value is escaped here), so it works offline, without a CDN and without JavaScript.
Filters travel in the query string through an ordinary GET form.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from html import escape
from importlib import resources
from string import Template
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from specschema.protocol import shipped_protocols
from specserver.board import aggregate
from specserver.board.aggregate import GroupAggregate
from specserver.board.leaderboard import Board
from specserver.http.caching import conditional
from specserver.http.deps import Reads
from specserver.http.page import charts
from specserver.http.params import parse_filters, query_params
from specserver.store import queries

router = APIRouter(include_in_schema=False)

PAGE_FILTERS = ("protocol", "target", "draft", "chip", "memory_gb", "ollama_version", "os")
DIMENSIONS = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)


@cache
def _asset(name: str) -> str:
    folder = resources.files("specserver.http.page") / "templates"
    return (folder / name).read_text(encoding="utf-8")


def render_page(title: str, body: str) -> str:
    return Template(_asset("page.html")).substitute(
        title=escape(title), css=_asset("style.css"), body=body)


def _num(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def _speedup_cell(value: float | None) -> str:
    if value is None:
        return '<td class="num">–</td>'
    kind = "faster" if value >= 1.0 else "slower"
    return f'<td class="num {kind}">{value:.2f}x</td>'


def _verdict_badges(counts: dict[str, int]) -> str:
    return "".join(f'<span class="badge">{escape(v)} {n}</span>'
                   for v, n in counts.items() if n)


def _key(group: GroupAggregate, dimension: str) -> str:
    return aggregate.dimension_label(dimension, group.key[dimension])


def _chart_label(group: GroupAggregate) -> str:
    config = group.key["draft"]["config_name"]
    return f"{_key(group, 'chip')} · {_key(group, 'memory_gb')} · {config}"


def board_table(groups: Sequence[GroupAggregate], board: str) -> str:
    head = ("<tr><th>Target</th><th>Draft config</th><th>Chip</th><th>Memory</th>"
            '<th class="num">Contributors</th><th class="num">Submissions</th>'
            '<th class="num">Median speedup</th><th class="num">Interquartile</th>'
            '<th class="num">Range</th><th class="num">Baseline tok/s</th><th>Verdicts</th></tr>')
    rows = []
    for group in groups:
        if group.few_results:
            iqr = '<td class="num few">few results</td>'
        else:
            iqr = f'<td class="num">{_num(group.p25_speedup)}–{_num(group.p75_speedup)}x</td>'
        rows.append(
            f'<tr class="group" data-board="{escape(board)}">'
            f"<td>{escape(_key(group, 'target'))}</td><td>{escape(_key(group, 'draft'))}</td>"
            f"<td>{escape(_key(group, 'chip'))}</td><td>{escape(_key(group, 'memory_gb'))}</td>"
            f'<td class="num">{group.contributors}</td><td class="num">{group.submissions}</td>'
            f"{_speedup_cell(group.median_speedup)}{iqr}"
            f'<td class="num">{_num(group.min_speedup)}–{_num(group.max_speedup)}x</td>'
            f'<td class="num">{_num(group.median_baseline_tps, 1)}</td>'
            f"<td>{_verdict_badges(group.verdicts)}</td></tr>")
    return f'<table class="board" data-board="{escape(board)}">{head}{"".join(rows)}</table>'


def board_chart(groups: Sequence[GroupAggregate], board: str, title: str, noise: bool) -> str:
    bars = [charts.Bar(_chart_label(g), g.median_speedup, g.p25_speedup, g.p75_speedup,
                       g.contributors) for g in groups]
    return charts.speedup_chart(bars, title=title, noise=noise, board=board)


def _sum_verdicts(groups: Sequence[GroupAggregate]) -> dict[str, int]:
    total = dict.fromkeys(queries.VERDICTS, 0)
    for group in groups:
        for verdict, count in group.verdicts.items():
            total[verdict] += count
    return total


def protocol_section(protocol_id: str, speed: list[GroupAggregate],
                     noise: list[GroupAggregate]) -> str:
    protocol = shipped_protocols().get(protocol_id)
    parts = [f'<section class="protocol" id="protocol-{escape(protocol_id)}">',
             f"<h2>{escape(protocol_id)}"
             f"{f' v{protocol.version}' if protocol else ''}</h2>"]
    if protocol is not None:
        parts.append(f'<p class="note">{escape(protocol.description)}</p>')
    board = f"speedup-{protocol_id}"
    parts.append("<h3>Speedup board</h3>")
    if speed:
        parts.append(f'<p class="note">Median decode speedup (draft tok/s ÷ baseline tok/s) by '
                     f"chip; bars show the median across contributors, whiskers the "
                     f"interquartile range, the dashed line 1.0x. Verdicts: "
                     f"{_verdict_badges(_sum_verdicts(speed))}</p>")
        parts.append(board_chart(speed, board, f"Speedup by chip, {protocol_id}", noise=False))
        parts.append(board_table(speed, board))
    else:
        parts.append('<p class="muted">No draft configs with a confirmed or not_observed '
                     "speculation verdict match these filters.</p>")
    if noise:
        floor = f"noise-{protocol_id}"
        parts.append("<h3>Noise floor (A/A)</h3>")
        parts.append('<p class="note">Draft configs the engine did not apply '
                     "(<code>not_applied</code>): the same computation measured twice. Their "
                     "spread around 1.0x is the smallest effect the speedup board can resolve. "
                     f"Verdicts: {_verdict_badges(_sum_verdicts(noise))}</p>")
        parts.append(board_chart(noise, floor, f"Noise floor, {protocol_id}", noise=True))
        parts.append(board_table(noise, floor))
    parts.append("</section>")
    return "".join(parts)


def _select(name: str, label: str, values: Sequence[Any], chosen: Any) -> str:
    options = ['<option value="">any</option>'] + [
        f'<option value="{escape(str(v))}"{" selected" if str(v) == str(chosen) else ""}>'
        f"{escape(str(v))}</option>" for v in values]
    return f'<label>{escape(label)}<select name="{name}">{"".join(options)}</select></label>'


def filter_form(filters: queries.Filters, menus: dict[str, list[Any]]) -> str:
    fields = [
        _select("protocol", "Protocol", sorted(shipped_protocols()), filters.protocol),
        _select("chip", "Chip", menus["chip"], filters.chip),
        _select("memory_gb", "Memory (GB)", menus["memory_gb"], filters.memory_gb),
        _select("ollama_version", "Ollama", menus["ollama_version"], filters.ollama_version),
        _select("os", "OS", menus["os_name"], filters.os),
        _select("target", "Target model", menus["target_model"], filters.target),
    ]
    return (f'<form class="filters" method="get" action="/">{"".join(fields)}'
            '<button type="submit">Apply</button> <a href="/">reset</a></form>')


def recent_table(items: Sequence[dict[str, Any]]) -> str:
    rows = []
    for item in items:
        drafts = ", ".join(
            f"{escape(d['config_name'])} {_num(d['speedup_tps'])}x ({escape(d['observed'])})"
            for d in item["drafts"])
        rows.append(
            f'<tr><td><a href="/submissions/{escape(item["submission_id"])}">'
            f'{escape(item["submission_id"][:8])}</a></td>'
            f'<td>{escape(str(item["received_at"])[:16].replace("T", " "))}</td>'
            f'<td>{escape(item["protocol_id"])}</td><td>{escape(str(item["chip"]))}</td>'
            f'<td>{escape(str(item["memory_gb"]))}</td><td>{escape(item["ollama_version"])}</td>'
            f"<td>{drafts}</td></tr>")
    return ("<table><tr><th>Submission</th><th>Received (UTC)</th><th>Protocol</th><th>Chip</th>"
            f"<th>GB</th><th>Ollama</th><th>Drafts</th></tr>{''.join(rows)}</table>")


def _by_protocol(board: Board) -> dict[str, list[GroupAggregate]]:
    found: dict[str, list[GroupAggregate]] = {}
    for group in aggregate.sort_groups(board.groups, aggregate.DEFAULT_SORT):
        found.setdefault(str(group.key["protocol"]["protocol_id"]), []).append(group)
    return found


@router.get("/", response_class=HTMLResponse)
def home(request: Request, reads: Reads) -> Response:
    params = query_params(request, PAGE_FILTERS)
    filters = parse_filters(params)
    version = reads.version()

    def build() -> Response:
        speed = _by_protocol(reads.board(filters, DIMENSIONS, "speedup", version))
        noise = _by_protocol(reads.board(filters, DIMENSIONS, "noise_floor", version))
        counts = reads.board(filters, DIMENSIONS, "speedup", version).verdict_counts
        with reads.engine.connect() as conn:
            menus = {c: queries.distinct_values(conn, c) for c in
                     ("chip", "memory_gb", "ollama_version", "os_name", "target_model")}
            recent, _ = queries.list_submissions(conn, filters, limit=15)
        protocols = [p for p in shipped_protocols() if p in speed or p in noise]
        parts = ["<h1>Speculative decoding leaderboard</h1>", filter_form(filters, menus),
                 f'<p class="note">Draft results matching these filters: '
                 f"{_verdict_badges(counts) or 'none'}. Each contributor counts once per group "
                 f"(their median first); interquartile ranges need "
                 f"{reads.min_contributors} contributors.</p>"]
        if not protocols:
            parts.append('<p class="empty">No results match these filters yet. Contribute one '
                         "with <code>specsubmit run</code>.</p>")
        parts += [protocol_section(p, speed.get(p, []), noise.get(p, [])) for p in protocols]
        parts.append("<h2>Recent submissions</h2>" + recent_table(recent))
        return HTMLResponse(render_page("specbench leaderboard", "".join(parts)))

    return conditional(request, version, build)


# --- one submission -----------------------------------------------------------------------


def _facts(pairs: Sequence[tuple[str, Any]]) -> str:
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape('–' if v is None else str(v))}</dd>"
                    for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def _flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _flatten(f"{prefix}.{k}" if prefix else k, v)]
    if isinstance(value, list):
        if not value:
            return [(prefix, "[]")]
        return [p for i, v in enumerate(value) for p in _flatten(f"{prefix}[{i}]", v)]
    return [(prefix, value)]


def _rows_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows)
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def verify_snippet(base_url: str, submission_id: str, key_id: str) -> str:
    """Python that re-verifies the stored envelope with specschema; tests run it verbatim."""
    return (
        "import json, urllib.request\n"
        "from specschema.envelope import verify_envelope\n"
        "from specschema.payload import parse_submission\n\n"
        f'url = "{base_url}/v1/submissions/{submission_id}/envelope"\n'
        "envelope = json.load(urllib.request.urlopen(url))\n"
        "verified = verify_envelope(envelope)  # raises SignatureInvalid if a byte changed\n"
        f'assert verified.key_id == "{key_id}"\n'
        "submission = parse_submission(verified.payload)\n"
        'print("verified", submission.submission_id, "signed by", verified.key_id)\n'
    )


TRIAL_COLUMNS = ("position", "config_name", "trial_index", "wall_s", "ttft_s", "eval_count",
                 "eval_duration_ns", "total_duration_ns", "load_duration_ns", "done_reason",
                 "cold")
VERDICT_COLUMNS = ("config_name", "role", "model", "draft_model", "mechanism", "requested",
                   "engine_can_honor", "observed", "drafted_tokens", "accepted_tokens",
                   "counters_source", "outputs_match_baseline")
SUMMARY_COLUMNS = ("config_name", "trials", "median_tps", "cv_tps", "median_wall_s",
                   "speedup_tps", "speedup_tps_ci_low", "speedup_tps_ci_high", "speedup_wall")


def submission_body(base_url: str, row: dict[str, Any], parts: dict[str, Any],
                    history: Sequence[dict[str, Any]]) -> str:
    sid = row["submission_id"]
    out = [f"<h1>Submission <code>{escape(sid)}</code></h1>"]
    if row["hidden"]:
        out.append('<p class="banner">Hidden by a maintainer: not counted on the leaderboard.'
                   "</p>")
    if row["key_banned"]:
        out.append('<p class="banner">This contributor key is banned: its results are not '
                   "counted.</p>")
    out.append(_facts([
        ("protocol", f"{row['protocol_id']} v{row['protocol_version']} "
                     f"({row['protocol_sha256'][:12]}…)"),
        ("target", row["target_model"]), ("chip", row["chip"]), ("memory (GB)", row["memory_gb"]),
        ("OS", row["os"]), ("Ollama", row["ollama_version"]), ("backend", row["backend"]),
        ("client", f"{row['client_name']} {row['client_version']}"),
        ("created", row["created_at"]), ("received", row["received_at"]),
        ("complete", row["complete"]), ("source", row["source"]),
        ("key id", row["key_id"] or "none (unsigned import)"), ("note", row["note"]),
    ]))
    out.append("<h2>Speculation verdicts</h2>" + _rows_table(parts["configs"], VERDICT_COLUMNS))
    out.append("<h2>Summary</h2>" + _rows_table(parts["summaries"], SUMMARY_COLUMNS))
    out.append("<h2>Fingerprint</h2>")
    out.append(_facts(_flatten("", parts["fingerprint"] or {})))
    out.append("<h2>Trials</h2>" + _rows_table(parts["trials"], TRIAL_COLUMNS))
    out.append("<h2>Moderation history</h2>")
    if history:
        out.append(_rows_table(list(history), ("at", "action", "target", "reason", "actor")))
    else:
        out.append('<p class="muted">No moderation actions.</p>')
    out.append("<h2>Verify the signature yourself</h2>")
    if row["key_id"]:
        out.append('<p class="note">The server keeps the exact bytes that were signed. With '
                   "<code>specschema</code> installed (<code>pip install specbench</code>):</p>")
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
            row = queries.submission_row(conn, submission_id)
            if row is None:
                body = (f"<h1>Not found</h1><p>No submission <code>{escape(submission_id)}"
                        '</code>. <a href="/">Back to the leaderboard</a>.</p>')
                return HTMLResponse(render_page("not found", body), status_code=404)
            parts = queries.submission_parts(conn, submission_id)
            history = queries.moderation_history(conn, submission_id, row["key_id"])
        base_url = str(request.base_url).rstrip("/")
        return HTMLResponse(render_page(f"submission {submission_id[:8]}",
                                        submission_body(base_url, row, parts, history)))

    return conditional(request, version, build)
