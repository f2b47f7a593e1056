"""The run's progress on stderr: rich bars on a terminal, and a heartbeat line while a slow
engine works (a 14B target at a few tokens per second is silent for a minute per trial;
piped into a file or a CI log, rich draws nothing in between, and a run looks hung)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from specschema import Trial
from specsubmit.engines import PullProgress
from specsubmit.outside_text import LINE_LIMIT, visible
from specsubmit.run import RunListener

# Seconds of silence from the engine before the heartbeat says it is still working, and
# between its lines after that.
HEARTBEAT_S = 30.0


class Heartbeat:
    """While something is under way (``begin``), one line every ``interval_s`` of silence
    saying what and for how long; ``end`` stops it. A daemon thread: it never keeps a run
    alive, and it says nothing once the work it names is over."""

    def __init__(self, say: Callable[[str], None], interval_s: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.say, self.interval_s, self.clock = say, interval_s, clock
        self._lock = threading.Lock()
        self._what: str | None = None
        self._since = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, what: str) -> None:
        with self._lock:
            if what != self._what:
                self._what, self._since = what, self.clock()
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._thread.start()

    def end(self) -> None:
        with self._lock:
            self._what = None

    def close(self) -> None:
        self.end()
        self._wake.set()

    def _beat(self) -> None:
        while not self._wake.wait(self.interval_s):
            with self._lock:
                what, since = self._what, self._since
            if what is not None:
                self.say(f"{what}: still working, {self.clock() - since:.0f} s so far")


class ConsoleListener(RunListener):
    """Progress on stderr: the config, trial i/N, elapsed and ETA; pulls in bytes."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=False,
        )
        self.pulls = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), TimeRemainingColumn(), console=console,
        )
        self.task: TaskID | None = None
        self.total: int | None = None  # the run's trials, as the last trial started knew them
        # rich redraws the elapsed time on a terminal; elsewhere the heartbeat speaks.
        self.heartbeat = Heartbeat(self._pulse) if not console.is_terminal else None
        self.pull_tasks: dict[str, TaskID] = {}
        # The displays running now. rich's Progress.stop() prints a newline on a console that
        # is not a terminal even when it never started: stopping only these, once, keeps
        # blank lines from appearing before the error line of a run that failed early.
        self._running: set[str] = set()

    def _start(self, name: str, display: Progress) -> None:
        if name not in self._running:
            display.start()
            self._running.add(name)

    def _stop(self, name: str, display: Progress) -> None:
        if name in self._running:
            self._running.discard(name)
            display.stop()

    def _pulse(self, line: str) -> None:
        self.console.print(f"[dim]{escape(visible(line, LINE_LIMIT))}[/]", highlight=False)

    def _busy(self, what: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.begin(what)

    def warning(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {escape(visible(message, LINE_LIMIT))}")

    def phase(self, message: str) -> None:
        self._busy(message)
        if self.task is None:
            self.console.print(f"[dim]{escape(visible(message, LINE_LIMIT))}[/]")
        else:
            self.progress.update(self.task, description=escape(visible(message, LINE_LIMIT)))

    def stopped_early(self, config: str, drafted: int) -> None:
        self.console.print(escape(visible(
            f"{config}: stopped after the first round by the protocol's rule: none of its "
            f"{drafted:,} drafted tokens accepted, so it cannot speed the model up; its "
            "later blocks do not run", LINE_LIMIT)), highlight=False)

    def launched(self, config: str, command: list[str]) -> None:
        self.console.print(f"[dim]{escape(config)}: {escape(visible(' '.join(command), 4000))}[/]",
                           soft_wrap=True, highlight=False)

    def pull_progress(self, model: str, progress: PullProgress) -> None:
        if model not in self.pull_tasks:
            self._start("pulls", self.pulls)
            self.pull_tasks[model] = self.pulls.add_task(f"pull {escape(visible(model, 120))}",
                                                         total=None)
        task = self.pull_tasks[model]
        if progress.total:
            self.pulls.update(task, total=progress.total, completed=progress.completed or 0,
                              description=f"pull {escape(visible(model, 120))}")
        if progress.status == "success":
            self._stop("pulls", self.pulls)

    def start_trials(self, total: int) -> None:
        self._start("progress", self.progress)
        self.task = self.progress.add_task("warming up", total=total)

    def trial_started(self, position: int, total: int, config: str, index: int) -> None:
        if self.task is None:
            self.start_trials(total)
        assert self.task is not None
        # the run's trials change when its rounds are fixed or a draft stops early
        self.progress.update(self.task, description=f"{config} trial {index + 1}", total=total)
        self.total = total
        self._busy(f"{config} trial {index + 1} of {total}")

    def trial_finished(self, position: int, total: int, config: str, trial: Trial) -> None:
        if self.heartbeat is not None:
            self.heartbeat.end()
        if self.task is not None:
            self.progress.update(self.task, completed=position + 1)

    def stop(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.close()
        self._stop("progress", self.progress)
        self._stop("pulls", self.pulls)
