"""docs/run.md covers every option of `specsubmit run` (docs that cannot drift)."""

from __future__ import annotations

from pathlib import Path

import typer.main

from specsubmit.cli import _register, app

DOC = Path(__file__).resolve().parents[3] / "docs" / "run.md"


def test_every_run_option_is_documented() -> None:
    _register()
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    text = DOC.read_text()
    options = [opt for param in command.params for opt in param.opts if opt.startswith("--")]
    assert "--ollama-log" in options and len(options) >= 12
    for option in options:
        assert f"`{option}" in text, option
    for param in command.params:
        if getattr(param, "envvar", None):
            assert f"`{param.envvar}`" in text, param.envvar
