"""Server settings: env prefix, database locations, validation, and docs that cover them."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from specserver.settings import (
    ServerSettings,
    database_url_for,
    default_database_path,
    legacy_note,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "server.md"


def test_env_prefix_and_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECSERVER_DATABASE_URL", str(tmp_path / "x.duckdb"))
    monkeypatch.setenv("SPECSERVER_MAX_BODY_BYTES", "4096")
    monkeypatch.setenv("SPECSERVER_TRUSTED_PROXIES", '["10.0.0.0/8"]')
    settings = ServerSettings()
    assert settings.max_body_bytes == 4096
    assert settings.resolved_database_url == f"duckdb:///{tmp_path / 'x.duckdb'}"
    assert [str(n) for n in settings.proxy_networks()] == ["10.0.0.0/8"]
    assert ServerSettings(max_body_bytes=300_000).max_body_bytes == 300_000  # explicit wins


def test_defaults_match_the_issue() -> None:
    settings = ServerSettings(_env_file=None)  # type: ignore[call-arg]
    assert settings.max_body_bytes == 256 * 1024
    assert settings.max_future_skew_s == 300
    assert settings.store_enabled is True


def test_default_store_is_an_embedded_duckdb_file_in_the_data_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPECSERVER_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_database_path().is_relative_to(tmp_path)
    assert ServerSettings().resolved_database_url.startswith("duckdb:///")
    assert ServerSettings().resolved_database_url.endswith("/specatlas.duckdb")


def test_a_store_under_the_old_name_stays_the_default_until_one_of_the_new_exists(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPECSERVER_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    folder = tmp_path / "specserver"
    folder.mkdir()
    (folder / "specbench.duckdb").write_bytes(b"")
    url = ServerSettings().resolved_database_url
    assert url.endswith("/specbench.duckdb")
    assert "rename it specatlas.duckdb" in (legacy_note(url) or "")
    (folder / "specatlas.duckdb").write_bytes(b"")
    url = ServerSettings().resolved_database_url
    assert url.endswith("/specatlas.duckdb")
    assert legacy_note(url) is None
    # An explicit file of the old name is the operator's choice, not a leftover default.
    assert legacy_note(database_url_for(str(tmp_path / "specbench.duckdb"))) is None


def test_database_url_or_path() -> None:
    assert database_url_for("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert database_url_for("/tmp/a.duckdb") == "duckdb:////tmp/a.duckdb"


def test_invalid_proxy_is_refused() -> None:
    with pytest.raises(ValidationError):
        ServerSettings(trusted_proxies=["not-a-network"])


def test_public_url() -> None:
    settings = ServerSettings(public_base_url="https://bench.example/")
    assert settings.public_url("abc") == "https://bench.example/submissions/abc"


def test_docs_cover_every_setting() -> None:
    text = DOCS.read_text()
    missing = [name for name in ServerSettings.model_fields
               if f"SPECSERVER_{name.upper()}" not in text]
    assert missing == []


def test_duckdb_threads_leave_the_check_workers_their_cores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert ServerSettings(check_workers=0).effective_duckdb_threads() == 8
    assert ServerSettings(check_workers=6).effective_duckdb_threads() == 2
    assert ServerSettings(check_workers=8).effective_duckdb_threads() == 1
    assert ServerSettings(check_workers=8, duckdb_threads=3).effective_duckdb_threads() == 3


def test_store_applies_duckdb_threads(tmp_path: Path) -> None:
    from sqlalchemy import text

    from specserver.store.database import Store

    for threads in (1, 3):
        store = Store(f"duckdb:///{tmp_path / f'{threads}.duckdb'}", duckdb_threads=threads)
        store.open()
        try:
            with store.engine.connect() as conn:
                value = conn.execute(text("SELECT current_setting('threads')")).scalar()
            assert int(value) == threads
        finally:
            store.close()


def test_store_turns_duckdb_vacuum_off_on_every_open(tmp_path: Path) -> None:
    """Vacuum tasks at checkpoints re-wrote partly filled row groups of envelopes: stalls
    of seconds inside a commit (store.DUCKDB_SETTINGS). The setting is not kept in the
    file, so each open applies it again, for the writer's connection too."""
    from sqlalchemy import text

    from specserver.store.database import Store

    url = f"duckdb:///{tmp_path / 'v.duckdb'}"
    for _ in range(2):
        store = Store(url)
        store.open()
        try:
            with store.engine.connect() as conn:
                assert conn.execute(text("SELECT current_setting('max_vacuum_tasks')")
                                    ).scalar() == 0
            seen = store.write(lambda conn: conn.execute(
                text("SELECT current_setting('max_vacuum_tasks')")).scalar())
            assert seen == 0
        finally:
            store.close()
