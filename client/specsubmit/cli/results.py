"""`specsubmit results list [--json]`: local results and what became of each."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from specsubmit.outside_text import visible

results_app = typer.Typer(help="Your saved results.", no_args_is_help=True)


@results_app.command("list")
def list_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Status of each saved result: submitted, pending, incomplete or not submitted."""
    from specsubmit.local import check_state_home, list_results

    check_state_home()
    entries = list_results()
    if json_out:
        typer.echo(json.dumps([entry.as_json() for entry in entries], indent=2))
        return
    if not entries:
        typer.echo("no saved results")
        return
    for entry in entries:  # every field was read from files: shown through visible
        created = visible((entry.created_at or "")[:16].replace("T", " "), 16)
        typer.echo(f"{visible(entry.submission_id, 80)}  {created:16}  "
                   f"{visible(entry.status, 20):13}  {visible(entry.chip or '-', 120)}  "
                   f"{visible(entry.protocol or '-', 80)}")
        if entry.url or entry.detail:
            typer.echo(f"    {visible(entry.url or entry.detail, 2048)}")


def register(app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
