"""``specserver disputes``: the groups whose recent cohorts disagree with their established
contributors, and settling one (``accept`` or ``hide`` a cohort), through the admin API of
the running server or of the store opened here (``cli/admin_client.py``).

A disputed group publishes its established side's median until it is settled
(docs/aggregation.md, "Disputes"; docs/maintainers.md, "Disputes").
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from specserver.cli.admin import (
    ActorOpt,
    DatabaseOpt,
    ServerOpt,
    TokenOpt,
    _action_line,
    _run,
    format_table,
)
from specserver.cli.admin_client import connect

CohortArg = Annotated[str, typer.Argument(help="the cohort's first key id (64 hex), as listed")]
ReasonOpt = Annotated[str, typer.Option(help="why (recorded in the audit log)")]


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def dispute_rows(items: list[dict[str, Any]]) -> list[list[Any]]:
    """One line per disputed group: both sides, what is published, the recent cohorts."""
    return [[item["label"], _speedup(item["median_speedup"]),
             f"{_speedup(item['established']['median_speedup'])} "
             f"({item['established']['contributors']})",
             f"{_speedup(item['recent']['median_speedup'])} "
             f"({item['recent']['contributors']})",
             " ".join(item["recent"]["cohorts"])] for item in items]


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Disputed groups: recent cohorts against established "
                             "contributors, and settling them.", no_args_is_help=False)

    @group.callback(invoke_without_command=True)
    def disputes(
        ctx: typer.Context,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """List the disputed groups of the leaderboard, the widest disagreement first: the
        published median (the established side's), each side's median and contributors, and
        the recent cohorts to accept or hide."""
        if ctx.invoked_subcommand is not None:
            return

        def work() -> list[dict[str, Any]]:
            with connect(server, token, database, actor) as admin:
                return admin.disputes()

        items = _run(work)
        if as_json:
            typer.echo(json.dumps(items, default=str, indent=2))
            return
        if not items:
            typer.echo("no disputed group")
            return
        typer.echo(format_table(["group", "published", "established (n)", "recent (n)",
                                 "recent cohorts"], dispute_rows(items)))

    def _settle(how: str, cohort: str, reason: str, server: str | None, token: str | None,
                database: str | None, actor: str) -> None:
        def work() -> dict[str, Any]:
            with connect(server, token, database, actor) as admin:
                return admin.settle(how, cohort, reason)

        result = _run(work)
        typer.echo(_action_line(result))
        if how == "hide":
            typer.echo(f"  {len(result['hidden'])} submission(s) of {len(result['keys'])} "
                       "key(s) hidden")

    @group.command("accept")
    def accept(cohort: CohortArg, reason: ReasonOpt, server: ServerOpt = None,
               token: TokenOpt = None, database: DatabaseOpt = None,
               actor: ActorOpt = "maintainer") -> None:
        """Count a cohort as established from now on: its results join the published
        median."""
        _settle("accept", cohort, reason, server, token, database, actor)

    @group.command("hide")
    def hide(cohort: CohortArg, reason: ReasonOpt, server: ServerOpt = None,
             token: TokenOpt = None, database: DatabaseOpt = None,
             actor: ActorOpt = "maintainer") -> None:
        """Hide every visible submission of a cohort's keys (each one audited; `unhide`
        shows one again)."""
        _settle("hide", cohort, reason, server, token, database, actor)

    app.add_typer(group, name="disputes")
