"""Wire format v1: the submission a client signs and a server stores.

Conventions:
- ``None`` (JSON null) means "not detected / not known". It is never the same as 0 or "":
  strings are non-empty and counts that cannot be zero are bounded below by 1.
- Every duration reported by the engine is an integer number of nanoseconds, exactly as
  Ollama reports it. Client-measured times (wall, time to first token) are float seconds
  on the client's monotonic clock.
- Summaries are *not* wire fields: both sides compute them with ``specschema.summary``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

SCHEMA_VERSION = 1

ShortStr = Annotated[str, StringConstraints(min_length=1, max_length=200)]
NameStr = Annotated[str, StringConstraints(min_length=1, max_length=120)]
Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
VersionStr = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z.+\-]{1,40}$")]
NonNegInt = Annotated[int, Field(ge=0, le=2**53 - 1)]
Nanoseconds = Annotated[int, Field(ge=0, le=10**15)]  # ~11.5 days: no single request runs longer
Seconds = Annotated[float, Field(ge=0, le=10**6)]
OptionValue = int | float | bool | str

Mechanism = Literal["none", "draft_model_field", "draft_num_predict"]
Observed = Literal["confirmed", "not_applied", "not_observed", "unknown"]
Role = Literal["baseline", "draft"]


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None or value.utcoffset().total_seconds() != 0:  # type: ignore[union-attr]
        raise ValueError("timestamp must be timezone-aware UTC")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- hardware -------------------------------------------------------------------------


class Cpu(WireModel):
    brand_raw: ShortStr | None = None
    name: ShortStr | None = Field(None, description="canonical CPU/SoC name, e.g. 'Apple M2'")
    arch: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = None
    cores_total: Annotated[int, Field(ge=1, le=4096)] | None = None
    cores_performance: Annotated[int, Field(ge=0, le=4096)] | None = None
    cores_efficiency: Annotated[int, Field(ge=0, le=4096)] | None = None
    threads: Annotated[int, Field(ge=1, le=8192)] | None = None


class Gpu(WireModel):
    name_raw: ShortStr | None = None
    name: ShortStr | None = Field(None, description="canonical, e.g. 'NVIDIA GeForce RTX 4090'")
    vendor: Literal["apple", "nvidia", "amd", "intel", "other"] | None = None
    memory_bytes: Annotated[int, Field(ge=1, le=2**50)] | None = None
    driver: ShortStr | None = None
    compute_cores: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    metal_family: ShortStr | None = None


class OsInfo(WireModel):
    name: Literal["macos", "linux", "windows", "other"] | None = None
    version: ShortStr | None = None
    arch: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = None


class Fingerprint(WireModel):
    chip: ShortStr | None = Field(
        None, description="the one aggregation key: SoC on Apple, main GPU elsewhere, else CPU"
    )
    machine_model: ShortStr | None = None
    cpu: Cpu = Cpu()
    memory_bytes: Annotated[int, Field(ge=1, le=2**50)] | None = None
    memory_gb: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None, description="marketed size in GB (24, not 23.99)"
    )
    unified_memory: bool | None = None
    gpus: Annotated[list[Gpu], Field(max_length=16)] = []
    os: OsInfo = OsInfo()
    virtualization: ShortStr | None = Field(
        None, description="'none', a hypervisor name, or 'rosetta'; null when not detected"
    )
    power_source: Literal["ac", "battery"] | None = None


# --- engine and models ------------------------------------------------------------------


class Engine(WireModel):
    name: Literal["ollama"] = "ollama"
    version: VersionStr
    backend: ShortStr | None = Field(
        None, description="'100% GPU', '100% CPU' or '25%/75% CPU/GPU'"
    )
    gpu_fraction: Annotated[float, Field(ge=0.0, le=1.0)] | None = None


class ModelInfo(WireModel):
    name: NameStr
    digest: Sha256Hex | None = None
    quantization: ShortStr | None = None
    parameter_size: ShortStr | None = None
    family: ShortStr | None = None
    size_bytes: Annotated[int, Field(ge=1, le=2**50)] | None = None


class ProtocolRef(WireModel):
    id: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9\-]{0,63}$")]
    version: Annotated[int, Field(ge=1, le=10_000)]
    sha256: Sha256Hex
    parameters: Annotated[dict[NameStr, NameStr], Field(max_length=8)] = {}


# --- measurements ------------------------------------------------------------------------


class Warmup(WireModel):
    wall_s: Seconds
    load_duration_ns: Nanoseconds | None = None
    total_duration_ns: Nanoseconds | None = None


class Trial(WireModel):
    index: Annotated[int, Field(ge=0, le=1000)] = Field(
        description="trial number within its config"
    )
    position: Annotated[int, Field(ge=0, le=100_000)] = Field(description="place in the run order")
    wall_s: Seconds
    ttft_s: Seconds | None = None
    total_duration_ns: Nanoseconds
    load_duration_ns: Nanoseconds
    prompt_eval_count: NonNegInt | None = None
    prompt_eval_duration_ns: Nanoseconds | None = None
    eval_count: NonNegInt
    eval_duration_ns: Nanoseconds
    done_reason: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = None
    output_chars: NonNegInt
    output_sha256: Sha256Hex
    cold: bool


class SpeculationEvidence(WireModel):
    requested: bool
    mechanism: Mechanism
    engine_can_honor: bool | None
    observed: Observed
    drafted_tokens: NonNegInt | None = None
    accepted_tokens: NonNegInt | None = None
    counters_source: Literal["mlx_log", "llama_server_log"] | None = None
    models_loaded: Annotated[list[NameStr], Field(max_length=16)] = []
    outputs_match_baseline: bool | None = None


class ConfigResult(WireModel):
    name: NameStr
    role: Role
    model: NameStr
    draft_model: NameStr | None = None
    request_options: Annotated[dict[NameStr, OptionValue], Field(max_length=64)]
    request_fields: Annotated[dict[NameStr, OptionValue], Field(max_length=16)] = Field(
        {}, description="extra top-level request fields sent (e.g. draft_model)"
    )
    warmups: Annotated[list[Warmup], Field(max_length=16)] = []
    trials: Annotated[list[Trial], Field(max_length=200)]
    speculation: SpeculationEvidence


class ClientInfo(WireModel):
    name: NameStr
    version: VersionStr


class Submission(WireModel):
    schema_version: Literal[1]
    submission_id: UUID
    created_at: UtcDatetime
    client: ClientInfo
    fingerprint: Fingerprint
    engine: Engine
    models: Annotated[list[ModelInfo], Field(min_length=1, max_length=16)]
    protocol: ProtocolRef
    configs: Annotated[list[ConfigResult], Field(min_length=1, max_length=16)]
    complete: bool = Field(description="false when the run stopped early (Ctrl-C, engine died)")
    note: Annotated[str, StringConstraints(max_length=500)] | None = None
