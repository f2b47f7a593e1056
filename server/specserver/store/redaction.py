"""What the public sees of a hidden submission (pure): its numbers, not its words.

Hiding keeps a submission off the boards, the list and the export (``queries.visible_clause``);
its own page, ``GET /v1/submissions/{id}`` and the envelope stay public, so they must not
carry the free text the sender wrote (hiding a doxxing note or a slur in a chip name has to
remove it). The rule (docs/maintainers.md, "Hiding"), applied once to the one view both
read (``queries.SubmissionView``):

- the free-text fields (``REDACTED_SUBMISSION_FIELDS``, the fingerprint's names and its JSON)
  are null in every public view of a hidden submission, which lists them under ``redacted``;
  numbers, verdicts, the moderation history and the envelope's sha256 stay, so the page
  still says what was measured and why it was hidden;
- the envelope itself (the signed bytes, which hold the same text) answers 410 ``redacted``
  with its sha256; it stays in the store, readable by maintainers
  (``specserver admin query "select body from envelopes where submission_id = '...'"``), and
  anyone who kept a copy can still check it against the published sha256 and the signature.
  Unhiding restores every public view: nothing is deleted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, select

from specserver.store import tables
from specserver.store.queries import SubmissionView

# Columns of ``submissions`` that hold text the sender chose.
# engine_build too: wire v2's build string is whatever the sender's engine (or sender) said.
# The target's name and quantization too (a hidden target name must not stay public).
REDACTED_SUBMISSION_FIELDS = ("note", "chip", "backend", "client_name", "source_note",
                              "engine_build", "target_model", "target_quant")
# Model names in the configs and summaries (the target's and the draft's).
REDACTED_MODEL_FIELDS = ("model", "draft_model", "draft_quant")
# Columns of ``fingerprints`` that do (``json`` is the whole fingerprint as sent).
REDACTED_FINGERPRINT_FIELDS = ("chip", "cpu_name", "cpu_brand_raw", "gpu_names", "os_version",
                               "virtualization", "json")


def redact_row(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """A copy with ``fields`` (those present) set to None and listed under ``redacted``."""
    present = [f for f in fields if f in row]
    out = {**row, **dict.fromkeys(present)}
    out["redacted"] = present
    return out


def redact_view(view: SubmissionView) -> SubmissionView:
    """The view as the public may see it (unchanged unless hidden): what the JSON route
    sends and what the page shows, alike."""
    if not view.hidden:
        return view
    fingerprint = (redact_row(view.fingerprint, REDACTED_FINGERPRINT_FIELDS)
                   if view.fingerprint is not None else None)
    return replace(
        view, submission=redact_row(view.submission, REDACTED_SUBMISSION_FIELDS),
        fingerprint=fingerprint,
        configs=[redact_row(row, REDACTED_MODEL_FIELDS) for row in view.configs],
        summary=[redact_row(row, REDACTED_MODEL_FIELDS) for row in view.summary],
        envelope={**view.envelope, "body": None, "redacted": True})


def hidden_envelope_sha256(conn: Connection, submission_id: str) -> str | None:
    """The envelope's sha256 when the submission is hidden (its envelope is withdrawn from
    public view), else None (visible, or no such submission)."""
    sub = tables.submissions
    row = conn.execute(select(sub.c.hidden, sub.c.envelope_sha256).where(
        sub.c.submission_id == submission_id)).first()
    return str(row.envelope_sha256) if row is not None and row.hidden else None
