"""The specserver command line: `serve` and the maintainer commands.

Command groups live in their own modules and register themselves here.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="specserver",
    help="specatlas's ingestion and leaderboard server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """specatlas's ingestion and leaderboard server."""


def main(argv: list[str] | None = None) -> None:
    from specserver.cli import serve

    serve.register(app)
    from specserver.cli import admin

    admin.register(app)
    from specserver.cli import disputes

    disputes.register(app)
    from specserver.cli import audit

    audit.register(app)
    app(args=argv)
