"""Registers every command group on the app. Each group lives in its own module."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from specsubmit.cli import run_cmd

    run_cmd.register(app)

    from specsubmit.cli import fingerprint_cmd, keys_cmd, results_cmd, submit_cmd

    fingerprint_cmd.register(app)
    keys_cmd.register(app)
    submit_cmd.register(app)
    results_cmd.register(app)
