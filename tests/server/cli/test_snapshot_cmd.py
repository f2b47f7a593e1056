"""`specserver snapshot` on a store no server holds (the admin API run in process): it writes
a signed snapshot into SPECSERVER_SNAPSHOT_DIR and says what it wrote; `specserver export`
names the data's licence on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specserver.licence import LICENCE_NAME, LICENCE_URL
from specserver.snapshots import newest
from tests.support.served import Served, settings_for
from tests.support.signed import valid_body


def run_cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    from specserver.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


def test_snapshot_writes_a_signed_snapshot_of_the_store(
        tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    database = tmp_path / "store.duckdb"
    with Served(settings_for(tmp_path, database_url=str(database))) as s:
        s.post(valid_body(seed=5))
    monkeypatch.setenv("SPECSERVER_SNAPSHOT_DIR", str(tmp_path / "snaps"))
    monkeypatch.setenv("SPECSERVER_LOG_KEY_FILE", str(tmp_path / "log-key"))
    monkeypatch.setenv("SPECSERVER_LOG_ORIGIN", "cli.example/log")
    code, out, err = run_cli(["snapshot", "--database", str(database)], capsys)
    assert code == 0, err
    found = newest(tmp_path / "snaps")
    assert found is not None
    manifest, parquet = found
    assert f"wrote snapshot {parquet.name}: 3 rows, log size 1, sha256 " in out
    assert "(CC-BY-4.0)" in out
    assert manifest.read_text().startswith("specatlas snapshot v1\norigin cli.example/log\n")

    code, out, err = run_cli(["export", str(tmp_path / "out.csv"), "--database",
                              str(database)], capsys)
    assert code == 0, err
    assert LICENCE_NAME in err and LICENCE_URL in err
