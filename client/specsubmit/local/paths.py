"""Where the client keeps its state: SPECSUBMIT_HOME, else the platform's data folder.

``check_state_home`` is called by every command that writes state (`run`, `submit`,
`keys`, `results`) before anything else, so that a folder it cannot write is one line
naming the folder and what to do, said before a run spends its minutes, never a
traceback after them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

from specsubmit.errors import StateFolderError

HOME_ENV = "SPECSUBMIT_HOME"
# The folders the client writes under the state folder (results, the outbox, the keys, probes).
SUBFOLDERS = ("results", "pending", "submitted", "rejected", "keys", "probes")


def _configured_home() -> Path:
    override = os.environ.get(HOME_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir("specsubmit"))


def _unwritable(home: Path, problem: OSError | str) -> StateFolderError:
    reason = problem if isinstance(problem, str) else (problem.strerror or type(problem).__name__)
    return StateFolderError(
        f"the state folder {home} cannot be written ({reason}): make it writable, or set "
        f"{HOME_ENV} to a folder you can write")


def state_home() -> Path:
    home = _configured_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(home, exc) from None
    return home


def check_state_home() -> Path:
    """The state folder, once a file could be written (and removed) in it and in each of
    its subfolders that exists; StateFolderError (one line) otherwise."""
    home = state_home()
    for folder in (home, *(home / name for name in SUBFOLDERS)):
        if folder is not home and not folder.exists():
            continue
        if not folder.is_dir():
            raise _unwritable(home, f"{folder} is not a folder")
        try:
            fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            where = home if folder is home else folder
            raise _unwritable(where, exc) from None
    return home
