"""`specsubmit probe` and `specsubmit advise`: this machine's cost of checking several
tokens at once, and the speedups it predicts.

A probe measures with the target alone (``specschema.probe``) and, with ``--server``, is
signed and sent like a result (``send.probe``: the same key and consent). ``advise
--result FILE`` combines the newest probe of a result's target with that result's own
acceptance per draft position (``specschema.advice``); ``advise --target NAME --server
URL`` asks the server for the crowd's prediction for this machine (``cli.prediction``).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from specschema.advice import predictions, recommendation
from specschema.domains import domain_label
from specschema.probe import CostProbe
from specsubmit.engines import RunListener, RunSettings, adapter, engine_options
from specsubmit.errors import UsageError
from specsubmit.run import report_console


class _Phases(RunListener):
    def __init__(self, console: Console) -> None:
        self.console = console

    def phase(self, message: str) -> None:
        self.console.print(message, highlight=False, markup=False)

    def warning(self, message: str) -> None:
        self.console.print(f"warning: {message}", highlight=False, markup=False)


def send_probe_command(*, saved: Path, server: str | None, assume_yes: bool) -> None:
    from specsubmit.local import load_probe
    from specsubmit.send import offer_probe, resolve_server

    if resolve_server(server) is None:
        raise UsageError("--send needs a server: pass --server URL or set SPECSUBMIT_SERVER")
    offer_probe(load_probe(saved.expanduser()), saved, assume_yes=assume_yes,
                no_submit=False, server=server)


def probe_command(*, target: str | None, engine: str, llama_server: Path | None,
                  ollama_models: Path | None, llama_threads: int | None,
                  json_out: bool, server: str | None = None, assume_yes: bool = False,
                  no_submit: bool = False) -> None:
    from specschema import get_protocol
    from specsubmit.local import check_state_home, engine_lock, save_probe
    from specsubmit.run import default_fingerprint
    from specsubmit.send import offer_probe, resolve_server

    if target is None:
        raise UsageError("--target is needed to measure a probe (or --send FILE to send one)")

    chosen = adapter(engine)
    if chosen.probe is None:
        raise UsageError(f"the probe runs on llama-server only for now, not {engine}")
    options = engine_options(chosen, {"--llama-server": llama_server,
                                      "--ollama-models": ollama_models,
                                      "--llama-threads": llama_threads})
    check_state_home()
    # The general protocol's baseline: the same launch settings as its runs.
    protocol = get_protocol("llamacpp-map").for_run({"configs": "ngram_simple_m8"})
    settings = RunSettings(protocol=protocol, target=target)
    err = Console(stderr=True)
    address, label = chosen.lock(options)
    with engine_lock(address, label):
        probe = chosen.probe(settings, options, default_fingerprint(), _Phases(err),
                             threading.Event())
    path = save_probe(probe)
    if json_out:
        sys.stdout.write(probe.model_dump_json(indent=2) + "\n")
    else:
        _show_probe(probe, report_console())
    err.print(f"probe saved to {path}", soft_wrap=True, highlight=False, markup=False)
    if resolve_server(server) is not None or no_submit:
        offer_probe(probe, path, assume_yes=assume_yes, no_submit=no_submit, server=server)


def _show_probe(probe: CostProbe, console: Console) -> None:
    curve = probe.curve()
    step = curve.at(1)
    table = Table(title="The target's cost of checking k tokens at once",
                  caption=f"k = 1: one decoding step ({step * 1000:.1f} ms); k > 1: "
                          + ("one speculative round checking k tokens"
                             if probe.measured == "verification" else
                             "a prefill of k new tokens after the context (an older "
                             "probe: it reads low)"))
    for column in ("k", "ms", "x one step"):
        table.add_column(column, justify="right")
    for k in sorted(curve.seconds):
        table.add_row(str(k), f"{curve.seconds[k] * 1000:.1f}", f"{curve.seconds[k] / step:.2f}")
    console.print(table)


def advise_command(*, result: Path, probe_file: Path | None, json_out: bool) -> None:
    from specsubmit.local import load_probe, load_result, newest_probe

    submission = load_result(result.expanduser())
    target = submission.models[0]
    probe = (load_probe(probe_file.expanduser()) if probe_file is not None
             else newest_probe(target.digest))
    if probe is None:
        raise UsageError(f"no probe of this result's target ({target.name}) was found: run "
                         "`specsubmit probe --target MODEL` with the same model file first")
    if probe.target.digest != target.digest:
        raise UsageError(f"the probe measured {probe.target.name}, not this result's target "
                         f"{target.name}")
    found = predictions(submission, probe.curve())
    answer = recommendation(found)
    if json_out:
        sys.stdout.write(json.dumps({
            "probe_id": str(probe.probe_id), "submission_id": str(submission.submission_id),
            "acceptance_from": "this result", "recommendation": answer,
            "predictions": [{"config": p.config, "depth": p.depth, "predicted": p.predicted,
                             "textbook": p.textbook, "measured": p.measured,
                             "by_domain": p.by_domain, "why": p.why or None}
                            for p in found]}, indent=2) + "\n")
        return
    console = report_console()
    domains = list(dict.fromkeys(d for p in found for d in p.by_domain))
    table = Table(title="Predicted decode speedup on this machine",
                  caption="from this result's acceptance per draft position and this "
                          "machine's probe; measured: this result, at the depth it ran")
    for column in ("Config", "Depth", "Predicted", "Measured", "Textbook",
                   *(domain_label(d) for d in domains)):
        table.add_column(column, justify="left" if column == "Config" else "right")
    for p in found:
        if p.predicted is None:
            table.add_row(p.config, "—", "not predicted", "", "", *([""] * len(domains)))
            continue
        table.add_row(p.config, str(p.depth), f"{p.predicted:.2f}x",
                      "" if p.measured is None else f"{p.measured:.2f}x",
                      "" if p.textbook is None else f"{p.textbook:.2f}x",
                      *(f"{p.by_domain[d]:.2f}x" if d in p.by_domain else "—"
                        for d in domains))
    console.print(table)
    for p in found:
        if p.predicted is None:
            console.print(f"{p.config}: not predicted: {p.why}", highlight=False, markup=False)
    console.print(answer, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe(
        target: Annotated[str | None, typer.Option("--target", help="The target model: an "
                                                   "Ollama name or a GGUF file.")] = None,
        engine: Annotated[str, typer.Option("--engine", envvar="SPECSUBMIT_ENGINE",
                                            help="The engine to probe.")] = "llama-server",
        llama_server: Annotated[Path | None, typer.Option(
            "--llama-server", envvar="SPECSUBMIT_LLAMA_SERVER",
            help="llama-server binary.")] = None,
        ollama_models: Annotated[Path | None, typer.Option(
            "--ollama-models", help="Ollama models folder to read models from.")] = None,
        llama_threads: Annotated[int | None, typer.Option(
            "--llama-threads", envvar="SPECSUBMIT_LLAMA_THREADS",
            help="llama-server --threads.")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print the probe as JSON.")]
        = False,
        server: Annotated[str | None, typer.Option(
            "--server", envvar="SPECSUBMIT_SERVER",
            help="Send the probe there, after showing what it holds.")] = None,
        assume_yes: Annotated[bool, typer.Option("--yes", help="Send without asking.")]
        = False,
        no_submit: Annotated[bool, typer.Option("--no-submit", help="Never send.")] = False,
        send: Annotated[Path | None, typer.Option(
            "--send", help="Send a saved probe instead of measuring one.")] = None,
    ) -> None:
        """Measure this machine's cost of checking several tokens at once (target only)."""
        if send is not None:
            send_probe_command(saved=send, server=server, assume_yes=assume_yes)
            return
        probe_command(target=target, engine=engine, llama_server=llama_server,
                      ollama_models=ollama_models, llama_threads=llama_threads,
                      json_out=json_out, server=server, assume_yes=assume_yes,
                      no_submit=no_submit)

    @app.command("advise")
    def advise(
        result: Annotated[Path | None, typer.Option(
            "--result", help="A saved result with acceptance per draft position.")] = None,
        target: Annotated[str | None, typer.Option(
            "--target", help="The target model (a name, a sha256 digest or a GGUF file): "
                             "predict from the crowd's acceptance on --server.")] = None,
        server: Annotated[str | None, typer.Option(
            "--server", envvar="SPECSUBMIT_SERVER", help="The server to ask.")] = None,
        domain: Annotated[str | None, typer.Option(
            "--domain", help="One kind of work only (code, code_edit, chat, summary, math, "
                             "translation).")] = None,
        probe_file: Annotated[Path | None, typer.Option(
            "--probe", help="A saved probe (default: the newest of the target).")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Predict each mechanism's speedup at each depth on this machine."""
        if (result is None) == (target is None):
            raise UsageError("pass either --result FILE or --target NAME (with --server)")
        if result is not None:
            advise_command(result=result, probe_file=probe_file, json_out=json_out)
            return
        from specsubmit.cli.prediction import advise_server_command
        from specsubmit.send import resolve_server

        chosen = resolve_server(server)
        if chosen is None:
            raise UsageError("--target asks a server: pass --server URL or set "
                             "SPECSUBMIT_SERVER")
        assert target is not None
        advise_server_command(target=target, server=chosen, domain=domain,
                              probe_file=probe_file, json_out=json_out)
