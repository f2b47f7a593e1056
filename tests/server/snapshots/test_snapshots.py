"""Signed snapshots of the public data, in process on DuckDB and PostgreSQL: the manifest is a
note the log's key signs, naming the log as the rows saw it (its root recomputed here from
the entries by RFC 6962's own definition), the Parquet file's sha256, size and rows, the
schema version, the licence and the query; the file holds the visible rows only, with the
licence in its metadata; the newest is served at stable URLs and the oldest pruned; the
timer writes them and survives a failure. And the manifest's text is refused when
tampered with, signed by another key or for another origin."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import duckdb
import nacl.signing
import pytest

from specschema.errors import NoteInvalid
from specschema.tlog import Checkpoint, Signer, decode_entries, parse_vkey
from specserver.licence import LICENCE_ID, LICENCE_URL
from specserver.snapshots import (
    Manifest,
    ManifestInvalid,
    SnapshotTimer,
    due_in,
    open_manifest,
    parse_manifest,
    sign_manifest,
)
from tests.schema.tlog.test_merkle import ref_mth
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, error_of, settings_for
from tests.support.signed import valid_body

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=STORES)
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    settings = settings_for(tmp_path, database_url=store_url_for(request.param, tmp_path,
                                                                 request),
                            log_checkpoint_s=0.001, admin_token=TOKEN,
                            log_key_file=str(tmp_path / "log-key"),
                            snapshot_dir=str(tmp_path / "snapshots"), snapshot_keep=2)
    with Served(settings) as s:
        yield s


def parquet_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect() as duck:
        return duck.execute(sql.replace("FILE", "'" + str(path) + "'")).fetchall()


def test_a_snapshot_is_signed_tied_to_the_log_and_served(served: Served, tmp_path: Path
                                                         ) -> None:
    missing = served.get("/v1/snapshots/latest.manifest")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    ids = [served.post(valid_body(seed=20 + i, key_seed=i)).json()["submission_id"]
           for i in range(3)]
    hidden = served.request("POST", "/admin/v1/hide", headers=AUTH,
                            json={"submission_id": ids[0], "reason": "a test"})
    assert hidden.status_code == 200
    written = served.request("POST", "/admin/v1/snapshot", headers=AUTH)
    assert written.status_code == 201, written.text
    export = served.get("/v1/export?format=jsonl").text.splitlines()
    assert written.json()["log_size"] == 4 and written.json()["rows"] == len(export) > 0

    note = served.get("/v1/snapshots/latest.manifest")
    assert note.headers["link"] == f'<{LICENCE_URL}>; rel="license"'
    manifest = open_manifest(note.content, parse_vkey(served.get("/log/key").text.strip()))
    entries = decode_entries(served.get("/log/tile/entries/000.p/4").content)
    assert manifest.checkpoint.size == 4 and manifest.checkpoint.root == ref_mth(entries)
    assert manifest.licence == f"{LICENCE_ID} {LICENCE_URL}"
    assert manifest.schema_version == served.get("/healthz").json()["store_version"]
    assert "FROM summaries JOIN submissions" in manifest.query

    body = served.get("/v1/snapshots/latest.parquet")
    assert body.status_code == 200 and body.headers["link"].endswith('rel="license"')
    assert hashlib.sha256(body.content).hexdigest() == manifest.parquet_sha256
    assert len(body.content) == manifest.parquet_bytes
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(body.content)
    shown = {r[0] for r in parquet_rows(copy, "SELECT DISTINCT submission_id FROM FILE")}
    assert shown == set(ids[1:])  # the hidden one is not public data
    assert parquet_rows(copy, "SELECT count(*) FROM FILE") == [(manifest.rows,)]
    metadata = {bytes(k): bytes(v) for _, k, v in parquet_rows(
        copy, "SELECT * FROM parquet_kv_metadata(FILE)")}
    assert metadata[b"license"] == LICENCE_ID.encode()


def test_the_newest_is_served_and_older_ones_pruned(served: Served) -> None:
    served.post(valid_body(seed=30))
    sizes = []
    for seed in (31, 32, 33):
        served.post(valid_body(seed=seed, key_seed=seed))
        sizes.append(served.request("POST", "/admin/v1/snapshot", headers=AUTH)
                     .json()["log_size"])
    assert sizes == [2, 3, 4]
    folder = served.app.state.snapshots.folder
    assert sorted(p.suffix for p in folder.iterdir()) == [".manifest", ".manifest",
                                                          ".parquet", ".parquet"]
    text = served.get("/v1/snapshots/latest.manifest").text
    assert parse_manifest(text[:text.index("\n\n") + 1]).checkpoint.size == 4


def test_the_licence_is_on_public_reads_and_exports_not_on_admin(served: Served) -> None:
    posted = served.post(valid_body(seed=40))
    assert "link" not in posted.headers  # the ingest path is answered before any middleware
    link = f'<{LICENCE_URL}>; rel="license"'
    for path in ("/v1/stats", "/v1/export?format=csv", "/v1/submissions", "/log/checkpoint",
                 "/"):
        assert served.get(path).headers.get("link") == link, path
    assert "link" not in served.get("/admin/v1/stats", headers=AUTH).headers
    assert served.get("/openapi.json").json()["info"]["license"]["url"] == LICENCE_URL
    page = served.get("/").text
    assert f'rel="license" href="{LICENCE_URL}"' in page and "CC BY 4.0" in page


def _manifest(signer: Signer) -> Manifest:
    return Manifest(origin=signer.name, checkpoint=Checkpoint(signer.name, 3, b"\x07" * 32),
                    parquet_sha256="ab" * 32, parquet_bytes=100, rows=6, schema_version=17,
                    created="2026-12-06T00:00:00.000000Z", query="SELECT 1\n  FROM x")


def test_a_manifest_opens_only_as_signed() -> None:
    signer = Signer("example.org/log", nacl.signing.SigningKey(b"\x01" * 32))
    manifest = _manifest(signer)
    note = sign_manifest(manifest, signer)
    opened = open_manifest(note, signer.verifier)
    assert opened.checkpoint == manifest.checkpoint and opened.rows == 6
    assert opened.query == "SELECT 1 FROM x"  # on one line
    with pytest.raises(NoteInvalid):
        open_manifest(note.replace(b"rows 6", b"rows 7"), signer.verifier)
    other = Signer("example.org/log", nacl.signing.SigningKey(b"\x02" * 32))
    with pytest.raises(NoteInvalid):
        open_manifest(note, other.verifier)
    stranger = Signer("elsewhere/log", nacl.signing.SigningKey(b"\x01" * 32))
    with pytest.raises(ManifestInvalid, match="origin"):
        sign_manifest(manifest, stranger)
    forged = stranger.sign(manifest.text())
    with pytest.raises(ManifestInvalid, match="is of"):
        open_manifest(forged.encode(), stranger.verifier)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("rows 6\n", ""), "has no rows"),
    (lambda t: t + "rows 7\n", "not a manifest line"),
    (lambda t: t.replace("ab" * 32, "AB" * 32), "64 lowercase hex"),
    (lambda t: t.replace("rows 6", "rows -6"), "not a count"),
    (lambda t: t.replace(" 3 ", " 03 "), "checkpoint line"),
    (lambda t: "specatlas snapshot v2" + t[t.index("\n"):], "begins"),
])
def test_a_malformed_manifest_is_refused(edit: Any, message: str) -> None:
    signer = Signer("example.org/log", nacl.signing.SigningKey(b"\x01" * 32))
    with pytest.raises(ManifestInvalid, match=message):
        parse_manifest(edit(_manifest(signer).text()))


def test_the_timer_writes_until_stopped_and_outlives_a_failure() -> None:
    calls: list[int] = []
    second = threading.Event()

    def write() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk full")  # logged; the next tick tries again
        second.set()

    timer = SnapshotTimer(write, 0.01)
    timer.start()
    assert second.wait(10)
    timer.stop()
    stopped_at = len(calls)
    assert stopped_at >= 2
    threading.Event().wait(0.05)
    assert len(calls) == stopped_at
    SnapshotTimer(write, 0).start()  # 0: only on demand, no thread


def test_the_readme_and_the_page_name_the_licence_the_code_names() -> None:
    from specserver.licence import ATTRIBUTION, LICENCE_NAME

    root = Path(__file__).resolve().parents[3]
    readme = (root / "README.md").read_text(encoding="utf-8")
    footer = (root / "server" / "specserver" / "http" / "page" / "templates" /
              "page.html").read_text(encoding="utf-8")
    for text in (readme, footer):
        assert f"[{LICENCE_NAME}]({LICENCE_URL})" in text or \
            f'href="{LICENCE_URL}">{LICENCE_NAME}</a>' in text
        assert f'"{ATTRIBUTION}"' in text


def test_the_next_snapshot_is_due_an_interval_after_the_newest_kept(tmp_path: Path) -> None:
    """A server restarted more often than the interval still writes snapshots."""
    folder = tmp_path / "snaps"
    assert due_in(folder, 86400, settle_s=60) == 60  # none yet: soon after the start
    folder.mkdir()
    manifest = folder / "snapshot-20261206T000000000000Z-3.manifest"
    manifest.write_text("m")
    manifest.with_suffix(".parquet").write_bytes(b"p")
    written = manifest.stat().st_mtime
    assert due_in(folder, 86400, now=lambda: written + 3600) == 82800
    assert due_in(folder, 86400, now=lambda: written + 90000) == 60


def test_the_timer_waits_for_its_first_due_time() -> None:
    calls: list[float] = []
    timer = SnapshotTimer(lambda: calls.append(1), 3600, lambda: 0.01)
    timer.start()
    deadline = threading.Event()
    for _ in range(500):
        if calls:
            break
        deadline.wait(0.01)
    timer.stop()
    assert calls == [1]  # the first at its due time, the next an hour later
