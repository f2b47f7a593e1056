"""POST /v1/probes: a signed cost probe, taken like a submission.

The one gate of ``POST /v1/submissions`` (``submissions.gated``): refusals from the address
charged first, the body under the size limit and its deadline, the checks
(``ingest.check_probe``: its own envelope type, the wire model, created_at's window), the
ban list, the rate limits per address and per key (one bucket with submissions: a probe is
a POST like any other), then one write through the store's single writer, which also
logs the probe in the transparency log (the receipt's ``log``, as a submission's).
Idempotent by probe id: the same bytes again are 200 with the same receipt, other bytes
under a stored id 409.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from specserver.errors import Conflict, signed_refusal
from specserver.http.errors import error_doc, logged_error_doc
from specserver.http.submissions import check_limits, gated, log_refusal
from specserver.ingest import check_probe
from specserver.ratelimit import client_address
from specserver.settings import ServerSettings
from specserver.store import LogReceipt, Store, probes

router = APIRouter()
PROBES_PATH = "/v1/probes"

_ENVELOPE = {"type": "object", "required": ["payloadType", "payload", "signatures"],
             "description": "a DSSE envelope of payloadType "
                            "application/vnd.specbench.cost-probe.v1+json whose payload is a "
                            "cost probe (specschema.probe.CostProbe)"}


def _receipt(row: probes.ProbeRow, log: LogReceipt | None) -> bytes:
    """``log``: the probe's entry in the transparency log (null for a probe stored before
    the log named probes, or by a server without a store)."""
    values = row.values
    entry = None if log is None else {
        "index": log.index, "leaf_hash": base64.b64encode(log.leaf_hash).decode()}
    return json.dumps({"probe_id": row.probe_id, "key_id": values["key_id"],
                       "received_at": values["received_at"].isoformat() + "Z",
                       "target_digest": values["target_digest"], "chip": values["chip"],
                       "log": entry}, separators=(",", ":")).encode()


@router.post(
    PROBES_PATH, status_code=201, tags=["ingest"],
    summary="Submit a signed cost probe (a machine's cost of checking k tokens at once)",
    responses={
        200: {"description": "already stored with these exact bytes"},
        400: logged_error_doc("malformed envelope or payload JSON"),
        401: error_doc("the signature does not verify"),
        403: logged_error_doc("the key id is banned"),
        408: error_doc("the body did not arrive in time"),
        409: logged_error_doc("this probe id is stored with other bytes"),
        413: error_doc("the body is over the size limit"),
        422: logged_error_doc("the probe does not match the schema, or its created_at is "
                              "out of the accepted window"),
        429: error_doc("rate limited (Retry-After)"),
        503: error_doc("the store cannot take probes now (Retry-After)"),
    },
    openapi_extra={"requestBody": {"required": True,
                                   "content": {"application/json": {"schema": _ENVELOPE}}}},
)
async def post_probe(request: Request) -> Response:
    state: Any = request.app.state
    settings: ServerSettings = state.settings
    store: Store = state.store
    address = client_address(request.client.host if request.client else None,
                             request.headers.get("x-forwarded-for"), settings.proxy_networks())
    limits = check_limits(settings)

    async def check(body: bytes) -> tuple[probes.ProbeRow, float]:
        started = time.thread_time()  # checked here, on this thread, without a pause
        row = check_probe(body, received_at=state.clock(), max_age=limits.max_age,
                          max_future_skew=limits.max_future_skew)
        return row, time.thread_time() - started

    row = await gated(state, address, request.receive, request.headers.get("content-length"),
                      check, lambda found: str(found.values["key_id"]))
    if settings.store_enabled:
        origin = await store.origin_of(address, state.clock())
        row = probes.ProbeRow({**row.values, "origin_hash": origin})
        outcome, logged = await store.store_probe(row)
        if outcome == "conflict":
            conflict = signed_refusal(Conflict("this probe id is already stored with other "
                                               "bytes", {"probe_id": row.probe_id}),
                                      str(row.values["key_id"]))
            await log_refusal(state, conflict, lambda: str(row.values["envelope_sha256"]))
            raise conflict
    else:
        outcome, logged = "stored", None
    return Response(_receipt(row, logged), status_code=201 if outcome == "stored" else 200,
                    media_type="application/json")
