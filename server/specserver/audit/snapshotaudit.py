"""The newest signed snapshot against the log and the public data.

- Its manifest opens with the log's key; the log it names (size, root) must be a prefix of
  the log copied now: larger means the log shrank since, another root means it was
  rewritten (both signed by the server: the proof).
- The Parquet file served must be the one the manifest names (sha256, size, rows).
- Each signed submission in it has an envelope entry below the manifest's size; each one
  is still public, or its view says it was withdrawn (a submission deleted since the
  snapshot is a finding).
- Rows are immutable: a submission's rows in the snapshot and in the export today must be
  equal (when the store's schema version is the same), so a row edited in the database
  after a snapshot is caught.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import duckdb

from specschema.errors import NoteInvalid
from specserver.audit.findings import AuditReport, b64, note_lines
from specserver.audit.logaudit import LogCopy
from specserver.audit.source import PublicSource
from specserver.snapshots import Manifest, ManifestInvalid, file_sha256, open_manifest

SNAPSHOT = "/v1/snapshots/latest.parquet"


def _literal(path: Path) -> str:
    """A path as a SQL string (a view cannot take a parameter); ours, in a temp folder."""
    return "'" + str(path).replace("'", "''") + "'"


def _check_log(manifest: Manifest, note: bytes, log: LogCopy, report: AuditReport) -> bool:
    size = manifest.checkpoint.size
    proof = (*note_lines("snapshot manifest", note), *note_lines("checkpoint now", log.note))
    if size > log.size:
        report.fail("log_shrank", "snapshot", f"the snapshot was taken at {size} log entries; "
                    f"the log now has {log.size}", proof)
        return False
    root = log.tree.root(size)
    if root != manifest.checkpoint.root:
        report.fail("log_rewritten", "snapshot", f"the log's first {size} entries do not hash "
                    "to the root the snapshot's manifest signed",
                    (f"recomputed root of the first {size}: {b64(root)}", *proof))
        return False
    report.passed("snapshot's checkpoint consistent with the log")
    return True


def _ids(duck: Any, table: str) -> dict[str, str]:
    rows = duck.execute(f"SELECT DISTINCT submission_id, source FROM {table}").fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def _check_rows(source: PublicSource, manifest: Manifest, note: bytes, parquet: Path,
                current: Path, log: LogCopy, public: set[str], report: AuditReport) -> None:
    owners = log.by_submission()
    proof = note_lines("snapshot manifest", note)
    with duckdb.connect() as duck:
        duck.execute(f"CREATE VIEW snap AS SELECT * FROM read_parquet({_literal(parquet)})")
        found = duck.execute("SELECT count(*) FROM snap").fetchone()
        if (found[0] if found else 0) != manifest.rows:
            report.fail("snapshot_rows", "snapshot", f"the file holds {found} rows, the "
                        f"manifest says {manifest.rows}", proof)
        for submission_id, kind in sorted(_ids(duck, "snap").items()):
            index = owners.get(submission_id)
            subject = f"submission {submission_id}"
            if kind == "signed" and (index is None or index >= manifest.checkpoint.size):
                report.fail("snapshot_unlogged", subject, "in the snapshot, but no entry "
                            f"below {manifest.checkpoint.size} names it", proof)
            elif submission_id not in public and source.submission(submission_id) is None:
                report.fail("snapshot_submission_gone", subject, "in the signed snapshot, "
                            "the server no longer has it", proof)
            else:
                report.passed("snapshot submissions accounted for")
        health = source.get("/healthz")
        now = health.json().get("store_version") if health.status_code == 200 else None
        if now != manifest.schema_version:
            report.note(f"snapshot rows not compared with today's export: store version "
                        f"{manifest.schema_version} then, {now} now")
            return
        duck.execute(f"CREATE VIEW cur AS SELECT * FROM read_parquet({_literal(current)})")
        changed = duck.execute(
            "SELECT DISTINCT submission_id FROM (SELECT * FROM snap WHERE submission_id IN "
            "(SELECT submission_id FROM cur) EXCEPT SELECT * FROM cur) ORDER BY 1").fetchall()
        for (submission_id,) in changed:
            report.fail("rows_changed", f"submission {submission_id}", "its rows in today's "
                        "export differ from the signed snapshot's", proof)
        if not changed:
            report.passed("snapshot rows unchanged in today's export")


def audit_snapshot(source: PublicSource, log: LogCopy, public: set[str], export: Path,
                   report: AuditReport, retry: bool = True) -> None:
    """``export``: today's Parquet export, downloaded by the caller. The manifest and the
    file are two reads: when the file is not the manifest's because a newer snapshot came
    between them (the manifest served has changed), the newer one is audited instead."""
    note = source.snapshot_manifest()
    if note is None:
        report.note("no snapshot is served yet: nothing to compare")
        return
    try:
        manifest = open_manifest(note, log.verifier)
    except (NoteInvalid, ManifestInvalid) as exc:
        report.fail("manifest_invalid", "snapshot", f"the manifest does not open with the "
                    f"log key: {exc}", note_lines("snapshot manifest", note))
        return
    report.passed("signed snapshot manifest")
    if not _check_log(manifest, note, log, report):
        return
    with tempfile.TemporaryDirectory(prefix="specserver-audit-") as folder:
        work = Path(folder)
        parquet = work / "snapshot.parquet"
        if not source.download(SNAPSHOT, parquet):
            report.fail("snapshot_missing", "snapshot", "the manifest is served, its Parquet "
                        "file is not", note_lines("snapshot manifest", note))
            return
        digest, size = file_sha256(parquet), parquet.stat().st_size
        if (digest, size) != (manifest.parquet_sha256, manifest.parquet_bytes):
            if retry and source.snapshot_manifest() != note:
                # A new snapshot was written between the two reads: audit that one.
                audit_snapshot(source, log, public, export, report, retry=False)
                return
            report.fail("snapshot_file", "snapshot", f"the Parquet file served is {digest} "
                        f"({size} bytes), not the one the manifest signed",
                        note_lines("snapshot manifest", note))
            return
        report.passed("snapshot file matches its manifest")
        _check_rows(source, manifest, note, parquet, export, log, public, report)
