"""Where signed envelopes wait and where deliveries are recorded.

    state_home()/pending/<submission_id>.json     the exact envelope bytes, not yet delivered
    state_home()/pending/<submission_id>.server   the server it was meant for (its URL)
    state_home()/submitted/<submission_id>.json   {"server", "delivered_at", "status", "receipt",
                                                   "envelope_sha256"}
    state_home()/rejected/<submission_id>.json    {"server", "rejected_at", "status", "message"}

An envelope is written to pending/ *before* the first attempt, so a crash or Ctrl-C while
sending loses nothing; it leaves pending/ only once a receipt (or a final refusal) is
recorded. Re-sending the same bytes is safe: the server is idempotent by submission id.
All writes are atomic (temp file, fsync, rename).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specsubmit.errors import SubmitError
from specsubmit.local.atomicfile import atomic_write
from specsubmit.local.paths import state_home

PENDING = "pending"
SUBMITTED = "submitted"
REJECTED = "rejected"


def folder(name: str, home: Path | None = None) -> Path:
    path = (home or state_home()) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _atomic_write(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise SubmitError(f"cannot write {path}: {exc.strerror or exc}") from None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class PendingEnvelope:
    submission_id: str
    path: Path

    def read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except OSError as exc:
            raise SubmitError(f"cannot read {self.path}: {exc.strerror or exc}") from None

    @property
    def server(self) -> str | None:
        """The server it was meant for (None: parked before servers were remembered)."""
        try:
            text = self.path.with_suffix(".server").read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return text or None


def pending_path(submission_id: str, home: Path | None = None) -> Path:
    return folder(PENDING, home) / f"{submission_id}.json"


def put_pending(submission_id: str, envelope: bytes, home: Path | None = None,
                server: str | None = None) -> Path:
    path = pending_path(submission_id, home)
    if server is not None:  # first, so that a parked envelope always knows where it goes
        _atomic_write(path.with_suffix(".server"), server.encode("utf-8") + b"\n")
    _atomic_write(path, envelope)
    return path


def get_pending(submission_id: str, home: Path | None = None) -> bytes | None:
    path = pending_path(submission_id, home)
    return PendingEnvelope(submission_id, path).read() if path.is_file() else None


def list_pending(home: Path | None = None) -> list[PendingEnvelope]:
    return [
        PendingEnvelope(path.stem, path)
        for path in sorted(folder(PENDING, home).glob("*.json"))
    ]


def _record(name: str, submission_id: str, record: dict[str, Any], home: Path | None) -> Path:
    path = folder(name, home) / f"{submission_id}.json"
    _atomic_write(path, json.dumps(record, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    parked = pending_path(submission_id, home)
    parked.unlink(missing_ok=True)
    parked.with_suffix(".server").unlink(missing_ok=True)
    return path


def record_submitted(
    submission_id: str, server: str, status: int, receipt: dict[str, Any], home: Path | None = None,
    envelope_sha256: str | None = None,
) -> Path:
    """The receipt as the server gave it (with its transparency log entry), and the SHA-256
    of the envelope bytes sent, from which ``specsubmit verify`` computes the log's leaf
    itself."""
    record: dict[str, Any] = {"server": server, "delivered_at": _now(), "status": status,
                              "receipt": receipt}
    if envelope_sha256 is not None:
        record["envelope_sha256"] = envelope_sha256
    return _record(SUBMITTED, submission_id, record, home)


def submitted_records(home: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every delivered submission's record, by id."""
    return _records(SUBMITTED, home)


def _records(name: str, home: Path | None) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(folder(name, home).glob("*.json")):
        record = _read_record(name, path.stem, home)
        if record is not None:
            found.append((path.stem, record))
    return found


def record_rejected(
    submission_id: str, server: str, status: int, message: str, home: Path | None = None,
    *, log_entry: tuple[int, str] | None = None, envelope_sha256: str | None = None,
) -> Path:
    """``log_entry``: where the server logged the refusal (index, base64 leaf hash), kept
    with the refused envelope's sha256 so that `specsubmit verify` proves it included."""
    record: dict[str, Any] = {"server": server, "rejected_at": _now(), "status": status,
                              "message": message}
    if log_entry is not None:
        record["log"] = {"index": log_entry[0], "leaf_hash": log_entry[1]}
        record["envelope_sha256"] = envelope_sha256
    return _record(REJECTED, submission_id, record, home)


def rejected_records(home: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every refused submission's record, by id."""
    return _records(REJECTED, home)


def _read_record(name: str, submission_id: str, home: Path | None) -> dict[str, Any] | None:
    path = folder(name, home) / f"{submission_id}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def submitted_record(submission_id: str, home: Path | None = None) -> dict[str, Any] | None:
    return _read_record(SUBMITTED, submission_id, home)


def rejected_record(submission_id: str, home: Path | None = None) -> dict[str, Any] | None:
    return _read_record(REJECTED, submission_id, home)
