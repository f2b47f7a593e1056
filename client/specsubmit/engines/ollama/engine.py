"""Ollama behind the runner's ``Engine`` interface.

One server for the whole run (the speculative settings are request options), a pre-flight
(``preflight``) plus the log's (``logsource.check``), and after the trials the log's
evidence per request (``serverlog.read_requests``: counters, engine starts, synthetic
warnings), attributed by byte offset (a file) or time (a command's output), per config
and per trial (``per_config``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specschema import Engine, Fingerprint, Launch, TrialCounters, engine_can_honor
from specschema.protocol import ProtocolConfig
from specsubmit.engines.base import (
    EngineName,
    EngineReport,
    Generation,
    Preflight,
    RunListener,
    RunSettings,
    counter_totals,
    unrequested,
    wire_version,
)
from specsubmit.engines.ollama import logsource
from specsubmit.engines.ollama.client import GenerateRequest, OllamaClient
from specsubmit.engines.ollama.logsource import LogSource
from specsubmit.engines.ollama.preflight import preflight
from specsubmit.engines.ollama.serverlog import (
    RequestEvidence,
    Segment,
    log_size,
    read_requests,
    wait_for_quiet_log,
)
from specsubmit.errors import OllamaLogMissing
from specsubmit.fingerprint import backend_from_ps

# Ollama's load-time (Runner) options: a request that changes one restarts the runner
# (server/sched.go), so its trial is a cold one (ollama-api.md "Read first" 3).
LOAD_TIME_OPTIONS = frozenset({"draft_num_predict", "num_ctx", "num_batch", "num_gpu",
                               "main_gpu", "use_mmap", "num_thread"})


@dataclass(frozen=True)
class OllamaLog:
    """Where the Ollama server log is (``--ollama-log``) and how it is read."""

    path: Path | None = None
    # --ollama-log as a command (journalctl, docker logs): read once after the trials
    command: tuple[str, ...] | None = None
    # After each request, wait until the server log has been quiet this long: counter
    # lines that Ollama forwards late still land before the next request starts, so they
    # are attributed to the request that produced them.
    settle_s: float = 0.05
    # --no-log: the user accepts a run whose drafts cannot be confirmed when no log is
    # readable (else that is an error before the first request).
    accept_missing: bool = False
    given: bool = False  # named by --ollama-log (not found in the OS's default place)

    @classmethod
    def from_option(cls, option: str | None) -> OllamaLog:
        """--ollama-log (a path or a command), else the OS's default place when it is
        there (``logsource``); the pre-flight says what is missing and the fix."""
        source = logsource.parse_option(option) if option else logsource.default_source()
        if source is None:
            return cls()
        return cls(path=source.path, command=source.command, given=option is not None)


class OllamaEngine:
    """The run's requests against one Ollama server (the client is the caller's)."""

    name: EngineName = "ollama"
    per_config_start = False
    load_time_options = LOAD_TIME_OPTIONS

    def __init__(self, client: OllamaClient, settings: RunSettings,
                 log: OllamaLog | None = None) -> None:
        self.client, self.settings = client, settings
        self.log = log or OllamaLog()
        self.protocol = settings.protocol
        self.segments: list[Segment] = []
        self.ps_after: dict[str, list[dict[str, Any]]] = {}
        self.models_loaded: dict[str, list[str]] = {}

    @property
    def log_source(self) -> LogSource | None:
        if self.log.command is not None:
            return LogSource(command=self.log.command)
        if self.log.path is not None:
            return LogSource(path=self.log.path)
        return None

    def preflight(self, fingerprint: Fingerprint, listener: RunListener,
                  stop: threading.Event | None = None) -> Preflight:
        pre = preflight(self.client, self.settings, fingerprint, listener, stop)
        # The log, checked before the first request: one line with what is missing and the
        # fix. Needed whenever something could speculate: a draft config, or (Ollama >= 0.30,
        # on llama-server or MLX) a model that drafts by itself, which only the log can
        # show. A run that asks to measure drafts, or names a log that is not there (a
        # typo), stops here unless --no-log accepts unconfirmed drafts; a run that could
        # only speculate by itself goes on with the warning (its verdicts say what is not
        # seen).
        drafts_honored = any(c.role == "draft" and pre.can_honor[c.name] is not False
                             for c in self.protocol.configs)
        could_speculate = drafts_honored or engine_can_honor(
            "draft_num_predict", pre.engine_version) is not False
        problem = logsource.check(self.log_source)
        if problem is None or not could_speculate:
            return pre
        if self.log.accept_missing:
            listener.warning(f"{problem} (--no-log: no draft can be confirmed)")
        elif drafts_honored or self.log.given:
            raise OllamaLogMissing(f"{problem}; or pass --no-log to run without it (no "
                                   "draft can then be confirmed)")
        else:
            listener.warning(problem)
        return pre

    def request(self, config: ProtocolConfig, prompt: str | None = None, *,
                warmup: bool = False) -> GenerateRequest:
        return GenerateRequest(
            model=self.protocol.model_for(config, self.settings.target),
            prompt=self.protocol.prompt if prompt is None else prompt,
            options=self.protocol.request_options(config, warmup=warmup),
            keep_alive=self.protocol.keep_alive,
            extra_fields=dict(config.request_fields),
        )

    def begin_config(self, config: ProtocolConfig, listener: RunListener) -> None:
        """Nothing to start: the config is in each request's options."""

    def generate(self, config: ProtocolConfig, *, counted: bool,
                 prompt: str | None = None) -> Generation:
        path = self.log.path if self.log.command is None else None
        offset = log_size(path) if path else None
        self.segments.append(Segment(config.name, counted, offset, datetime.now(UTC)))
        generation = self.client.generate(self.request(config, prompt, warmup=not counted))
        if path is not None and self.log.settle_s > 0:
            wait_for_quiet_log(path, self.log.settle_s)
        elif self.log.command is not None:
            # A command's lines are attributed by time: let late ones land before the next.
            time.sleep(self.log.settle_s * 4)
        return generation

    def end_config(self, config: ProtocolConfig, *, last: bool) -> None:
        """After a config's last trial: what Ollama has loaded (``/api/ps``)."""
        if not last:
            return
        ps = self.client.ps()
        self.ps_after[config.name] = ps
        names = (str(m.get("name") or m.get("model") or "") for m in ps)
        self.models_loaded[config.name] = [n for n in names if 0 < len(n) <= 120][:16]

    def report(self, pre: Preflight, listener: RunListener) -> EngineReport:
        source = self.log_source
        could_speculate = any(
            c.role == "draft" and pre.can_honor[c.name] is not False
            for c in self.protocol.configs
        )
        if source is None:
            if could_speculate:
                listener.warning("no Ollama server log given (--ollama-log): speculation can "
                                 "be neither confirmed nor ruled out by its counters")
            return EngineReport(log_read=None, log_status="not_given", runtime=pre.runtime,
                                models_loaded=self.models_loaded, ps_after=self.ps_after)
        requests = read_requests(source.read(), self.segments)
        if requests is None:
            if could_speculate:
                listener.warning(f"cannot read the Ollama server log at {source.describe()}: "
                                 "speculation can be neither confirmed nor ruled out")
            return EngineReport(log_read=False, log_status="unreadable", runtime=pre.runtime,
                                models_loaded=self.models_loaded, ps_after=self.ps_after)
        report = per_config(self.segments, requests, pre.runtime)
        for name in unrequested(self.protocol.configs, pre.can_honor, report.counters):
            role = self.protocol.config(name).role
            listener.warning(
                f"the server log shows speculation during {name} "
                f"({report.counters[name].drafted} tokens drafted), which this config does not "
                "ask for: the model speculates by itself (MTP layers, a DRAFT or MLX)"
                + (", so every comparison against this baseline is invalid"
                   if role == "baseline" else "")
            )
        if report.foreign:
            listener.warning(
                "another client's requests reached Ollama during "
                f"{', '.join(report.foreign[:6])}" + (" and more" if len(report.foreign) > 6
                                                      else "")
                + ": the log's counters in those trials cannot be told apart, so they are "
                "not counted (run alone for a clean result)")
        report.models_loaded, report.ps_after = self.models_loaded, self.ps_after
        return report

    def wire_engine(self, pre: Preflight, report: EngineReport) -> tuple[Engine, str | None]:
        """Ollama's version, the backend and GPU share from ``/api/ps``, the runtime (the
        log's, else the model format's), and whether the log was read."""
        main_model = self.protocol.model_for(self.protocol.baseline(), self.settings.target)
        ps = next(iter(report.ps_after.values()), [])
        backend, fraction = backend_from_ps({"models": ps}, main_model)
        runtime = report.runtime or pre.runtime
        engine = Engine(version=wire_version(pre.engine_version), backend=backend,
                        gpu_fraction=fraction,
                        runtime=runtime if runtime in ("ggml", "mlx") else None)  # type: ignore[arg-type]
        return engine, report.log_status

    def close(self) -> None:
        """The client belongs to the caller, who closes it."""


def per_config(segments: Sequence[Segment], requests: Sequence[RequestEvidence],
               runtime: str | None) -> EngineReport:
    """The log's evidence per config: each trial's counters and reload flag (the counted
    segments of a config are its trials, in order), the engine starts seen during any of
    its requests (warm-ups too: they are what the config ran with), the totals (the sums
    of the trials' counters) and the runtime the lines show."""
    trial_counters: dict[str, list[TrialCounters | None]] = {}
    reloaded: dict[str, list[bool]] = {}
    foreign: list[str] = []
    # Ollama logs one access line per generation request, ours or anyone's. More of them
    # than we sent: another client used this Ollama during the run, and the windows that
    # hold two cannot say whose counters are whose. (One of ours logged late lands in the
    # next window, but then the count is still ours.)
    crowded = sum(e.requests for e in requests) > len(segments)
    launches: dict[str, list[Launch]] = {}
    seen_runtime = set()
    for segment, evidence in zip(segments, requests, strict=True):
        starts = evidence.all_launches()
        for launch in starts:
            found = launches.setdefault(segment.config, [])
            if launch not in found and len(found) < 16:
                found.append(launch)
        if evidence.launches:
            seen_runtime.add("ggml")
        seen_runtime.update("mlx" if c.source == "mlx_log" else "ggml"
                            for c in evidence.counters)
        if segment.counted:
            mine = trial_counters.setdefault(segment.config, [])
            shared = crowded and evidence.requests > 1
            if shared:  # another client's counters may be in this window
                foreign.append(f"{segment.config} trial {len(mine) + 1}")
            mine.append(None if shared else evidence.trial_counters())
            reloaded.setdefault(segment.config, []).append(bool(evidence.launches))
    counters = {name: totals for name, per_trial in trial_counters.items()
                if (totals := counter_totals(per_trial)) is not None}
    # The log's own lines decide; the pre-flight's guess (model format) otherwise.
    found_runtime = ("mlx" if "mlx" in seen_runtime else "ggml") if seen_runtime else runtime
    return EngineReport(counters=counters, log_read=True, launches=launches,
                        trial_counters=trial_counters, reloaded=reloaded,
                        runtime=found_runtime, log_status="read", foreign=foreign)
