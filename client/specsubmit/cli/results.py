"""`specsubmit results list [--json]`: local results and what became of each."""

from __future__ import annotations

import json
from typing import Annotated

import typer

results_app = typer.Typer(help="Your saved results.", no_args_is_help=True)


@results_app.command("list")
def list_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Status of each saved result: submitted, pending, incomplete or not submitted."""
    from specsubmit.local.index import list_results

    entries = list_results()
    if json_out:
        typer.echo(json.dumps([entry.as_json() for entry in entries], indent=2))
        return
    if not entries:
        typer.echo("no saved results")
        return
    for entry in entries:
        created = (entry.created_at or "")[:16].replace("T", " ")
        typer.echo(f"{entry.submission_id}  {created:16}  {entry.status:13}  "
                   f"{entry.chip or '-'}  {entry.protocol or '-'}")
        if entry.url or entry.detail:
            typer.echo(f"    {entry.url or entry.detail}")


def register(app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
