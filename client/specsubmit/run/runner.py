"""The trial protocol against one engine: warm-ups, trials, evidence, result.

Pure orchestration over an ``Engine`` (``specsubmit.engines.base``; passed in): the same
code runs Ollama and llama-server, and the statistics and verdict rules never see which.
Nothing here prints. Progress and warnings go to a ``RunListener``; a ``threading.Event``
asks the run to stop after the current request (Ctrl-C), which yields an incomplete result
rather than nothing. An ``EngineError`` during the trials does the same. After every trial
an incomplete result with all the trials so far goes to a ``checkpoint`` callback (the CLI
saves it), so that an abort or a crash between trials loses none that finished.

A block is kept whole or not at all where blocks are the interval's unit (protocols whose
blocks each start with their own warm-up, ``warmup_each_block``: the bracketed and ABBA
orders): the trials of a block cut short by an interrupt, a crash or an engine error are
left out of the result and of every checkpoint (a block of one trial where the protocol
asks for two is not a block: its ratio would count as one of the blocks the interval is
over). Protocols without (blocked, interleaved) keep every finished trial.

Before the first counted trial, a ``planner`` (``specsubmit.run.plan``) is shown the first
block's engine start and warm-ups, and once more, when every config has run a block, how
long each block took; it may answer with fewer bracketed rounds: the run then makes those
(the run parameter ``rounds``), the first part of the same schedule. A protocol with an
early-stop rule (``specschema.earlystop``) has it applied at the end of the first round, to
the counters of the first round's trials: the configs it names run no later block (the run
parameter ``stopped``), and the planner is told beforehand which configs look set to stop.

Order: an engine that shares one server between configs (Ollama) gets every config's
warm-ups first, then the trials in the protocol's order. An engine that starts a server
per config (llama-server: its speculative settings are launch flags) gets, for each run of
consecutive trials of one config, a start, that config's warm-ups, the trials and a stop.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from specschema import (
    Fingerprint,
    Protocol,
    Submission,
    Warmup,
)
from specschema.earlystop import first_round_end, round_one_counts, stopped_by_rule
from specschema.protocol import ProtocolConfig
from specsubmit.engines import (
    COLD_LOAD_NS,
    EngineReport,
    Generation,
    Preflight,
    RunListener,
    RunSettings,
    unrequested,
)
from specsubmit.engines import Engine as RunEngine
from specsubmit.errors import EngineError, SpeculationRefused, UsageError
from specsubmit.fingerprint import collect_fingerprint
from specsubmit.run.kept import api_counters, cut_report
from specsubmit.run.plan import Measured
from specsubmit.run.submission import (
    ConfigState,
    build_submission,
    protocol_ref,
    run_note,
    trial_from,
)
from specsubmit.run.timing import TrialClock

# Called before the first counted trial and when every config has run a block, with what
# was timed; answers the rounds to run (None: as they are). ``specsubmit.run.plan``.
Planner = Callable[[Measured], int | None]

__all__ = [
    "COLD_LOAD_NS",
    "Planner",
    "Preflight",
    "RunListener",
    "RunOutcome",
    "RunSettings",
    "build_submission",
    "default_fingerprint",
    "protocol_ref",
    "resolve_target",
    "run_protocol",
]


@dataclass
class RunOutcome:
    submission: Submission
    interrupted: bool = False
    error: EngineError | None = None
    trials_done: int = 0  # the trials kept in the result
    trials_planned: int = 0
    log_read: bool | None = None
    trials_dropped: int = 0  # measured in a block cut short, so not kept (see above)


# --- helpers ------------------------------------------------------------------------------


def default_fingerprint() -> Fingerprint:
    """This machine's fingerprint (``specsubmit.fingerprint``)."""
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


class _Run:
    def __init__(self, engine: RunEngine, settings: RunSettings, listener: RunListener,
                 stop: threading.Event, on_trial: Callable[[], None] | None = None,
                 refused: Mapping[str, str] | None = None,
                 planner: Planner | None = None, clock: TrialClock | None = None) -> None:
        self.engine, self.settings, self.listener, self.stop = engine, settings, listener, stop
        self.on_trial = on_trial
        self.planner = planner
        self.plans = 0  # how often the planner was asked (twice at most: ``plan``)
        # The first block's engine start (None: none per block), its warm-ups, and whether
        # every block has its own: what the planner is shown besides the blocks timed.
        self.first: tuple[float | None, tuple[Generation, ...], bool] = (None, (), False)
        self.timed: list[tuple[str, float, int]] = []  # finished blocks: config, s, trials
        self.states = {c.name: ConfigState() for c in settings.protocol.configs}
        # Configs the engine cannot run as asked: {name: reason}. Skipped; incompatible.
        self.refused: dict[str, str] = dict(refused or {})
        self.set_protocol(settings.protocol)
        self.done = 0
        self.last_load: dict[str, Any] | None = None  # load-time options of the last request
        self.warmed: list[Generation] = []  # the warm-ups the planner is shown
        self.clock = clock or TrialClock()

    def set_protocol(self, protocol: Protocol) -> None:
        """The protocol as the run makes it, and its schedule."""
        self.protocol = protocol
        self.schedule = protocol.schedule()
        self.blocks = protocol.blocks()  # each trial's block, recorded on the wire
        self.block_sizes = Counter(self.blocks)
        self.last_position = {name: pos for pos, (name, _) in enumerate(self.schedule)}

    def plan(self, position: int, *, in_block: bool) -> None:
        """Ask the planner (``run.plan`` says when: before the first counted trial, and
        once more before the first block after every config's first) and make the rounds
        it answers, which become the run parameter ``rounds``. Fewer rounds must be the
        first part of the same schedule, with every config's last block still to come."""
        if self.planner is None:
            return
        self.plans += 1
        start_s, warmups, per_block = self.first
        rounds = self.planner(Measured(self.protocol, frozenset(self.refused), start_s,
                                       warmups, per_block, tuple(self.timed), position,
                                       in_block, stopping=self.stopping()))
        if rounds is None or rounds == self.protocol.rounds:
            return
        value = str(rounds)
        shorter = self.protocol.for_run({"rounds": value})
        schedule = shorter.schedule()
        last = {name: pos for pos, (name, _) in enumerate(schedule)}
        if schedule != self.schedule[:len(schedule)] or min(last.values()) < position:
            raise ValueError(f"{value} rounds cannot be made from position {position}")
        self.settings = replace(self.settings, protocol=shorter,
                                parameters={**self.settings.parameters, "rounds": value})
        self.set_protocol(shorter)

    def first_round_counts(self) -> dict[str, tuple[int, int] | None]:
        """Each draft config's (drafted, accepted) over its kept first-round trials."""
        return round_one_counts(self.protocol, (
            (name, trial.position, gen.draft_n, gen.draft_accepted)
            for name, state in self.kept_states().items()
            for trial, gen in zip(state.trials, state.generations, strict=True)))

    def stopping(self) -> tuple[str, ...]:
        """The configs the early-stop rule would stop, were the first round over now: what
        the planner is shown to estimate the rounds after it."""
        return stopped_by_rule(self.protocol, self.first_round_counts())

    def stop_early(self, position: int) -> None:
        """At the end of the first round: the configs the protocol's early-stop rule names
        run no later block (the run parameter ``stopped``, ``specschema.earlystop``)."""
        counts = self.first_round_counts()
        stopped = stopped_by_rule(self.protocol, counts)
        if not stopped:
            return
        value = ",".join(stopped)
        shorter = self.protocol.for_run({"stopped": value})
        if shorter.schedule()[:position] != self.schedule[:position]:
            raise ValueError(f"{value} cannot be stopped at position {position}")
        self.settings = replace(self.settings, protocol=shorter,
                                parameters={**self.settings.parameters, "stopped": value})
        self.set_protocol(shorter)
        for name in stopped:
            self.listener.stopped_early(name, (counts[name] or (0, 0))[0])

    def every_config_timed(self) -> bool:
        timed = {name for name, _, _ in self.timed}
        return all(c.name in timed or c.name in self.refused for c in self.protocol.configs)

    def whole_blocks(self) -> dict[str, int]:
        """Per config, how many of its trials to keep: all of them, or (``warmup_each_block``)
        those of whole blocks. Only the block running when the run stopped can be cut short,
        and it is its config's last, so the kept trials are a prefix."""
        keep: dict[str, int] = {}
        for name, state in self.states.items():
            kept = len(state.trials)
            if self.protocol.warmup_each_block and kept:
                last = state.trials[-1].block
                measured = sum(1 for t in state.trials if t.block == last)
                if last is not None and measured < self.block_sizes[last]:
                    kept -= measured
            keep[name] = kept
        return keep

    def kept_states(self) -> dict[str, ConfigState]:
        """The states with the trials ``whole_blocks`` keeps (warm-ups all: they ran)."""
        keep = self.whole_blocks()
        return {name: state if keep[name] == len(state.trials) else ConfigState(
                    warmups=state.warmups, trials=state.trials[:keep[name]],
                    generations=state.generations[:keep[name]])
                for name, state in self.states.items()}

    def planned(self) -> int:
        """The trials this run means to make: the schedule's, less the refused configs'."""
        return sum(1 for name, _ in self.schedule if name not in self.refused)

    def refuse(self, config: ProtocolConfig, error: SpeculationRefused) -> None:
        """The engine cannot run `config` as asked: nothing of it is kept (should a later
        block be refused, the earlier blocks' trials go too), the run goes on."""
        self.refused[config.name] = error.public
        state = self.states[config.name]
        self.done -= len(state.trials)
        self.states[config.name] = ConfigState()
        self.listener.warning(f"{error.message}; {config.name} is recorded as incompatible "
                              "and not run, the other configs run as usual")

    def switches_load(self, config: ProtocolConfig) -> bool:
        """Whether this request changes a load-time option: the engine restarts for it."""
        load = {k: v for k, v in self.protocol.request_options(config).items()
                if k in self.engine.load_time_options}
        switched = self.last_load is not None and load != self.last_load
        self.last_load = load
        return switched

    def warmup(self, config: ProtocolConfig) -> bool:
        for _ in range(self.protocol.warmups_per_config):
            if self.stop.is_set():
                return False
            self.listener.phase(f"warming up {config.name}")
            self.switches_load(config)
            gen = self.engine.generate(config, counted=False,
                                       prompt=self.protocol.prompt_for(0))
            self.warmed.append(gen)
            state = self.states[config.name]
            if len(state.warmups) < 16:  # the wire's limit; a restart per block warms again
                state.warmups.append(Warmup(
                    wall_s=round(gen.wall_s, 6), load_duration_ns=gen.load_duration_ns,
                    total_duration_ns=gen.total_duration_ns))
        return True

    def trial(self, position: int, name: str, index: int) -> None:
        config = self.protocol.config(name)
        self.listener.trial_started(position, len(self.schedule), name, index)
        switched = self.switches_load(config)
        self.clock.begin()
        gen = self.engine.generate(config, counted=True,
                                   prompt=self.protocol.prompt_for(index))
        trial = trial_from(gen, index=index, position=position,
                           cold_load_ns=self.settings.cold_load_ns, block=self.blocks[position],
                           timing=self.clock.fields())
        if switched and not trial.cold:  # a reload with a small load_duration is still one
            trial = trial.model_copy(update={"cold": True})
        self.states[name].trials.append(trial)
        self.states[name].generations.append(gen)
        self.done += 1
        self.listener.trial_finished(position, len(self.schedule), name, trial)
        if self.on_trial is not None:
            self.on_trial()

    def run_shared(self) -> None:
        """One engine for every config: all warm-ups, then the trials in order."""
        for config in self.protocol.configs:
            if config.name not in self.refused and not self.warmup(config):
                return
        self.first = (None, tuple(self.warmed), False)
        self.plan(0, in_block=True)
        for position, (name, index) in enumerate(self.schedule):
            if self.stop.is_set():
                return
            if name in self.refused:
                continue
            self.trial(position, name, index)
            if self.last_position[name] == position:
                self.engine.end_config(self.protocol.config(name), last=True)

    def block_end(self, start: int) -> int:
        """The position after the run of consecutive trials of one config from ``start``."""
        name, end = self.schedule[start][0], start
        while end < len(self.schedule) and self.schedule[end][0] == name:
            end += 1
        return end

    def run_per_config(self) -> None:
        """An engine start per block of consecutive trials of one config."""
        start = 0
        while start < len(self.schedule):
            end = self.block_end(start)
            name = self.schedule[start][0]
            if self.stop.is_set():
                return
            if name in self.refused:
                start = end
                continue
            if self.plans == 1 and self.every_config_timed():
                self.plan(start, in_block=False)
                end = self.block_end(start)
            if start == first_round_end(self.protocol):
                self.stop_early(start)
                end = self.block_end(start)
            config = self.protocol.config(name)
            began = time.monotonic()
            try:
                self.engine.begin_config(config, self.listener)
            except SpeculationRefused as exc:
                self.refuse(config, exc)
                start = end
                continue
            try:
                start_s = time.monotonic() - began
                self.warmed = []
                if not self.warmup(config):
                    return
                if self.plans == 0:
                    self.first = (start_s if self.engine.per_config_start else None,
                                  tuple(self.warmed), True)
                    self.plan(start, in_block=True)
                    end = self.block_end(start)
                for position in range(start, end):
                    if self.stop.is_set():
                        return
                    self.trial(position, name, self.schedule[position][1])
            finally:
                self.engine.end_config(config, last=end - 1 == self.last_position[name])
            self.timed.append((name, time.monotonic() - began, end - start))
            start = end


def run_protocol(
    engine: RunEngine,
    settings: RunSettings,
    *,
    fingerprint: Fingerprint,
    listener: RunListener | None = None,
    stop: threading.Event | None = None,
    pre: Preflight | None = None,
    checkpoint: Callable[[Submission], None] | None = None,
    planner: Planner | None = None,
    clock: TrialClock | None = None,
) -> RunOutcome:
    """Preflight (unless given), warm-ups and trials; always returns a Submission once the
    trials started, complete or not. Preflight errors propagate (nothing was measured).

    ``checkpoint`` gets an incomplete Submission (same id as the final one) after every
    trial, so that a caller can keep what finished even if the process dies later. It
    carries the trials and the engine API's counters, not the log's (read once, at the end).

    ``planner`` is called before the first counted trial and once more when every config
    has run a block (``_Run.plan``); the rounds it answers are the run's (the result's
    ``protocol.parameters.rounds``). ``clock``: when each trial ran and the load beside it
    (``timing.TrialClock``; the process's own clocks by default).
    """
    listener = listener or RunListener()
    stop = stop or threading.Event()
    protocol = settings.protocol
    resolve_target(protocol, settings.target)
    started = datetime.now(UTC)
    submission_id = uuid.uuid4()
    pre = pre or engine.preflight(fingerprint, listener, stop)

    def on_trial() -> None:
        if checkpoint is None:
            return
        kept = run.kept_states()
        if not _trials(kept):
            return  # the first block is not whole yet: nothing to keep
        checkpoint(build_submission(
            run.settings, pre, kept, EngineReport(), api_counters(kept),
            engine=engine, fingerprint=fingerprint, started=started, complete=False,
            note=f"incomplete: {_trials(kept)} of {run.planned()} trials so far",
            submission_id=submission_id, refused=run.refused))

    run = _Run(engine, settings, listener, stop, on_trial if checkpoint else None,
               refused=pre.refused, planner=planner, clock=clock)
    error: EngineError | None = None
    try:
        if engine.per_config_start or protocol.warmup_each_block:
            run.run_per_config()
        else:
            run.run_shared()
    except EngineError as exc:
        error = exc
    planned = run.planned()
    interrupted = error is None and run.done < planned
    keep = run.whole_blocks()
    states = run.kept_states()
    done = _trials(states)
    report = cut_report(engine.report(pre, listener), keep)
    counters = dict(report.counters) or api_counters(states)
    submission = build_submission(
        run.settings, pre, states, report, counters, engine=engine, fingerprint=fingerprint,
        started=started, complete=error is None and done == planned,
        note=run_note(pre, error, interrupted, done, planned,
                      unrequested(protocol.configs, pre.can_honor, counters), report.foreign),
        submission_id=submission_id, refused=run.refused,
    )
    return RunOutcome(submission, interrupted, error, done, planned, report.log_read,
                      trials_dropped=run.done - done)


def _trials(states: Mapping[str, ConfigState]) -> int:
    return sum(len(state.trials) for state in states.values())
