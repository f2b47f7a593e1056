"""The public read API: leaderboard, aggregates, submission list, protocols, stats, export.

Read-only and unauthenticated. Every GET carries an ETag (from the store's data version
and the request's URL) and Cache-Control, and answers 304 to a matching If-None-Match
before doing any work. CORS allows GET from any origin. Unknown query parameters,
group_by dimensions, verdicts, protocols, OS names, sorts and formats are refused with
422 in the one error shape, listing the allowed values.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.middleware.cors import CORSMiddleware

from specschema.conclusion import LEVEL_BADGES, LEVEL_CHECKS
from specschema.protocol_files import all_protocols
from specschema.verdicts import VERDICTS, listed_on
from specserver.board import (
    Board,
    GroupAcceptance,
    GroupAggregate,
    KeyTuple,
    ReadService,
    Snapshot,
    View,
    acceptance_words,
    aggregate,
)
from specserver.errors import Gone, NotFound
from specserver.http import caching, exports, params
from specserver.http.deps import Reads
from specserver.http.errors import ErrorBody
from specserver.http.page.data import PageReuse
from specserver.ingest import chip_is_known, target_unsized_reason
from specserver.ratelimit import client_address
from specserver.settings import ServerSettings
from specserver.store import (
    DEFAULT_FORMAT,
    DIMENSIONS,
    FILTER_NAMES,
    FORMATS,
    Dimension,
    Filter,
    Filters,
    exporting,
    queries,
    redaction,
)

VIEWS: tuple[View, ...] = aggregate.VIEWS
MAX_LIMIT = 1000

router = APIRouter(tags=["public"])


# Statuses every public GET can answer besides 200, for the OpenAPI document.
_ERROR = {"model": ErrorBody}
REFUSED: dict[int | str, dict[str, Any]] = {
    304: {"description": "not modified (If-None-Match matched the ETag)"},
    422: {**_ERROR, "description": "unknown or invalid query parameter (details list them)"},
}


# --- JSON shapes --------------------------------------------------------------------------


def group_json(group: GroupAggregate, dimensions: list[str],
               acceptance: dict[KeyTuple, GroupAcceptance] | None = None) -> dict[str, Any]:
    data = asdict(group)
    del data["shown"]  # in the label
    if data["dispute"] is not None:  # maintainers' only: it says which keys share a range
        del data["dispute"]["recent_cohorts"]
    data["label"] = group.label(dimensions)
    if acceptance is not None:  # asked for (acceptance=true)
        # Acceptance per draft position (board/acceptance.py): per voice, then the median
        # across them at each position; null where no result of the group had counts.
        accepted = acceptance.get(aggregate.flat_key(group))
        data["acceptance_per_position"] = list(accepted.per_position) if accepted else None
        data["acceptance_contributors"] = list(accepted.contributors) if accepted else []
        data["acceptance_rounds"] = accepted.rounds if accepted else None
        data["acceptance_words"] = acceptance_words(accepted)
    # The bandwidth bound needs the server's size of the target (ingest/plausibility.py):
    # without it the group is shown but does not count as established.
    unsized = target_unsized_reason(group.key.get("target"))
    data["target_sized"] = unsized is None
    data["established"] = unsized is None and not group.few_results
    data["not_established_reason"] = unsized or (
        "fewer contributors than the board needs" if group.few_results else None)
    if "chip" in group.key:  # a chip outside known_chips.json is shown as new (ingest.names)
        chip = group.key["chip"].get("chip")
        data["chip_known"] = chip_is_known(chip if isinstance(chip, str) else None)
    return data


def board_json(board: Board, dimensions: list[str], sort: str, limit: int, offset: int,
               filters: Filters, min_contributors: int) -> dict[str, Any]:
    groups = aggregate.sort_groups(board.groups, sort)
    page = groups[offset:offset + limit]
    return {
        "view": board.view,
        "group_by": dimensions,
        "filters": params.filters_json(filters),
        "sort": sort,
        "min_contributors": min_contributors,
        "total_groups": len(groups),
        "offset": offset,
        "limit": limit,
        "next_offset": offset + limit if offset + limit < len(groups) else None,
        "results": board.results,
        "verdict_counts": board.verdict_counts,
        "evidence_counts": board.evidence_counts,
        # what each level means: what the client reported and what the server checked
        "evidence_levels": {level: {"label": LEVEL_BADGES[level], "client_reported": reported,
                                    "server_checked": checked}
                            for level, (reported, checked) in LEVEL_CHECKS.items()},
        # and what each verdict is, from the verdict table, in its order
        "verdict_words": VERDICT_WORDS_JSON,
        "groups": [group_json(g, dimensions, board.acceptance) for g in page],
        # Groups of chips the known-chip table does not list, off the board until results
        # on them come from enough address ranges (board/chips.py): never in "groups".
        "uncorroborated_groups": [
            group_json(g, [*dimensions, *(("chip",) if "chip" not in dimensions else ())])
            for g in aggregate.sort_groups(board.uncorroborated, sort)],
    }


def _board_response(request: Request, reads: ReadService, leaderboard: bool) -> Response:
    asked_at = time.monotonic()  # Board-Current speaks of the writes before this
    allowed = (*FILTER_NAMES, "group_by", "view", "sort", "limit", "offset", "acceptance")
    given = params.query_params(request, allowed)
    filters = params.parse_filters(given)
    group_by = params.parse_group_by(given)
    chosen = params.choice(params.one(given, "view"), "view", VIEWS)
    view: View = next((v for v in VIEWS if v == chosen), "speedup")
    dimensions = (aggregate.leaderboard_dimensions(group_by, view) if leaderboard
                  else aggregate.view_dimensions(group_by, view))
    sort = (params.choice(params.one(given, "sort"), "sort", aggregate.SORTS)
            or aggregate.DEFAULT_SORT)
    limit = params.integer(params.one(given, "limit"), "limit", 1, MAX_LIMIT) or 100
    offset = params.integer(params.one(given, "offset"), "offset", 0, 10**9) or 0
    params.check_known(reads, None, filters)
    with_acceptance = params.choice(params.one(given, "acceptance"), "acceptance",
                                    ("true", "false")) == "true"
    # the last computed: no waiting
    snapshot = reads.board(filters, dimensions, view, with_acceptance)

    def build(of: Snapshot[Board]) -> Response:
        return JSONResponse(board_json(of.value, dimensions, sort, limit, offset,
                                       filters, reads.min_contributors))

    return caching.board_conditional(
        request, reads.board_key(filters, dimensions, view, with_acceptance), snapshot, build,
        asked_at=asked_at)


def _param(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


def _filter_doc(dimension: Dimension, spec: Filter) -> dict[str, Any]:
    """A filter's OpenAPI entry, from the dimension table."""
    allowed = list(spec.choices()) if spec.choices else []
    if spec.kind == "list":
        return _param(dimension.name, f"{dimension.description}: " + ", ".join(allowed))
    if spec.kind == "choice":
        return _param(dimension.name, dimension.description, {"type": "string", "enum": allowed})
    if spec.kind == "integer":
        return _param(dimension.name, dimension.description, {"type": "integer", "minimum": 1})
    return _param(dimension.name, dimension.description)


# Each verdict as the verdict table (specschema.verdicts) says it: the board's counts' key.
VERDICT_WORDS_JSON = {v.name: {"label": v.words, "meaning": v.meaning, "view": v.board,
                               "counts_as_speedup": v.counts, "drawn_as_bar": v.bar}
                      for v in VERDICTS}


def view_doc() -> str:
    """Each view and the verdicts it holds, in the verdict table's words."""
    return "; ".join(
        f"{view}{' (default)' if view == 'speedup' else ''}: "
        + ", ".join(v.words for v in listed_on(view)) for view in VIEWS
    ) + " (an unverified group is always split by verdict)"


# Query parameters are parsed by hand (to refuse unknown names with the allowed list);
# these entries document them in the OpenAPI schema, from the dimension table.
FILTER_DOCS = [_filter_doc(d, d.filter) for d in DIMENSIONS if d.filter is not None]
BOARD_DOCS = FILTER_DOCS + [
    _param("group_by", "comma-separated dimensions: " + "; ".join(
        f"{d.name} ({d.description})" for d in DIMENSIONS if d.fields)),
    _param("view", view_doc(), {"type": "string", "enum": list(VIEWS)}),
    _param("sort", "ordering", {"type": "string", "enum": list(aggregate.SORTS)}),
    _param("limit", "groups per page (default 100)",
           {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
    _param("offset", "groups to skip", {"type": "integer", "minimum": 0}),
    _param("acceptance", "true: each group with its acceptance per draft position "
                         "(acceptance_per_position, acceptance_contributors, "
                         "acceptance_rounds, acceptance_words); computed in full for each "
                         "new state of the store, so asked for only where it is read",
           {"type": "string", "enum": ["true", "false"]}),
]
LIST_DOCS = FILTER_DOCS + [
    _param("cursor", "next_cursor of the previous page"),
    _param("limit", "items per page (default 50)", {"type": "integer", "minimum": 1,
                                                     "maximum": 500}),
]
EXPORT_DOCS = FILTER_DOCS + [
    _param("format", "; ".join(
        f"{f.name}{' (default)' if f.name == DEFAULT_FORMAT else ''}: {f.description}"
        for f in FORMATS.values()), {"type": "string", "enum": list(FORMATS)}),
    _param("rows", "; ".join(
        f"{r.name}{' (default)' if r.name == exporting.DEFAULT_ROWS else ''}: {r.description}"
        for r in exporting.EXPORT_ROWS.values()),
        {"type": "string", "enum": list(exporting.EXPORT_ROWS)}),
]


@router.get("/v1/leaderboard", openapi_extra={"parameters": BOARD_DOCS}, responses=REFUSED)
def leaderboard(request: Request, reads: Reads) -> Response:
    """Speedup by group; the protocol, target and draft config are always part of a group."""
    return _board_response(request, reads, leaderboard=True)


@router.get("/v1/aggregates", openapi_extra={"parameters": BOARD_DOCS}, responses=REFUSED)
def aggregates(request: Request, reads: Reads) -> Response:
    """The same statistics grouped by exactly the whitelisted dimensions in group_by."""
    return _board_response(request, reads, leaderboard=False)


@router.get("/v1/submissions", openapi_extra={"parameters": LIST_DOCS}, responses=REFUSED)
def submissions(request: Request, reads: Reads) -> Response:
    """Visible submissions, newest first; follow next_cursor for the next page."""
    given = params.query_params(request, (*FILTER_NAMES, "cursor", "limit"))
    filters = params.parse_filters(given)
    cursor = params.one(given, "cursor")
    limit = params.integer(params.one(given, "limit"), "limit", 1, 500) or 50
    if cursor is not None:
        try:
            queries.decode_cursor(cursor)
        except queries.BadCursor as exc:
            raise params.QueryRejected("bad_cursor", str(exc), {"cursor": cursor}) from None
    version = reads.version()
    params.check_known(reads, version, filters)

    def build() -> Response:
        with reads.engine.connect() as conn:
            items, next_cursor = queries.list_submissions(conn, filters, cursor=cursor,
                                                          limit=limit)
        return JSONResponse({"filters": params.filters_json(filters), "items": items,
                             "next_cursor": next_cursor})

    return caching.conditional(request, version, build)


@router.get("/v1/protocols", responses=REFUSED)
def protocols(request: Request, reads: Reads) -> Response:
    """The protocols this server accepts, with their identities and submission counts."""
    params.query_params(request, ())
    version = reads.version()

    def build() -> Response:
        with reads.engine.connect() as conn:
            counts = {(c["protocol_id"], c["protocol_version"], c["protocol_sha256"]):
                      c["submissions"] for c in queries.protocol_counts(conn)}
        items = [{
            "id": p.id, "version": p.version, "sha256": p.sha256,
            "description": p.description, "target": p.target,
            "trials_per_config": p.trials_per_config,
            "configs": [{"name": c.name, "role": c.role, "draft_model": c.draft_model,
                         "mechanism": c.mechanism} for c in p.configs],
            "submissions": counts.get((p.id, p.version, p.sha256), 0),
        } for p in all_protocols()]  # every version accepted (older ones stay valid)
        return JSONResponse({"items": items})

    return caching.conditional(request, version, build)


@router.get("/v1/stats", responses=REFUSED)
def stats(request: Request, reads: Reads) -> Response:
    """Counts over the whole store."""
    params.query_params(request, ())
    version = reads.version()

    def build() -> Response:
        with reads.engine.connect() as conn:
            return JSONResponse(queries.stats(conn))

    return caching.conditional(request, version, build)


@router.get("/v1/submissions/{submission_id}/envelope",
            responses={**REFUSED, 404: {**_ERROR, "description": "no such submission"}})
def envelope(submission_id: str, request: Request, reads: Reads) -> Response:
    """The exact bytes stored for a submission (the signed DSSE envelope), to re-verify."""
    params.query_params(request, ())
    version = reads.version()

    def build() -> Response:
        with reads.engine.connect() as conn:
            withdrawn = redaction.hidden_envelope_sha256(conn, submission_id)
            body = None if withdrawn else queries.envelope_body(conn, submission_id)
        if withdrawn:  # its free text is redacted everywhere (store/redaction.py)
            raise Gone("this submission is hidden: its envelope is withdrawn from public view; "
                       "check a copy against envelope_sha256",
                       {"submission_id": submission_id, "envelope_sha256": withdrawn},
                       code="redacted")
        if body is None:
            raise NotFound(f"no submission {submission_id}", {"submission_id": submission_id})
        return Response(body, media_type="application/json")

    return caching.conditional(request, version, build)


# --- export -------------------------------------------------------------------------------


EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **REFUSED,
    503: {**_ERROR, "description": "too many exports in progress, or the file cannot be "
                                   "written now (see Retry-After)"},
    200: {"description": "the rows, in the requested format",
          "content": {f.media_type.split(";")[0]: {} for f in FORMATS.values()}},
}


@router.get("/v1/export", openapi_extra={"parameters": EXPORT_DOCS}, responses=EXPORT_RESPONSES)
def export(request: Request, reads: Reads) -> Response:
    """One row per visible submission x config (or, with ``rows=domains``, per draft config
    x kind of work), in one of the export formats, from a file written for these filters
    (http/exports.py: a slow client never holds the database; a file is reused for
    ``export_reuse_s``, never across a moderation action). The ETag names the data version
    the file holds."""
    given = params.query_params(request, (*FILTER_NAMES, "format", "rows"))
    filters = params.parse_filters(given)
    fmt = params.choice(params.one(given, "format"), "format", FORMATS) or DEFAULT_FORMAT
    rows = (params.choice(params.one(given, "rows"), "rows", exporting.EXPORT_ROWS)
            or exporting.DEFAULT_ROWS)
    state = request.app.state
    settings: ServerSettings = state.export_settings
    slots: exports.ExportSlots = state.export_slots
    files: exports.ExportFiles = state.export_files
    # The store's scratch folder is the only one its locked-down DuckDB may write.
    store = getattr(state, "store", None)
    folder = store.scratch_dir if store is not None else None
    key = (filters, fmt, rows)
    client = client_address(request.client.host if request.client else None,
                            request.headers.get("x-forwarded-for"),
                            settings.proxy_networks())
    slot = slots.acquire(client)  # before any database work: refusing one more is cheap
    response: Response | None = None
    try:
        version = reads.version()
        params.check_known(reads, version, filters)
        ready = files.open_kept(key, version)
        if ready is None:
            # The client may have this version already: then no file needs writing.
            response = caching.not_modified(request, caching.make_etag(version, request))
            if response is not None:
                return response
            ready = files.open_or_write(
                key, version, slots.writer(settings.export_build_wait_s),
                lambda: exporting.materialize(reads.engine, filters, fmt, folder=folder,
                                              timeout_s=settings.export_build_timeout_s,
                                              rows=rows))
        handle, held = ready
        etag = caching.make_etag(held, request)
        response = caching.not_modified(request, etag, exists=True)  # a file: ``*`` too
        if response is not None:
            handle.close()
            return response
        headers = {**caching.cache_headers(etag),
                   "Content-Disposition": 'attachment; filename="specatlas-export'
                                          f'{"" if rows == exporting.DEFAULT_ROWS else "-" + rows}'
                                          f'.{fmt}"'}
        response = exports.ExportFileResponse(handle, slot, media_type=FORMATS[fmt].media_type,
                                              headers=headers,
                                              send_timeout_s=settings.export_send_timeout_s)
        return response
    finally:
        if not isinstance(response, exports.ExportFileResponse):  # it frees its slot itself
            slot.release()


# --- wiring -------------------------------------------------------------------------------


def install(app: FastAPI, reads: ReadService) -> None:
    """Add the public API and CORS for GET to ``app`` (errors: ``http/errors.py``)."""
    app.state.reads = reads
    app.state.bodies = caching.RememberedBodies(reads)  # by ETag; rendered ahead
    settings = getattr(app.state, "settings", None) or ServerSettings()
    app.state.export_settings = settings
    app.state.export_slots = exports.ExportSlots(settings.export_max_concurrent,
                                                 retry_after_s=5,
                                                 per_client=settings.export_max_per_client)
    app.state.export_files = exports.ExportFiles(settings.export_reuse_s)
    # What the page's computations reuse (http/page/data.py), beside the service they use.
    app.state.page_reuse = PageReuse(settings.page_menu_reuse_s)
    app.include_router(router)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET"],
                       allow_headers=["If-None-Match"],
                       expose_headers=["ETag", *caching.FRESHNESS_HEADERS])
