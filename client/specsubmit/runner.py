"""The trial protocol against one Ollama: preflight, warm-ups, trials, evidence, result.

Pure orchestration over an ``OllamaClient`` (passed in); nothing here prints. Progress
and warnings go to a ``RunListener``; a ``threading.Event`` asks the run to stop after
the current request (Ctrl-C), which yields an incomplete result rather than nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from specschema import (
    ClientInfo,
    ConfigResult,
    Engine,
    Fingerprint,
    ModelInfo,
    Protocol,
    ProtocolRef,
    Submission,
    Trial,
    Warmup,
    engine_can_honor,
)
from specschema.protocol import ProtocolConfig
from specsubmit import __version__
from specsubmit.errors import ModelMissing, OllamaError, SpecSubmitError, UsageError
from specsubmit.fingerprint import backend_from_ps, collect_fingerprint
from specsubmit.ollama import GenerateRequest, Generation, OllamaClient, PullProgress
from specsubmit.serverlog import DraftCounters, Segment, log_size, read_counters
from specsubmit.speculation import build_evidence, capability_reason, outputs_match_baseline

# A warm request's load_duration is queueing + scheduling: tens of milliseconds. Reading
# weights from disk takes far longer, so a load above this threshold means a (re)load.
COLD_LOAD_NS = 250_000_000
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class RunListener:
    """Receives progress; every method is a no-op here. The CLI overrides them."""

    def warning(self, message: str) -> None: ...

    def phase(self, message: str) -> None: ...

    def pull_progress(self, model: str, progress: PullProgress) -> None: ...

    def trial_started(self, position: int, total: int, config: str, index: int) -> None: ...

    def trial_finished(self, position: int, total: int, config: str, trial: Trial) -> None: ...


@dataclass(frozen=True)
class RunSettings:
    protocol: Protocol
    target: str | None = None
    pull: bool = False
    assume_yes: bool = False
    log_path: Path | None = None
    cold_load_ns: int = COLD_LOAD_NS


@dataclass(frozen=True)
class Preflight:
    engine_version: str
    models: list[ModelInfo]
    can_honor: dict[str, bool | None]
    memory_needed: int | None
    memory_available: int | None


@dataclass
class RunOutcome:
    submission: Submission
    interrupted: bool = False
    error: OllamaError | None = None
    trials_done: int = 0
    trials_planned: int = 0
    log_read: bool | None = None


@dataclass
class _ConfigState:
    warmups: list[Warmup] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    models_loaded: list[str] = field(default_factory=list)


# --- helpers ------------------------------------------------------------------------------


def normalize_model_name(name: str) -> str:
    """Ollama's `name:tag` with the default tag made explicit."""
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


def resolve_target(protocol: Protocol, target: str | None) -> str | None:
    if target is None and protocol.target is None:
        note = protocol.requirements.target_note
        raise UsageError(
            f"protocol {protocol.id} has no default model: pass --target MODEL"
            + (f" ({note})" if note else "")
        )
    return target


def protocol_ref(protocol: Protocol, target: str | None) -> ProtocolRef:
    parameters = {"target": target} if target and target != protocol.target else {}
    return ProtocolRef(id=protocol.id, version=protocol.version, sha256=protocol.sha256,
                       parameters=parameters)


def default_fingerprint() -> Fingerprint:
    """This machine's fingerprint (``specsubmit.fingerprint``, issue 4)."""
    return collect_fingerprint()


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def available_memory(fingerprint: Fingerprint) -> int | None:
    """RAM (unified on Apple) plus discrete GPU memory: what a model can spread over."""
    ram = fingerprint.memory_bytes or _physical_memory()
    if ram is None:
        return None
    if fingerprint.unified_memory:
        return ram
    return ram + sum(g.memory_bytes or 0 for g in fingerprint.gpus)


def _str_or_none(value: object, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def model_identity(name: str, tag: dict[str, Any], show: dict[str, Any]) -> ModelInfo:
    details: dict[str, Any] = {}
    for source in (tag.get("details"), show.get("details")):
        if isinstance(source, dict):
            details.update({k: v for k, v in source.items() if v})
    digest = str(tag.get("digest") or "").removeprefix("sha256:").lower()
    size = tag.get("size")
    return ModelInfo(
        name=name,
        digest=digest if _DIGEST.match(digest) else None,
        quantization=_str_or_none(details.get("quantization_level")),
        parameter_size=_str_or_none(details.get("parameter_size")),
        family=_str_or_none(details.get("family")),
        size_bytes=size if isinstance(size, int) and not isinstance(size, bool) and size > 0
        else None,
    )


def _engine_version(text: str) -> str:
    cleaned = re.sub(r"[^0-9A-Za-z.+\-]", "", text)[:40]
    return cleaned or "unknown"


# --- preflight ----------------------------------------------------------------------------


def preflight(client: OllamaClient, settings: RunSettings, fingerprint: Fingerprint,
              listener: RunListener, stop: threading.Event | None = None) -> Preflight:
    protocol, target = settings.protocol, settings.target
    version = client.version()
    listener.phase(f"Ollama {version}")
    can_honor: dict[str, bool | None] = {}
    for config in protocol.configs:
        can_honor[config.name] = engine_can_honor(config.mechanism, version)
        if config.role == "draft" and can_honor[config.name] is False:
            listener.warning(
                f"{config.name}: {capability_reason(config.mechanism, version)}, so this "
                "draft cannot be applied; it is measured anyway (an A/A comparison)"
            )
    needed_models: list[str] = []
    optional_models: list[str] = []
    for config in protocol.configs:
        model = protocol.model_for(config, target)
        if model not in needed_models:
            needed_models.append(model)
        if config.draft_model and config.draft_model not in needed_models:
            if can_honor[config.name] is False:
                optional_models.append(config.draft_model)
            else:
                needed_models.append(config.draft_model)
    tags = {normalize_model_name(str(t.get("name") or t.get("model"))): t for t in client.tags()}
    for model in needed_models:
        if normalize_model_name(model) in tags:
            continue
        if not settings.pull:
            raise ModelMissing(
                f"model '{model}' is not installed in Ollama — run `ollama pull {model}` "
                "or rerun with --pull"
            )
        listener.phase(f"pulling {model}")
        client.pull(model, partial(_pull_progress, listener, model, stop=stop))
        tags = {normalize_model_name(str(t.get("name") or t.get("model"))): t
                for t in client.tags()}
        if normalize_model_name(model) not in tags:
            raise ModelMissing(f"model '{model}' is still missing after pulling it")
    models: list[ModelInfo] = []
    for model in needed_models + [m for m in optional_models if m not in needed_models]:
        tag = tags.get(normalize_model_name(model))
        if tag is None:
            listener.warning(f"{model} is not installed; Ollama ignores it in this protocol, "
                             "so the measurement is the same without it")
            continue
        models.append(model_identity(model, tag, client.show(model)))
    sizes = [m.size_bytes for m in models if m.name in needed_models]
    needed = sum(s for s in sizes if s) or None
    if protocol.requirements.memory_bytes:
        needed = max(needed or 0, protocol.requirements.memory_bytes)
    available = available_memory(fingerprint)
    _check_memory(needed, available, settings.assume_yes, listener)
    return Preflight(version, models, can_honor, needed, available)


def _pull_progress(listener: RunListener, model: str, progress: PullProgress, *,
                   stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise KeyboardInterrupt
    listener.pull_progress(model, progress)


def _check_memory(needed: int | None, available: int | None, assume_yes: bool,
                  listener: RunListener) -> None:
    if needed is None:
        return
    if available is None:
        listener.warning("could not read this machine's memory; skipping the memory check")
        return
    if needed <= available:
        return
    message = (f"the models need about {needed / 1e9:.1f} GB but this machine has "
               f"{available / 1e9:.1f} GB: expect swapping, slow trials or a failed load")
    if not assume_yes:
        raise SpecSubmitError(message + " (rerun with --yes to try anyway)")
    listener.warning(message)


# --- trials -------------------------------------------------------------------------------


class _Run:
    def __init__(self, client: OllamaClient, settings: RunSettings, listener: RunListener,
                 stop: threading.Event) -> None:
        self.client, self.settings, self.listener, self.stop = client, settings, listener, stop
        self.protocol = settings.protocol
        self.states = {c.name: _ConfigState() for c in self.protocol.configs}
        self.segments: list[Segment] = []
        self.ps_after: dict[str, list[dict[str, Any]]] = {}

    def request(self, config: ProtocolConfig) -> GenerateRequest:
        return GenerateRequest(
            model=self.protocol.model_for(config, self.settings.target),
            prompt=self.protocol.prompt,
            options=self.protocol.request_options(config),
            keep_alive=self.protocol.keep_alive,
            extra_fields=dict(config.request_fields),
        )

    def send(self, config: ProtocolConfig, counted: bool) -> Generation:
        offset = log_size(self.settings.log_path) if self.settings.log_path else None
        self.segments.append(Segment(config.name, counted, offset, datetime.now(UTC)))
        return self.client.generate(self.request(config))

    def warmups(self) -> bool:
        for config in self.protocol.configs:
            for _ in range(self.protocol.warmups_per_config):
                if self.stop.is_set():
                    return False
                self.listener.phase(f"warming up {config.name}")
                gen = self.send(config, counted=False)
                self.states[config.name].warmups.append(Warmup(
                    wall_s=round(gen.wall_s, 6), load_duration_ns=gen.load_duration_ns,
                    total_duration_ns=gen.total_duration_ns))
        return True

    def trials(self) -> int:
        schedule = self.protocol.schedule()
        last_position = {name: pos for pos, (name, _) in enumerate(schedule)}
        done = 0
        for position, (name, index) in enumerate(schedule):
            if self.stop.is_set():
                break
            config = self.protocol.config(name)
            self.listener.trial_started(position, len(schedule), name, index)
            gen = self.send(config, counted=True)
            trial = Trial(
                index=index, position=position, wall_s=round(gen.wall_s, 6),
                ttft_s=round(gen.ttft_s, 6) if gen.ttft_s is not None else None,
                total_duration_ns=gen.total_duration_ns, load_duration_ns=gen.load_duration_ns,
                prompt_eval_count=gen.prompt_eval_count,
                prompt_eval_duration_ns=gen.prompt_eval_duration_ns,
                eval_count=gen.eval_count, eval_duration_ns=gen.eval_duration_ns,
                done_reason=gen.done_reason[:32] if gen.done_reason else None,
                output_chars=len(gen.text),
                output_sha256=hashlib.sha256(gen.text.encode("utf-8")).hexdigest(),
                cold=gen.load_duration_ns >= self.settings.cold_load_ns,
            )
            self.states[name].trials.append(trial)
            done += 1
            self.listener.trial_finished(position, len(schedule), name, trial)
            if last_position[name] == position:
                self.record_ps(name)
        return done

    def record_ps(self, name: str) -> None:
        ps = self.client.ps()
        self.ps_after[name] = ps
        self.states[name].models_loaded = [
            str(m.get("name") or m.get("model")) for m in ps if m.get("name") or m.get("model")
        ][:16]


def run_protocol(
    client: OllamaClient,
    settings: RunSettings,
    *,
    fingerprint: Fingerprint,
    listener: RunListener | None = None,
    stop: threading.Event | None = None,
    pre: Preflight | None = None,
) -> RunOutcome:
    """Preflight (unless given), warm-ups and trials; always returns a Submission once the
    trials started, complete or not. Preflight errors propagate (nothing was measured)."""
    listener = listener or RunListener()
    stop = stop or threading.Event()
    protocol = settings.protocol
    resolve_target(protocol, settings.target)
    started = datetime.now(UTC)
    pre = pre or preflight(client, settings, fingerprint, listener, stop)
    run = _Run(client, settings, listener, stop)
    error: OllamaError | None = None
    done = 0
    try:
        if run.warmups():
            done = run.trials()
    except OllamaError as exc:
        error = exc
        done = sum(len(s.trials) for s in run.states.values())
    planned = len(protocol.schedule())
    interrupted = error is None and done < planned
    counters, log_read = _counters(settings, run.segments, pre, listener)
    submission = build_submission(
        settings, pre, run.states, run.ps_after, counters, fingerprint=fingerprint,
        started=started, complete=error is None and done == planned,
        note=_note(error, interrupted, done, planned),
    )
    return RunOutcome(submission, interrupted, error, done, planned, log_read)


def _counters(settings: RunSettings, segments: Sequence[Segment], pre: Preflight,
              listener: RunListener) -> tuple[dict[str, DraftCounters], bool | None]:
    could_speculate = any(
        c.role == "draft" and pre.can_honor[c.name] is not False for c in settings.protocol.configs
    )
    if settings.log_path is None:
        if could_speculate:
            listener.warning("no Ollama server log given (--ollama-log): speculation can be "
                             "neither confirmed nor ruled out by its counters")
        return {}, None
    found = read_counters(settings.log_path, segments)
    if found is None:
        if could_speculate:
            listener.warning(f"cannot read the Ollama server log at {settings.log_path}: "
                             "speculation can be neither confirmed nor ruled out")
        return {}, False
    return found, True


def _note(error: OllamaError | None, interrupted: bool, done: int, planned: int) -> str | None:
    # Never the error text itself: it carries the Ollama URL (an address is private).
    if error is not None:
        return (f"stopped early: Ollama failed ({type(error).__name__}) after {done} of "
                f"{planned} trials")
    if interrupted:
        return f"stopped early: interrupted by the contributor after {done} of {planned} trials"
    return None


def build_submission(
    settings: RunSettings,
    pre: Preflight,
    states: dict[str, _ConfigState],
    ps_after: dict[str, list[dict[str, Any]]],
    counters: dict[str, DraftCounters],
    *,
    fingerprint: Fingerprint,
    started: datetime,
    complete: bool,
    note: str | None,
) -> Submission:
    protocol, target = settings.protocol, settings.target
    baseline_trials = states[protocol.baseline().name].trials
    configs: list[ConfigResult] = []
    for config in protocol.configs:
        state = states[config.name]
        evidence = build_evidence(
            config, engine_version=pre.engine_version, counters=counters.get(config.name),
            models_loaded=state.models_loaded,
            outputs_match=outputs_match_baseline(baseline_trials, state.trials),
        )
        configs.append(ConfigResult(
            name=config.name, role=config.role, model=protocol.model_for(config, target),
            draft_model=config.draft_model, request_options=protocol.request_options(config),
            request_fields=dict(config.request_fields), warmups=state.warmups,
            trials=state.trials, speculation=evidence,
        ))
    main_model = protocol.model_for(protocol.baseline(), target)
    ps = next(iter(ps_after.values()), [])
    backend, fraction = backend_from_ps({"models": ps}, main_model)
    models = pre.models or [ModelInfo(name=main_model)]
    return Submission(
        schema_version=1,
        submission_id=uuid.uuid4(),
        created_at=started,
        client=ClientInfo(name="specsubmit", version=__version__),
        fingerprint=fingerprint,
        engine=Engine(version=_engine_version(pre.engine_version), backend=backend,
                      gpu_fraction=fraction),
        models=models[:16],
        protocol=protocol_ref(protocol, target),
        configs=configs,
        complete=complete,
        note=note,
    )
