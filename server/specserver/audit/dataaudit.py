"""The public data against the log: every entry accounted for, every public submission
logged, every decision recomputed.

- An envelope entry names a submission (the log's index). While public, its envelope's
  bytes (``GET /v1/submissions/{id}/envelope``) must hash to the entry and their DSSE
  signature must verify; otherwise its view (``GET /v1/submissions/{id}``) must exist,
  and when hidden, the SHA-256 it shows must be
  the entry's, and something must say why it is off the list: quarantined at ingest, or a
  decision in the log (hide, reject, ban) naming it. A logged submission the server no
  longer has, or whose bytes changed, is a finding with the entry's inclusion proof.
- A submission the public list shows has an envelope entry, or (an import) a logged
  ``import`` decision naming it.
- A moderation entry's decision, as the index gives it, hashes to the entry (recomputed
  here from the rule: ``0x02 || SHA-256`` of the row plus ``affects`` as sorted, compact
  JSON), names only earlier envelope entries, the target's own where it names a
  submission, and is in the public moderation history of that submission (of the first
  submission it names, for a key's ban or unban).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any

from specschema.envelope import verify_envelope
from specschema.errors import EnvelopeError, SignatureInvalid
from specserver.audit.findings import AuditReport, entry_proof
from specserver.audit.logaudit import ENVELOPE, MODERATION, LogCopy
from specserver.audit.rowsaudit import Facts, check_rows
from specserver.audit.source import PublicSource

QUARANTINED = "quarantined: "
_HEX64 = re.compile(r"[0-9a-f]{64}")
WITHDRAWING = ("hide", "reject")
SUBMISSION_ACTIONS = ("hide", "unhide", "reject", "import")
KEY_ACTIONS = ("ban", "unban")
# A decision in the public history that the log does not hold: made before the log began
# (its store version logged the stored envelopes, not the past decisions). Said apart.
UNLOGGED = "by a decision in its public history that the log does not hold (before the log?)"


def decision_entry(decision: dict[str, Any], affects: list[int]) -> bytes:
    """What a moderation entry holds for ``decision`` (the rule, written from its spec)."""
    text = json.dumps({**decision, "affects": sorted(affects)}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return bytes([MODERATION]) + hashlib.sha256(text.encode("utf-8")).digest()


def _decisions(log: LogCopy, report: AuditReport,
               views: dict[str, dict[str, Any] | None], source: PublicSource
               ) -> dict[int, list[dict[str, Any]]]:
    """Check each moderation entry; the decisions naming each envelope entry."""
    naming: dict[int, list[dict[str, Any]]] = {}
    owners = log.by_submission()
    for index, item in sorted(log.index.items()):
        if item.get("kind") != "moderation":
            continue
        entry = log.entries[index]
        decision, affects = item.get("decision"), item.get("affects")
        if not isinstance(decision, dict) or not isinstance(affects, list):
            report.fail("decision_missing", f"entry {index}", "no decision in the public "
                        "moderation history hashes to this moderation entry",
                        entry_proof(log.tree, index, entry, log.note))
            continue
        if decision_entry(decision, affects) != entry:
            report.fail("decision_mismatch", f"entry {index}", "the decision the index gives "
                        "does not hash to the entry", (f"decision: {json.dumps(decision)}",
                                                       *entry_proof(log.tree, index, entry,
                                                                    log.note)))
            continue
        action, target = str(decision.get("action")), str(decision.get("target"))
        bad = [i for i in affects if not isinstance(i, int) or not 0 <= i < index
               or log.entries[i][0] != ENVELOPE]
        own = owners.get(target)
        if bad or (action in SUBMISSION_ACTIONS
                   and affects != ([own] if own is not None and own < index else [])):
            report.fail("decision_affects", f"entry {index}", f"the {action} of {target} "
                        f"names entries {affects}, not what it acts on",
                        entry_proof(log.tree, index, entry, log.note))
            continue
        # A submission's history holds the decisions on it and on its key.
        shown_on = target if action in SUBMISSION_ACTIONS else (
            str(log.index.get(affects[0], {}).get("submission_id"))
            if action in KEY_ACTIONS and affects else None)
        if shown_on is not None and not _in_history(shown_on, decision, views, source):
            report.fail("history_mismatch", f"entry {index}", f"the {action} of {target} is "
                        f"not in the public moderation history of submission {shown_on}",
                        entry_proof(log.tree, index, entry, log.note))
            continue
        for affected in affects:
            naming.setdefault(affected, []).append(decision)
        report.passed("decisions recomputed")
    return naming


def _view(views: dict[str, dict[str, Any] | None], source: PublicSource,
          submission_id: str) -> dict[str, Any] | None:
    if submission_id not in views:
        views[submission_id] = source.submission(submission_id)
    return views[submission_id]


def _in_history(target: str, decision: dict[str, Any],
                views: dict[str, dict[str, Any] | None], source: PublicSource) -> bool:
    view = _view(views, source, target)
    return view is not None and decision in view.get("moderation", [])


def _envelope_bytes(view: dict[str, Any]) -> bytes | None:
    body = view.get("envelope", {}).get("body")
    if not isinstance(body, str):
        return None
    try:
        return base64.b64decode(body, validate=True)
    except binascii.Error:
        return None


def _last(decisions: list[dict[str, Any]], actions: tuple[str, ...]) -> str | None:
    """The latest of ``decisions`` (in log order) among ``actions``."""
    found = [d["action"] for d in decisions if d.get("action") in actions]
    return str(found[-1]) if found else None


def _why_withdrawn(view: dict[str, Any], decisions: list[dict[str, Any]]) -> str | None:
    """Why a logged submission is off the public list, or None when nothing says:
    ``decisions`` are the logged ones naming its entry, in log order."""
    submission = view.get("submission", {})
    history = [row for row in view.get("moderation", []) if isinstance(row, dict)]
    if submission.get("hidden"):
        last = _last(decisions, SUBMISSION_ACTIONS)
        if last in WITHDRAWING:
            return f"hidden by a logged decision ({last})"
        if last is None and str(submission.get("hidden_reason") or "").startswith(
                QUARANTINED):
            return "quarantined at ingest"
        if last is None and _last(history, SUBMISSION_ACTIONS) in WITHDRAWING:
            return UNLOGGED
        return None
    if submission.get("key_banned") and _last(decisions, KEY_ACTIONS) == "ban":
        return "its key is banned by a logged decision"
    if submission.get("key_banned") and not decisions and _last(history, KEY_ACTIONS) == "ban":
        return UNLOGGED
    if submission.get("complete") is False:
        return "incomplete"
    return None


def _check_envelope(log: LogCopy, index: int, submission_id: str, served: bytes | None,
                    view: dict[str, Any] | None, public: set[str],
                    decisions: list[dict[str, Any]], exported: Facts,
                    report: AuditReport) -> None:
    """``served``: the envelope's bytes from ``/envelope`` (a public submission), else its
    ``view`` is read (None: the server has no such submission)."""
    entry = log.entries[index]
    subject = f"submission {submission_id}"
    if served is None and view is None:
        report.fail("submission_missing", subject, f"logged as entry {index}, the server no "
                    "longer has it", entry_proof(log.tree, index, entry, log.note))
        return
    shown = str((view or {}).get("submission", {}).get("envelope_sha256") or "")
    body = served if served is not None else _envelope_bytes(view or {})
    if body is not None:
        digest = hashlib.sha256(body).hexdigest()
        if bytes([ENVELOPE]) + bytes.fromhex(digest) != entry:
            report.fail("envelope_mismatch", subject, f"the envelope served hashes to "
                        f"{digest}, not to entry {index}",
                        (f"served envelope sha256: {digest}",
                         *entry_proof(log.tree, index, entry, log.note)))
            return
        try:
            verified = verify_envelope(json.loads(body))
        except (ValueError, EnvelopeError, SignatureInvalid) as exc:
            report.fail("signature_invalid", subject, f"its envelope's signature does not "
                        f"verify: {exc}", entry_proof(log.tree, index, entry, log.note))
            return
        report.passed("envelopes hashed and signatures verified")
        check_rows(submission_id, verified.payload, exported, report,
                   lambda: entry_proof(log.tree, index, entry, log.note))
    elif not _HEX64.fullmatch(shown) or bytes([ENVELOPE]) + bytes.fromhex(shown) != entry:
        report.fail("envelope_mismatch", subject, f"its envelope is withdrawn and the "
                    f"sha256 shown ({shown[:64]}) is not entry {index}'s",
                    entry_proof(log.tree, index, entry, log.note))
        return
    else:
        report.passed("hidden envelopes matched by their sha256")
    if submission_id in public or view is None:
        return
    shown_row = view.get("submission", {})
    if not (shown_row.get("hidden") or shown_row.get("key_banned")
            or shown_row.get("complete") is False):
        report.passed("public since the list was read")  # stored after it: not withdrawn
        return
    why = _why_withdrawn(view, decisions)
    if why is None:
        report.fail("withdrawn_unexplained", subject, f"logged as entry {index} but off "
                    "the public list, and neither its view nor a logged decision says why",
                    entry_proof(log.tree, index, entry, log.note))
    else:
        report.passed(f"off the list: {why}")


def read_public_list(source: PublicSource) -> dict[str, dict[str, Any]]:
    """The public list by submission id. Read before the log is copied: a submission it
    shows was committed with its entry, so the log copied after it names it."""
    return {str(item["submission_id"]): item for item in source.public_submissions()}


def unlogged(listed: dict[str, dict[str, Any]], log: LogCopy) -> list[str]:
    """Signed submissions the list shows that the copied log does not name."""
    owners = log.by_submission()
    return [sid for sid, item in listed.items()
            if item.get("source") == "signed" and sid not in owners]


def audit_public_data(source: PublicSource, log: LogCopy, report: AuditReport,
                      listed: dict[str, dict[str, Any]], exported: Facts) -> set[str]:
    """The checks of the module doc, and each public submission's rows in today's export
    (``exported``) against its signed payload (``rowsaudit``); ``listed``: the public
    list read before the log was copied. Returns the ids it shows."""
    public = set(listed)
    views: dict[str, dict[str, Any] | None] = {}
    naming = _decisions(log, report, views, source)
    owners = log.by_submission()
    for submission_id, index in sorted(owners.items(), key=lambda pair: pair[1]):
        # A public one's bytes alone (one cheap read); any other's whole view.
        served = source.envelope(submission_id) if submission_id in public else None
        view = None if served is not None else _view(views, source, submission_id)
        _check_envelope(log, index, submission_id, served, view, public,
                        naming.get(index, []), exported, report)
    imported = {str(d["decision"]["target"]) for d in log.index.values()
                if d.get("kind") == "moderation" and isinstance(d.get("decision"), dict)
                and d["decision"].get("action") == "import"}
    for submission_id in sorted(public - set(owners)):
        if listed[submission_id].get("source") != "signed":
            if submission_id in imported:
                report.passed("imports named by a logged decision")
                continue
            view = _view(views, source, submission_id)
            if view is not None and _last(view.get("moderation", []), ("import",)):
                report.passed(f"imports {UNLOGGED}")
                continue
        report.fail("unlogged_submission", f"submission {submission_id}",
                    "the public list shows it, but no entry of the log names it",
                    (f"log size: {log.size}",))
    report.passed("public submissions listed", len(public))
    return public
