"""``specserver audit --from URL``: audit a public server from the outside.

Prints one line per finding, then a summary, then each finding's proof (the server's own
signed and served data, and what is recomputed from it). Exit 0 when everything checks
out, 3 when anything does not, 1 when the server could not be read (no audit happened).
With ``--keep FILE`` the checkpoint of the last audit that passed is kept there, and the
next audit proves the log extends it (an auditor that keeps nothing cannot see a log
truncated and regrown, or two histories shown at two times).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specserver.audit import AuditReport, AuditUnreachable, PublicSource, audit

MISBEHAVIOUR_EXIT = 3


def print_report(report: AuditReport) -> None:
    for finding in report.findings:
        typer.echo(finding.line())
    for line in report.notes:
        typer.echo(f"note: {line}")
    typer.echo(report.summary())
    for number, finding in enumerate(report.findings, 1):
        if finding.proof:
            typer.echo(f"\nproof {number} ({finding.subject}, {finding.kind}):")
            for line in finding.proof:
                typer.echo(f"  {line}")


def register(app: typer.Typer) -> None:
    @app.command("audit")
    def audit_command(
        url: Annotated[str, typer.Option(
            "--from", envvar="SPECSERVER_AUDIT_URL", help="the public server's base URL")],
        log_key: Annotated[str | None, typer.Option(
            "--log-key", envvar="SPECSERVER_AUDIT_LOG_KEY",
            help="the log's verifier key (name+id+key), from a source you trust; default: "
                 "the one the server serves at /log/key")] = None,
        keep: Annotated[Path | None, typer.Option(
            "--keep", envvar="SPECSERVER_AUDIT_KEEP",
            help="file keeping the checkpoint of the last audit that passed; the log must "
                 "extend it")] = None,
        settle_s: Annotated[float, typer.Option(
            "--settle-s", envvar="SPECSERVER_AUDIT_SETTLE_S", min=0, max=600,
            help="when the public list shows submissions the signed checkpoint does not "
                 "hold yet, copy the log again after this long (checkpoints are signed "
                 "every few seconds)")] = 5.0,
    ) -> None:
        """Copy the transparency log, recompute its root and check it against the public
        data and the newest signed snapshot."""
        if not url.startswith(("http://", "https://")):
            typer.echo("specserver: --from takes the server's URL (http:// or https://)",
                       err=True)
            raise typer.Exit(2)
        try:
            kept = keep.read_bytes() if keep is not None and keep.exists() else None
        except OSError as exc:
            typer.echo(f"specserver: cannot read {keep}: {exc.strerror}", err=True)
            raise typer.Exit(1) from None
        source = PublicSource.for_url(url)
        try:
            report = audit(source, log_key, kept, settle_s)
        except AuditUnreachable as exc:
            typer.echo(f"specserver: {exc.message}", err=True)
            raise typer.Exit(1) from None
        finally:
            source.close()
        print_report(report)
        if not report.ok:
            raise typer.Exit(MISBEHAVIOUR_EXIT)
        if keep is not None and report.checkpoint is not None:
            partial = keep.with_name(keep.name + ".partial")
            try:
                partial.write_bytes(report.checkpoint)
                partial.replace(keep)
            except OSError as exc:
                typer.echo(f"specserver: the audit passed, but its checkpoint cannot be kept "
                           f"in {keep}: {exc.strerror}", err=True)
                raise typer.Exit(1) from None
