"""GET /v1/predict: what speculation would do for one machine, before anything is downloaded.

Parses the query by hand (unknown names and values are 422 in the one error shape), reads
the crowd's inputs for the target on that machine (``specserver.crowd``, the board's rules
for counting voices) and answers ``specschema.forecast.forecast`` over them with the
crowd's cost curves, plus the inputs themselves (``inputs``), from which a client predicts
again with its own probe and gets what this would say for it. An answer is kept for the
same query while neither the store's data version nor its probes change.

An answer to compute costs a few hundred ms of CPU, and every chip, memory size and kind
of work is another query: at most ``predict_max_concurrent`` are computed at once, the
rest wait their turn in the event loop (holding no worker thread the page and the board's
reads need) for ``predict_wait_s``, then get 503 ``predictions_busy`` with Retry-After. A
kept answer never waits, and a query computed while another asking it waited is sent as
kept: a flood of one query costs one answer.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import Response
from sqlalchemy import Connection, func, select
from starlette.concurrency import run_in_threadpool

from specschema.crowd import CrowdInputs, inputs_json
from specschema.domains import DOMAINS
from specschema.engines import ENGINES
from specschema.forecast import forecast
from specserver.board import newkeys
from specserver.crowd import Asked, crowd_inputs, standing_of
from specserver.errors import Unavailable
from specserver.http import caching, params
from specserver.http.errors import error_doc
from specserver.ingest import canonical_chip, canonical_model_optional
from specserver.settings import ServerSettings
from specserver.store import Store, queries, tables

router = APIRouter(tags=["public"])
PREDICT_PATH = "/v1/predict"
ALLOWED = ("target", "chip", "memory_gb", "engine", "domain")
KEPT_ANSWERS = 256
BUSY_RETRY_AFTER_S = 2.0


class _Answers:
    """The last answers by query, each with the store version it was computed at, and the
    keys' standing (cohorts, probation): reading every key's arrival is the costly part
    of an answer (~0.2 s of CPU at 100,000 submissions, BENCHMARKS.md), so it is kept for
    every query while the data version holds, and while writes arrive for up to
    ``fresh_s`` (``SPECSERVER_BOARD_REFRESH_S``, as the board's rules are): a key that
    arrived since counts as new (``crowd_inputs``), and a ban applies at once (the rows
    are read under it)."""

    def __init__(self, fresh_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.Lock()
        self.kept: OrderedDict[tuple[str, ...], tuple[str, bytes]] = OrderedDict()
        self.standing: tuple[str, float, newkeys.Standing] | None = None
        self.fresh_s = fresh_s
        self.clock = clock

    def standing_at(self, version: str) -> newkeys.Standing | None:
        with self.lock:
            held = self.standing
            if held is None:
                return None
            same = held[0] == version or self.clock() - held[1] < self.fresh_s
            return held[2] if same else None

    def keep_standing(self, version: str, standing: newkeys.Standing) -> None:
        with self.lock:
            self.standing = (version, self.clock(), standing)

    def get(self, key: tuple[str, ...], version: str) -> bytes | None:
        with self.lock:
            found = self.kept.get(key)
            return found[1] if found is not None and found[0] == version else None

    def put(self, key: tuple[str, ...], version: str, body: bytes) -> None:
        with self.lock:
            self.kept[key] = (version, body)
            self.kept.move_to_end(key)
            while len(self.kept) > KEPT_ANSWERS:
                self.kept.popitem(last=False)


class _Turns:
    """At most ``limit`` answers computed at once; one more waits up to ``wait_s`` for a
    turn (module docstring). ``async with`` it around a computation. The semaphore is made
    on the event loop that first asks."""

    def __init__(self, limit: int, wait_s: float) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self._semaphore: anyio.Semaphore | None = None

    async def __aenter__(self) -> None:
        if self._semaphore is None:
            self._semaphore = anyio.Semaphore(self.limit)
        with anyio.move_on_after(self.wait_s) as waited:
            await self._semaphore.acquire()
        if waited.cancelled_caught:
            raise Unavailable("too many predictions are being computed; retry later",
                              {"max_concurrent_predictions": self.limit},
                              code="predictions_busy", retry_after=BUSY_RETRY_AFTER_S)

    async def __aexit__(self, *exc: object) -> None:
        assert self._semaphore is not None
        self._semaphore.release()


def _versions(conn: Connection) -> tuple[str, str]:
    """(the store's data version, that and its probes' version)."""
    probes = tables.probes
    row = conn.execute(select(func.count(), func.max(probes.c.received_at))).one()
    data = queries.data_version(conn)
    return data, f"{data}|{row[0]}|{row[1]}"


def parse_asked(request: Request) -> tuple[Asked, str | None]:
    given = params.query_params(request, ALLOWED)
    target = params.one(given, "target")
    chip = params.one(given, "chip")
    missing = [n for n, v in (("target", target), ("chip", chip)) if v is None]
    if missing:
        raise params.QueryRejected(
            "missing_parameter", f"missing query parameter(s): {', '.join(missing)}",
            {"missing": missing, "allowed": list(ALLOWED)})
    assert target is not None and chip is not None
    engine = params.choice(params.one(given, "engine"), "engine", ENGINES) or "llama-server"
    domain = params.choice(params.one(given, "domain"), "domain", DOMAINS)
    memory = params.integer(params.one(given, "memory_gb"), "memory_gb", 1, 65536)
    named = target if len(target) == 64 else canonical_model_optional(target) or target
    return Asked(named, canonical_chip(chip) or chip, engine, memory), domain


def predict_inputs(store: Store, settings: ServerSettings, asked: Asked,
                   answers: _Answers | None = None, data_version: str = "") -> CrowdInputs:
    """The crowd's inputs to the answer, on one connection; the keys' standing kept in
    ``answers`` for ``data_version``."""
    rules = newkeys.CohortRules.of(settings.new_key_probation_days,
                                   settings.cohort_window_hours,
                                   settings.range_graduations_per_day)
    with store.engine.connect() as conn:
        standing = answers.standing_at(data_version) if answers is not None else None
        if standing is None:
            standing = standing_of(conn, rules)
            if answers is not None:
                answers.keep_standing(data_version, standing)
        return crowd_inputs(conn, asked, rules, settings.min_contributors, standing)


def predict_answer(store: Store, settings: ServerSettings, asked: Asked,
                   domain: str | None, answers: _Answers | None = None,
                   data_version: str = "") -> dict[str, Any]:
    """The answer's data (the route's body) from ``predict_inputs``."""
    inputs = predict_inputs(store, settings, asked, answers, data_version)
    answer = forecast(inputs, inputs.cost, "crowd", domain, inputs.cost_measured)
    answer["inputs"] = inputs_json(inputs)
    return answer


@router.get(
    PREDICT_PATH,
    summary="Predicted speedups of each way to speculate, for one machine and target",
    description=(
        "Per candidate (draft models, n-gram drafters, MTP), depth and kind of work: the "
        "decode speedup predicted from the crowd's acceptance per draft position (which "
        "travels between machines, with the share of steps that drafted nothing) and the "
        "crowd's cost curves for this chip, engine and target (what checking k tokens at "
        "once costs there; verification probes when there is any, cost.measured says "
        "which; a draft model never probed there costed from the file sizes, draft_cost "
        "says so; a draft model runs once more a round than it drafts, over the checked "
        "batch, each pass costing the draft's step times what a pass cost in "
        "contributors' runs on machines whose probes tell it, drafting_steps, drawn for "
        "this machine as one more of theirs would fall; each "
        "depth's round priced at the tokens the contributors' rounds drafted, which for "
        "an n-gram lookup is fewer than its depth where the text it copies runs out, "
        "inputs.profiles[].drafted_per_round), with a 90 % "
        "interval from resampling both, each draw times the noise of a measured speedup "
        "(the contributors' own, measurement_spread; or, where contributors' n-gram runs "
        "can be held against their own machine's probe and missed by more, model_error: "
        "the root mean square of those misses, Student's t for how few they are): where "
        "a run would land; the speedups "
        "measured on this chip beside it; and one line that "
        "answers. A pair with fewer contributors than the server's minimum is not "
        "predicted (why_not_predicted says what is missing), nor an engine that picks its "
        "depth as it runs (only its measured rows). `inputs` holds what the prediction "
        "was made from, so that a client can predict again with its own probe."),
    responses={
        304: {"description": "not modified (If-None-Match matched the ETag)"},
        404: error_doc("no result names this target"),
        422: error_doc("a missing, unknown or invalid query parameter, or a name shared by "
                       "several model files (details list them)"),
        503: error_doc("predictions_busy: as many answers as the server computes at once "
                       "were being computed for longer than it waits (Retry-After)"),
    },
)
async def predict(request: Request, target: str | None = None, chip: str | None = None,
                  memory_gb: str | None = None, engine: str | None = None,
                  domain: str | None = None) -> Response:
    # The declared parameters document the route; they are parsed by hand (parse_asked),
    # so that a bad value gets the one error shape with the allowed values.
    del target, chip, memory_gb, engine, domain
    asked, chosen = parse_asked(request)
    state: Any = request.app.state
    store: Store = state.store
    answers: _Answers = state.predict_answers
    key = (asked.target, asked.chip, asked.engine, str(asked.memory_gb), chosen or "")

    def kept() -> tuple[str, str, bytes | None]:
        with store.engine.connect() as conn:
            data, version = _versions(conn)
        return data, version, answers.get(key, version)

    def compute(data: str, version: str) -> bytes:
        body = json.dumps(predict_answer(store, state.settings, asked, chosen, answers, data),
                          separators=(",", ":")).encode()
        answers.put(key, version, body)
        return body

    async def answer() -> bytes:
        data, version, body = await run_in_threadpool(kept)
        if body is not None:
            return body
        turns: _Turns = state.predict_turns
        async with turns:
            # the same query may have been computed while this one waited for its turn
            found = answers.get(key, version)
            return found if found is not None else await run_in_threadpool(
                compute, data, version)

    body = await answer()
    # as the other public reads: an ETag of the body, 304 when the client holds it
    headers = {"ETag": caching.content_etag(body), "Cache-Control": caching.CACHE_CONTROL}
    if caching.matches(request.headers.get("if-none-match"), headers["ETag"]):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def install(app: Any) -> None:
    settings: ServerSettings = app.state.settings
    app.state.predict_answers = _Answers(settings.board_refresh_s)
    app.state.predict_turns = _Turns(settings.predict_max_concurrent, settings.predict_wait_s)
    app.include_router(router)
