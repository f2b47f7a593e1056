"""The server-rendered page: "your machine" and its candidates first, then the leaderboard
per protocol, and a page per submission.

Routes only: they parse the URL, read the page's data (``data.py``) and hand plain values
to the templates (``templates/``, ``render.py``: autoescaped), so the page works offline,
without a CDN and without JavaScript. Filters travel in the query string through an
ordinary GET form, and "your machine" is those filters (chip, memory, engine, target).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import Connection

from specschema.conclusion import VERDICT_WORDS
from specschema.protocol_files import shipped_protocols
from specserver.board import Snapshot, aggregate
from specserver.http.caching import board_conditional, conditional
from specserver.http.deps import Reads
from specserver.http.page import board, forecasts, machine, submission
from specserver.http.page.data import MENUS, PageData, PageReuse, page_data, page_version
from specserver.http.page.render import page_response
from specserver.http.params import choice, integer, one, parse_filters, query_params
from specserver.settings import ServerSettings
from specserver.store import dimensions, queries, redaction

router = APIRouter(include_in_schema=False)

PAGE_FILTERS = dimensions.PAGE_FILTERS


def _draft_words(draft: dict[str, Any]) -> str:
    """"spec_4 1.21x (confirmed)" in the recent list: the verdict beside every ratio, and
    ", not counted: <level> counters" for a confirmed draft kept off the board."""
    speedup = draft["speedup_tps"]
    ratio = "–" if speedup is None else f"{speedup:.2f}"
    verdict = VERDICT_WORDS.get(draft["observed"], str(draft["observed"]).replace("_", " "))
    level = draft.get("evidence")
    uncounted = ("" if draft.get("observed") != "confirmed"
                 or aggregate.on_board("confirmed", level)
                 else f", not counted: {level or 'unassessed'} counters")
    return f"{draft['config_name']} {ratio}x ({verdict}{uncounted})"


def recent_rows(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"submission_id": str(item["submission_id"]),
             "received": str(item["received_at"])[:16].replace("T", " "),
             "protocol_id": item["protocol_id"], "chip": item["chip"],
             "memory_gb": item["memory_gb"], "engine": submission.engine_words(item),
             "drafts": [_draft_words(d) for d in item["drafts"]]} for item in items]


def your_machine(data: PageData, filters: queries.Filters, menu_cut: int,
                 min_contributors: int, limit: int) -> dict[str, Any]:
    """The first screen's data: the menus, what is still to choose, and the candidates."""
    mine, others = machine.menus(MENUS, data.menus, filters.get, menu_cut)
    missing = machine.missing(filters.get, MENUS)
    found = [] if missing else machine.candidates(
        data.speed.groups, data.unverified.groups, data.noise.groups,
        data.domains.groups if data.domains is not None else (),
        forecasts.predictor(data.forecasts or {}),
        chosen=[name for name in machine.MACHINE if filters.get(name) is not None])
    return {"mine": mine, "others": others, "missing": missing,
            "others_chosen": any(m.chosen is not None for m in others),
            "found": found[:limit], "total": len(found), "more": len(found) > limit,
            "domains": machine.domains_of(found[:limit]),
            "min_contributors": min_contributors}


@router.get("/", response_class=HTMLResponse)
def home(request: Request, reads: Reads) -> Response:
    asked_at = time.monotonic()  # Board-Current speaks of the writes before this
    params = query_params(request, (*PAGE_FILTERS, "page", "sort"))
    filters = parse_filters(params)
    settings: ServerSettings = request.app.state.settings
    paging = board.Paging(integer(one(params, "page"), "page", 1, 10**6) or 1,
                          settings.page_groups, reads.min_contributors,
                          {name: value for name in PAGE_FILTERS
                           if (value := one(params, name)) is not None})
    menu_cut = settings.page_menu_values
    sort = choice(one(params, "sort"), "sort", aggregate.SORTS) or aggregate.DEFAULT_SORT
    sorting = board.Sorting(sort, dict(paging.query))
    if sort != aggregate.DEFAULT_SORT:
        paging = board.Paging(paging.page, paging.per_page, paging.min_contributors,
                              {**paging.query, "sort": sort})
    pooled = board.new_keys_note(settings.new_key_probation_days, reads.min_contributors)
    base_url = settings.public_base_url.rstrip("/")  # never the Host header (cached page)
    # The last computed page data, at once (board/leaderboard.py): boards and the recent
    # list of one state of the store, the menus of that one or of one a little older
    # (http/page/data.py); the versions of both label the page.
    reuse: PageReuse = request.app.state.page_reuse
    key = ("page", filters, menu_cut)
    chip, target, memory = (filters.get(n) for n in ("chip", "target", "memory_gb"))

    def forecaster(conn: Connection, engines: Sequence[str]) -> dict[str, forecasts.Answer]:
        return forecasts.answers(conn, settings, reads.min_contributors, str(target),
                                 str(chip), memory if isinstance(memory, int) else None,
                                 engines)

    snapshot = reads.latest(key, lambda conn, version: page_data(
        reads, reuse, conn, version, filters, menu_cut, forecaster))

    def build(of: Snapshot[PageData]) -> Response:
        data = of.value
        speed = board.by_protocol([*data.speed.groups, *data.unverified.groups], sort)
        noise = board.by_protocol(data.noise.groups, sort)
        protocols = [p for p in shipped_protocols() if p in speed or p in noise]
        return page_response(request, "home.html", {
            "title": "specatlas: will speculative decoding speed up your machine?",
            "yours": your_machine(data, filters, menu_cut, reads.min_contributors,
                                  settings.page_groups),
            "run": f"specsubmit run --server {base_url}",
            "verdicts": board.verdict_counts(data.speed.verdict_counts),
            "evidence": board.evidence_counts(data.speed.evidence_counts),
            "min_contributors": reads.min_contributors,
            "newest": None if data.newest is None else submission.when(data.newest),
            "sections": [board.protocol_section(p, speed.get(p, []), noise.get(p, []),
                                                paging, sorting, data.speed.acceptance)
                         for p in protocols],
            "apart": board.uncorroborated_table(data.speed.uncorroborated, sorting,
                                                settings.page_groups),
            "apart_more": max(0, len(data.speed.uncorroborated) - settings.page_groups),
            "pooled": pooled,
            "counter_sources": board.counter_sources(),
            "api_engines": board.api_engines(),
            "recent": recent_rows(data.recent)})

    return board_conditional(request, key, snapshot, build,
                             lambda of: page_version(of.version, of.value), asked_at)


@router.get("/submissions/{submission_id}", response_class=HTMLResponse)
def submission_page(submission_id: str, request: Request, reads: Reads) -> Response:
    query_params(request, ())
    version = reads.version()

    def build() -> Response:
        with reads.engine.connect() as conn:
            view = queries.submission_view(conn, submission_id)
        if view is None:
            return page_response(request, "not_found.html",
                                 {"title": "not found", "submission_id": submission_id},
                                 status_code=404)
        view = redaction.redact_view(view)  # hidden: no free text, as in the JSON route
        base_url = request.app.state.settings.public_base_url.rstrip("/")  # not Host
        return page_response(request, "submission.html",
                             submission.submission_context(base_url, view))

    return conditional(request, version, build)
