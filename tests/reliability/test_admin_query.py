"""The admin "read-only" query: the attacks that worked, and what they get now.

Before: a keyword screen ended ``--`` comments at ``\\n``; DuckDB ends them at ``\\r`` too,
so ``SELECT 1 --\\r; COMMIT; DELETE FROM bans; ...`` passed it and DuckDB ran every
statement (a ban and an acknowledged submission deleted, no audit row), and
``read_text('/proc/self/environ')`` returned the server's environment, admin token
included. Now (``store/adhoc.py``): one SELECT as the engine's own parser sees it, a
read-only transaction, DuckDB without external access and with its configuration locked,
PostgreSQL prepared (one command) with a statement timeout and, optionally, a role that
may only read; a row limit, a time limit and an audit row for every query.

Each test runs through the admin API of the in-process app (DuckDB file and a private
PostgreSQL schema) and checks the stored rows afterwards, so "refused" means nothing was
changed, not only that a status came back.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import psycopg
import pytest
from sqlalchemy import func, select, text

from specschema import key_id_of
from specserver.http.app import create_app
from specserver.store import adhoc, tables
from tests.reliability.apps import STORES, app_on, make_settings
from tests.reliability.hostile import signing_key, valid_envelope
from tests.support.inprocess import InProcessClient
from tests.support.postgres import POSTGRES_ADMIN_DSN, private_schema_url

TOKEN = "test-admin-token-" + "x" * 20
ADMIN = {"Authorization": f"Bearer {TOKEN}", "X-Specserver-Actor": "tester"}
# The attack of the issue, verbatim in form: DuckDB ends the comment at \r.
CR_COMMENT = "SELECT 1 --\r; COMMIT; DELETE FROM bans; DELETE FROM submissions"


@contextlib.contextmanager
def seeded(store: str, tmp: Path, **overrides: Any) -> Iterator[InProcessClient]:
    """A served app with one acknowledged submission and one ban."""
    with app_on(store, tmp, admin_token=TOKEN, **overrides) as app, \
            InProcessClient(app) as client:
        assert client.post("/v1/submissions", content=valid_envelope(1)).status_code == 201
        banned = key_id_of(bytes(signing_key(2).verify_key))
        answer = admin_post(client, "/admin/v1/ban", {"key_id": banned, "reason": "test"})
        assert answer.status_code == 200, answer.text
        yield client


def counts(client: InProcessClient) -> dict[str, int]:
    """Rows per table, read by the test on the store's engine (not through the query)."""
    store = client.app.state.store
    with store.engine.connect() as conn:
        return {t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for t in (tables.submissions, tables.bans, tables.trials)}


def admin_post(client: InProcessClient, url: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(url, content=json.dumps(body).encode(),
                       headers={**ADMIN, "Content-Type": "application/json"})


def query(client: InProcessClient, sql: str, **body: Any) -> httpx.Response:
    return admin_post(client, "/admin/v1/query", {"sql": sql, **body})


def audited_queries(client: InProcessClient) -> list[tuple[str, str, str]]:
    audit = tables.audit_log
    with client.app.state.store.engine.connect() as conn:
        rows = conn.execute(select(audit.c.target, audit.c.reason, audit.c.actor)
                            .where(audit.c.action == "query")).all()
    return [tuple(r) for r in rows]


HOSTILE = [
    CR_COMMENT,
    "SELECT 1; DELETE FROM bans",
    "SELECT 1 /* */; DELETE FROM bans",
    "DELETE FROM bans",
    "WITH gone AS (DELETE FROM bans RETURNING *) SELECT * FROM gone",
    "COMMIT",
    "UPDATE submissions SET hidden = true",
    "CREATE TABLE stolen AS SELECT * FROM submissions",
    "SELECT * FROM query('DELETE FROM bans')",
    "ATTACH ':memory:' AS other",
    "SET enable_external_access = true",
]


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("sql", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_change_nothing(store: str, sql: str, tmp_path: Path) -> None:
    with seeded(store, tmp_path) as client:
        before = counts(client)
        assert before == {"submissions": 1, "bans": 1, "trials": before["trials"]}
        answer = query(client, sql)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] in {"not_read_only", "query_failed"}
        assert counts(client) == before
        # Recorded before it ran, refused or not.
        assert audited_queries(client) == [(adhoc.audit_target(sql), sql, "tester")]


@pytest.mark.parametrize("store", STORES)
def test_a_select_still_answers_with_a_row_limit(store: str, tmp_path: Path) -> None:
    with seeded(store, tmp_path) as client:
        answer = query(client, "SELECT submission_id FROM submissions -- comment\r")
        assert answer.status_code == 200, answer.text
        assert answer.json()["columns"] == ["submission_id"]
        assert len(answer.json()["rows"]) == 1
        many = query(client, "SELECT * FROM generate_series(1, 5000) AS g(n)", limit=10)
        assert many.status_code == 200, many.text
        assert many.json()["rows"] == [[n] for n in range(1, 11)]
        assert many.json()["truncated"] is True


def test_read_text_of_the_environment_is_refused_on_duckdb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSERVER_ADMIN_TOKEN", TOKEN)  # what the attack was after
    with seeded("duckdb", tmp_path) as client:
        for sql in ("SELECT content FROM read_text('/proc/self/environ')",
                    "SELECT * FROM read_blob('/proc/self/environ')",
                    "SELECT * FROM glob('/proc/self/*')",
                    "SELECT * FROM read_csv('/etc/passwd')"):
            answer = query(client, sql)
            assert answer.status_code == 422, (sql, answer.text)
            # The table gate refuses it before it runs (not an allowed table function) ...
            assert answer.json()["error"]["code"] == "not_read_only"
            assert TOKEN not in answer.text
            assert "is not allowed" in answer.json()["error"]["message"]
        # Turning it back on is not a SELECT, and the configuration is locked anyway, for
        # every connection of the store's DuckDB, also one the writer would open anew.
        assert query(client, "SET enable_external_access = true").status_code == 422
        store = client.app.state.store
        store.engine.dispose()
        with store.engine.connect() as conn:
            # ... and the lockdown under it still holds should a read get past the gate.
            with pytest.raises(Exception, match="disabled by configuration"):
                conn.exec_driver_sql("SELECT content FROM read_text('/proc/self/environ')")
            conn.rollback()
            with pytest.raises(Exception, match="locked"):
                conn.exec_driver_sql("SET enable_external_access = true")
            conn.rollback()
            assert conn.execute(text(
                "SELECT current_setting('enable_external_access')")).scalar() is False
        # The store still ingests after the lockdown and the reopen.
        assert client.post("/v1/submissions", content=valid_envelope(3)).status_code == 201


@pytest.mark.parametrize("store", STORES)
def test_a_query_past_its_time_limit_is_stopped(store: str, tmp_path: Path) -> None:
    slow = {"duckdb": "SELECT count(*) FROM range(100000000000) AS r(n) WHERE n % 7 = 3",
            "postgres": "SELECT pg_sleep(30)"}[store]
    with seeded(store, tmp_path, admin_query_timeout_s=0.5) as client:
        answer = query(client, slow)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "query_timeout"
        assert query(client, "SELECT 1 AS one").json()["rows"] == [[1]]


def test_the_cli_query_is_the_same_guard(tmp_path: Path) -> None:
    """``specserver query`` on a store no server holds: the same refusal, the same audit."""
    import typer
    from typer.testing import CliRunner

    from specserver.cli import admin

    cli_app = typer.Typer()
    admin.register(cli_app)
    database = str(tmp_path / "cli.duckdb")
    runner = CliRunner()
    refused = runner.invoke(cli_app, ["query", CR_COMMENT, "--database", database])
    assert refused.exit_code == 1
    # (The command may first name the store it opened on stderr: the error is the last line.)
    assert "exactly one statement" in refused.output.strip().splitlines()[-1]
    environ = runner.invoke(cli_app, ["query", "SELECT content FROM read_text("
                                      "'/proc/self/environ')", "--database", database])
    assert environ.exit_code == 1 and "read_text() is not allowed" in environ.output
    audit = runner.invoke(cli_app, ["query", "SELECT count(*) AS n FROM audit_log WHERE "
                                    "action = 'query'", "--database", database, "--json"])
    assert audit.exit_code == 0, audit.output
    assert '"n": 3' in audit.output  # the two refused ones and this one


# --- PostgreSQL: a role that may only read --------------------------------------------------


@contextlib.contextmanager
def reader_role(store_url: str) -> Iterator[str]:
    """A LOGIN role that may only read the store's schema (the docs/maintainers.md recipe:
    default privileges, so tables the migrations create later are readable too)."""
    schema = unquote(store_url.split("search_path%3D", 1)[1])
    role = f"reader_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'ALTER ROLE "{role}" SET default_transaction_read_only = on')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" GRANT SELECT ON TABLES '
                      f'TO "{role}"')
    host = POSTGRES_ADMIN_DSN.split("//", 1)[1].split("@", 1)[1]
    try:
        yield f"postgresql+psycopg://{role}@{host}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


@pytest.mark.postgres
def test_postgres_reader_role_cannot_read_server_files(tmp_path: Path) -> None:
    read_file = "SELECT length(pg_read_file('PG_VERSION')) AS n"  # in the data folder
    with seeded("postgres", tmp_path) as client:
        # Without a reader role the store's own role (here a superuser) runs the query: the
        # transaction is read only, but a superuser may still read the server's files.
        assert query(client, read_file).status_code == 200
    with private_schema_url() as store_url, reader_role(store_url) as reader_url:
        settings = make_settings(tmp_path, database_url=store_url, admin_token=TOKEN,
                                 admin_query_url=reader_url)
        with InProcessClient(create_app(settings)) as client:
            assert client.post("/v1/submissions", content=valid_envelope(1)).status_code == 201
            answer = query(client, read_file)
            assert answer.status_code == 422, answer.text
            assert "permission denied" in answer.json()["error"]["message"]
            answer = query(client, "SELECT count(*) AS n, current_user AS who FROM submissions")
            assert answer.status_code == 200, answer.text
            assert answer.json()["rows"] == [[1, reader_url.split("//")[1].split("@")[0]]]


# --- table functions and the store's paths ---------------------------------------------------

# Each passed the single-SELECT gate before: checkpoint() ran (a write to the file), and
# duckdb_databases() / duckdb_settings() answered with the store's path and temp folder.
DISCLOSING = [
    "SELECT * FROM checkpoint()",
    "SELECT * FROM force_checkpoint()",
    "SELECT path FROM duckdb_databases()",
    "SELECT * FROM duckdb_settings() WHERE name = 'temp_directory'",
    "SELECT (SELECT max(path) FROM duckdb_databases()) AS p",
    "SELECT * FROM duckdb_databases",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM pg_catalog.pg_settings",
    "SELECT current_setting('temp_directory') AS t",
    "SELECT * FROM submissions, duckdb_settings()",
    "WITH d AS (SELECT * FROM duckdb_databases()) SELECT * FROM d",
    "SHOW databases",
    "SELECT * FROM other.main.submissions",
]


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("sql", DISCLOSING, ids=range(len(DISCLOSING)))
def test_table_functions_and_catalog_reads_are_refused(store: str, sql: str,
                                                       tmp_path: Path) -> None:
    with seeded(store, tmp_path) as client:
        answer = query(client, sql)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "not_read_only"
        assert str(tmp_path) not in answer.text


@pytest.mark.parametrize("store", STORES)
def test_reads_of_the_stores_tables_still_answer(store: str, tmp_path: Path) -> None:
    with seeded(store, tmp_path) as client:
        for sql in ("WITH s AS (SELECT submission_id FROM submissions) SELECT count(*) FROM s",
                    "SELECT count(*) FROM main.bans" if store == "duckdb"
                    else "SELECT count(*) FROM bans",
                    "SELECT b.key_id FROM bans b JOIN submissions s ON s.key_id <> b.key_id",
                    "SELECT n FROM unnest([1, 2]) AS u(n)" if store == "duckdb"
                    else "SELECT n FROM generate_series(1, 2) AS u(n)"):
            answer = query(client, sql)
            assert answer.status_code == 200, (sql, answer.text)


def test_an_engine_error_does_not_show_the_stores_path(tmp_path: Path) -> None:
    with seeded("duckdb", tmp_path) as client:
        answer = query(client, "SELECT no_such_column FROM submissions")
        assert answer.status_code == 422, answer.text
        assert str(tmp_path) not in answer.text
