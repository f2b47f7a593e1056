"""The trial protocol against one Ollama: warm-ups, trials, evidence, result.

Pure orchestration over an ``OllamaClient`` (passed in); nothing here prints. Progress
and warnings go to a ``RunListener``; a ``threading.Event`` asks the run to stop after
the current request (Ctrl-C), which yields an incomplete result rather than nothing.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
)
from specschema.protocol import ProtocolConfig
from specsubmit import __version__
from specsubmit.engines.ollama.client import GenerateRequest, Generation, OllamaClient
from specsubmit.engines.ollama.serverlog import (
    DraftCounters,
    Segment,
    log_size,
    read_counters,
    wait_for_quiet_log,
)
from specsubmit.errors import OllamaError, UsageError
from specsubmit.fingerprint import backend_from_ps, collect_fingerprint
from specsubmit.run.evidence import build_evidence, outputs_match_baseline
from specsubmit.run.preflight import Preflight, preflight
from specsubmit.run.settings import COLD_LOAD_NS, RunListener, RunSettings

__all__ = [
    "COLD_LOAD_NS",
    "Preflight",
    "RunListener",
    "RunOutcome",
    "RunSettings",
    "build_submission",
    "default_fingerprint",
    "preflight",
    "protocol_ref",
    "resolve_target",
    "run_protocol",
]


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


def default_fingerprint() -> Fingerprint:
    """This machine's fingerprint (``specsubmit.fingerprint``, issue 4)."""
    return collect_fingerprint()


def resolve_target(protocol: Protocol, target: str | None) -> str | None:
    if target is not None and not (0 < len(target) <= 120 and target.strip() == target
                                   and target.isprintable()):
        raise UsageError(f"--target {target!r} is not a model name (1 to 120 characters)")
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


def _engine_version(text: str) -> str:
    cleaned = re.sub(r"[^0-9A-Za-z.+\-]", "", text)[:40]
    return cleaned or "unknown"


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
        generation = self.client.generate(self.request(config))
        if self.settings.log_path is not None and self.settings.log_settle_s > 0:
            wait_for_quiet_log(self.settings.log_path, self.settings.log_settle_s)
        return generation

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
        names = (str(m.get("name") or m.get("model") or "") for m in ps)
        self.states[name].models_loaded = [n for n in names if 0 < len(n) <= 120][:16]


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
        note=_note(error, interrupted, done, planned, _unrequested(settings, pre, counters)),
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
    for name in _unrequested(settings, pre, found):
        listener.warning(
            f"the server log shows speculation during {name} ({found[name].drafted} tokens "
            "drafted), which this config does not ask for: the model speculates by itself "
            "(MTP layers or a DRAFT), so every config may include it"
        )
    return found, True


def _unrequested(settings: RunSettings, pre: Preflight,
                 counters: dict[str, DraftCounters]) -> list[str]:
    """Configs whose trials speculated although their mechanism cannot have caused it."""
    return [
        c.name for c in settings.protocol.configs
        if (seen := counters.get(c.name)) and seen.drafted
        and (c.role == "baseline" or pre.can_honor[c.name] is False)
    ]


def _note(error: OllamaError | None, interrupted: bool, done: int, planned: int,
          unrequested: Sequence[str]) -> str | None:
    # Never the error text itself: it carries the Ollama URL (an address is private).
    parts: list[str] = []
    if error is not None:
        parts.append(f"stopped early: Ollama failed ({type(error).__name__}) after {done} of "
                     f"{planned} trials")
    elif interrupted:
        parts.append(f"stopped early: interrupted by the contributor after {done} of {planned} "
                     "trials")
    if unrequested:
        parts.append("speculation counters seen in configs that do not request it: "
                     + ", ".join(unrequested))
    return "; ".join(parts)[:500] or None


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
