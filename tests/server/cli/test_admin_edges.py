"""The rough edges a new maintainer hits first: exports into missing folders or onto folders,
formats from extensions, a store named or refused, the direct mode's checks and audit."""

from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq
import pytest

from tests.server.cli.test_admin import (
    FIXTURE,
    IMPORT_ARGS,
    _no_admin_env,  # noqa: F401 - autouse here too
    cli,
)
from tests.support.liveserver import free_port


@pytest.fixture
def imported_db(tmp_path):
    db = str(tmp_path / "store.duckdb")
    assert cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--database", db).exit_code == 0
    return db


def _single_error(result) -> str:
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_export_into_a_missing_folder_is_one_line(imported_db, tmp_path):
    target = tmp_path / "no" / "such" / "out.csv"
    for where in (["--database", imported_db],
                  ["--server", f"http://127.0.0.1:{free_port()}", "--token", "x"]):
        result = cli("export", str(target), *where)
        assert result.exit_code == 1
        assert _single_error(result) == (
            f"specserver: cannot write {target}: the folder {target.parent} does not exist")
    assert not (tmp_path / "no").exists()


def test_export_takes_its_format_from_the_extension(imported_db, tmp_path):
    for name, fmt in [("a.csv", "csv"), ("a.JSONL", "jsonl"), ("a.ndjson", "jsonl"),
                      ("a.parquet", "parquet")]:
        result = cli("export", str(tmp_path / name), "--database", imported_db)
        assert result.exit_code == 0, result.output
        assert result.stdout.endswith(f"bytes, {fmt})\n")
    csv_rows = list(csv.DictReader(io.StringIO((tmp_path / "a.csv").read_text())))
    jsonl_rows = [json.loads(line) for line in (tmp_path / "a.JSONL").read_text().splitlines()]
    assert len(csv_rows) == len(jsonl_rows) == pq.read_table(tmp_path / "a.parquet").num_rows == 3
    # An explicit --format wins over the extension.
    assert cli("export", str(tmp_path / "b.data"), "--format", "csv",
               "--database", imported_db).exit_code == 0
    assert (tmp_path / "b.data").read_text().startswith(next(iter(csv_rows[0])))


@pytest.mark.parametrize("name", ["out.xlsx", "out", "out.csv.gz"])
def test_export_refuses_an_extension_it_cannot_tell(imported_db, tmp_path, name):
    result = cli("export", str(tmp_path / name), "--database", imported_db)
    assert result.exit_code == 2
    line = _single_error(result)
    assert line.startswith(f"specserver: cannot tell the format of {name!r} from its extension")
    assert line.endswith("pass --format csv|jsonl|parquet")
    assert not (tmp_path / name).exists()


def test_export_onto_a_folder_is_one_line(imported_db, tmp_path):
    (tmp_path / "taken.csv").mkdir()
    result = cli("export", str(tmp_path / "taken.csv"), "--database", imported_db)
    assert result.exit_code == 1
    assert _single_error(result).startswith(f"specserver: {tmp_path / 'taken.csv'}: ")


def test_query_names_the_store_it_read(imported_db, monkeypatch):
    monkeypatch.setenv("SPECSERVER_DATABASE_URL", imported_db)  # the "default" store here
    result = cli("query", "SELECT count(*) AS n FROM trials")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"specserver: store duckdb:///{imported_db}"]
    assert result.stdout.splitlines()[2].strip() == "15"  # stdout stays the table alone
    stats = cli("stats", "--json")
    assert f"store duckdb:///{imported_db}" in stats.stderr
    assert json.loads(stats.stdout)["trials"] == 15


def test_a_mistyped_database_folder_is_refused_not_created(tmp_path):
    typo = tmp_path / "sotre" / "store.duckdb"
    for command in (["stats"], ["query", "SELECT 1"], ["export", str(tmp_path / "x.csv")]):
        result = cli(*command, "--database", str(typo))
        assert result.exit_code == 1
        assert _single_error(result) == (
            f"specserver: no store at {typo}: the folder {typo.parent} does not exist (a typo?)")
    assert not typo.parent.exists()
    # The folder exists: a new store file is a store like any other (the first import).
    (tmp_path / "store").mkdir()
    fresh = str(tmp_path / "store" / "new.duckdb")
    assert cli("stats", "--database", fresh).exit_code == 0


def test_the_direct_mode_is_the_admin_api_with_its_checks_and_audit(imported_db):
    """Without --server the command runs the admin API of the app in process: the API's
    own checks refuse what the old direct implementation let through (a reason over the
    API's 2,000 characters), and an accepted action is audited under the actor."""
    listed = json.loads(cli("query", "SELECT submission_id FROM submissions", "--json",
                            "--database", imported_db).stdout)
    sid = listed[0]["submission_id"]
    too_long = cli("hide", sid, "--reason", "x" * 2001, "--database", imported_db)
    assert too_long.exit_code == 1
    assert "reason" in _single_error(too_long)
    done = cli("hide", sid, "--reason", "duplicate", "--actor", "alice",
               "--database", imported_db)
    assert done.exit_code == 0 and done.output.strip() == f"hide {sid}: done"
    audit = json.loads(cli("query", "SELECT action, target, actor FROM audit_log "
                           "WHERE action = 'hide'", "--json", "--database", imported_db).stdout)
    assert audit == [{"action": "hide", "target": sid, "actor": "alice"}]
