"""A run's result as the wire's ``Submission``: every config with its trials, the engine's
evidence and the verdicts (``specschema.submission_verdicts``, the rule the server
applies); each trial's output compared with the baseline's answers to its own prompt.

Pure: the runner (``run/runner.py``) hands it what was measured.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from specschema import (
    ClientInfo,
    ConfigResult,
    Fingerprint,
    ModelInfo,
    Protocol,
    ProtocolRef,
    Submission,
    Trial,
    TrialCounters,
    Warmup,
)
from specschema import Engine as WireEngine
from specschema.engines import descriptor
from specsubmit import __version__
from specsubmit.engines import (
    DraftCounters,
    EngineReport,
    Generation,
    Preflight,
    RunSettings,
)
from specsubmit.engines import Engine as RunEngine
from specsubmit.errors import EngineError
from specsubmit.run.evidence import (
    build_evidence,
    divergences,
    outputs_match_baseline,
    token_reference,
)

__all__ = ["ConfigState", "build_submission", "protocol_ref", "run_note", "trial_from",
           "with_log_evidence"]


@dataclass
class ConfigState:
    """One config's warm-ups, trials and their generations, as measured."""

    warmups: list[Warmup] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    generations: list[Generation] = field(default_factory=list)


def protocol_ref(protocol: Protocol, target: str | None,
                 others: Mapping[str, str] | None = None) -> ProtocolRef:
    """``others``: the run's other parameters (``RunSettings.parameters``), as published."""
    parameters = {"target": target} if target and target != protocol.target else {}
    parameters.update(others or {})
    return ProtocolRef(id=protocol.id, version=protocol.version, sha256=protocol.sha256,
                       parameters=parameters)



def trial_from(gen: Generation, *, index: int, position: int, cold_load_ns: int,
               block: int | None = None, timing: Mapping[str, Any] | None = None) -> Trial:
    """``timing``: the trial's ``started_s``, ``load_1m`` and ``client_cpu_s``
    (``timing.TrialClock.fields``); v2 fields, left out when not given."""
    fields: dict[str, Any] = {} if block is None else {"block": block}
    fields.update({k: v for k, v in (timing or {}).items() if v is not None})
    if gen.draft_n is not None:
        # The engine's own per-request counters (llama-server timings): a v2 field, so it
        # is only set when there is something to set and v1 results keep their bytes.
        from specschema import TrialCounters

        accepted = gen.draft_accepted or 0
        extra: dict[str, Any] = {}
        if gen.draft_rounds is not None:  # llama-server's /metrics around the request
            extra = {"rounds": gen.draft_rounds,
                     "accepted_per_position": list(gen.accepted_per_position or ())[:64],
                     "mean_accepted_len": (round(1.0 + accepted / gen.draft_rounds, 4)
                                           if gen.draft_rounds else None)}
        if gen.draft_past_end is not None:
            extra["drafted_past_end"] = gen.draft_past_end
        fields["counters"] = TrialCounters(drafted=gen.draft_n, accepted=accepted,
                                           source="engine_api", **extra)
    return Trial(
        index=index, position=position, wall_s=round(gen.wall_s, 6),
        ttft_s=round(gen.ttft_s, 6) if gen.ttft_s is not None else None,
        total_duration_ns=gen.total_duration_ns, load_duration_ns=gen.load_duration_ns,
        prompt_eval_count=gen.prompt_eval_count,
        prompt_eval_duration_ns=gen.prompt_eval_duration_ns,
        eval_count=gen.eval_count, eval_duration_ns=gen.eval_duration_ns,
        done_reason=gen.done_reason[:32] if gen.done_reason else None,
        output_chars=len(gen.text),
        output_sha256=hashlib.sha256(gen.text.encode("utf-8")).hexdigest(),
        cold=gen.load_duration_ns >= cold_load_ns,
        **fields,
    )


def build_submission(
    settings: RunSettings,
    pre: Preflight,
    states: Mapping[str, ConfigState],
    report: EngineReport,
    counters: Mapping[str, DraftCounters],
    *,
    engine: RunEngine,
    fingerprint: Fingerprint,
    started: datetime,
    complete: bool,
    note: str | None,
    submission_id: uuid.UUID | None = None,
    refused: Mapping[str, str] | None = None,
) -> Submission:
    """``refused``: the configs the engine could not run, {name: reason} (incompatible)."""
    protocol = settings.protocol
    target = pre.public_names.get(settings.target, settings.target) if settings.target \
        else None
    baseline_state = states[protocol.baseline().name]
    # Each trial is compared with the baseline's answers to its own prompt (a prompt set's
    # trials answer different prompts: ``Protocol.prompt_for``).
    prompts = max(len(protocol.prompts or ()), 1)
    base_by_prompt = [[(t, g) for t, g in zip(baseline_state.trials, baseline_state.generations,
                                              strict=True) if t.index % prompts == p]
                      for p in range(prompts)]
    references = [token_reference([g for _, g in pairs]) for pairs in base_by_prompt]
    configs: list[ConfigResult] = []
    for config in protocol.configs:
        state = states[config.name]
        # Token by token where the engine gave the ids (llama-server), else by text hash.
        diverged = _divergences(references, state.trials, state.generations)
        matches = (all(d is None for d in diverged) if diverged is not None
                   else _outputs_match(base_by_prompt, state.trials))
        evidence = build_evidence(
            config, engine_version=report.version or pre.engine_version,
            engine=pre.engine_name, counters=counters.get(config.name),
            models_loaded=report.models_loaded.get(config.name, []),
            outputs_match=matches,
            launches=report.launches.get(config.name, []),
            refusal=(refused or {}).get(config.name),
        )
        trials = with_log_evidence(state.trials, report.trial_counters.get(config.name, []),
                                   report.reloaded.get(config.name, []),
                                   keep_counters=evidence.drafted_tokens is not None)
        if diverged is not None and any(d is not None for d in diverged):
            trials = [t.model_copy(update={"diverged_at": d}) if d is not None else t
                      for t, d in zip(trials, diverged, strict=True)]
            if config.role == "draft":
                evidence = evidence.model_copy(update={
                    "diverged_at": min(d for d in diverged if d is not None)})
        draft = config.draft_model
        configs.append(ConfigResult(
            name=config.name, role=config.role, model=protocol.model_for(config, target),
            draft_model=pre.public_names.get(draft, draft) if draft else None,
            request_options=protocol.request_options(config),
            request_fields=dict(config.request_fields), warmups=state.warmups,
            trials=trials, speculation=evidence,
        ))
    main_model = protocol.model_for(protocol.baseline(), target)
    models = pre.models or [ModelInfo(name=main_model)]
    common: dict[str, Any] = {
        "submission_id": submission_id or uuid.uuid4(),
        "created_at": started,
        "client": ClientInfo(name="specsubmit", version=__version__),
        "fingerprint": fingerprint,
        "models": models[:16],
        "protocol": protocol_ref(protocol, target, {
            key: pre.public_names.get(value, value)
            for key, value in settings.parameters.items()}),
        "complete": complete,
        "note": note,
    }
    wire_engine, engine_log = engine.wire_engine(pre, report)
    if engine_log is not None:
        common["engine_log"] = engine_log
    return _v2_submission(pre, report, configs, common, wire_engine)


def _divergences(references: Sequence[tuple[int, ...] | None], trials: Sequence[Trial],
                 generations: Sequence[Generation]) -> list[int | None] | None:
    """``evidence.divergences`` of each trial from the reference of its prompt; None
    without trials or token ids."""
    if not trials:
        return None
    found: list[int | None] = []
    for trial, generation in zip(trials, generations, strict=True):
        one = divergences(references[trial.index % len(references)], [generation])
        if one is None:
            return None
        found.append(one[0])
    return found


def _outputs_match(base_by_prompt: Sequence[Sequence[tuple[Trial, Generation]]],
                   trials: Sequence[Trial]) -> bool | None:
    """``evidence.outputs_match_baseline`` per prompt: every trial gave the baseline's
    most common answer to its own prompt (None: either side has no trials)."""
    if not trials:
        return None
    verdicts = [outputs_match_baseline([t for t, _ in base_by_prompt[t.index % len(
        base_by_prompt)]], [t]) for t in trials]
    if None in verdicts:
        return None
    return all(verdicts)


def with_log_evidence(trials: Sequence[Trial], counters: Sequence[TrialCounters | None],
                      reloaded: Sequence[bool], *, keep_counters: bool) -> list[Trial]:
    """The trials with the log's per-trial counters (only where the config keeps its
    totals: they are the same lines summed) and ``cold`` set where the engine restarted
    during the trial (a ``starting llama-server`` line in its request)."""
    out: list[Trial] = []
    for i, trial in enumerate(trials):
        update: dict[str, Any] = {}
        found = counters[i] if i < len(counters) else None
        if keep_counters and found is not None and trial.counters is None:
            update["counters"] = found
        if i < len(reloaded) and reloaded[i] and not trial.cold:
            update["cold"] = True
        out.append(trial.model_copy(update=update) if update else trial)
    return out


def _v2_submission(pre: Preflight, report: EngineReport, configs: list[ConfigResult],
                   common: dict[str, Any], engine: WireEngine) -> Submission:
    """Wire v2 (engine name, runtime, build, per-trial counters, launches), with every
    verdict from ``specschema.submission_verdicts``, the rule the server applies."""
    from specschema import submission_verdicts

    draft = Submission(schema_version=2, configs=configs, engine=engine, **common)
    fixed = [
        c.model_copy(update={"speculation": c.speculation.model_copy(
            update={"observed": observed})})
        for c, observed in zip(configs, submission_verdicts(draft), strict=True)
    ]
    return Submission(schema_version=2, configs=fixed, engine=engine, **common)


def run_note(pre: Preflight, error: EngineError | None, interrupted: bool, done: int,
             planned: int, unrequested: Sequence[str], foreign: Sequence[str] = ()) -> str | None:
    """The result's ``note``: why it stopped early, counters seen where none were asked
    for, another client's requests."""
    # Never the error text itself: it carries the Ollama URL or a path (both private).
    parts: list[str] = []
    if error is not None:
        parts.append(f"stopped early: {descriptor(pre.engine_name).label} failed "
                     f"({type(error).__name__}) after {done} of {planned} trials")
    elif interrupted:
        parts.append(f"stopped early: interrupted by the contributor after {done} of {planned} "
                     "trials")
    if unrequested:
        parts.append("speculation counters seen in configs that do not request it: "
                     + ", ".join(unrequested))
    if foreign:
        parts.append("another client's requests reached the engine during "
                     + ", ".join(foreign[:8]) + (" and more" if len(foreign) > 8 else "")
                     + "; their log counters are not counted")
    return "; ".join(parts)[:500] or None

