"""`specsubmit submit FILE` and `specsubmit submit --pending`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specsubmit.errors import SubmissionUndelivered, SubmitError, UsageError

ServerOption = Annotated[str | None, typer.Option(
    "--server", envvar="SPECSUBMIT_SERVER", help="The specatlas server, e.g. https://host.")]


def _stderr(line: str) -> None:  # the log's lines are said beside the result, not in it
    typer.echo(line, err=True)


def submit_file(path: Path, server: str | None, *, yes: bool, print_payload: bool) -> None:
    from specsubmit.local import load_result
    from specsubmit.send import check_on_contact, submit

    submission = load_result(path)
    submit.check_submittable(submission, path)
    target = submit.require_server(server)
    previous = submit.receipt_from_record(str(submission.submission_id))
    if previous is None:
        if not submit.ask_consent(submission, target, assume_yes=yes,
                                  print_payload=print_payload,
                                  say=lambda line: typer.echo(line, err=True)):
            raise typer.Exit(1)
    receipt, again = submit.send_submission(submission, target)
    for line in submit.receipt_lines(receipt, again=again):
        typer.echo(line)
    check_on_contact(target, _stderr)


def submit_pending(server: str | None) -> None:
    from specsubmit.local import outbox
    from specsubmit.send import check_on_contact, submit

    waiting = outbox.list_pending()
    if not waiting:
        typer.echo("nothing pending")
        return
    # Each waits for the server it was meant for, unless --server (or the variable) says
    # another one.
    target = submit.resolve_server(server)
    # read before sending: a delivered envelope's pending file, which names it, is gone
    servers = sorted({where for item in waiting if (where := target or item.server)})
    undelivered, refused = submit.send_pending(target)
    for contacted in servers:
        check_on_contact(contacted, _stderr)
    if refused:  # final: retrying will not change the server's mind
        raise SubmitError(f"{refused} of {len(waiting)} pending results were refused by the "
                          "server" + (f" and {undelivered} not delivered" if undelivered else ""))
    if undelivered:  # exit 75: still waiting in pending/, worth retrying later
        raise SubmissionUndelivered(
            f"{undelivered} of {len(waiting)} pending results were not delivered; they wait "
            "in pending/: retry with `specsubmit submit --pending`")


def register(app: typer.Typer) -> None:
    @app.command("submit")
    def submit_command(
        file: Annotated[Path | None, typer.Argument(help="A saved result (JSON).")] = None,
        pending: Annotated[bool, typer.Option(
            "--pending", help="Retry every signed result waiting in the pending folder.")]
        = False,
        server: ServerOption = None,
        yes: Annotated[bool, typer.Option("--yes", help="Send without asking.")] = False,
        print_payload: Annotated[bool, typer.Option(
            "--print-payload", help="Show the exact JSON before asking.")] = False,
    ) -> None:
        """Sign and send a saved result, or retry the pending ones."""
        if pending == (file is not None):
            raise UsageError("give either a result FILE or --pending")
        from specsubmit.local import check_state_home

        check_state_home()
        if file is not None:
            submit_file(file.expanduser(), server, yes=yes, print_payload=print_payload)
        else:
            submit_pending(server)
