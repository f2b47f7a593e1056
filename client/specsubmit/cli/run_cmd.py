"""`specsubmit run`, `protocols`, `show` (issue 3)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("protocols")
    def protocols() -> None:
        """List the shipped trial protocols."""
        from specschema import shipped_protocols

        for protocol in shipped_protocols().values():
            typer.echo(f"{protocol.id} v{protocol.version}  {protocol.sha256[:12]}")
