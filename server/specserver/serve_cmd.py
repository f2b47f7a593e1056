"""`specserver serve` (issue 5)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve() -> None:
        """Start the server (not built yet)."""
        raise typer.Exit(1)
