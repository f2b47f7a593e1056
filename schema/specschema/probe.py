"""A cost probe: what one machine's engine takes to check several tokens at once (wire
model, pure).

``specsubmit probe`` measures, with the target alone, the seconds the engine spends on k
tokens at once after a fixed context, for k from 2 to 17 (version 2: the sizes the advisor
predicts at), and one step of plain decoding (k = 1). With a pair's acceptance per draft
position (which travels between machines) it predicts a speedup on this machine
(``specschema.predict``). Two versions, told apart by
``schema_version`` and named in ``measured``:

- 2, ``"verification"``: each point is one speculative round as the engine runs it,
  checking k tokens (k - 1 drafted, every draft accepted): one forward pass with an output
  for every position, the sampler run at each, and the round's own bookkeeping. That is the
  denominator of ``predict``'s S(g) for a drafter that costs nothing, overhead included.
- 1, ``"prefill"`` (the first probes): the prefill of k new tokens, whose output is
  computed for the last of them only; on a model whose output layer dominates (a small
  model with a large vocabulary) it read 2-4x below what a round costs. Still parsed and
  kept; a reader that mixes probes should prefer version 2.
"""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field, ValidationError, model_validator

from specschema.errors import PayloadSchemaError
from specschema.models import (
    ClientInfo,
    Engine,
    Fingerprint,
    ModelInfo,
    UtcDatetime,
    WireModel,
)
from specschema.predict import CostCurve
from specschema.stats import median
from specschema.strictjson import loads_strict

PROBE_SCHEMA_VERSION: Literal[2] = 2
# What each version's points are (the module docstring); one entry per version.
Measured = Literal["prefill", "verification"]
PREFILL: Measured = "prefill"
VERIFICATION: Measured = "verification"
MEASURED_BY_VERSION: dict[int, Measured] = {1: PREFILL, 2: VERIFICATION}
# A probe is signed into a DSSE envelope of its own type, so that neither kind's signature
# can be replayed as the other's.
PROBE_PAYLOAD_TYPE = "application/vnd.specbench.cost-probe.v1+json"
Seconds = Annotated[float, Field(gt=0, le=3600)]


class CostPoint(WireModel):
    tokens: Annotated[int, Field(ge=1, le=64)]
    samples: Annotated[list[Seconds], Field(min_length=1, max_length=16)]


class CostProbe(WireModel):
    kind: Literal["cost_probe"] = "cost_probe"
    # 1 when absent: the probes sent before version 2 carry 1.
    schema_version: Literal[1, 2] = 1
    measured: Literal["prefill", "verification"] = Field(
        default="prefill", description="what a point's samples are: one speculative round "
        "checking k tokens (verification, version 2) or the prefill of k new tokens "
        "(prefill, version 1)")
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

    @model_validator(mode="after")
    def _version_names_what_was_measured(self) -> CostProbe:
        if MEASURED_BY_VERSION[self.schema_version] != self.measured:
            raise ValueError(f"schema_version {self.schema_version} measures "
                             f"{MEASURED_BY_VERSION[self.schema_version]}, not {self.measured}")
        return self

    def curve(self) -> CostCurve:
        """Each size's median as a cost curve, not smoothed across sizes (a pass over more
        tokens can cost less: ``predict.CostCurve``); T_t(1) is the plain decoding step
        (what the baseline's speed is made of)."""
        seconds = {p.tokens: median(p.samples) for p in self.points if p.tokens > 1}
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
