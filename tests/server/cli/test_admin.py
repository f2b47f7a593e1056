"""Maintainer tools: Hard Numbers import, read-only query, moderation, export, stats.

Through the admin API of a real server (uvicorn on loopback), through the CLI on a store no
server holds, and against a server in another process (DuckDB's single-process rule).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from specschema.envelope import envelope_bytes, key_id_of, sign_envelope
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.payload import submission_bytes
from specschema.protocol_files import get_protocol
from specschema.stats import median
from specserver.cli import admin
from specserver.http.app import create_app
from specserver.ingest import hardnumbers
from specserver.settings import ServerSettings
from specserver.store import adhoc
from tests.support.liveserver import free_port, serve

FIXTURE = Path(__file__).parents[1] / "data" / "hardnumbers_spec_decode_m2.json"
TOKEN = "test-admin-token"
IMPORT_ARGS = ["--chip", "Apple M2", "--memory-gb", "24", "--ollama-version", "0.12.8",
               "--os", "macos", "--source", "hardnumbers-experiments spec-decode-m2"]


@pytest.fixture(autouse=True)
def _no_admin_env(monkeypatch):
    for name in ("SPECSERVER_ADMIN_URL", "SPECSERVER_ADMIN_TOKEN", "SPECSERVER_DATABASE_URL",
                 "SPECSERVER_ADMIN_ACTOR"):
        monkeypatch.delenv(name, raising=False)


def cli(*args: str):
    app = typer.Typer()
    admin.register(app)
    return CliRunner().invoke(app, list(args))


def signed(seed: int, key_seed: int, **kwargs) -> tuple[bytes, str]:
    import hashlib

    import nacl.signing

    key = nacl.signing.SigningKey(hashlib.sha256(f"admin-key-{key_seed}".encode()).digest())
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             counters_seen=True, draft_speedups={"spec_4": 1.3}, **kwargs)
    body = envelope_bytes(sign_envelope(submission_bytes(sub), key))
    return body, key_id_of(bytes(key.verify_key))


@pytest.fixture
def server(tmp_path):
    settings = ServerSettings(database_url=str(tmp_path / "store.duckdb"), admin_token=TOKEN)
    with serve(create_app(settings)) as url:
        yield url


def post_submissions(url: str, count: int) -> list[tuple[str, str]]:
    stored = []
    for i in range(count):
        body, key_id = signed(i, i % 3, machine=EXAMPLE_MACHINES[0])
        response = httpx.post(f"{url}/v1/submissions", content=body,
                              headers={"Content-Type": "application/json"})
        assert response.status_code == 201, response.text
        stored.append((response.json()["submission_id"], key_id))
    return stored


# --- Hard Numbers import ------------------------------------------------------------------


def test_import_reproduces_the_files_own_medians(tmp_path):
    db = str(tmp_path / "store.duckdb")
    result = cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--database", db)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("imported ")
    # The drafts were not applied: their ratios are said as noise, never as speedups.
    assert "speedup" not in result.output
    assert "not_applied  ratio 0.95x, noise" in result.output
    data = json.loads(FIXTURE.read_text())
    out = cli("query", "SELECT * FROM summaries ORDER BY config_name", "--json", "--database", db)
    assert out.exit_code == 0, out.output
    summaries = {s["config_name"]: s for s in json.loads(out.stdout)}
    assert set(summaries) == {"no_draft", "draft_qwen2.5_0.5b", "draft_qwen2.5_1.5b"}
    for name, summary in summaries.items():
        trials = [r for r in data["results"] if r["config"] == name]
        assert len(trials) == 5
        assert summary["median_wall_s"] == median([t["wall_s"] for t in trials])
        assert summary["median_eval_s"] == median([t["eval_duration_s"] for t in trials])
        # The file's tok_per_s is eval_count / eval_duration_s at full precision.
        assert summary["median_tps"] == pytest.approx(
            median([t["tok_per_s"] for t in trials]), rel=1e-12)
        assert summary["observed"] == "not_applied"
    # ... and the published article's headline (the fixture is the real published file, see
    # data/hardnumbers_spec_decode_m2.json.provenance): eval 50.1 / 52.8 / 55.9 s, 0.95x, 0.90x.
    assert [round(summaries[n]["median_eval_s"], 1) for n in
            ("no_draft", "draft_qwen2.5_0.5b", "draft_qwen2.5_1.5b")] == [50.1, 52.8, 55.9]
    assert round(summaries["draft_qwen2.5_0.5b"]["speedup_tps"], 2) == 0.95
    assert round(summaries["draft_qwen2.5_1.5b"]["speedup_tps"], 2) == 0.90
    row = json.loads(cli("query", "SELECT key_id, source, source_note, protocol_id, chip, "
                         "memory_gb, engine_version FROM submissions", "--json",
                         "--database", db).stdout)[0]
    assert row["key_id"] is None and row["source"] == "imported"
    assert "spec-decode-m2" in row["source_note"]
    assert (row["protocol_id"], row["chip"], row["memory_gb"], row["engine_version"]) == (
        "hardnumbers-m2", "Apple M2", 24, "0.12.8")
    trials = json.loads(cli("query", "SELECT count(*) AS n FROM trials", "--json",
                            "--database", db).stdout)
    assert trials == [{"n": 15}]
    audit = json.loads(cli("query", "SELECT action, reason FROM audit_log WHERE action <> "
                           "'query'", "--json", "--database", db).stdout)
    assert audit == [{"action": "import", "reason": "hardnumbers-experiments spec-decode-m2"}]
    again = cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--database", db)
    assert again.exit_code == 1
    assert "already imported" in again.output and "Traceback" not in again.output


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(target="llama3:8b"), "target"),
    (lambda d: d["results"].pop(), "without 5 trials"),
    (lambda d: d["results"][0].update(tok_per_s=9.99), "tok_per_s"),
    (lambda d: d["results"][0].update(config="draft_llama"), "unknown config"),
    (lambda d: d["results"][1].update(eval_duration_s=-1), "eval_duration_s"),
    (lambda d: d.pop("results"), "missing keys"),
])
def test_import_refuses_inconsistent_files(edit, message):
    data = json.loads(FIXTURE.read_text())
    edit(data)
    with pytest.raises(hardnumbers.ImportRejected, match=message):
        hardnumbers.build_submission(json.dumps(data).encode(), chip="Apple M2", memory_gb=24,
                                     ollama_version="0.12.8", os_name="macos", source="t")


def test_imported_reference_lands_in_the_noise_floor_view(server):
    result = cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--server", server,
                 "--token", TOKEN)
    assert result.exit_code == 0, result.output
    sid = result.output.split()[1]
    board = httpx.get(f"{server}/v1/leaderboard").json()
    assert board["groups"] == []
    noise = httpx.get(f"{server}/v1/leaderboard", params={"view": "noise_floor"}).json()
    assert {g["key"]["draft"]["config_name"] for g in noise["groups"]} == {
        "draft_qwen2.5_0.5b", "draft_qwen2.5_1.5b"}
    page = httpx.get(f"{server}/submissions/{sid}").text
    assert "Imported reference result" in page and "unsigned" in page


# --- read-only query ----------------------------------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT 1", "  with x as (select 1 as a) select a from x;", "select 'drop table x' as t",
    "SELECT count(*) FROM submissions -- delete everything", "DESCRIBE submissions",
])
def test_read_only_queries_pass_the_screen(sql):
    assert adhoc.single_select(sql)


@pytest.mark.parametrize("sql", [
    "DELETE FROM submissions", "drop table submissions", "SELECT 1; DROP TABLE bans",
    "UPDATE submissions SET hidden = true", "COPY submissions TO '/tmp/x.csv'",
    "WITH x AS (SELECT 1) INSERT INTO bans SELECT * FROM x", "ATTACH 'other.db'",
    "SELECT * INTO backup FROM submissions", "CREATE TABLE t AS SELECT 1", "", "PRAGMA version",
])
def test_writes_are_refused(sql):
    with pytest.raises(adhoc.QueryRefused):
        adhoc.single_select(sql)


def test_query_cli_refuses_writes_and_keeps_data(tmp_path):
    db = str(tmp_path / "store.duckdb")
    assert cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--database", db).exit_code == 0
    refused = cli("query", "DELETE FROM trials", "--database", db)
    assert refused.exit_code == 1
    # The store it opened is named first, then the refusal: one line each.
    assert refused.stderr.splitlines() == [
        f"specserver: store duckdb:///{db}",
        "specserver: only SELECT queries are allowed, not DELETE"]
    table = cli("query", "SELECT config_name, count(*) AS n FROM trials GROUP BY 1 ORDER BY 1",
                "--database", db)
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["config_name", "n"]
    assert [line.split() for line in lines[2:]] == [["draft_qwen2.5_0.5b", "5"],
                                                    ["draft_qwen2.5_1.5b", "5"],
                                                    ["no_draft", "5"]]


# --- moderation through the admin API -----------------------------------------------------


def test_admin_api_needs_the_token(server, tmp_path):
    assert httpx.post(f"{server}/admin/v1/hide", json={"submission_id": "x", "reason": "r"}
                      ).status_code == 401
    wrong = httpx.get(f"{server}/admin/v1/stats", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "admin_token"
    ok = httpx.get(f"{server}/admin/v1/stats", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.json()["submissions"] == 0
    settings = ServerSettings(database_url=str(tmp_path / "off.duckdb"))
    with serve(create_app(settings)) as url:
        off = httpx.get(f"{url}/admin/v1/stats", headers={"Authorization": "Bearer anything"})
        assert off.status_code == 403 and off.json()["error"]["code"] == "admin_disabled"


def test_hide_unhide_ban_unban_through_the_running_server(server):
    stored = post_submissions(server, 6)
    (first, _), (_, key_b) = stored[0], stored[1]

    def board_submissions() -> int:
        groups = httpx.get(f"{server}/v1/leaderboard", params={"draft": "spec_4"}).json()["groups"]
        return sum(g["submissions"] for g in groups)

    assert board_submissions() == 6
    base = ["--server", server, "--token", TOKEN, "--actor", "alice"]
    hidden = cli("hide", first, "--reason", "duplicate run", *base)
    assert hidden.exit_code == 0 and hidden.output.strip() == f"hide {first}: done"
    assert board_submissions() == 5
    assert "no change" in cli("hide", first, "--reason", "again", *base).output
    banned = cli("ban", key_b, "--reason", "implausible numbers", *base)
    assert banned.exit_code == 0
    assert board_submissions() == 3  # key_b made submissions 1 and 4
    again, _ = signed(100, 1, machine=EXAMPLE_MACHINES[0])
    refused = httpx.post(f"{server}/v1/submissions", content=again,
                         headers={"Content-Type": "application/json"})
    assert refused.status_code == 403
    history = httpx.get(f"{server}/v1/submissions/{first}").json()["moderation"]
    assert [(h["action"], h["reason"], h["actor"]) for h in history] == [
        ("hide", "duplicate run", "alice")]
    assert cli("unhide", first, *base).exit_code == 0
    assert cli("unban", key_b, "--reason", "appeal", *base).exit_code == 0
    assert board_submissions() == 6
    history = httpx.get(f"{server}/v1/submissions/{first}").json()["moderation"]
    assert [h["action"] for h in history] == ["hide", "unhide"]
    page = httpx.get(f"{server}/submissions/{stored[1][0]}").text
    assert "implausible numbers" in page and "appeal" in page
    missing = cli("hide", "00000000-0000-4000-8000-000000000000", "--reason", "x", *base)
    assert missing.exit_code == 1 and "no submission" in missing.output
    bad_key = cli("ban", "not-a-key", "--reason", "x", *base)
    assert bad_key.exit_code == 1 and "64 lowercase hex" in bad_key.output


def test_export_and_stats_through_the_server_and_directly(server, tmp_path):
    post_submissions(server, 4)
    base = ["--server", server, "--token", TOKEN]
    parquet = tmp_path / "out.parquet"
    assert cli("export", str(parquet), "--format", "parquet", *base).exit_code == 0
    assert pq.read_table(parquet).num_rows == 4 * 3
    stats = cli("stats", "--json", *base)
    per_run = len(get_protocol("ollama-draft").schedule())  # v3: 21 trials per run
    assert stats.exit_code == 0 and json.loads(stats.output)["trials"] == 4 * per_run
    bad = cli("export", str(tmp_path / "x"), "--format", "xls", *base)
    assert bad.exit_code == 2
    # Directly on a store no server holds: same rows.
    db = str(tmp_path / "direct.duckdb")
    assert cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--database", db).exit_code == 0
    out = tmp_path / "direct.csv"
    assert cli("export", str(out), "--format", "csv", "--database", db).exit_code == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert sorted(r["config_name"] for r in rows) == sorted(
        ["no_draft", "draft_qwen2.5_0.5b", "draft_qwen2.5_1.5b"])
    text = cli("stats", "--database", db).output
    assert "imported: 1" in text and "not_applied 2" in text


def test_cli_cannot_reach_a_missing_server(tmp_path):
    result = cli("stats", "--server", f"http://127.0.0.1:{free_port()}", "--token", "x")
    assert result.exit_code == 1 and "cannot reach the server" in result.output


# --- DuckDB's one-process rule ------------------------------------------------------------


def test_while_a_server_process_holds_the_file_the_cli_goes_through_its_api(tmp_path):
    db = tmp_path / "held.duckdb"
    port = free_port()
    env = {**os.environ, "SPECSERVER_ADMIN_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-c", "from specserver.cli import main; main()", "serve",
         "--port", str(port), "--database", str(db)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        direct = cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--database", str(db))
        assert direct.exit_code == 1
        assert "held by another process" in direct.output and "--server" in direct.output
        through = cli("import-hardnumbers", str(FIXTURE), *IMPORT_ARGS, "--server", url,
                      "--token", TOKEN)
        assert through.exit_code == 0, through.output
        assert httpx.get(f"{url}/v1/stats").json()["imported"] == 1
    finally:
        process.terminate()
        process.wait(15)
        if process.stderr is not None:
            process.stderr.close()
    # Once the server is gone, the CLI opens the file itself and sees the import.
    stats = cli("stats", "--json", "--database", str(db))
    assert stats.exit_code == 0 and json.loads(stats.stdout)["imported"] == 1


# --- the same tools on PostgreSQL ---------------------------------------------------------


@pytest.mark.postgres
def test_parquet_export_and_read_only_query_on_postgres(postgres_url, tmp_path):
    from sqlalchemy import create_engine, text

    from specserver.store import exporting, tables
    from specserver.store.queries import Filters
    from tests.support.boardfill import fill

    engine = create_engine(postgres_url)
    tables.metadata.create_all(engine)
    try:
        fill(engine, 5)
        with engine.connect() as conn:
            path = tmp_path / "pg.parquet"
            exporting.write_export(conn, Filters(), "parquet", path)
            exporting.write_export(conn, Filters(), "csv", tmp_path / "pg.csv")
            table = pq.read_table(path).to_pylist()
            rows = list(csv.DictReader(io.StringIO((tmp_path / "pg.csv").read_text())))
            assert len(table) == len(rows) == 5 * 3
            assert [r["speedup_tps"] for r in table if r["role"] == "draft"] == [
                float(r["speedup_tps"]) for r in rows if r["role"] == "draft"]
        with engine.connect() as conn:
            result = adhoc.run_query(conn, "SELECT count(*) AS n FROM trials")
            trials = 5 * len(get_protocol("ollama-draft").schedule())
            assert result == {"columns": ["n"], "rows": [[trials]], "truncated": False}
            with pytest.raises(adhoc.QueryRefused):
                adhoc.run_query(conn, "DELETE FROM trials")
            assert conn.execute(text("SELECT count(*) FROM trials")).scalar() == trials
    finally:
        engine.dispose()


# --- rough edges a new maintainer hits first ----------------------------------


def test_query_through_the_server_does_not_name_a_local_store(server):
    result = cli("query", "SELECT 1 AS one", "--server", server, "--token", TOKEN)
    assert result.exit_code == 0 and result.stderr == ""


