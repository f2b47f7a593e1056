"""`specsubmit verify` against the real specserver under uvicorn: receipts stored with the
envelope's hash verify by inclusion; the checkpoint kept between runs catches a log that a
maintainer truncated or edited directly in the database (exit 3, both checkpoints and the
failing proof printed); a checkpoint not signed by the pinned key is refused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from sqlalchemy import create_engine, delete, update

from specschema.examples import example_submission
from specschema.tlog import Signer
from specserver.http.app import create_app
from specserver.settings import ServerSettings
from specserver.store import tables
from specsubmit.local import logstate
from specsubmit.send import submit
from specsubmit.send.delivery import RetryPolicy
from tests.support.liveserver import serve
from tests.support.ports import free_port


def run_cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    from specsubmit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


ORIGIN = "testlog.example/log"


@contextmanager
def running(tmp_path: Path, port: int) -> Iterator[str]:
    """specserver under uvicorn on ``port``, its store and log key in ``tmp_path``: started
    again on the same port and files, it is the same server to the client."""
    settings = ServerSettings(database_url=str(tmp_path / "server.duckdb"),
                              public_base_url=f"http://127.0.0.1:{port}", log_origin=ORIGIN,
                              log_key_file=str(tmp_path / "log-key"), log_checkpoint_s=0.001)
    with serve(create_app(settings), port) as url:
        yield url


def edit_store(tmp_path: Path, statement: Any) -> None:
    """A change made directly in the database, with the server stopped (DuckDB admits one
    process at a time)."""
    engine = create_engine(f"duckdb:///{tmp_path / 'server.duckdb'}")
    with engine.begin() as conn:
        conn.execute(statement)
    engine.dispose()


def submit_three(url: str) -> list[str]:
    ids = []
    for seed in (71, 72, 73):
        submission = example_submission(seed=seed,
                                        created_at=datetime.now(UTC) - timedelta(minutes=1))
        receipt, _ = submit.send_submission(submission, url, RetryPolicy(attempts=1))
        assert receipt.status == 201 and receipt.body["log"] is not None
        ids.append(receipt.submission_id)
    return ids


def test_receipts_verify_and_the_kept_checkpoint_catches_a_truncated_log(
        tmp_path: Path, capsys: Any) -> None:
    port = free_port()
    with running(tmp_path, port) as url:
        ids = submit_three(url)
        code, out, err = run_cli(["verify", "--server", url], capsys)
        assert code == 0, err
        assert "pinned its log key" in out
        for index, sid in enumerate(ids):
            assert f"{sid}: entry {index}, included" in out
        kept = logstate.load(url)
        assert kept is not None and kept.checkpoint is not None
        assert kept.checkpoint.split(b"\n")[1] == b"3"
        code, out, err = run_cli(["verify"], capsys)  # every server with receipts: this one
        assert code == 0 and "pinned" not in out, err
    # A maintainer removes the newest entry directly in the database.
    edit_store(tmp_path, delete(tables.log_entries).where(tables.log_entries.c.idx == 2))
    with running(tmp_path, port):
        code, out, err = run_cli(["verify"], capsys)
    assert code == 3
    assert "SERVER MISBEHAVIOUR: the log went from 3 entries to 2" in out
    assert "kept checkpoint:" in out and "new checkpoint:" in out
    assert "contradicts what this client holds" in err


def test_an_entry_edited_in_the_database_fails_inclusion_with_its_proof(
        tmp_path: Path, capsys: Any) -> None:
    port = free_port()
    with running(tmp_path, port) as url:
        ids = submit_three(url)
    # entry 1 now names other bytes
    edit_store(tmp_path, update(tables.log_entries).where(tables.log_entries.c.idx == 1)
               .values(entry=b"\x01" + b"\x00" * 32))
    with running(tmp_path, port) as url:
        code, out, _ = run_cli(["verify", "--server", url], capsys)
    assert code == 3
    assert f"{ids[1]}: entry 1 is not in the log" in out
    assert "inclusion proof from the tiles:" in out


def test_a_checkpoint_not_signed_by_the_pinned_key_is_refused(
        tmp_path: Path, capsys: Any) -> None:
    with running(tmp_path, free_port()) as url:
        submit_three(url)
        other = f"{ORIGIN}+00000000+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
        code, out, err = run_cli(["verify", "--log-key", other], capsys)
        assert code == 75 and "not a log key" in err  # its id does not match its key
        wrong = Signer(ORIGIN, nacl.signing.SigningKey(b"\x05" * 32))
        code, out, err = run_cli(["verify", "--log-key", wrong.verifier.vkey], capsys)
        assert code == 3
        assert "does not open with the pinned key" in out
        assert logstate.load(url) is None  # nothing kept from a log that did not verify
