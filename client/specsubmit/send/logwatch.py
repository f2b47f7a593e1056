"""A server's transparency log, checked on every contact, not only by `specsubmit verify`:
Go's checksum database client checks the database's newest signed tree against the one
it kept on every lookup, so that a server cannot show one client a history and later
another. After anything this client sends a server or asks of it (a result, the pending
ones, a cost probe, a prediction), it fetches the log's newest checkpoint, proves it
consistent with the newest one kept (``logcheck.check_log``) and keeps it.

A fork, a shrunk log or a checkpoint the pinned key did not sign is printed with its proof
and raised as ``LogMisbehavior`` (exit 3). A server without a log (its ``/log/checkpoint``
is 404) has nothing to check. A log that does not answer is said in one line and is no
failure: what was delivered stays delivered, and the next contact checks again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager

from specschema.errors import NoteInvalid
from specschema.tlog import parse_vkey
from specsubmit.errors import LogMisbehavior, LogUnchecked
from specsubmit.local import logstate
from specsubmit.outside_text import visible
from specsubmit.send.logcheck import Fetch, Held, HttpLog, LogReport, Misbehavior, check_log

Say = Callable[[str], None]
LOG_KEY_ENV = "SPECSUBMIT_LOG_KEY"
CONTACT_TIMEOUT_S = 10.0  # the log is checked after the real work: it must not hang a run


class NoLog(LogUnchecked):
    """The server keeps no transparency log (an older one): nothing to check."""


def keep_checked(where: str, fetch: Fetch, items: list[Held], log_key: str | None,
                 say: Say) -> LogReport:
    """The server's log checked against what this client kept: its key pinned on first
    contact (or ``log_key``), its newest checkpoint proven consistent with the one kept
    and including each of ``items`` it is old enough to hold, then kept. A proof of
    misbehaviour is printed with ``say`` and raised as ``LogMisbehavior``."""
    kept = logstate.load(where)
    vkey = log_key or (kept.vkey if kept else None)
    if vkey is None:
        vkey = fetch("key").decode("utf-8", "replace").strip()
        say(f"{visible(where, 300)}: pinned its log key {visible(vkey, 300)} "
            "(first contact: compare it with the key its operators publish)")
    try:
        verifier = parse_vkey(vkey)
    except NoteInvalid as exc:
        raise LogUnchecked(f"not a log key: {visible(vkey, 300)}: {exc.message}") from None
    try:
        report = check_log(fetch, verifier, kept.checkpoint if kept else None, items)
    except Misbehavior as exc:
        say(f"{visible(where, 300)}: SERVER MISBEHAVIOUR: {exc.message}")
        for line in exc.evidence:
            say(line)
        raise LogMisbehavior(f"the log of {visible(where, 300)} contradicts what this "
                             "client holds (proof above)") from None
    logstate.save(logstate.KeptLog(where, verifier.vkey, report.note))
    return report


class _ContactLog(HttpLog):
    """``HttpLog`` whose first 404 for the checkpoint means: no log here."""

    def __call__(self, path: str) -> bytes:
        try:
            return super().__call__(path)
        except LogUnchecked as exc:
            if path == "checkpoint" and exc.message.endswith("answered 404"):
                raise NoLog(exc.message) from None
            raise


def check_on_contact(server: str, say: Say,
                     open_log: Callable[[str], AbstractContextManager[Fetch]] | None = None
                     ) -> LogReport | None:
    """After a contact with ``server``: its log checked and its newest checkpoint kept (the
    module doc); None when it has no log or did not answer (said in one line)."""
    opened = open_log or (lambda url: _ContactLog(url, timeout_s=CONTACT_TIMEOUT_S))
    try:
        with opened(server) as fetch:
            if logstate.load(server) is None:
                fetch("checkpoint")  # a server without a log says so before a key is pinned
            return keep_checked(server, fetch, [], os.environ.get(LOG_KEY_ENV) or None, say)
    except LogMisbehavior:
        raise
    except NoLog:
        return None
    except LogUnchecked as exc:
        say(f"{visible(server, 300)}: its transparency log was not checked this time "
            f"({exc.message}); what was delivered stays delivered")
        return None
