"""POST /v1/probes: a signed cost probe, taken like a submission.

The same gates in the same order as ``POST /v1/submissions``: refusals from the address
charged first, the body under the size limit and its deadline, the checks
(``ingest.check_probe``: its own envelope type, the wire model, created_at's window), the
ban list, the rate limits per address and per key (one bucket with submissions: a probe is
a POST like any other), then one write through the store's single writer. Idempotent by
probe id: the same bytes again are 200 with the same receipt, other bytes under a stored
id 409.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from specserver.errors import Conflict, NotPermitted, RateLimited
from specserver.http.errors import error_doc
from specserver.http.submissions import REJECTIONS, check_limits, read_body
from specserver.ingest import check_probe
from specserver.ratelimit import RejectionGate, client_address, first_refusal, rejections
from specserver.settings import ServerSettings
from specserver.store import Store, probes

router = APIRouter()
PROBES_PATH = "/v1/probes"

_ENVELOPE = {"type": "object", "required": ["payloadType", "payload", "signatures"],
             "description": "a DSSE envelope of payloadType "
                            "application/vnd.specbench.cost-probe.v1+json whose payload is a "
                            "cost probe (specschema.probe.CostProbe)"}


def _receipt(row: probes.ProbeRow) -> bytes:
    values = row.values
    return json.dumps({"probe_id": row.probe_id, "key_id": values["key_id"],
                       "received_at": values["received_at"].isoformat() + "Z",
                       "target_digest": values["target_digest"], "chip": values["chip"]},
                      separators=(",", ":")).encode()


@router.post(
    PROBES_PATH, status_code=201, tags=["ingest"],
    summary="Submit a signed cost probe (a machine's cost of checking k tokens at once)",
    responses={
        200: {"description": "already stored with these exact bytes"},
        400: error_doc("malformed envelope or payload JSON"),
        401: error_doc("the signature does not verify"),
        403: error_doc("the key id is banned"),
        408: error_doc("the body did not arrive in time"),
        409: error_doc("this probe id is stored with other bytes"),
        413: error_doc("the body is over the size limit"),
        422: error_doc("the probe does not match the schema, or its created_at is out of "
                       "the accepted window"),
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
    gate: RejectionGate | None = getattr(state, "rejection_gate", None)
    address = client_address(request.client.host if request.client else None,
                             request.headers.get("x-forwarded-for"), settings.proxy_networks())
    blocked = gate.blocked(address) if gate is not None else None
    if blocked is not None:
        raise RateLimited("too many refused submissions from this address; retry later",
                          {"scope": rejections.SCOPE}, retry_after=blocked)
    limits = check_limits(settings)
    try:
        body = await read_body(request.receive, request.headers.get("content-length"),
                               settings.max_body_bytes, settings.body_read_timeout_s,
                               settings.body_min_rate_bytes_s)
        refused = first_refusal(state.rate_limiter, (("address", address),))
        if refused is None:
            row = check_probe(body, received_at=state.clock(), max_age=limits.max_age,
                              max_future_skew=limits.max_future_skew)
            if await store.check_banned(str(row.values["key_id"])):
                raise NotPermitted("this key id is banned", {"key_id": row.values["key_id"]},
                                   code="key_banned")
    except REJECTIONS:
        if gate is not None:
            gate.rejected(address)
        raise
    if refused is None:
        refused = first_refusal(state.rate_limiter, (("key", str(row.values["key_id"])),))
    if refused is not None:
        scope, wait = refused
        raise RateLimited(f"too many submissions from this {scope}; retry later",
                          {"scope": scope}, retry_after=wait)
    if settings.store_enabled:
        origin = await store.origin_of(address, state.clock())
        row = probes.ProbeRow({**row.values, "origin_hash": origin})
        outcome = await store.awrite(lambda conn: probes.insert_probe(conn, row))
        if outcome == "conflict":
            raise Conflict("this probe id is already stored with other bytes",
                           {"probe_id": row.probe_id})
    else:
        outcome = "stored"
    return Response(_receipt(row), status_code=201 if outcome == "stored" else 200,
                    media_type="application/json")
