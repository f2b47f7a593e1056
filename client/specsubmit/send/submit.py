"""Sign, ask, send: the submit step used by `specsubmit run` and `specsubmit submit`.

A result is signed once into a DSSE envelope (``specschema.sign_envelope`` over
``submission_bytes``), parked in pending/ and POSTed; the exact same bytes are re-sent
until the server gives a receipt (recorded under submitted/) or a final refusal
(recorded under rejected/). See ``specsubmit.local.outbox`` and ``specsubmit.send.delivery``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import nacl.signing
import typer

from specschema import Submission, envelope_bytes, key_id_of, sign_envelope, submission_bytes
from specschema.capability import submission_counter_problems
from specschema.conclusion import problem_words
from specsubmit.errors import RunAborted, SubmissionRejected, SubmissionUndelivered, SubmitError
from specsubmit.local import keys, outbox
from specsubmit.outside_text import visible
from specsubmit.send.consent import consent_lines
from specsubmit.send.delivery import Receipt, RetryPolicy, normalize_server, post_envelope
from specsubmit.send.logwatch import check_on_contact

SERVER_ENV = "SPECSUBMIT_SERVER"

Ask = Callable[[str], bool]
Echo = Callable[[str], None]


def resolve_server(flag: str | None = None) -> str | None:
    """--server, else $SPECSUBMIT_SERVER, else None (nothing is sent anywhere by default)."""
    value = flag or os.environ.get(SERVER_ENV)
    return normalize_server(value) if value else None


def require_server(flag: str | None) -> str:
    server = resolve_server(flag)
    if server is None:
        raise SubmitError(f"no server to submit to: pass --server URL or set {SERVER_ENV}")
    return server


def sign(submission: Submission, key: nacl.signing.SigningKey) -> bytes:
    return envelope_bytes(sign_envelope(submission_bytes(submission), key))


def _public_url(receipt: Receipt) -> str:
    return receipt.url or f"{receipt.server}/v1/submissions/{receipt.submission_id}"


def receipt_lines(receipt: Receipt, *, again: bool = False) -> list[str]:
    """What a receipt prints: the receipt was validated when it arrived, but a record read
    back from submitted/ is a file, so both go through ``visible``."""
    verb = "already submitted" if again else "submitted"
    return [f"{verb}: {visible(receipt.submission_id, 80)}",
            f"  {visible(_public_url(receipt), 2048)}"]


def receipt_from_record(submission_id: str) -> Receipt | None:
    record = outbox.submitted_record(submission_id)
    if record is None:
        return None
    body = record.get("receipt")
    body = body if isinstance(body, dict) else {}
    url = body.get("url") or body.get("public_url")
    return Receipt(str(body.get("submission_id") or submission_id),
                   url if isinstance(url, str) else None,
                   int(record.get("status") or 0), body, str(record.get("server", "")))


def deliver(submission_id: str, envelope: bytes, server: str,
            policy: RetryPolicy | None = None) -> Receipt:
    """Park, send, record. Raises SubmissionRejected or SubmissionUndelivered."""
    if outbox.get_pending(submission_id) != envelope \
            or outbox.PendingEnvelope(submission_id,
                                      outbox.pending_path(submission_id)).server != server:
        outbox.put_pending(submission_id, envelope, server=server)
    try:
        receipt = post_envelope(envelope, server, submission_id, policy)
    except SubmissionRejected as exc:
        outbox.record_rejected(submission_id, server, exc.status, exc.message,
                               log_entry=exc.log_entry,
                               envelope_sha256=hashlib.sha256(envelope).hexdigest())
        raise
    except SubmissionUndelivered as exc:
        raise SubmissionUndelivered(
            f"not delivered: {exc.message}; the signed result waits in "
            f"{outbox.pending_path(submission_id)}: retry with `specsubmit submit --pending`"
        ) from None
    outbox.record_submitted(submission_id, server, receipt.status, receipt.body,
                            envelope_sha256=hashlib.sha256(envelope).hexdigest())
    return receipt


def check_submittable(submission: Submission, path: Path | None = None) -> None:
    where = f" {path}" if path else ""
    if not submission.complete:
        raise SubmitError(
            f"result{where} is incomplete (the run stopped early): incomplete results are "
            "kept locally and never submitted")
    problems = submission_counter_problems(submission)
    if problems:
        # The server's own rule, run before anyone is asked: it would refuse this (422).
        raise SubmitError(
            f"result{where} is not submitted: its counters break the shared rule "
            f"{problem_words(problems[0])}"
            + (f" and {len(problems) - 1} more" if len(problems) > 1 else "")
            + "; it is kept locally")


def send_submission(submission: Submission, server: str,
                    policy: RetryPolicy | None = None) -> tuple[Receipt, bool]:
    """(receipt, already): re-uses a pending envelope, never re-sends a delivered one."""
    check_submittable(submission)
    submission_id = str(submission.submission_id)
    previous = receipt_from_record(submission_id)
    if previous is not None:
        return previous, True
    envelope = outbox.get_pending(submission_id) or sign(submission, keys.load_or_create())
    return deliver(submission_id, envelope, server, policy), False


def send_pending(server: str | None, policy: RetryPolicy | None = None,
                 echo: Echo = typer.echo) -> tuple[int, int]:
    """Retry every pending envelope, each to ``server`` or else to the server it was meant
    for; returns (not delivered, refused by the server)."""
    undelivered = refused = 0
    for item in outbox.list_pending():
        target = server or item.server
        if target is None:
            undelivered += 1
            echo(f"{item.submission_id}: no server is remembered for it: pass --server URL "
                 f"or set {SERVER_ENV}")
            continue
        try:
            receipt = deliver(item.submission_id, item.read(), target, policy)
        except SubmissionUndelivered as exc:
            undelivered += 1
            echo(f"{item.submission_id}: {visible(exc.message, 2000)}")
            continue
        except SubmitError as exc:
            refused += 1
            echo(f"{item.submission_id}: {visible(exc.message, 2000)}")
            continue
        for line in receipt_lines(receipt):
            echo(line)
    return undelivered, refused


@contextlib.contextmanager
def _signal_wakeup() -> Iterator[int]:
    """A pipe that CPython's C-level signal handler writes a byte to the instant a signal
    with a Python handler (SIGINT's raises KeyboardInterrupt) arrives."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # set_wakeup_fd needs it: a handler must never block
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    try:
        yield read_end
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)


def _read_line(stdin_fd: int, wakeup_fd: int) -> str:
    """One line from the terminal; a Ctrl-C raises KeyboardInterrupt at any moment.

    input() (what typer.confirm reads with) can lose a Ctrl-C: the Python-level handler
    only runs between bytecodes, so a SIGINT that arrives after the prompt is written but
    before input()'s C code enters read() just sets a flag, and read() then blocks until
    Enter (seen under load: the prompt shown, Ctrl-C pressed, the process never exits).
    Blocking in select() on the wakeup pipe as well closes that gap: the byte is there even
    when the signal came first, select() returns, and the pending handler runs on the way
    back to Python.
    """
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([stdin_fd, wakeup_fd], [], [])
        if wakeup_fd in ready:
            os.read(wakeup_fd, 512)  # a signal that raised nothing (not SIGINT): wait on
            continue
        chunk = os.read(stdin_fd, 1024)
        if not chunk:
            if data:
                break
            raise EOFError  # Ctrl-D: read as a no, like click does
        data += chunk
    return data.decode("utf-8", errors="replace")


def _tty_ask(question: str) -> bool:
    """typer.confirm(question, default=False, err=True), with a Ctrl-C that is never lost.

    Only on POSIX in the main thread (the wakeup fd is the main thread's, and Windows has
    no select() on a console); elsewhere typer.confirm itself.
    """
    if os.name != "posix" or threading.current_thread() is not threading.main_thread():
        return typer.confirm(question, default=False, err=True)
    while True:
        try:
            with _signal_wakeup() as wakeup_fd:
                typer.echo(f"{question} [y/N]: ", nl=False, err=True)
                answer = _read_line(sys.stdin.fileno(), wakeup_fd).strip().lower()
        except (KeyboardInterrupt, EOFError):
            raise typer.Abort() from None  # what typer.confirm makes of them
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        typer.echo("Error: invalid input", err=True)


def ask_consent(
    submission: Submission,
    server: str,
    *,
    assume_yes: bool,
    print_payload: bool,
    say: Echo,
    ask: Ask | None = None,
    later: str = "",
) -> bool:
    """Show the consent screen; True when the contributor agreed (or passed --yes)."""
    key = keys.load_or_create()
    for line in consent_lines(submission, server, key_id_of(bytes(key.verify_key))):
        say(line)
    if print_payload:
        say("Exact payload (signed as is):")
        payload = submission_bytes(submission).decode("utf-8")
        say(visible(payload, len(payload)))  # JSON leaves C1 and bidi characters raw
    if assume_yes:
        return True
    if ask is None and not sys.stdin.isatty():
        say(f"Not submitted: no terminal to ask for consent and no --yes{later}")
        return False
    try:
        agreed = (ask or _tty_ask)("Send this result?")
    except typer.Abort:  # what the prompt makes of Ctrl-C (and of Ctrl-D)
        say("")  # end the prompt's line: the error goes on a line of its own
        raise RunAborted(f"interrupted at the consent prompt: not submitted{later}") from None
    if not agreed:
        say(f"Not submitted{later}")
        return False
    return True


def offer_submission(
    submission: Submission,
    result_path: Path,
    *,
    assume_yes: bool,
    no_submit: bool,
    print_payload: bool,
    server: str | None = None,
    ask: Ask | None = None,
    policy: RetryPolicy | None = None,
    echo: Echo | None = None,
) -> None:
    """After a run: show what would be sent, ask, send. Output goes to stderr.

    ``--no-submit`` never sends; ``--yes`` sends without asking; with neither and no
    terminal to ask on, nothing is sent. An undeliverable result waits in pending/ and
    raises SubmissionUndelivered (exit 75: the run's result is saved, its delivery is
    not done); a refusal by the server raises SubmissionRejected.
    """
    say: Echo = echo or (lambda line: typer.echo(line, err=True))
    later = f"; to send it later: specsubmit submit {result_path}"
    if not submission.complete:
        say(f"Not submitted: the result is incomplete. It is saved at {result_path}.")
        return
    if no_submit:
        say(f"Not submitted (--no-submit){later}")
        return
    target = resolve_server(server)
    if target is None:
        say(f"Not submitted: no server configured (set {SERVER_ENV}){later} --server URL")
        return
    check_submittable(submission, result_path)  # impossible counters: never to consent
    if not ask_consent(submission, target, assume_yes=assume_yes, print_payload=print_payload,
                       say=say, ask=ask, later=later):
        return
    receipt, again = send_submission(submission, target, policy)
    for line in receipt_lines(receipt, again=again):
        say(line)
    check_on_contact(target, say)
