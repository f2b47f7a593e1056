"""Wire format v2 (and v1): the submission a client signs and a server stores.

One family of models reads both versions. v2 is a superset of v1: every v2 field has a
default ("not known", an empty list), and a ``schema_version: 1`` submission that uses any
of them, or a v2-only value (the new verdicts, engine "llama-server", counters from the
engine's API), is refused (``v1_violations``). A v1 submission serializes to exactly the
bytes it had before v2 existed (``payload.submission_bytes`` leaves the v2 fields out), and
its published JSON Schema (``schema/jsonschema/submission.v1.schema.json``) is frozen.

What v2 adds (docs/run.md explains the verdicts):
- verdicts ``baseline_speculated``, ``synthetic``, ``cannot_compare``, ``unstable`` (the
  baseline's blocks disagree: ``specschema.stability``) and
  ``incompatible`` (the engine could not run the config as asked:
  ``SpeculationEvidence.refusal``): none of them is a measured speedup;
- per-trial block numbers (``Trial.block``): the unit the confidence interval resamples;
- per-trial times and load (``Trial.started_s``, ``load_1m``, ``client_cpu_s``): where each
  trial sits in time and how busy the machine was, for the baseline's interpolation and
  its stability rule (``specschema.stability``);
- per-trial counters (``Trial.counters``) with their source;
- what the engine actually ran with (``SpeculationEvidence.launches``), as the engine
  logged or was given it, never what was requested;
- the engine as a dimension: ``Engine.name`` (a ``specschema.engines`` entry), ``runtime``
  ("ggml" | "mlx"), ``version`` and ``build``; a model's ``format``; whether the server
  log was read (``Submission.engine_log``).

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

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from specschema.engines import ENGINES

SCHEMA_VERSION = 2
SCHEMA_VERSIONS = (1, 2)

ShortStr = Annotated[str, StringConstraints(min_length=1, max_length=200)]
NameStr = Annotated[str, StringConstraints(min_length=1, max_length=120)]
Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
VersionStr = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z.+\-]{1,40}$")]
NonNegInt = Annotated[int, Field(ge=0, le=2**53 - 1)]
Nanoseconds = Annotated[int, Field(ge=0, le=10**15)]  # ~11.5 days: no single request runs longer
Seconds = Annotated[float, Field(ge=0, le=10**6)]
OptionValue = int | float | bool | str

# server_launch (v2): speculation is set by how the engine process is started (llama-server
# --spec-type ...), one start per config; the client starts the engine itself.
Mechanism = Literal["none", "draft_model_field", "draft_num_predict", "server_launch"]
Observed = Literal[
    "confirmed", "not_applied", "not_observed", "unknown",
    "baseline_speculated", "synthetic", "cannot_compare", "unstable", "incompatible",
]
Role = Literal["baseline", "draft"]
# Where acceptance counters came from: the Ollama server log (llama-server's or the MLX
# runner's line), or (v2) llama-server's own API (``timings.draft_n`` / ``draft_n_accepted``).
CounterSource = Literal["mlx_log", "llama_server_log", "engine_api"]

def _known_engine(value: str) -> str:
    if value not in ENGINES:
        raise ValueError(f"unknown engine {value!r} (known: {', '.join(ENGINES)})")
    return value


# An engine's wire name: one of the descriptors in ``specschema.engines``.
EngineName = Annotated[str, AfterValidator(_known_engine),
                       WithJsonSchema({"type": "string", "enum": list(ENGINES)})]
# ggml: GGUF models on llama-server (Ollama >= 0.30 runs them there); mlx: Ollama's MLX
# runner (safetensors models, the default on Apple Silicon from 0.40).
Runtime = Literal["ggml", "mlx"]
LogStatus = Literal["read", "not_given", "unreadable"]

OBSERVED_V1: tuple[str, ...] = ("confirmed", "not_applied", "not_observed", "unknown")
MECHANISMS_V1: tuple[str, ...] = ("none", "draft_model_field", "draft_num_predict")
# A command-line flag or environment variable name, as it appears in a launch line.
FlagName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,48}$")]
FlagValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,48}$")]
# One line of words, never a path (the client writes it from what the engine said).
RefusalStr = Annotated[str, StringConstraints(min_length=1, max_length=300)]


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
    name: EngineName = "ollama"
    version: VersionStr
    runtime: Runtime | None = Field(
        None, description="v2: 'ggml' (llama-server) or 'mlx'; null when not detected"
    )
    build: ShortStr | None = Field(
        None, description="v2: the engine's build string (llama-server --version or /props)"
    )
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
    format: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_\-]{1,32}$")] | None = Field(
        None, description="v2: /api/tags details.format ('gguf'; 'safetensors' runs on MLX)"
    )


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


class TrialCounters(WireModel):
    """v2: what the engine reported for one trial's request."""

    drafted: NonNegInt
    accepted: NonNegInt
    mean_accepted_len: Annotated[float, Field(ge=0.0, le=1000.0)] | None = Field(
        None, description="llama-server's 'mean len' (tokens accepted per draft round)"
    )
    source: CounterSource
    rounds: NonNegInt | None = Field(
        None, description="v2: draft rounds (verification steps) of this request; null when "
        "the engine did not say (llama-server's /metrics spec_decode_num_drafts_total)"
    )
    accepted_per_position: Annotated[list[NonNegInt], Field(max_length=64)] | None = Field(
        None, description="v2: per draft position i (from 0), the rounds whose first i + 1 "
        "drafted tokens were all accepted; null when the engine did not say"
    )
    drafted_past_end: NonNegInt | None = Field(
        None, description="v2: of the drafted tokens, those the answer's end (the token "
        "limit or the end of the stream) cut before they could be accepted; none of them is "
        "in accepted, so the rate over the drafts that could finish is accepted / (drafted - "
        "drafted_past_end); null when the engine did not say"
    )


class Launch(WireModel):
    """v2: one engine start, as the engine logged it (Ollama's ``starting llama-server``
    line) or as the client started it (``engine_command``). Never what was requested."""

    source: Literal["llama_server_log", "engine_command"]
    spec_type: FlagValue | None = Field(
        None, description="--spec-type's value; null when the flag was absent (no speculation)"
    )
    draft_n_max: Annotated[int, Field(ge=0, le=4096)] | None = None
    draft_model: bool = Field(False, description="a separate draft model was loaded")
    draft_model_digest: Sha256Hex | None = Field(
        None, description="the draft model's sha256 (never its path)"
    )
    synthetic_flags: Annotated[list[FlagName], Field(max_length=8)] = Field(
        [], description="synthetic-acceptance flags seen (--spec-synth-len, 'warning', ...)"
    )
    flags: Annotated[dict[FlagName, FlagValue], Field(max_length=16)] = Field(
        {}, description="v2: the settings the protocol pins, as this start was given them "
        "(flag name without its dashes -> value, e.g. spec-draft-p-min: 0.0)"
    )
    threads: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None, description="--threads (and --threads-batch) the engine was started with; null "
        "when not known"
    )


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
    cold: bool = Field(description="the model was (re)loaded for this request")
    counters: TrialCounters | None = Field(
        None, description="v2: this trial's acceptance counters; null when none were seen"
    )
    block: Annotated[int, Field(ge=0, le=1000)] | None = Field(
        None, description="v2: the block of the run this trial belongs to (blocks are runs of "
        "one config's trials, each after its own warm-up, numbered in run order); null when "
        "the client did not record blocks"
    )
    diverged_at: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        None, description="v2: the index of the first generated token that differs from the "
        "baseline's most common token sequence (compared over the tokens both have); null "
        "when they agree or the engine gave no token ids"
    )
    started_s: Seconds | None = Field(
        None, description="v2: when this trial's request was sent, in seconds since the run's "
        "first trial was sent (the client's monotonic clock; the baseline is interpolated by "
        "time between its blocks); null when the client did not record it"
    )
    load_1m: Annotated[float, Field(ge=0.0, le=100_000.0)] | None = Field(
        None, description="v2: the machine's 1-minute load average (all processes) read as "
        "this trial ended; null when the system does not give one"
    )
    client_cpu_s: Seconds | None = Field(
        None, description="v2: CPU seconds the client's own process used during this trial "
        "(apart from the engine's); null when not recorded"
    )


class SpeculationEvidence(WireModel):
    requested: bool
    mechanism: Mechanism
    engine_can_honor: bool | None
    observed: Observed
    drafted_tokens: NonNegInt | None = None
    accepted_tokens: NonNegInt | None = None
    counters_source: CounterSource | None = None
    models_loaded: Annotated[list[NameStr], Field(max_length=16)] = []
    outputs_match_baseline: bool | None = None
    mean_accepted_len: Annotated[float, Field(ge=0.0, le=1000.0)] | None = Field(
        None, description="v2: mean accepted length over the trials, when the engine gave it"
    )
    launches: Annotated[list[Launch], Field(max_length=16)] = Field(
        [], description="v2: every distinct engine start seen during this config's requests"
    )
    diverged_at: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        None, description="v2: the first token index at which any of this config's trials "
        "differs from the baseline's tokens (the smallest of its trials' diverged_at)"
    )
    refusal: RefusalStr | None = Field(
        None, description="v2: why the engine could not run this draft config as the protocol "
        "asks (the engine's reason in words: vocabularies, a missing file, speculation refused "
        "at start); its trials were not run and its verdict is incompatible"
    )


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
    schema_version: Literal[1, 2]
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
    engine_log: LogStatus | None = Field(
        None, description="v2: whether the engine's log was read ('not_given': no counters "
        "could be looked for); null when counters come from the engine's API"
    )

    @model_validator(mode="after")
    def _v1_has_only_v1_fields(self) -> Submission:
        if self.schema_version == 1:
            problems = v1_violations(self)
            if problems:
                path, message = problems[0]
                raise ValueError(f"{path}: {message} (schema_version 1 has no such field "
                                 "or value; send schema_version 2)")
        return self


def v1_violations(submission: Submission) -> list[tuple[str, str]]:
    """Where a submission uses what schema v1 does not have (path, what)."""
    found: list[tuple[str, str]] = []
    engine = submission.engine
    if engine.name != "ollama":
        found.append(("engine.name", f"engine {engine.name!r}"))
    for field in ("runtime", "build"):
        if getattr(engine, field) is not None:
            found.append((f"engine.{field}", "a v2 field"))
    if submission.engine_log is not None:
        found.append(("engine_log", "a v2 field"))
    for mi, model in enumerate(submission.models):
        if model.format is not None:
            found.append((f"models.{mi}.format", "a v2 field"))
    for ci, config in enumerate(submission.configs):
        s = config.speculation
        path = f"configs.{ci}.speculation"
        if s.observed not in OBSERVED_V1:
            found.append((f"{path}.observed", f"verdict {s.observed!r}"))
        if s.mechanism not in MECHANISMS_V1:
            found.append((f"{path}.mechanism", f"mechanism {s.mechanism!r}"))
        if s.counters_source == "engine_api":
            found.append((f"{path}.counters_source", "counters_source 'engine_api'"))
        if s.mean_accepted_len is not None:
            found.append((f"{path}.mean_accepted_len", "a v2 field"))
        if s.launches:
            found.append((f"{path}.launches", "a v2 field"))
        if s.refusal is not None:
            found.append((f"{path}.refusal", "a v2 field"))
        if s.diverged_at is not None:
            found.append((f"{path}.diverged_at", "a v2 field"))
        for ti, trial in enumerate(config.trials):
            if trial.counters is not None:
                found.append((f"configs.{ci}.trials.{ti}.counters", "a v2 field"))
            if trial.diverged_at is not None:
                found.append((f"configs.{ci}.trials.{ti}.diverged_at", "a v2 field"))
            for field in ("block", "started_s", "load_1m", "client_cpu_s"):
                if getattr(trial, field) is not None:
                    found.append((f"configs.{ci}.trials.{ti}.{field}", "a v2 field"))
    return found
