"""A cost probe: what one machine's engine takes to check several tokens at once (wire
model, pure).

``specsubmit probe`` measures, with the target alone and no speculation, the seconds of one
forward pass over k new tokens after a fixed context, for k = 1 ... 16, and the seconds per
generated token of plain decoding. With a pair's acceptance per draft position (which
travels between machines) it predicts a speedup on this machine (``specschema.predict``).

What it measures is the prefill of k new tokens, whose output is computed for the last of
them only, while checking k drafted tokens needs it for every one: on a model whose output
layer dominates (a small model with a large vocabulary) the probe reads low. The result
says so; the predictions name the probe they used.
"""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field, ValidationError

from specschema.errors import PayloadSchemaError
from specschema.models import (
    ClientInfo,
    Engine,
    Fingerprint,
    ModelInfo,
    UtcDatetime,
    WireModel,
)
from specschema.predict import CostCurve, non_decreasing
from specschema.stats import median
from specschema.strictjson import loads_strict

PROBE_SCHEMA_VERSION: Literal[1] = 1
# A probe is signed into a DSSE envelope of its own type, so that neither kind's signature
# can be replayed as the other's.
PROBE_PAYLOAD_TYPE = "application/vnd.specbench.cost-probe.v1+json"
Seconds = Annotated[float, Field(gt=0, le=3600)]


class CostPoint(WireModel):
    tokens: Annotated[int, Field(ge=1, le=64)]
    samples: Annotated[list[Seconds], Field(min_length=1, max_length=16)]


class CostProbe(WireModel):
    kind: Literal["cost_probe"] = "cost_probe"
    schema_version: Literal[1] = PROBE_SCHEMA_VERSION
    probe_id: UUID
    created_at: UtcDatetime
    client: ClientInfo
    fingerprint: Fingerprint
    engine: Engine
    target: ModelInfo
    threads: Annotated[int, Field(ge=1, le=1024)] | None = None
    context_tokens: Annotated[int, Field(ge=1, le=1_000_000)]
    points: Annotated[list[CostPoint], Field(min_length=1, max_length=64)]
    decode_samples: Annotated[list[Seconds], Field(min_length=1, max_length=16)] = Field(
        description="seconds per generated token of plain decoding, per sample")

    def curve(self) -> CostCurve:
        """The medians as a cost curve, made non-decreasing in k (``predict.non_decreasing``:
        a pass over more tokens never costs less; a dip is load); T_t(1) is the plain
        decoding step (what the baseline's speed is made of)."""
        measured = sorted((p.tokens, median(p.samples)) for p in self.points if p.tokens > 1)
        smooth = non_decreasing([s for _, s in measured])
        seconds = {k: s for (k, _), s in zip(measured, smooth, strict=True)}
        seconds[1] = median(self.decode_samples)
        return CostCurve(seconds)


def probe_bytes(probe: CostProbe) -> bytes:
    """The payload bytes a client signs (compact JSON, UTF-8)."""
    return probe.model_dump_json().encode("utf-8")


def parse_probe(payload: bytes) -> CostProbe:
    """Strict JSON first (PayloadParseError), then the wire model (PayloadSchemaError)."""
    loads_strict(payload)
    try:
        return CostProbe.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "$"
        raise PayloadSchemaError(f"probe does not match the schema: {where}: {first['msg']}",
                                 details=[{"path": where, "message": first["msg"]}]) from None
