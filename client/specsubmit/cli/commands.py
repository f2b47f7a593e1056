"""Registers every command group on the app. Each group lives in its own module."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from specsubmit.cli import run_cmd

    run_cmd.register(app)
