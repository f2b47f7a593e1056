"""Client test fixtures: every test's state (keys, results, pending, submitted) in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def specsubmit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SPECSUBMIT_HOME and SPECSUBMIT_LOCKS point into tmp_path; SPECSUBMIT_SERVER is unset
    unless a test sets it."""
    home = tmp_path / "specsubmit-home"
    monkeypatch.setenv("SPECSUBMIT_HOME", str(home))
    # The one-run-per-engine locks are machine-wide: each test gets its own folder of them.
    monkeypatch.setenv("SPECSUBMIT_LOCKS", str(tmp_path / "locks"))
    monkeypatch.delenv("SPECSUBMIT_SERVER", raising=False)
    return home
