"""Saved results: one JSON file per run under ``state_home()/results/<submission_id>.json``.

A result is written (atomically: temp file, fsync, rename) before anything else happens
with it, so that nothing a run measured is lost to a later failure.
"""

from __future__ import annotations

from pathlib import Path

from specschema import PayloadParseError, PayloadSchemaError, Submission, parse_submission
from specschema.payload import submission_bytes
from specsubmit.errors import ResultFileError
from specsubmit.local.atomicfile import atomic_write
from specsubmit.local.paths import state_home


def results_dir() -> Path:
    folder = state_home() / "results"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def result_path(submission: Submission) -> Path:
    return results_dir() / f"{submission.submission_id}.json"


def write_result(submission: Submission, path: Path) -> Path:
    """Write ``submission`` to ``path`` atomically; the payload is the exact wire bytes."""
    data = submission_bytes(submission)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    except OSError as exc:
        raise ResultFileError(f"cannot write the result to {path}: {exc.strerror or exc}") from None
    return path


def save_result(submission: Submission) -> Path:
    """Save into the results folder; returns the file's path."""
    return write_result(submission, result_path(submission))


def load_result(path: Path) -> Submission:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse_submission(data)
    except (PayloadParseError, PayloadSchemaError) as exc:
        raise ResultFileError(f"{path} is not a specsubmit result: {exc.message}") from None
