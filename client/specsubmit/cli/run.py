"""`specsubmit run`, `protocols` and `show FILE`.

Thin edge: parses flags, wires the runner to rich progress on stderr, saves the result
first, then renders it. Errors are raised as ``SpecSubmitError``s for ``cli.main``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from specschema import (
    Submission,
)
from specschema.engines import ENGINES
from specschema.payload import submission_bytes
from specsubmit.cli.listener import ConsoleListener
from specsubmit.cli.protocols import for_run, shipped
from specsubmit.engines import (
    ADAPTERS,
    DEFAULT_TIMEOUT_S,
    adapter,
    engine_options,
)
from specsubmit.errors import (
    BudgetTooShort,
    ResultFileError,
    RunAborted,
    SpecSubmitError,
    UsageError,
)
from specsubmit.local import check_state_home, engine_lock, load_result, save_result, write_result
from specsubmit.run import (
    Measured,
    RunSettings,
    decide,
    default_fingerprint,
    plan_lines,
    render_result,
    report_console,
    resolve_target,
    run_protocol,
    too_long_message,
)
from specsubmit.send import check_server, offer_submission, resolve_server


class _CtrlC:
    """First Ctrl-C: stop after the current request. Second: abort now, except while a
    result is being saved (``shield()``): then the abort waits until the file is written,
    so that no Ctrl-C ever costs a trial that finished. Once aborting, further Ctrl-Cs are
    ignored, so that a burst of them still ends in the one-line message and exit 130."""

    def __init__(self, console: Console) -> None:
        self.event = threading.Event()
        self.console = console
        self._previous: object = None
        self._shielded = False
        self._deferred = False
        self._aborting = False
        self._previous_unraisable = sys.unraisablehook

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._aborting:
            return
        if self.event.is_set():
            if self._shielded:
                self._deferred = True
                return
            self._aborting = True
            raise KeyboardInterrupt
        self.event.set()
        self.console.print("[yellow]stopping after the current request "
                           "(press Ctrl-C again to abort at once)[/]")

    @contextlib.contextmanager
    def shield(self) -> Iterator[None]:
        """No KeyboardInterrupt from this handler inside; a deferred one is raised after."""
        self._shielded = True
        try:
            yield
        finally:
            self._shielded = False
        if self._deferred and not self._aborting:
            self._aborting = True
            raise KeyboardInterrupt

    def _unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        # The abort's KeyboardInterrupt can land inside a finalizer (an HTTP stream closed
        # by the garbage collector), where Python swallows it and prints a traceback. The
        # stop event is set by then, so the run still ends after the current request: the
        # traceback is all that would be lost, and it is not the one-line message promised.
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        self._previous_unraisable(unraisable)

    def __enter__(self) -> _CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._previous_unraisable = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        if threading.current_thread() is threading.main_thread():
            sys.unraisablehook = self._previous_unraisable
        if self._aborting and threading.current_thread() is threading.main_thread():
            # On the way out with the one-line message: a late Ctrl-C must not turn it into
            # a traceback.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        elif self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]


def run_command(
    *, protocol_id: str | None, target: str | None, pull: bool, no_submit: bool,
    output: Path | None, json_out: bool, yes: bool, timeout: float,
    print_payload: bool, server: str | None = None, engine: str = "ollama",
    engine_flags: Mapping[str, object] | None = None,
    draft: str | None = None, configs: str | None = None, budget: float | None = None,
) -> None:
    """``engine_flags``: the engine options as given, by flag (None: not given); the
    chosen engine's adapter reads those it owns (``engines.engine_options``)."""
    began = time.monotonic()  # the budget counts from here
    err = Console(stderr=True)
    chosen = adapter(engine)
    protocol, parameters = for_run(shipped(protocol_id or chosen.default_protocol),
                                   engine=chosen.name, draft=draft, configs=configs)
    resolve_target(protocol, target)
    if timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    if budget is not None and not budget > 0:
        raise UsageError("--budget must be a positive number of minutes")
    options = engine_options(chosen, engine_flags or {}, timeout_s=timeout)
    check_state_home()  # before any request: the result has to be saved somewhere
    submit_to = None if no_submit else resolve_server(server)
    if submit_to is not None:
        # Before the minutes of trials, not after them: a typo in --server is said now.
        check_server(submit_to)
    settings = RunSettings(protocol=protocol, target=target, parameters=parameters, pull=pull,
                           assume_yes=yes)
    listener = ConsoleListener(err)
    saved: list[Path] = []  # where the checkpoints went (one file, rewritten per trial)
    trials_saved = 0

    def surviving() -> str:
        """What a failed save (a full disk) leaves: the checkpoint before it, untouched
        (each save replaces the file only once the new one is whole)."""
        if not saved:
            return "no trial was saved"
        return f"the last checkpoint, {trials_saved} trials, is intact at {saved[0]}"

    def checkpoint(partial: Submission) -> None:
        nonlocal trials_saved
        with ctrl_c.shield():
            try:
                path = save_result(partial)
            except ResultFileError as exc:
                raise ResultFileError(f"{exc.message}; {surviving()}") from None
            saved[:] = [path]
            trials_saved = sum(len(config.trials) for config in partial.configs)

    planned_trials = len(protocol.schedule())

    def planner(measured: Measured) -> int | None:
        """The plan, printed before the first trial; fewer rounds when the budget asks."""
        nonlocal planned_trials
        plan = decide(measured, budget_s=None if budget is None else budget * 60,
                      elapsed_s=time.monotonic() - began)
        for line in plan_lines(plan, datetime.now().astimezone()):
            err.print(escape(line), soft_wrap=True, highlight=False)
        if plan.too_long:
            raise BudgetTooShort(too_long_message(plan))
        planned_trials = plan.chosen.trials
        return plan.rounds

    # One run per engine: a second run would read this one's counters (and its load).
    address, label = chosen.lock(options)
    with engine_lock(address, label), _CtrlC(err) as ctrl_c, \
            chosen.open(settings, options) as run_engine:
        try:
            fingerprint = default_fingerprint()
            pre = run_engine.preflight(fingerprint, listener, ctrl_c.event)
            if ctrl_c.event.is_set():
                raise KeyboardInterrupt
            outcome = run_protocol(run_engine, settings, fingerprint=fingerprint, listener=listener,
                                   stop=ctrl_c.event, pre=pre, checkpoint=checkpoint,
                                   planner=planner)
            submission = outcome.submission
            path: Path | None = None
            if outcome.trials_done or not (outcome.error or outcome.interrupted):
                with ctrl_c.shield():  # the final result replaces the last checkpoint
                    try:
                        path = save_result(submission)
                    except ResultFileError as exc:
                        raise ResultFileError(f"{exc.message}; {surviving()}") from None
        except KeyboardInterrupt:
            listener.stop()
            if saved:
                raise RunAborted(
                    f"interrupted after {trials_saved} of {planned_trials} trials; "
                    f"the incomplete result is saved at {saved[0]}") from None
            raise RunAborted("interrupted before any trial ran; nothing was saved") from None
        finally:
            listener.stop()
    if path is None:
        # Nothing was measured: a result without trials would only be clutter.
        if outcome.trials_dropped:
            nothing = (f"nothing was saved: the {outcome.trials_dropped} trials of the first "
                       "block are not a whole block")
            if outcome.error is not None:
                raise type(outcome.error)(f"{outcome.error.message} ({nothing})")
            raise RunAborted(f"interrupted before the first block was whole; {nothing}")
        if outcome.error is not None:
            raise type(outcome.error)(f"{outcome.error.message} (nothing was measured)")
        raise RunAborted("interrupted before any trial ran; nothing was saved")
    if output is not None:
        write_result(submission, output.expanduser())
    if json_out:
        sys.stdout.write(submission_bytes(submission).decode("utf-8") + "\n")
        sys.stdout.flush()
        render_result(submission, report_console(stderr=True))
    else:
        render_result(submission, report_console())
    err.print(f"result saved to {path}" + (f" and {output}" if output else ""), soft_wrap=True)
    dropped = (f" (and {outcome.trials_dropped} of the block cut short, not kept: a block "
               "counts only whole)" if outcome.trials_dropped else "")
    if outcome.error is not None:
        raise type(outcome.error)(
            f"{outcome.error.message}; the partial result "
            f"({outcome.trials_done} of {outcome.trials_planned} trials{dropped}) is saved at "
            f"{path}"
        )
    if outcome.interrupted:
        raise RunAborted(f"interrupted after {outcome.trials_done} of {outcome.trials_planned} "
                         f"trials{dropped}; the incomplete result is saved at {path}")
    offer_submission(submission, path, assume_yes=yes, no_submit=no_submit,
                     print_payload=print_payload, server=server)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        protocol: Annotated[str | None, typer.Option(
            "--protocol", envvar="SPECSUBMIT_PROTOCOL",
            help="Protocol id (see `specsubmit protocols`); default: the engine's own ("
                 + ", ".join(f"{ENGINES[a.name].label}: {a.default_protocol}"
                             for a in ADAPTERS.values()) + ").")] = None,
        target: Annotated[str | None, typer.Option(
            "--target", help="Target model; required by protocols without a default.")] = None,
        ollama: Annotated[str | None, typer.Option(
            "--ollama", envvar="OLLAMA_HOST", help="Ollama URL, parsed like OLLAMA_HOST.")]
        = None,
        pull: Annotated[bool, typer.Option("--pull", help="Pull missing models.")] = False,
        no_submit: Annotated[bool, typer.Option("--no-submit", help="Never send the result.")]
        = False,
        output: Annotated[Path | None, typer.Option(
            "--output", help="Also write the result JSON to this file.")] = None,
        json_out: Annotated[bool, typer.Option(
            "--json", help="Print the result JSON on stdout and nothing else there.")] = False,
        yes: Annotated[bool, typer.Option(
            "--yes", help="Continue past the memory warning; consent to submit.")] = False,
        ollama_log: Annotated[str | None, typer.Option(
            "--ollama-log", envvar="SPECSUBMIT_OLLAMA_LOG",
            help="Ollama server log, read for speculation counters: a path, or a command "
                 "that prints it (e.g. 'journalctl -u ollama', 'docker logs -t ollama'). "
                 "Default: ~/.ollama/logs/server.log (macOS), "
                 "%LOCALAPPDATA%\\Ollama\\server.log (Windows), journalctl -u ollama "
                 "(Linux, when readable).")]
        = None,
        no_log: Annotated[bool, typer.Option(
            "--no-log", help="Run even when no Ollama server log is readable: its drafts "
                             "cannot be confirmed and read as unconfirmed.")] = False,
        timeout: Annotated[float, typer.Option(
            "--timeout", envvar="SPECSUBMIT_TIMEOUT",
            help="Seconds to wait for the engine to send anything.")] = DEFAULT_TIMEOUT_S,
        print_payload: Annotated[bool, typer.Option(
            "--print-payload", help="Show the exact JSON before asking to submit.")] = False,
        server: Annotated[str | None, typer.Option(
            "--server", envvar="SPECSUBMIT_SERVER", help="specatlas server to submit to.")]
        = None,
        engine: Annotated[str, typer.Option(
            "--engine", envvar="SPECSUBMIT_ENGINE",
            help="; ".join(a.summary for a in ADAPTERS.values()) + ".")] = "ollama",
        engine_url: Annotated[str | None, typer.Option(
            "--engine-url", envvar="SPECSUBMIT_ENGINE_URL",
            help="Where an engine reached over HTTP listens, other than Ollama (--ollama); "
                 "default: the engine's own.")] = None,
        llama_server: Annotated[Path | None, typer.Option(
            "--llama-server", envvar="SPECSUBMIT_LLAMA_SERVER",
            help="llama-server binary (default: Ollama's bundled one, else llama-server on "
                 "PATH).")] = None,
        ollama_models: Annotated[Path | None, typer.Option(
            "--ollama-models", help="Ollama models folder to read models from, read-only "
                                    "(default $OLLAMA_MODELS, else ~/.ollama/models).")]
        = None,
        llama_threads: Annotated[int | None, typer.Option(
            "--llama-threads", envvar="SPECSUBMIT_LLAMA_THREADS",
            help="llama-server --threads (default: the physical cores less those busy "
                 "with other work, by the load average; at least 1).")]
        = None,
        draft: Annotated[str | None, typer.Option(
            "--draft", help="A draft model for the protocols that take one (an Ollama name "
                            "or a GGUF file): llamacpp-map.")] = None,
        configs: Annotated[str | None, typer.Option(
            "--configs", help="Run only these configs besides the baseline, comma-separated "
                              "(see `specsubmit protocols`).")] = None,
        budget: Annotated[float | None, typer.Option(
            "--budget", envvar="SPECSUBMIT_BUDGET", metavar="MINUTES",
            help="Minutes the run may take: once every config ran a block, the most "
                 "bracketed rounds whose estimated end fits (at least one); a run not even "
                 "one round fits stops before its first trial. The plan is printed either "
                 "way.")] = None,
    ) -> None:
        """Run a trial protocol against a local engine and save the result."""
        run_command(protocol_id=protocol, target=target, pull=pull,
                    no_submit=no_submit, output=output, json_out=json_out, yes=yes,
                    timeout=timeout, print_payload=print_payload, server=server, engine=engine,
                    engine_flags={"--ollama": ollama, "--ollama-log": ollama_log,
                                  "--no-log": no_log, "--engine-url": engine_url,
                                  "--llama-server": llama_server,
                                  "--ollama-models": ollama_models,
                                  "--llama-threads": llama_threads},
                    draft=draft, configs=configs, budget=budget)

    @app.command("show")
    def show(file: Annotated[Path, typer.Argument(help="A saved result JSON file.")]) -> None:
        """Render a saved result again (tables and verdicts)."""
        render_result(load_result(file.expanduser()), report_console())


__all__ = ["register", "run_command", "SpecSubmitError"]
