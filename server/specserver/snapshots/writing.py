"""Signed snapshots of the public data: a Parquet file of every visible submission x config
(the export's rows and columns, unfiltered) and its signed manifest (``manifest.py``).

The rows and the log's size are read in one database snapshot (one transaction;
REPEATABLE READ on PostgreSQL), so the manifest's checkpoint is the log exactly as the
rows saw it. The file is written by DuckDB into the store's scratch folder (the only one
its locked-down instance may write), then moved into ``folder`` with its manifest beside
it: ``snapshot-<UTC time>-<log size>.parquet`` and ``.manifest``, the manifest last, so
that a snapshot is listed (``newest``) only once both are whole. The newest ``keep``
snapshots stay; older ones are deleted.

``SnapshotTimer`` writes one every ``interval_s`` on a thread of its own, the first when
the newest kept one is that old (``due_in``); the admin API writes one on demand.
Nothing here runs in the ingest path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
from sqlalchemy import Engine

from specschema.tlog import Checkpoint, Signer
from specserver.snapshots.manifest import Manifest, sign_manifest
from specserver.store import Filters, backend_of, current_version, exporting, next_index

log = logging.getLogger("specserver")
_NAME = re.compile(r"snapshot-(\d{8}T\d{6}\d{6}Z)-(\d+)\.manifest")


@dataclass(frozen=True)
class Snapshot:
    parquet: Path
    manifest_path: Path
    note: bytes  # the signed manifest, as served
    manifest: Manifest


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _row_count(path: Path) -> int:
    with duckdb.connect() as duck:
        found = duck.execute("SELECT count(*) FROM read_parquet(?)", [str(path)]).fetchone()
    return int(found[0]) if found else 0


def write_snapshot(engine: Engine, folder: Path, scratch: Path, signer: Signer,
                   root: Callable[[int], bytes], keep: int = 7,
                   now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Snapshot:
    """Write a snapshot into ``folder``; ``root(size)`` is the log's root at ``size``."""
    folder.mkdir(parents=True, exist_ok=True)
    handle, scratch_name = tempfile.mkstemp(prefix="snapshot-", suffix=".parquet", dir=scratch)
    os.close(handle)
    os.unlink(scratch_name)  # DuckDB writes it anew
    written = Path(scratch_name)
    try:
        isolation = backend_of(engine).snapshot_isolation
        options = {} if isolation is None else {"isolation_level": isolation}
        with engine.connect().execution_options(**options) as conn, conn.begin():
            size = next_index(conn)
            query = exporting.export_sql(conn, Filters())
            exporting.write_parquet(conn, Filters(), written)
            version = current_version(conn) or 0
        stamp = now().astimezone(UTC)
        manifest = Manifest(
            origin=signer.name, checkpoint=Checkpoint(signer.name, size, root(size)),
            parquet_sha256=file_sha256(written), parquet_bytes=written.stat().st_size,
            rows=_row_count(written), schema_version=version,
            created=stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), query=query)
        note = sign_manifest(manifest, signer)
        base = folder / f"snapshot-{stamp.strftime('%Y%m%dT%H%M%S%fZ')}-{size}"
        parquet = base.with_suffix(".parquet")
        shutil.move(written, parquet)
        partial = base.with_suffix(".manifest.partial")
        partial.write_bytes(note)
        os.replace(partial, base.with_suffix(".manifest"))
    finally:
        written.unlink(missing_ok=True)
    _prune(folder, keep)
    return Snapshot(parquet, base.with_suffix(".manifest"), note, manifest)


def _listed(folder: Path) -> list[Path]:
    """The manifests in ``folder``, oldest first (their names sort by time)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.fullmatch(p.name))


def _prune(folder: Path, keep: int) -> None:
    for manifest in _listed(folder)[:-keep] if keep > 0 else []:
        manifest.unlink(missing_ok=True)
        manifest.with_suffix(".parquet").unlink(missing_ok=True)


def newest(folder: Path) -> tuple[Path, Path] | None:
    """The newest snapshot's (manifest, parquet) paths, or None."""
    listed = _listed(folder)
    if not listed:
        return None
    return listed[-1], listed[-1].with_suffix(".parquet")


def due_in(folder: Path, interval_s: float, settle_s: float = 60.0,
           now: Callable[[], float] = time.time) -> float:
    """Seconds until the next snapshot is due: ``interval_s`` after the newest one kept
    (so a server restarted more often than that still writes them), at least ``settle_s``
    after a start (not while the server warms up)."""
    found = newest(folder)
    age = now() - found[0].stat().st_mtime if found is not None else float("inf")
    return max(settle_s, interval_s - age)


class SnapshotTimer:
    """Writes a snapshot by calling ``write`` once ``first_s()`` seconds have passed, then
    every ``interval_s``; a failure is logged and tried again at the next tick. Any other
    periodic job of the log names itself (``job``: the log's checkpoints, http/log.py)."""

    def __init__(self, write: Callable[[], object], interval_s: float,
                 first_s: Callable[[], float] | None = None, job: str = "snapshots") -> None:
        self.write = write
        self.interval_s = interval_s
        self.first_s = first_s or (lambda: interval_s)
        self.job = job
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"specserver-{self.job}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wait = self.first_s()
        while not self._stop.wait(wait):
            try:
                self.write()
            except Exception:  # the next tick tries again; the server goes on serving
                log.exception("the periodic %s job failed", self.job)
            wait = self.interval_s

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
