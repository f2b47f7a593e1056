"""An in-memory engine for unit tests of the runner: no process, no socket, no sleep.

It implements ``specsubmit.engines.base.Engine`` from a script: per config, the decode
rate, the counters its API reports per request (None: none), the output text. It records
every call the runner makes (``calls``), can fail with an ``EngineDied`` at a given request,
or set a stop event after a given trial, so that the runner's orchestration (order,
warm-ups, starts and stops, checkpoints, partial results, cold trials, counters and
verdicts) is tested without the fake Ollama server or a real llama-server, which stay for
the integration tests.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from specschema import Engine, Fingerprint, ModelInfo, engine_can_honor
from specschema.protocol import Protocol, ProtocolConfig
from specsubmit.engines.base import (
    EngineReport,
    Generation,
    Preflight,
    RunListener,
    wire_version,
)
from specsubmit.errors import EngineDied


@dataclass(frozen=True)
class Script:
    """What one config's requests return."""

    tps: float = 20.0
    drafted: int | None = None  # per request, from the engine's API
    accepted: int | None = None
    text: str = "def merge_dicts(*dicts): ..."
    load_ns: int = 30_000_000


@dataclass
class FakeEngine:
    protocol: Protocol
    name: str = "llama-server"
    version: str = "b6123"
    target: str | None = None
    per_config_start: bool = True
    load_time_options: frozenset[str] = frozenset()
    scripts: dict[str, Script] = field(default_factory=dict)
    fail_at_request: int | None = None  # the n-th generate (1-based) raises EngineDied
    stop_after_trials: tuple[threading.Event, int] | None = None
    calls: list[tuple[str, ...]] = field(default_factory=list)
    requests: int = 0
    trials: int = 0
    running: str | None = None  # the config whose engine start is up (per_config_start)

    def preflight(self, fingerprint: Fingerprint, listener: RunListener,
                  stop: threading.Event | None = None) -> Preflight:
        self.calls.append(("preflight",))
        can_honor = {c.name: engine_can_honor(c.mechanism, self.version, self.name)
                     for c in self.protocol.configs}
        models = [ModelInfo(name=self.protocol.model_for(self.protocol.baseline(), self.target))]
        return Preflight(self.version, models, can_honor, None, None, engine_name=self.name)

    def begin_config(self, config: ProtocolConfig, listener: RunListener) -> None:
        self.calls.append(("begin", config.name))
        self.running = config.name

    def generate(self, config: ProtocolConfig, *, counted: bool,
                 prompt: str | None = None) -> Generation:
        self.calls.append(("generate", config.name, "trial" if counted else "warmup"))
        if self.per_config_start:
            assert self.running == config.name, "a request outside its config's start"
        self.requests += 1
        if self.fail_at_request == self.requests:
            raise EngineDied(f"{self.name} died during a {config.name} request")
        script = self.scripts.get(config.name, Script())
        # a warm-up stops at the protocol's warmup_tokens, when it sets them
        eval_count = int(self.protocol.request_options(config, warmup=not counted)["num_predict"])
        eval_ns = int(eval_count / script.tps * 1e9)
        generation = Generation(
            wall_s=(script.load_ns + eval_ns) / 1e9 + 0.1, ttft_s=0.1, text=script.text,
            total_duration_ns=script.load_ns + eval_ns + 90_000_000,
            load_duration_ns=script.load_ns, prompt_eval_count=58,
            prompt_eval_duration_ns=90_000_000, eval_count=eval_count, eval_duration_ns=eval_ns,
            done_reason="length", draft_n=script.drafted, draft_accepted=script.accepted)
        if counted:
            self.trials += 1
            if self.stop_after_trials is not None and self.trials == self.stop_after_trials[1]:
                self.stop_after_trials[0].set()
        return generation

    def end_config(self, config: ProtocolConfig, *, last: bool) -> None:
        self.calls.append(("end", config.name, "last" if last else "more"))
        self.running = None

    def report(self, pre: Preflight, listener: RunListener) -> EngineReport:
        self.calls.append(("report",))
        return EngineReport()

    def wire_engine(self, pre: Preflight, report: EngineReport) -> tuple[Engine, str | None]:
        return Engine(name=self.name, version=wire_version(self.version), runtime="ggml"), None

    def close(self) -> None:
        self.calls.append(("close",))
