"""The maintainer commands on the default store: never a new empty file read as an empty
board, and a store kept under its pre-rename name found and named."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specserver.cli import admin


@pytest.fixture(autouse=True)
def _data_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("SPECSERVER_ADMIN_URL", "SPECSERVER_ADMIN_TOKEN", "SPECSERVER_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    return tmp_path / "specserver"


def cli(*args: str):  # noqa: ANN201 - typer's Result
    app = typer.Typer()
    admin.register(app)
    return CliRunner().invoke(app, list(args))


def test_stats_without_a_store_refuses_and_creates_nothing(_data_folder: Path) -> None:
    result = cli("stats")
    assert result.exit_code != 0
    assert f"no store at {_data_folder / 'specatlas.duckdb'} (the default)" in result.output
    assert "--database PATH or --server URL" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (_data_folder / "specatlas.duckdb").exists()


def test_stats_reads_a_default_store_kept_under_the_old_name(_data_folder: Path,
                                                            tmp_path: Path) -> None:
    made = cli("stats", "--database", str(tmp_path / "made.duckdb"))  # asked for: created
    assert made.exit_code == 0, made.output
    _data_folder.mkdir(parents=True)
    (tmp_path / "made.duckdb").rename(_data_folder / "specbench.duckdb")
    result = cli("stats")
    assert result.exit_code == 0, result.output
    assert f"store duckdb:///{_data_folder / 'specbench.duckdb'}" in result.output
    assert "rename it specatlas.duckdb" in result.output
    assert "submissions: 0" in result.output
    assert not (_data_folder / "specatlas.duckdb").exists()
