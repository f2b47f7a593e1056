"""What the client keeps of each server's transparency log, between runs: the verifier key it
pinned and the newest checkpoint it verified. A client that keeps nothing cannot see a
fork or a truncation (the server could show it any history); one that keeps the newest
checkpoint checks every later one against it.

    state_home()/log/<sha256(server)[:16]>.json   {"server", "vkey", "checkpoint"}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from specsubmit.errors import StateFolderError
from specsubmit.local.atomicfile import atomic_write
from specsubmit.local.paths import state_home

FOLDER = "log"


@dataclass(frozen=True)
class KeptLog:
    server: str
    vkey: str
    checkpoint: bytes | None  # the signed note as the server sent it


def path_for(server: str, home: Path | None = None) -> Path:
    name = hashlib.sha256(server.encode("utf-8")).hexdigest()[:16]
    return (home or state_home()) / FOLDER / f"{name}.json"


def load(server: str, home: Path | None = None) -> KeptLog | None:
    path = path_for(server, home)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StateFolderError(f"cannot read the kept log state {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("server") != server \
            or not isinstance(data.get("vkey"), str):
        raise StateFolderError(f"the kept log state {path} is not one this client wrote")
    note = data.get("checkpoint")
    return KeptLog(server, data["vkey"], note.encode("utf-8") if isinstance(note, str) else None)


def save(kept: KeptLog, home: Path | None = None) -> Path:
    path = path_for(kept.server, home)
    record = {"server": kept.server, "vkey": kept.vkey,
              "checkpoint": kept.checkpoint.decode("utf-8") if kept.checkpoint else None}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(record, indent=2, sort_keys=True).encode("utf-8") + b"\n")
    except OSError as exc:
        raise StateFolderError(f"cannot write the kept log state {path}: {exc}") from None
    return path
