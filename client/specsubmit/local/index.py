"""The local results and what became of each: submitted, pending, incomplete, not submitted.

Pure over the state folder: reads ``results/``, ``pending/``, ``submitted/`` and
``rejected/`` and joins them by submission id.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specsubmit.errors import ResultFileError
from specsubmit.local import outbox
from specsubmit.local.results import load_result, results_dir

SUBMITTED = "submitted"
PENDING = "pending"
INCOMPLETE = "incomplete"
NOT_SUBMITTED = "not submitted"
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class ResultEntry:
    submission_id: str
    path: str
    status: str
    created_at: str | None = None
    protocol: str | None = None
    chip: str | None = None
    complete: bool | None = None
    url: str | None = None
    detail: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _status(submission_id: str, complete: bool) -> tuple[str, str | None, str | None]:
    record = outbox.submitted_record(submission_id)
    if record is not None:
        receipt = record.get("receipt")
        url = receipt.get("url") if isinstance(receipt, dict) else None
        if not isinstance(url, str):
            url = f"{record.get('server', '')}/v1/submissions/{submission_id}"
        return SUBMITTED, url, f"delivered {record.get('delivered_at', '')}".strip()
    if outbox.pending_path(submission_id).is_file():
        return PENDING, None, "retry with `specsubmit submit --pending`"
    if not complete:
        return INCOMPLETE, None, "the run stopped early; never submitted"
    rejected = outbox.rejected_record(submission_id)
    if rejected is not None:
        return NOT_SUBMITTED, None, f"rejected: {rejected.get('message', '')}"
    return NOT_SUBMITTED, None, None


def list_results(folder: Path | None = None) -> list[ResultEntry]:
    entries: list[ResultEntry] = []
    for path in sorted((folder or results_dir()).glob("*.json")):
        try:
            submission = load_result(path)
        except ResultFileError as exc:
            entries.append(ResultEntry(path.stem, str(path), UNREADABLE, detail=exc.message))
            continue
        submission_id = str(submission.submission_id)
        status, url, detail = _status(submission_id, submission.complete)
        entries.append(ResultEntry(
            submission_id=submission_id,
            path=str(path),
            status=status,
            created_at=submission.created_at.isoformat(),
            protocol=f"{submission.protocol.id} v{submission.protocol.version}",
            chip=submission.fingerprint.chip,
            complete=submission.complete,
            url=url,
            detail=detail,
        ))
    seen = {entry.submission_id for entry in entries}
    for item in outbox.list_pending():
        if item.submission_id not in seen:  # its result file was moved or deleted
            entries.append(ResultEntry(item.submission_id, str(item.path), PENDING,
                                       detail="signed envelope only (no result file); retry "
                                              "with `specsubmit submit --pending`"))
    entries.sort(key=lambda entry: entry.created_at or "")
    return entries
