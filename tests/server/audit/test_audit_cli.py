"""`specserver audit --from URL` against the real specserver under uvicorn: a server that
kept its log and its public data in step passes; a submission deleted or edited directly
in the database, a row edited after a snapshot, a decision's row edited, or a truncated
log is caught, with exit 3 and the proof printed (DuckDB, with the server stopped while
the file is edited; PostgreSQL, edited beside the running server)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nacl.signing
import pytest
from sqlalchemy import create_engine, delete, insert, select, update

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.tlog import (
    MemoryTree,
    Signer,
    inclusion_proof,
    leaf_hash,
    open_checkpoint,
    parse_vkey,
    verify_inclusion,
)
from specserver.http.app import create_app
from specserver.settings import ServerSettings
from specserver.store import tables
from tests.support.liveserver import serve
from tests.support.ports import free_port
from tests.support.postgres import STORES, store_url_for
from tests.support.signed import valid_body

ORIGIN = "audit.example/log"
TOKEN = "t0ken"


def run_cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    from specserver.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


class Deployment:
    """A store, a log key and a snapshot folder in ``tmp_path``; ``running()`` serves them
    on one port (again after a restart)."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp_path = tmp_path
        self.store_url = url
        self.port = free_port()

    @contextmanager
    def running(self) -> Iterator[str]:
        settings = ServerSettings(
            database_url=self.store_url, public_base_url=f"http://127.0.0.1:{self.port}",
            log_origin=ORIGIN, log_key_file=str(self.tmp_path / "log-key"),
            log_checkpoint_s=0.001, admin_token=TOKEN,
            snapshot_dir=str(self.tmp_path / "snapshots"), rate_key_per_minute=0,
            rate_addr_per_minute=0, rate_reject_per_minute=0, ban_cache_s=0)
        with serve(create_app(settings), self.port) as url:
            yield url

    def edit(self, *statements: Any) -> None:
        """Changes made directly in the database, past the server."""
        engine = create_engine(self.store_url)
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(statement)
        engine.dispose()


def admin(url: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    response = httpx.post(f"{url}/admin/v1/{path}", json=body,
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert response.is_success, response.text
    return response


def publish(url: str) -> list[str]:
    """Three results, one hidden, and a signed snapshot: four log entries."""
    ids = []
    for seed in (61, 62, 63):
        answer = httpx.post(f"{url}/v1/submissions", content=valid_body(seed=seed,
                                                                         key_seed=seed))
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["submission_id"])
    admin(url, "hide", {"submission_id": ids[1], "reason": "one machine twice"})
    assert admin(url, "snapshot").json()["log_size"] == 4
    return ids


@pytest.fixture(params=STORES)
def deployment(tmp_path: Path, request: pytest.FixtureRequest) -> Deployment:
    return Deployment(tmp_path, store_url_for(request.param, tmp_path, request))


@contextmanager
def edited_beside(deployment: Deployment, *statements: Any) -> Iterator[str]:
    """The server running after ``statements`` (DuckDB: stopped while the file is edited,
    it admits one process; PostgreSQL: edited beside the running server)."""
    if deployment.store_url.startswith("duckdb"):
        deployment.edit(*statements)
        with deployment.running() as url:
            yield url
    else:
        with deployment.running() as url:
            deployment.edit(*statements)
            yield url


def post_implausible(url: str, seed: int) -> str:
    machine = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             machine=machine, baseline_tps=500.0, counters_seen=True,
                             target="qwen3:14b",
                             created_at=datetime.now(UTC) - timedelta(minutes=5))
    answer = httpx.post(f"{url}/v1/submissions", content=envelope_bytes(
        sign_envelope(submission_bytes(sub), nacl.signing.SigningKey(bytes([seed]) * 32))))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["submission_id"])


def delete_submission(submission_id: str) -> list[Any]:
    """Every row of the submission, in every table but the log's."""
    return [delete(t).where(t.c.submission_id == submission_id)
            for t in reversed(tables.metadata.sorted_tables)
            if "submission_id" in t.c and t is not tables.log_entries]


def test_an_honest_server_passes_and_a_pinned_wrong_key_fails(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        publish(url)
        code, out, err = run_cli(["audit", "--from", url], capsys)
        assert code == 0, out + err
        assert "the log and the public data check out" in out
        assert "4 entries" in out and "1 decisions recomputed" in out
        assert "2 envelopes hashed and signatures verified" in out
        assert "1 off the list: hidden by a logged decision (hide)" in out
        assert "1 snapshot rows unchanged in today's export" in out
        key = httpx.get(f"{url}/log/key").text.strip()
        code, out, _ = run_cli(["audit", "--from", url, "--log-key", key], capsys)
        assert code == 0, out
        other = f"{ORIGIN}+00000000+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
        code, out, _ = run_cli(["audit", "--from", url, "--log-key", other], capsys)
        assert code == 3 and "FAIL log: not a log key" in out
        forger = Signer(ORIGIN, nacl.signing.SigningKey(b"\x09" * 32)).verifier.vkey
        code, out, _ = run_cli(["audit", "--from", url, "--log-key", forger], capsys)
        assert code == 3
        assert "FAIL log: the checkpoint does not open with the log key" in out
        assert "FAIL log: the server's /log/key is not the key given" in out


def test_a_deleted_submission_is_caught_with_its_inclusion_proof(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        ids = publish(url)
        note = httpx.get(f"{url}/log/checkpoint").content
        key = httpx.get(f"{url}/log/key").text.strip()
    with edited_beside(deployment, *delete_submission(ids[2])) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 3
    assert f"FAIL submission {ids[2]}: logged as entry 2, the server no longer has it" in out
    assert f"FAIL submission {ids[2]}: in the signed snapshot, the server no longer has " \
           "it" in out
    # The proof printed is checkable by itself: the entry, its inclusion proof and the
    # signed checkpoint it leads to.
    proof = out[out.index("proof 1 (submission"):]
    entry = bytes.fromhex(proof.split("entry 2: ")[1].split("\n")[0])
    path = [base64.b64decode(h) for h in
            proof.split("inclusion proof (4 entries): ")[1].split("\n")[0].split()]
    checkpoint = open_checkpoint(note, parse_vkey(key), ORIGIN)
    verify_inclusion(2, 4, leaf_hash(entry), path, checkpoint.root)
    assert "checkpoint | audit.example/log" in proof


def test_an_edited_envelope_and_an_edited_row_are_caught(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        ids = publish(url)
    envelopes, summaries = tables.envelopes, tables.summaries
    engine = create_engine(deployment.store_url)
    with engine.connect() as conn:
        body = bytes(conn.execute(select(envelopes.c.body).where(
            envelopes.c.submission_id == ids[0])).scalar_one())
    engine.dispose()
    forged = body.replace(b'"sig":"', b'"sig":"A', 1)
    with edited_beside(
            deployment,
            update(envelopes).where(envelopes.c.submission_id == ids[0]).values(body=forged),
            update(summaries).where(summaries.c.submission_id == ids[2])
            .values(speedup_tps=9.5)) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 3
    digest = hashlib.sha256(forged).hexdigest()
    assert f"FAIL submission {ids[0]}: the envelope served hashes to {digest}, not to " \
           "entry 0" in out
    assert f"FAIL submission {ids[2]}: its rows in today's export differ from the signed " \
           "snapshot's" in out
    assert f"FAIL submission {ids[2]}: config " in out and "speedup_tps 9.5 (signed: " in out
    assert "snapshot manifest | specatlas snapshot v1" in out


def test_a_truncated_log_is_caught_against_the_snapshot_and_the_list(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        ids = publish(url)
    log = tables.log_entries
    with edited_beside(deployment, delete(log).where(log.c.idx >= 2)) as url:
        code, out, _ = run_cli(["audit", "--from", url, "--settle-s", "0.1"], capsys)
    assert code == 3
    assert "FAIL snapshot: the snapshot was taken at 4 log entries; the log now has 2" in out
    assert "snapshot manifest | checkpoint 4 " in out and "checkpoint now | 2" in out
    assert f"FAIL submission {ids[2]}: the public list shows it, but no entry of the log " \
           "names it" in out


def test_a_decision_whose_row_was_edited_has_no_decision_behind_it(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        publish(url)
    audit = tables.audit_log
    with edited_beside(deployment, update(audit).values(reason="nothing to see")) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 3
    assert "FAIL entry 3: no decision in the public moderation history hashes to this " \
           "moderation entry" in out


def test_the_proofs_printed_come_from_the_rfc_tree() -> None:
    """The inclusion proof a finding prints is RFC 9162's, from the recomputed tree."""
    from specserver.audit.findings import entry_proof

    entries = [bytes([1]) + bytes([i]) * 32 for i in range(5)]
    tree = MemoryTree([leaf_hash(e) for e in entries])
    lines = entry_proof(tree, 3, entries[3], "o\n5\nroot\n\n\u2014 o sig\n".encode())
    path = [base64.b64decode(h) for h in lines[2].split(": ")[1].split()]
    assert path == inclusion_proof(3, 5, tree.node)
    verify_inclusion(3, 5, leaf_hash(entries[3]), path, tree.root())


def test_the_kept_checkpoint_catches_a_log_rewritten_behind_the_public_data(
        deployment: Deployment, capsys: Any, tmp_path: Path) -> None:
    """Entry 2 and its submission deleted, then a new submission takes index 2: the public
    data agrees with the log again, so only a checkpoint kept from before shows the fork."""
    kept = tmp_path / "audit-checkpoint"
    with deployment.running() as url:
        ids = [httpx.post(f"{url}/v1/submissions", content=valid_body(seed=s, key_seed=s))
               .json()["submission_id"] for s in (71, 72, 73)]
        code, out, _ = run_cli(["audit", "--from", url, "--keep", str(kept)], capsys)
        assert code == 0, out
        before = kept.read_bytes()
        assert before == httpx.get(f"{url}/log/checkpoint").content
    log = tables.log_entries
    with edited_beside(deployment, delete(log).where(log.c.idx == 2),
                       *delete_submission(ids[2])) as url:
        again = httpx.post(f"{url}/v1/submissions", content=valid_body(seed=74, key_seed=74))
        assert again.json()["log"]["index"] == 2
        code, out, _ = run_cli(["audit", "--from", url], capsys)
        assert code == 0, out  # nothing kept: the rewritten log looks whole
        code, out, _ = run_cli(["audit", "--from", url, "--keep", str(kept)], capsys)
    assert code == 3
    assert "FAIL log: the log's first 3 entries no longer hash to the root kept from the " \
           "last audit" in out
    assert "kept checkpoint | audit.example/log" in out and "checkpoint now | 3" in out
    assert kept.read_bytes() == before  # a failed audit keeps the old one


def test_a_ban_and_a_quarantine_explain_what_is_off_the_list_a_silent_hide_fails(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        posted = [httpx.post(f"{url}/v1/submissions", content=valid_body(seed=s, key_seed=s))
                  .json() for s in (81, 82)]
        admin(url, "ban", {"key_id": posted[0]["key_id"], "reason": "fabricated"})
        # A baseline no M2 can decode (tests/server/cli/test_admin_quarantine.py): stored
        # quarantined, with no decision; a second one rejected by a maintainer.
        fast = [post_implausible(url, seed) for seed in (41, 42)]
        admin(url, "reject", {"submission_id": fast[1], "reason": "invented baseline"})
        code, out, _ = run_cli(["audit", "--from", url], capsys)
        assert code == 0, out
        assert "1 off the list: its key is banned by a logged decision" in out
        assert "1 off the list: quarantined at ingest" in out
        assert "1 off the list: hidden by a logged decision (reject)" in out
    sub = tables.submissions
    with edited_beside(deployment, update(sub).where(
            sub.c.submission_id == posted[1]["submission_id"]).values(
            hidden=True, hidden_reason="maintenance")) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 3
    assert f"FAIL submission {posted[1]['submission_id']}: logged as entry 1 but off the " \
           "public list, and neither its view nor a logged decision says why" in out


def test_a_row_edited_before_any_snapshot_disagrees_with_its_signed_payload(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        ids = [httpx.post(f"{url}/v1/submissions", content=valid_body(seed=s, key_seed=s))
               .json()["submission_id"] for s in (91, 92)]
        code, out, _ = run_cli(["audit", "--from", url], capsys)
        assert code == 0, out
        assert "2 rows recomputed from their signed envelopes" in out
        assert "no snapshot is served yet" in out
    summaries = tables.summaries
    with edited_beside(deployment, update(summaries).where(
            summaries.c.submission_id == ids[1], summaries.c.role == "baseline")
            .values(median_tps=summaries.c.median_tps * 1.5)) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 3
    assert f"FAIL submission {ids[1]}: config " in out and "median_tps " in out
    assert "[row_edited]" in out and "inclusion proof (2 entries)" in out


def test_a_checkpoint_behind_the_public_list_is_waited_for(tmp_path: Path,
                                                            capsys: Any) -> None:
    """Checkpoints are signed at most every log_checkpoint_s: a submission stored after
    one is public before a checkpoint holds it. The audit copies the log again."""
    deployment = Deployment(tmp_path, f"duckdb:///{tmp_path / 'store.duckdb'}")
    settings = ServerSettings(
        database_url=deployment.store_url, public_base_url="http://127.0.0.1",
        log_origin=ORIGIN, log_key_file=str(tmp_path / "log-key"), log_checkpoint_s=4,
        snapshot_dir=str(tmp_path / "snapshots"), rate_key_per_minute=0,
        rate_addr_per_minute=0)
    with serve(create_app(settings)) as url:
        httpx.post(f"{url}/v1/submissions", content=valid_body(seed=95, key_seed=95))
        assert httpx.get(f"{url}/log/checkpoint").content.split(b"\n")[1] == b"1"
        httpx.post(f"{url}/v1/submissions", content=valid_body(seed=96, key_seed=96))
        code, out, _ = run_cli(["audit", "--from", url, "--settle-s", "5"], capsys)
    assert code == 0, out
    assert "2 entries" in out and "2 public submissions listed" in out


def test_a_snapshot_file_replaced_after_signing_is_caught(deployment: Deployment,
                                                          capsys: Any) -> None:
    with deployment.running() as url:
        publish(url)
        parquet = next((deployment.tmp_path / "snapshots").glob("*.parquet"))
        parquet.write_bytes(parquet.read_bytes() + b"\0")
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 3
    assert "FAIL snapshot: the Parquet file served is " in out
    assert "not the one the manifest signed [snapshot_file]" in out


def test_a_hide_only_in_the_history_is_said_apart(deployment: Deployment,
                                                 capsys: Any) -> None:
    """A decision made before the log began is in the public history but not in the log:
    the audit passes and says so, in its own words (a hide with no row at all fails)."""
    with deployment.running() as url:
        sid = httpx.post(f"{url}/v1/submissions", content=valid_body(seed=97, key_seed=97)
                         ).json()["submission_id"]
    sub, audit = tables.submissions, tables.audit_log
    with edited_beside(
            deployment,
            update(sub).where(sub.c.submission_id == sid).values(hidden=True,
                                                                  hidden_reason="spam"),
            insert(audit).values(audit_id="00000000-0000-4000-8000-000000000001",
                                 at=datetime(2026, 1, 1), action="hide", target=sid,
                                 reason="spam", actor="maintainer")) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 0, out
    assert "1 off the list: by a decision in its public history that the log does not " \
           "hold (before the log?)" in out


def test_a_log_entry_edited_in_the_database_is_caught(deployment: Deployment,
                                                      capsys: Any) -> None:
    """The server signs whatever its table holds, so the tree holds together; the entry no
    longer names its envelope, and the snapshot's signed root no longer matches."""
    with deployment.running() as url:
        ids = publish(url)
    log = tables.log_entries
    with edited_beside(deployment, update(log).where(log.c.idx == 0)
                       .values(entry=b"\x01" + b"\x00" * 32)) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
    assert code == 3
    assert f"FAIL submission {ids[0]}: the envelope served hashes to " in out
    assert "FAIL snapshot: the log's first 4 entries do not hash to the root the snapshot's " \
           "manifest signed [log_rewritten]" in out
