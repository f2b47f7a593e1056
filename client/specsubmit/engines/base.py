"""What the runner needs from an engine, whichever it is (Ollama, llama-server).

The runner, the statistics and the verdict rules only see this module's types: an
``Engine`` answers a pre-flight, is told when a config's trials begin and end (llama-server
starts and stops a server there; Ollama does nothing), and turns one request of a config
into a ``Generation`` with its timings and, when the engine's own API reports them, its
acceptance counters. What only one engine knows (the Ollama server log, a llama-server
command line) stays behind the adapter and comes back in an ``EngineReport``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from specschema import Fingerprint, ModelInfo, Trial
from specschema.protocol import ProtocolConfig

if TYPE_CHECKING:
    from specschema import Launch, TrialCounters
    from specsubmit.engines.ollama.serverlog import DraftCounters

EngineName = Literal["ollama", "llama-server"]


@dataclass(frozen=True)
class PullProgress:
    """One progress line of a model download (Ollama's /api/pull)."""

    status: str
    completed: int | None
    total: int | None


class RunListener:
    """Receives progress; every method is a no-op here. The CLI overrides them."""

    def warning(self, message: str) -> None: ...

    def phase(self, message: str) -> None: ...

    def pull_progress(self, model: str, progress: PullProgress) -> None: ...

    def launched(self, config: str, command: list[str]) -> None:
        """An engine process started for `config` (paths in `command` are digests)."""

    def trial_started(self, position: int, total: int, config: str, index: int) -> None: ...

    def trial_finished(self, position: int, total: int, config: str, trial: Trial) -> None: ...


@dataclass(frozen=True)
class Generation:
    """One finished request: client timings plus the engine's own metrics.

    Durations are integer nanoseconds as the engine reported them (llama-server's float
    milliseconds are converted once, here in the adapter). ``draft_n`` / ``draft_accepted``
    are the engine API's per-request counters: None when the API has none (Ollama) or the
    request did not speculate (llama-server omits ``timings.draft_n`` then).
    """

    wall_s: float
    ttft_s: float | None
    text: str
    total_duration_ns: int
    load_duration_ns: int
    prompt_eval_count: int | None
    prompt_eval_duration_ns: int | None
    eval_count: int
    eval_duration_ns: int
    done_reason: str | None
    draft_n: int | None = None
    draft_accepted: int | None = None


@dataclass(frozen=True)
class Preflight:
    """What was established before the first request; raised errors mean nothing ran."""

    engine_version: str
    models: list[ModelInfo]
    can_honor: dict[str, bool | None]
    memory_needed: int | None
    memory_available: int | None
    engine_name: EngineName = "ollama"
    build: str | None = None
    # A model given as a file path is published under this name instead (a path is
    # private: it names folders, often the user's): {path as given: public name}.
    public_names: dict[str, str] = field(default_factory=dict)
    # "ggml" | "mlx" when the pre-flight could tell (Ollama: the target's /api/tags
    # details.format, "safetensors" running on MLX); the log may say more (EngineReport).
    runtime: str | None = None
    # Draft configs the engine cannot run as the protocol asks, found before any start
    # (llama.cpp's vocabulary rule, a missing draft file): {config name: the reason in
    # words, no path}. The runner skips them; their verdict is incompatible.
    refused: dict[str, str] = field(default_factory=dict)


@dataclass
class EngineReport:
    """After the trials: what the engine can tell about them beyond the generations.

    ``counters``: totals per config from a log (Ollama), empty when none were read;
    ``log_read``: whether a log was read (None: none given); ``launches``: every engine
    start per config as the client ran it (llama-server); ``models_loaded``: per config,
    what the engine said it had loaded (Ollama's /api/ps).
    """

    counters: Mapping[str, DraftCounters] = field(default_factory=dict)
    log_read: bool | None = None
    launches: Mapping[str, list[Launch]] = field(default_factory=dict)
    models_loaded: Mapping[str, list[str]] = field(default_factory=dict)
    ps_after: Mapping[str, list[dict[str, object]]] = field(default_factory=dict)
    build: str | None = None  # the build as the running engine reported it (/props)
    # Ollama, from its log (wire v2): per config, each trial's counters in trial order
    # (None: the trial logged none) and whether the engine (re)started during that trial;
    # the runtime the log showed ("ggml": a llama-server start or line; "mlx": MLX stats);
    # the log's status ("read" | "not_given" | "unreadable").
    trial_counters: Mapping[str, list[TrialCounters | None]] = field(default_factory=dict)
    reloaded: Mapping[str, list[bool]] = field(default_factory=dict)
    runtime: str | None = None
    log_status: str | None = None
    # Ollama: trials during which the log shows another client's generation requests
    # ("spec_4 trial 2"): their log counters are dropped, and the result's note names them.
    foreign: list[str] = field(default_factory=list)


class Engine(Protocol):
    """One local inference engine behind the runner (see the module docstring)."""

    name: EngineName
    # True when every config needs its own engine start (llama-server: the speculative
    # settings are launch flags); the runner then warms up each config right after it.
    per_config_start: bool

    def preflight(self, fingerprint: Fingerprint, listener: RunListener,
                  stop: threading.Event | None = None) -> Preflight: ...

    def begin_config(self, config: ProtocolConfig, listener: RunListener) -> None:
        """Raises ``SpeculationRefused`` when the engine cannot run this config as asked
        (the runner then records it as incompatible and goes on with the others)."""

    def generate(self, config: ProtocolConfig, *, counted: bool) -> Generation: ...

    def end_config(self, config: ProtocolConfig, *, last: bool) -> None: ...

    def report(self, pre: Preflight, listener: RunListener) -> EngineReport: ...

    def close(self) -> None: ...


__all__ = ["Engine", "EngineName", "EngineReport", "Generation", "Preflight", "PullProgress",
           "RunListener"]
