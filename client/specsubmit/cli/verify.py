"""`specsubmit verify [--server URL] [--log-key VKEY]`: every receipt this client holds,
checked against its server's transparency log (``specsubmit.send.logcheck``), the
refusals the server logged (a ``Log-Entry`` answer) too.

Per server: the log's verifier key is pinned on first contact (or given with --log-key,
as the server's operators publish it), the newest checkpoint must extend the one kept from
the last check, and each receipt's entry must be in it. A proof of misbehaviour is printed
(the checkpoints and the failing proof) and the command exits 3; entries the newest
checkpoint does not hold yet exit 75 (try again in a minute).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Annotated

import typer

from specsubmit.errors import LogUnchecked
from specsubmit.outside_text import visible

if TYPE_CHECKING:
    from specsubmit.send import logcheck


def verify_command(
    server: Annotated[str | None, typer.Option(
        "--server", help="Check only this server's log (also with no receipts from it); "
                         "default: $SPECSUBMIT_SERVER, else every server holding a receipt")
    ] = None,
    log_key: Annotated[str | None, typer.Option(
        "--log-key", envvar="SPECSUBMIT_LOG_KEY",
        help="Pin this verifier key for the server's log (as its operators publish it).")
    ] = None,
) -> None:
    """Check every receipt against the server's transparency log."""
    from specsubmit.local import check_state_home, outbox
    from specsubmit.send import logcheck, resolve_server

    check_state_home()
    by_server: dict[str, list[logcheck.Held]] = defaultdict(list)
    target = resolve_server(server)
    if target is not None:
        by_server[target] = []
    for submission_id, record in outbox.submitted_records():
        where = str(record.get("server", ""))
        if not where or (target is not None and where != target):
            continue
        held = logcheck.held_from_record(submission_id, record)
        if held is None:
            typer.echo(f"{visible(submission_id, 80)}: no log entry in its receipt "
                       "(delivered before the server kept a log)")
            continue
        by_server[where].append(held)
    for submission_id, record in outbox.rejected_records():  # refusals the server logged
        where = str(record.get("server", ""))
        held = logcheck.held_from_refusal(submission_id, record)
        if held is not None and where and (target is None or where == target):
            by_server[where].append(held)
    if not by_server:
        typer.echo("no receipts to check; pass --server URL to check a server's log")
        return
    waiting = 0
    for where, items in sorted(by_server.items()):
        with logcheck.HttpLog(where) as fetch:
            waiting += _check_server(where, items, fetch, log_key)
    if waiting:
        raise LogUnchecked(f"{waiting} receipt(s) not in the newest checkpoint yet: run "
                           "`specsubmit verify` again in a minute")


def _check_server(where: str, items: list[logcheck.Held], fetch: logcheck.Fetch,
                  log_key: str | None) -> int:
    """Check one server's log; the number of receipts its checkpoint does not hold yet."""
    from specsubmit.send import keep_checked

    report = keep_checked(where, fetch, items, log_key, typer.echo)
    typer.echo(f"{visible(where, 300)}: checkpoint of {report.checkpoint.size} entries, "
               "consistent with the last one kept")
    for item in report.included:
        typer.echo(f"  {visible(item.submission_id, 80)}: entry {item.index}, included")
    for item in report.not_yet:
        typer.echo(f"  {visible(item.submission_id, 80)}: entry {item.index}, not in "
                   "this checkpoint yet")
    return len(report.not_yet)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_command)
