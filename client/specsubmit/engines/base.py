"""What the runner needs from an engine, whichever it is: the interface between ``run/``
and the adapters (``engines/registry.py`` lists them).

The runner, the statistics and the verdict rules only see this module's types: an
``Engine`` answers a pre-flight, is told when a config's trials begin and end (llama-server
starts and stops a server there; Ollama does nothing), turns one request of a config into
a ``Generation`` with its timings and, when the engine's own API reports them, its
acceptance counters, and says how it is recorded on the wire (``wire_engine``). What only
one engine knows (the Ollama server log, a llama-server command line) stays behind the
adapter and comes back in an ``EngineReport``. Its words (label, counter sources, what its
versions can honour) are its descriptor in ``specschema.engines``.

``run/`` imports this module; no adapter imports ``run/``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

from specschema import Engine as WireEngine
from specschema import Fingerprint, ModelInfo, Trial
from specschema.engines import descriptor
from specschema.protocol import Protocol as TrialProtocol
from specschema.protocol import ProtocolConfig

if TYPE_CHECKING:
    from specschema import Launch, TrialCounters
    from specschema.probe import CostProbe

# The wire's engine.name: a key of specschema.engines.ENGINES.
EngineName = str
# An adapter's own options class (``Adapter.options``).
OptionsT = TypeVar("OptionsT")
# mlx_log / llama_server_log: lines of a log (Ollama's); engine_api: summed from the
# engine's own per-request counters (llama-server's timings, LM Studio's stats).
CounterSource = Literal["mlx_log", "llama_server_log", "engine_api"]

# A warm request's load_duration is queueing + scheduling: tens of milliseconds. Reading
# weights from disk takes far longer, so a load above this threshold means a (re)load.
COLD_LOAD_NS = 250_000_000


@dataclass(frozen=True)
class RunSettings:
    """What a run is told, whatever the engine (an adapter's own settings are its own)."""

    protocol: TrialProtocol  # as this run makes it (``Protocol.for_run``)
    target: str | None = None
    # The protocol's other run parameters as given (``--draft``, ``--configs``): recorded
    # in the result's protocol reference, a model path by its public name.
    parameters: Mapping[str, str] = field(default_factory=dict)
    pull: bool = False
    assume_yes: bool = False
    cold_load_ns: int = COLD_LOAD_NS


@dataclass(frozen=True)
class DraftCounters:
    """A config's acceptance counters: totals of its trials (or of a log's lines)."""

    drafted: int
    accepted: int
    source: CounterSource
    lines: int
    rounds: int | None = None  # draft rounds, where every counted request said


def counter_totals(per_trial: Sequence[TrialCounters | None]) -> DraftCounters | None:
    """A config's totals from its trials' own counters (None: no trial has any); the
    source is that of the trial that drafted most."""
    present = [c for c in per_trial if c is not None]
    if not present:
        return None
    source = max(present, key=lambda c: c.drafted).source
    return DraftCounters(drafted=sum(c.drafted for c in present),
                         accepted=sum(c.accepted for c in present), source=source,
                         lines=len(present))


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

    def stopped_early(self, config: str, drafted: int) -> None:
        """The protocol's early-stop rule stopped `config` after the first round: none of
        its `drafted` tokens were accepted (``specschema.earlystop``)."""

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
    # The generated token ids, when the engine returns them (llama-server's return_tokens):
    # outputs are compared token by token, with the first position that differs.
    token_ids: tuple[int, ...] | None = None
    # Draft rounds of this request and, per draft position, the rounds that accepted up to
    # it (llama-server's /metrics); None where the engine does not say.
    draft_rounds: int | None = None
    accepted_per_position: tuple[int, ...] | None = None
    # Of draft_n, the tokens the answer's end cut before they could be accepted; None
    # where the engine's behaviour does not tell them apart.
    draft_past_end: int | None = None


@dataclass(frozen=True)
class Preflight:
    """What was established before the first request; raised errors mean nothing ran."""

    engine_version: str
    models: list[ModelInfo]
    can_honor: dict[str, bool | None]
    memory_needed: int | None
    memory_available: int | None
    engine_name: EngineName  # the descriptor's name (specschema.engines): each adapter says
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
    # The version as the engine's responses reported it, when the pre-flight could not
    # (LM Studio: the runtime's version comes with each response).
    version: str | None = None


class Engine(Protocol):
    """One local inference engine behind the runner (see the module docstring)."""

    name: EngineName
    # True when every config needs its own engine start (llama-server: the speculative
    # settings are launch flags); the runner then warms up each config right after it.
    per_config_start: bool
    # Request options that, when they change between two requests, make the engine
    # reload (Ollama's Runner options): such a trial is cold whatever its load time.
    load_time_options: frozenset[str]

    def preflight(self, fingerprint: Fingerprint, listener: RunListener,
                  stop: threading.Event | None = None) -> Preflight: ...

    def begin_config(self, config: ProtocolConfig, listener: RunListener) -> None:
        """Raises ``SpeculationRefused`` when the engine cannot run this config as asked
        (the runner then records it as incompatible and goes on with the others)."""

    def generate(self, config: ProtocolConfig, *, counted: bool,
                 prompt: str | None = None) -> Generation:
        """One request of ``config``; ``prompt``: the protocol's prompt for this trial
        (``Protocol.prompt_for``), None for its one prompt."""
        ...

    def end_config(self, config: ProtocolConfig, *, last: bool) -> None: ...

    def report(self, pre: Preflight, listener: RunListener) -> EngineReport: ...

    def wire_engine(self, pre: Preflight, report: EngineReport) -> tuple[WireEngine, str | None]:
        """How this run's engine is recorded: the wire's ``engine`` and ``engine_log``."""
        ...

    def close(self) -> None: ...


# Seconds an engine may stay silent before a request fails (--timeout).
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Flag:
    """One command-line option an engine owns: the flag, and the field of the adapter's own
    options it sets. ``ambient``: often set in the environment (OLLAMA_HOST,
    SPECSUBMIT_OLLAMA_LOG), so an engine that does not own it ignores it rather than
    refusing to run."""

    name: str
    field: str
    ambient: bool = False


@dataclass(frozen=True)
class Adapter(Generic[OptionsT]):
    """One engine as the client runs it: its name (its descriptor's, ``specschema.engines``),
    one line for ``--engine``'s help, the options it owns (its own options class, built from
    the command line's flags by ``registry.engine_options``), and how to open it (start it or
    reach it): a context manager whose exit leaves no process of ours running."""

    name: EngineName
    summary: str
    flags: tuple[Flag, ...]
    # The adapter's options class: its fields are its flags' fields, and ``timeout_s``.
    options: Callable[..., OptionsT]
    open: Callable[[RunSettings, OptionsT], AbstractContextManager[Engine]]
    # The protocol a run on this engine uses when --protocol is not given.
    default_protocol: str
    # Measures the engine's cost of checking several tokens at once (``specsubmit probe``);
    # None: this engine cannot be probed yet.
    probe: Callable[[RunSettings, OptionsT, Fingerprint, RunListener,
                     threading.Event | None], CostProbe] | None = None
    # Checks the options before anything runs (a malformed URL fails before the trials).
    check: Callable[[OptionsT], None] = lambda options: None
    # Where the engine is (its URL) for the one-run-per-engine lock; None: an engine the
    # client starts itself, whose runs share this machine's cores (one lock per machine).
    address: Callable[[OptionsT], str | None] = lambda options: None

    def lock(self, options: OptionsT) -> tuple[str, str]:
        """(the lock's key, the engine in words) for ``local.enginelock``."""
        label = descriptor(self.name).label
        where = self.address(options)
        if where is None:
            return self.name, f"{label} on this machine"
        return f"{self.name} {where}", f"{label} at {where}"


def wire_version(text: str) -> str:
    """An engine's version as the wire takes it (``VersionStr``): its characters, 40 at most."""
    return re.sub(r"[^0-9A-Za-z.+\-]", "", text)[:40] or "unknown"


def unrequested(configs: Sequence[ProtocolConfig], can_honor: Mapping[str, bool | None],
                counters: Mapping[str, DraftCounters]) -> list[str]:
    """Configs whose trials speculated although their mechanism cannot have caused it."""
    return [
        c.name for c in configs
        if (seen := counters.get(c.name)) and seen.drafted
        and (c.role == "baseline" or can_honor.get(c.name) is False)
    ]


__all__ = ["COLD_LOAD_NS", "DEFAULT_TIMEOUT_S", "Adapter", "Flag", "OptionsT",
           "CounterSource", "DraftCounters", "Engine", "EngineName",
           "EngineReport", "Generation", "Preflight", "PullProgress", "RunListener",
           "RunSettings", "unrequested", "wire_version"]
