"""The specsubmit command line. Commands are grouped by noun in sibling modules (``run``,
``protocols``, ``advise``, ``fingerprint``, ``keys``, ``submit``, ``results``), each with a
``register(app)``; this module wires them together and is the one place where errors
become messages."""

from __future__ import annotations

import sys

import typer

from specsubmit.errors import SpecSubmitError
from specsubmit.outside_text import LINE_LIMIT, visible

app = typer.Typer(
    name="specsubmit",
    help="Benchmark speculative decoding on a local inference engine and share the result.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Benchmark speculative decoding on a local inference engine and share the result."""


def _register() -> None:
    # Imported here, not at the top: `import specsubmit.cli` stays cheap for what only needs
    # `main`, and the command modules never import this one.
    from specsubmit.cli import (
        advise,
        fingerprint,
        keys,
        protocols,
        results,
        run,
        submit,
        verify,
    )

    if not app.registered_commands:  # once, however often main() runs in one process
        for group in (run, protocols, advise, fingerprint, keys, submit, results, verify):
            group.register(app)


def _survive_any_encoding() -> None:
    """A terminal that cannot show a character (PYTHONIOENCODING=ascii, a latin-1 locale)
    gets it escaped, not a traceback after a complete run with the result's place unsaid."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> None:
    _survive_any_encoding()
    _register()
    try:
        app(args=argv, standalone_mode=True)
    except SpecSubmitError as exc:
        # Messages quote servers and engines (each quote already passed through visible):
        # the whole line once more, so that no message of any origin reaches the terminal
        # with a control sequence in it, or at any length.
        typer.echo(f"specsubmit: error: {visible(exc.message, LINE_LIMIT)}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("specsubmit: interrupted", err=True)
        sys.exit(130)
