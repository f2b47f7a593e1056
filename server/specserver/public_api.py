"""The public read API: leaderboard, aggregates, submission list, protocols, stats, export.

Read-only and unauthenticated. Every GET carries an ETag (from the store's data version
and the request's URL) and Cache-Control, and answers 304 to a matching If-None-Match
before doing any work. CORS allows GET from any origin. Unknown query parameters,
group_by dimensions, verdicts, protocols, OS names, sorts and formats are refused with
422 in the one error shape, listing the allowed values.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from typing import Annotated, Any

import duckdb
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy.exc import DBAPIError
from starlette.middleware.cors import CORSMiddleware

from specschema.protocol import shipped_protocols
from specserver import aggregate, exporting, queries
from specserver.aggregate import GroupAggregate, View
from specserver.errors import NotFound, Unavailable, Unprocessable
from specserver.ingest_api import ErrorBody
from specserver.leaderboard import Board, ReadService
from specserver.queries import Filters

CACHE_CONTROL = "public, max-age=5, must-revalidate"
EXPORT_FORMATS = ("csv", "jsonl", "parquet")
VIEWS: tuple[View, ...] = ("speedup", "noise_floor")
MAX_LIMIT = 1000

router = APIRouter(tags=["public"])


class QueryRejected(Unprocessable):
    """A public query the API refuses (422), with the allowed values in ``details``."""

    def __init__(self, code: str, message: str, details: Any = None) -> None:
        super().__init__(message, details, code=code)


def reads_of(request: Request) -> ReadService:
    reads: ReadService = request.app.state.reads
    return reads


Reads = Annotated[ReadService, Depends(reads_of)]

# Statuses every public GET can answer besides 200, for the OpenAPI document.
_ERROR = {"model": ErrorBody}
REFUSED: dict[int | str, dict[str, Any]] = {
    304: {"description": "not modified (If-None-Match matched the ETag)"},
    422: {**_ERROR, "description": "unknown or invalid query parameter (details list them)"},
}


# --- query parameters ---------------------------------------------------------------------


def query_params(request: Request, allowed: Iterable[str]) -> dict[str, list[str]]:
    allowed = tuple(allowed)
    # U+0000 cannot reach PostgreSQL (DataError -> 500); no stored value holds one anyway.
    for name, value in (*request.query_params.multi_items(), *request.path_params.items()):
        if "\x00" in name or "\x00" in str(value):
            raise QueryRejected("bad_parameter", "parameters must not contain U+0000",
                                {"name": name.replace("\x00", "")})
    names = list(dict.fromkeys(request.query_params.keys()))
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise QueryRejected(
            "unknown_parameter", f"unknown query parameter(s): {', '.join(unknown)}",
            {"unknown": unknown, "allowed": list(allowed)})
    return {n: request.query_params.getlist(n) for n in names}


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise QueryRejected("repeated_parameter", f"{name} given more than once", {"name": name})
    return values[0].strip() or None


def _listed(params: dict[str, list[str]], name: str) -> list[str]:
    return [v.strip() for raw in params.get(name, []) for v in raw.split(",") if v.strip()]


def _choice(value: str | None, name: str, allowed: Iterable[str]) -> str | None:
    allowed = list(allowed)
    if value is not None and value not in allowed:
        raise QueryRejected(f"unknown_{name}", f"unknown {name} {value!r}",
                            {"value": value, "allowed": allowed})
    return value


def _int(value: str | None, name: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        raise QueryRejected("bad_parameter", f"{name} must be an integer in [{low}, {high}]",
                            {"name": name, "value": value})
    return number


def parse_filters(params: dict[str, list[str]]) -> Filters:
    verdicts = _listed(params, "verdict")
    bad = [v for v in verdicts if v not in aggregate.VERDICTS]
    if bad:
        raise QueryRejected("unknown_verdict", f"unknown verdict(s): {', '.join(bad)}",
                            {"unknown": bad, "allowed": list(aggregate.VERDICTS)})
    return Filters(
        protocol=_choice(_one(params, "protocol"), "protocol", sorted(shipped_protocols())),
        target=_one(params, "target"),
        draft=_one(params, "draft"),
        chip=_one(params, "chip"),
        memory_gb=_int(_one(params, "memory_gb"), "memory_gb", 1, 2**20),
        ollama_version=_one(params, "ollama_version"),
        os=_choice(_one(params, "os"), "os", queries.OS_NAMES),
        verdicts=frozenset(verdicts),
    )


MAX_LISTED = 200


def check_known(reads: ReadService, version: str, filters: Filters) -> None:
    """Refuse (422) a free-text filter value no visible submission has, listing those there are."""
    asked = {"chip": filters.chip, "target": filters.target, "draft": filters.draft,
             "ollama_version": filters.ollama_version, "memory_gb": filters.memory_gb}
    if all(v is None for v in asked.values()):
        return
    known = reads.known_values(version)
    for name, value in asked.items():
        if value is not None and value not in known[name]:
            allowed = known[name]
            raise QueryRejected(
                f"unknown_{name}", f"no visible submission has {name} {value!r}",
                {"value": value, "allowed": allowed[:MAX_LISTED],
                 "more": max(0, len(allowed) - MAX_LISTED)})


def parse_group_by(params: dict[str, list[str]]) -> list[str]:
    group_by = _listed(params, "group_by") or list(aggregate.DEFAULT_GROUP_BY)
    unknown = aggregate.check_dimensions(group_by)
    if unknown:
        raise QueryRejected("unknown_group_by", f"unknown group_by value(s): {', '.join(unknown)}",
                            {"unknown": unknown, "allowed": list(aggregate.DIMENSIONS)})
    return list(dict.fromkeys(group_by))


def filters_json(filters: Filters) -> dict[str, Any]:
    data = asdict(filters)
    data["verdicts"] = sorted(filters.verdicts)
    return data


# --- caching headers ----------------------------------------------------------------------


def make_etag(version: str, request: Request) -> str:
    basis = f"{version}\n{request.url.path}\n{request.url.query}".encode()
    return '"' + hashlib.sha256(basis).hexdigest()[:32] + '"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def conditional(request: Request, version: str, build: Callable[[], Response]) -> Response:
    """304 when the client has this version; else the body built for this version and URL
    (remembered, except streamed exports), or ``build()``; with caching headers."""
    etag = make_etag(version, request)
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    reads = reads_of(request)
    cached = reads.cached_body(etag)
    if cached is not None:
        status, body, media_type = cached
        return Response(body, status_code=status, media_type=media_type, headers=headers)
    response = build()
    if not isinstance(response, StreamingResponse) and response.status_code == 200:
        reads.remember_body(etag, response.status_code, bytes(response.body),
                            response.media_type or "application/octet-stream")
    response.headers.update(headers)
    return response


# --- JSON shapes --------------------------------------------------------------------------


def group_json(group: GroupAggregate, dimensions: list[str]) -> dict[str, Any]:
    data = asdict(group)
    data["label"] = group.label(dimensions)
    return data


def board_json(board: Board, dimensions: list[str], sort: str, limit: int, offset: int,
               filters: Filters, min_contributors: int) -> dict[str, Any]:
    groups = aggregate.sort_groups(board.groups, sort)
    page = groups[offset:offset + limit]
    return {
        "view": board.view,
        "group_by": dimensions,
        "filters": filters_json(filters),
        "sort": sort,
        "min_contributors": min_contributors,
        "total_groups": len(groups),
        "offset": offset,
        "limit": limit,
        "next_offset": offset + limit if offset + limit < len(groups) else None,
        "results": board.results,
        "verdict_counts": board.verdict_counts,
        "groups": [group_json(g, dimensions) for g in page],
    }


def _board_response(request: Request, reads: ReadService, leaderboard: bool) -> Response:
    allowed = (*queries.FILTER_NAMES, "group_by", "view", "sort", "limit", "offset")
    params = query_params(request, allowed)
    filters = parse_filters(params)
    group_by = parse_group_by(params)
    dimensions = aggregate.leaderboard_dimensions(group_by) if leaderboard else group_by
    chosen = _choice(_one(params, "view"), "view", VIEWS)
    view: View = "noise_floor" if chosen == "noise_floor" else "speedup"
    sort = _choice(_one(params, "sort"), "sort", aggregate.SORTS) or aggregate.DEFAULT_SORT
    limit = _int(_one(params, "limit"), "limit", 1, MAX_LIMIT) or 100
    offset = _int(_one(params, "offset"), "offset", 0, 10**9) or 0
    version = reads.version()
    check_known(reads, version, filters)

    def build() -> Response:
        board = reads.board(filters, dimensions, view, version)
        return JSONResponse(board_json(board, dimensions, sort, limit, offset, filters,
                                       reads.min_contributors))

    return conditional(request, version, build)


def _param(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


# Query parameters are parsed by hand (to refuse unknown names with the allowed list);
# these entries document them in the OpenAPI schema.
FILTER_DOCS = [
    _param("protocol", "protocol id", {"type": "string", "enum": ["hardnumbers-m2",
                                                                   "ollama-draft"]}),
    _param("target", "target model name"),
    _param("draft", "draft config name or draft model name"),
    _param("chip", "chip, as in the fingerprint"),
    _param("memory_gb", "memory in GB", {"type": "integer", "minimum": 1}),
    _param("ollama_version", "Ollama version"),
    _param("os", "operating system", {"type": "string", "enum": list(queries.OS_NAMES)}),
    _param("verdict", "comma-separated verdicts: " + ", ".join(aggregate.VERDICTS)),
]
BOARD_DOCS = FILTER_DOCS + [
    _param("group_by", "comma-separated dimensions: " + ", ".join(aggregate.DIMENSIONS)),
    _param("view", "speedup (default) or noise_floor", {"type": "string", "enum": list(VIEWS)}),
    _param("sort", "ordering", {"type": "string", "enum": list(aggregate.SORTS)}),
    _param("limit", "groups per page (default 100)",
           {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
    _param("offset", "groups to skip", {"type": "integer", "minimum": 0}),
]
LIST_DOCS = FILTER_DOCS + [
    _param("cursor", "next_cursor of the previous page"),
    _param("limit", "items per page (default 50)", {"type": "integer", "minimum": 1,
                                                     "maximum": 500}),
]
EXPORT_DOCS = FILTER_DOCS + [
    _param("format", "csv (default), jsonl or parquet",
           {"type": "string", "enum": list(EXPORT_FORMATS)}),
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
    params = query_params(request, (*queries.FILTER_NAMES, "cursor", "limit"))
    filters = parse_filters(params)
    cursor = _one(params, "cursor")
    limit = _int(_one(params, "limit"), "limit", 1, 500) or 50
    if cursor is not None:
        try:
            queries.decode_cursor(cursor)
        except queries.BadCursor as exc:
            raise QueryRejected("bad_cursor", str(exc), {"cursor": cursor}) from None
    version = reads.version()
    check_known(reads, version, filters)

    def build() -> Response:
        with reads.engine.connect() as conn:
            items, next_cursor = queries.list_submissions(conn, filters, cursor=cursor,
                                                          limit=limit)
        return JSONResponse({"filters": filters_json(filters), "items": items,
                             "next_cursor": next_cursor})

    return conditional(request, version, build)


@router.get("/v1/protocols", responses=REFUSED)
def protocols(request: Request, reads: Reads) -> Response:
    """The protocols this server accepts, with their identities and submission counts."""
    query_params(request, ())
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
        } for p in shipped_protocols().values()]
        return JSONResponse({"items": items})

    return conditional(request, version, build)


@router.get("/v1/stats", responses=REFUSED)
def stats(request: Request, reads: Reads) -> Response:
    """Counts over the whole store."""
    query_params(request, ())
    version = reads.version()

    def build() -> Response:
        with reads.engine.connect() as conn:
            return JSONResponse(queries.stats(conn))

    return conditional(request, version, build)


@router.get("/v1/submissions/{submission_id}/envelope",
            responses={**REFUSED, 404: {**_ERROR, "description": "no such submission"}})
def envelope(submission_id: str, request: Request, reads: Reads) -> Response:
    """The exact bytes stored for a submission (the signed DSSE envelope), to re-verify."""
    query_params(request, ())
    version = reads.version()

    def build() -> Response:
        with reads.engine.connect() as conn:
            body = queries.envelope_body(conn, submission_id)
        if body is None:
            raise NotFound(f"no submission {submission_id}", {"submission_id": submission_id})
        return Response(body, media_type="application/json")

    return conditional(request, version, build)


# --- export -------------------------------------------------------------------------------


def _streamed_rows(reads: ReadService, filters: Filters) -> Iterator[tuple[Any, ...]]:
    with reads.engine.connect() as conn:
        yield from queries.export_rows(conn, filters)


def _file_chunks(path: str, size: int = 1 << 16) -> Iterator[bytes]:
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(size):
                yield chunk
    finally:
        os.unlink(path)


EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **REFUSED,
    503: {**_ERROR, "description": "the Parquet file cannot be written now (see Retry-After)"},
    200: {"description": "the rows, in the requested format",
          "content": {"text/csv": {}, "application/x-ndjson": {},
                      "application/vnd.apache.parquet": {}}},
}


def _parquet_file(reads: ReadService, filters: Filters) -> str:
    """Write the Parquet export to a temporary file; a full disk is a 503, not a 500."""
    path: str | None = None
    try:
        handle, path = tempfile.mkstemp(suffix=".parquet")
        os.close(handle)
        with reads.engine.connect() as conn:
            exporting.write_parquet(conn, filters, path)
        return path
    except BaseException as exc:
        if path is not None:
            os.unlink(path)
        cause = exc.orig if isinstance(exc, DBAPIError) else exc
        if isinstance(cause, OSError | duckdb.IOException):
            raise Unavailable("the export file cannot be written right now",
                              {"reason": str(cause)[:200]}, retry_after=30) from None
        raise


@router.get("/v1/export", openapi_extra={"parameters": EXPORT_DOCS}, responses=EXPORT_RESPONSES)
def export(request: Request, reads: Reads) -> Response:
    """One row per visible submission x config, as csv, jsonl or parquet, streamed."""
    params = query_params(request, (*queries.FILTER_NAMES, "format"))
    filters = parse_filters(params)
    fmt = _choice(_one(params, "format"), "format", EXPORT_FORMATS) or "csv"
    version = reads.version()
    check_known(reads, version, filters)
    filename = f"specbench-export.{fmt}"
    disposition = {"Content-Disposition": f'attachment; filename="{filename}"'}

    def build() -> Response:
        if fmt == "csv":
            return StreamingResponse(exporting.csv_chunks(_streamed_rows(reads, filters)),
                                     media_type="text/csv; charset=utf-8", headers=disposition)
        if fmt == "jsonl":
            return StreamingResponse(exporting.jsonl_chunks(_streamed_rows(reads, filters)),
                                     media_type="application/x-ndjson", headers=disposition)
        path = _parquet_file(reads, filters)
        return StreamingResponse(_file_chunks(path), media_type="application/vnd.apache.parquet",
                                 headers=disposition)

    return conditional(request, version, build)


# --- wiring -------------------------------------------------------------------------------


def install(app: FastAPI, reads: ReadService) -> None:
    """Add the public API, the page and CORS for GET to ``app`` (errors: ``errors.py``)."""
    from specserver import web

    app.state.reads = reads
    app.include_router(router)
    app.include_router(web.router)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET"],
                       allow_headers=["If-None-Match"], expose_headers=["ETag"])
