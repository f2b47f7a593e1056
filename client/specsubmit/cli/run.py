"""`specsubmit run`, `protocols` and `show FILE` (issue 3).

Thin edge: parses flags, wires the runner to rich progress on stderr, saves the result
first, then renders it. Errors are raised as ``SpecSubmitError``s for ``cli.main``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.padding import Padding
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

from specschema import Protocol, ProtocolError, Trial, get_protocol, shipped_protocols
from specschema.payload import submission_bytes
from specsubmit.engines.ollama.client import DEFAULT_TIMEOUT_S, OllamaClient, PullProgress
from specsubmit.engines.ollama.host import parse_ollama_host
from specsubmit.errors import RunAborted, SpecSubmitError, UsageError
from specsubmit.local.results import load_result, save_result, write_result
from specsubmit.run.report import render_result, report_console
from specsubmit.run.runner import (
    RunListener,
    RunSettings,
    default_fingerprint,
    preflight,
    resolve_target,
    run_protocol,
)
from specsubmit.send.submit import offer_submission


def default_log_path() -> Path:
    """Where Ollama writes its server log: macOS ~/.ollama/logs, Windows %LOCALAPPDATA%.
    On Linux it goes to journald; pass a file with --ollama-log (for example one that
    `journalctl -u ollama -f > ollama.log` is writing during the run)."""
    local = os.environ.get("LOCALAPPDATA")
    if os.name == "nt" and local:
        return Path(local) / "Ollama" / "server.log"
    return Path("~/.ollama/logs/server.log").expanduser()


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
        self.pull_tasks: dict[str, TaskID] = {}

    def warning(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}")

    def phase(self, message: str) -> None:
        if self.task is None:
            self.console.print(f"[dim]{message}[/]")
        else:
            self.progress.update(self.task, description=message)

    def pull_progress(self, model: str, progress: PullProgress) -> None:
        if model not in self.pull_tasks:
            self.pulls.start()
            self.pull_tasks[model] = self.pulls.add_task(f"pull {model}", total=None)
        task = self.pull_tasks[model]
        if progress.total:
            self.pulls.update(task, total=progress.total, completed=progress.completed or 0,
                              description=f"pull {model}")
        if progress.status == "success":
            self.pulls.stop()

    def start_trials(self, total: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task("warming up", total=total)

    def trial_started(self, position: int, total: int, config: str, index: int) -> None:
        if self.task is None:
            self.start_trials(total)
        assert self.task is not None
        self.progress.update(self.task, description=f"{config} trial {index + 1}")

    def trial_finished(self, position: int, total: int, config: str, trial: Trial) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=position + 1)

    def stop(self) -> None:
        self.progress.stop()
        self.pulls.stop()


class _CtrlC:
    """First Ctrl-C: stop after the current request. Second: abort now."""

    def __init__(self, console: Console) -> None:
        self.event = threading.Event()
        self.console = console
        self._previous: object = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()
        self.console.print("[yellow]stopping after the current request "
                           "(press Ctrl-C again to abort at once)[/]")

    def __enter__(self) -> _CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]


def _protocol(protocol_id: str) -> Protocol:
    try:
        return get_protocol(protocol_id)
    except ProtocolError as exc:
        raise UsageError(exc.message) from None


def _log_path(option: Path | None) -> Path | None:
    if option is not None:
        return option.expanduser()
    default = default_log_path()
    return default if default.exists() else None


def run_command(
    *, protocol_id: str, target: str | None, ollama: str | None, pull: bool, no_submit: bool,
    output: Path | None, json_out: bool, yes: bool, ollama_log: Path | None, timeout: float,
    print_payload: bool, server: str | None = None,
) -> None:
    err = Console(stderr=True)
    protocol = _protocol(protocol_id)
    resolve_target(protocol, target)
    if timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    base_url = parse_ollama_host(ollama)
    settings = RunSettings(protocol=protocol, target=target, pull=pull, assume_yes=yes,
                           log_path=_log_path(ollama_log))
    listener = ConsoleListener(err)
    with _CtrlC(err) as ctrl_c, OllamaClient(base_url, timeout_s=timeout) as client:
        try:
            fingerprint = default_fingerprint()
            pre = preflight(client, settings, fingerprint, listener, ctrl_c.event)
            if ctrl_c.event.is_set():
                raise KeyboardInterrupt
            outcome = run_protocol(client, settings, fingerprint=fingerprint, listener=listener,
                                   stop=ctrl_c.event, pre=pre)
        except KeyboardInterrupt:
            listener.stop()
            raise RunAborted("interrupted before any trial ran; nothing was saved") from None
        finally:
            listener.stop()
    submission = outcome.submission
    if outcome.trials_done == 0 and (outcome.error or outcome.interrupted):
        # Nothing was measured: a result without trials would only be clutter.
        if outcome.error is not None:
            raise type(outcome.error)(f"{outcome.error.message} (nothing was measured)")
        raise RunAborted("interrupted before any trial ran; nothing was saved")
    path = save_result(submission)
    if output is not None:
        write_result(submission, output.expanduser())
    if json_out:
        sys.stdout.write(submission_bytes(submission).decode("utf-8") + "\n")
        sys.stdout.flush()
        render_result(submission, report_console(stderr=True))
    else:
        render_result(submission, report_console())
    err.print(f"result saved to {path}" + (f" and {output}" if output else ""), soft_wrap=True)
    if outcome.error is not None:
        raise type(outcome.error)(
            f"{outcome.error.message}; the partial result "
            f"({outcome.trials_done} of {outcome.trials_planned} trials) is saved at {path}"
        )
    if outcome.interrupted:
        raise RunAborted(f"interrupted after {outcome.trials_done} of {outcome.trials_planned} "
                         f"trials; the incomplete result is saved at {path}")
    offer_submission(submission, path, assume_yes=yes, no_submit=no_submit,
                     print_payload=print_payload, server=server)


def _describe(protocol: Protocol, console: Console) -> None:
    console.print(f"[bold]{protocol.id}[/] v{protocol.version}  sha256 {protocol.sha256[:12]}")
    def indented(text: str) -> None:
        console.print(Padding(text, (0, 0, 0, 2), expand=False), highlight=False)

    indented(protocol.description)
    indented(f"target: {protocol.target or 'required: --target MODEL'}")
    for config in protocol.configs:
        extra = {**config.extra_options, **config.request_fields}
        fields = ", ".join(f"{k}={v}" for k, v in extra.items()) or "no extra options"
        indented(f"- {config.name} ({config.role}, {config.mechanism}): {fields}")
    indented(f"{protocol.warmups_per_config} warm-up + {protocol.trials_per_config} trials "
             f"per config, {protocol.order} order, num_predict {protocol.options.num_predict}")
    req = protocol.requirements
    needs = [f"Ollama >= {v} for {k}" for k, v in req.min_engine_version.items()]
    if req.memory_bytes:
        needs.append(f"about {req.memory_bytes / 1e9:.0f} GB of memory")
    if req.target_note:
        needs.append(f"target: {req.target_note}")
    indented(f"requires: {'; '.join(needs) or 'nothing special'}")
    console.print()


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        protocol: Annotated[str, typer.Option("--protocol", envvar="SPECSUBMIT_PROTOCOL",
                                              help="Protocol id (see `specsubmit protocols`).")]
        = "hardnumbers-m2",
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
        ollama_log: Annotated[Path | None, typer.Option(
            "--ollama-log", envvar="SPECSUBMIT_OLLAMA_LOG",
            help="Ollama server log, read for speculation counters (default "
                 "~/.ollama/logs/server.log when it exists; on Linux pass the file that "
                 "`journalctl -u ollama -f` writes during the run).")]
        = None,
        timeout: Annotated[float, typer.Option(
            "--timeout", envvar="SPECSUBMIT_TIMEOUT",
            help="Seconds to wait for Ollama to send anything.")] = DEFAULT_TIMEOUT_S,
        print_payload: Annotated[bool, typer.Option(
            "--print-payload", help="Show the exact JSON before asking to submit.")] = False,
        server: Annotated[str | None, typer.Option(
            "--server", envvar="SPECSUBMIT_SERVER", help="specbench server to submit to.")]
        = None,
    ) -> None:
        """Run a trial protocol against the local Ollama and save the result."""
        run_command(protocol_id=protocol, target=target, ollama=ollama, pull=pull,
                    no_submit=no_submit, output=output, json_out=json_out, yes=yes,
                    ollama_log=ollama_log, timeout=timeout, print_payload=print_payload,
                    server=server)

    @app.command("protocols")
    def protocols() -> None:
        """List the shipped trial protocols."""
        console = Console()
        for proto in shipped_protocols().values():
            _describe(proto, console)

    @app.command("show")
    def show(file: Annotated[Path, typer.Argument(help="A saved result JSON file.")]) -> None:
        """Render a saved result again (tables and verdicts)."""
        render_result(load_result(file.expanduser()), report_console())


__all__ = ["register", "run_command", "SpecSubmitError"]
