"""Receipts checked against a server's transparency log, the way Go's checksum database
client checks its database: fetch the newest signed checkpoint, open it with the key this
client pinned, prove it consistent with the newest checkpoint kept from before (from the
log's tiles, C2SP tlog-tiles), then prove each receipt's entry included in it. The proofs
are computed here from the tiles; the server is trusted for nothing but serving them.

What is proven wrong raises ``LogMisbehavior`` with its evidence (the two checkpoints and
the failing proof, all the server's own signed or served data, so anyone can check it);
what cannot be checked yet (the server unreachable, an entry newer than the checkpoint)
raises or reports ``LogUnchecked``. ``fetch`` is passed in: tests serve tiles from memory.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from specschema.errors import NoteInvalid, ProofInvalid, TileInvalid
from specschema.tlog import (
    ENVELOPE,
    REFUSED,
    Checkpoint,
    TileNodeReader,
    TileRef,
    Verifier,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    open_checkpoint,
    parse_checkpoint,
    typed_entry,
    verify_consistency,
    verify_inclusion,
)
from specsubmit import __version__
from specsubmit.errors import LogMisbehavior, LogUnchecked
from specsubmit.outside_text import visible

Fetch = Callable[[str], bytes]  # a path under <server>/log/ -> its body
MAX_BODY = 64 * 1024  # a checkpoint, a key or a tile (8,192 bytes) is far smaller


class Misbehavior(LogMisbehavior):
    def __init__(self, message: str, evidence: list[str]) -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass(frozen=True)
class Held:
    """One receipt to check: its index and the leaf this client computed or was given."""

    submission_id: str
    index: int
    leaf_hash: bytes


@dataclass
class LogReport:
    checkpoint: Checkpoint
    note: bytes
    included: list[Held] = field(default_factory=list)
    not_yet: list[Held] = field(default_factory=list)


def envelope_leaf(envelope_sha256: str) -> bytes:
    """The leaf of a stored envelope: SHA-256(0x00 || 0x01 || SHA-256(envelope bytes))."""
    return leaf_hash(typed_entry(ENVELOPE, bytes.fromhex(envelope_sha256)))


def refused_leaf(envelope_sha256: str) -> bytes:
    """The leaf of an envelope refused after its signature verified (type 0x03)."""
    return leaf_hash(typed_entry(REFUSED, bytes.fromhex(envelope_sha256)))


def held_from_record(submission_id: str, record: dict[str, object]) -> Held | None:
    """The receipt's log entry (None: delivered before the server kept a log). A receipt
    whose leaf is not the one of the envelope this client sent is misbehaviour."""
    receipt = record.get("receipt")
    entry = receipt.get("log") if isinstance(receipt, dict) else None
    return _held(submission_id, entry, record.get("envelope_sha256"), envelope_leaf)


def held_from_refusal(submission_id: str, record: dict[str, object]) -> Held | None:
    """A refusal's log entry, from its ``Log-Entry`` header as recorded (None: the server
    did not log it, a refusal before its signature verified)."""
    return _held(submission_id, record.get("log"), record.get("envelope_sha256"),
                 refused_leaf)


def _held(submission_id: str, entry: object, digest: object,
          leaf_of: Callable[[str], bytes]) -> Held | None:
    if not isinstance(entry, dict):
        return None
    index, given = entry.get("index"), entry.get("leaf_hash")
    try:
        leaf = base64.b64decode(str(given), validate=True)
    except ValueError:
        leaf = b""
    if not isinstance(index, int) or index < 0 or len(leaf) != 32:
        raise LogUnchecked(f"{submission_id}: its receipt's log entry is malformed")
    if isinstance(digest, str):
        mine = leaf_of(digest)
        if mine != leaf:
            raise Misbehavior(f"{submission_id}: the receipt's leaf hash is not the one of "
                              "the envelope this client sent", [
                                  f"receipt leaf hash {base64.b64encode(leaf).decode()}",
                                  f"leaf of the envelope sent {base64.b64encode(mine).decode()}"])
        leaf = mine
    return Held(submission_id, index, leaf)


def _b64(hashes: list[bytes]) -> list[str]:
    return [base64.b64encode(h).decode() for h in hashes]


def _note_lines(label: str, note: bytes) -> list[str]:
    return [f"{label}:", *("  " + visible(line, 200) for line in
                           note.decode("utf-8", "replace").splitlines())]


def check_log(fetch: Fetch, verifier: Verifier, kept_note: bytes | None,
              held: list[Held]) -> LogReport:
    """The newest checkpoint, proven consistent with ``kept_note`` (when any) and including
    every receipt it is old enough to hold."""
    note = fetch("checkpoint")
    try:
        new = open_checkpoint(note, verifier)
    except NoteInvalid as exc:
        raise Misbehavior(f"the log's checkpoint does not open with the pinned key "
                          f"{verifier.vkey}: {exc.message}", _note_lines("checkpoint", note)
                          ) from None
    reader = TileNodeReader(new.size, lambda ref: _tile(fetch, ref))
    if kept_note is not None:
        # Kept only once verified (perhaps under a key pinned before a rotation): read as is.
        text = kept_note.decode("utf-8", "replace")
        kept = parse_checkpoint(text[:text.rfind("\n\n") + 1])
        evidence = _note_lines("kept checkpoint", kept_note) + _note_lines("new checkpoint",
                                                                            note)
        if kept.origin != new.origin or new.size < kept.size:
            raise Misbehavior(f"the log went from {kept.size} entries to {new.size}"
                              if new.size < kept.size else "the log changed its origin",
                              evidence)
        proof: list[bytes] = []
        try:
            if kept.size:
                proof = consistency_proof(kept.size, new.size, reader.node)
                verify_consistency(kept.size, new.size, kept.root, new.root, proof)
        except (ProofInvalid, TileInvalid) as exc:
            raise Misbehavior(f"the log of {new.size} entries does not extend the one of "
                              f"{kept.size} this client kept: {exc.message}",
                              [*evidence, "consistency proof from the tiles:",
                               *(f"  {h}" for h in _b64(proof))]) from None
    report = LogReport(new, note)
    for item in held:
        if item.index >= new.size:
            report.not_yet.append(item)
            continue
        path: list[bytes] = []
        try:
            path = inclusion_proof(item.index, new.size, reader.node)
            verify_inclusion(item.index, new.size, item.leaf_hash, path, new.root)
        except (ProofInvalid, TileInvalid) as exc:
            raise Misbehavior(
                f"{item.submission_id}: entry {item.index} is not in the log: {exc.message}",
                [*_note_lines("checkpoint", note),
                 f"entry {item.index}, leaf hash {_b64([item.leaf_hash])[0]}",
                 "inclusion proof from the tiles:", *(f"  {h}" for h in _b64(path))]
            ) from None
        report.included.append(item)
    return report


def _tile(fetch: Fetch, ref: TileRef) -> bytes:
    return fetch(ref.path)


class HttpLog:
    """GETs under ``<server>/log/`` (a ``Fetch``), each at most ``MAX_BODY`` bytes; anything
    but a 200 is ``LogUnchecked`` (a log that does not answer proves nothing either way).
    A context manager: the connection is closed at the end."""

    def __init__(self, server: str, timeout_s: float = 30.0) -> None:
        self.server = server
        self.client = httpx.Client(timeout=timeout_s, follow_redirects=False,
                                   headers={"User-Agent": f"specsubmit/{__version__}"})

    def __enter__(self) -> HttpLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def __call__(self, path: str) -> bytes:
        url = f"{self.server}/log/{path}"
        try:
            with self.client.stream("GET", url) as response:
                body = b""
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY:
                        raise LogUnchecked(f"{visible(url, 300)}: more than {MAX_BODY} bytes")
        except httpx.HTTPError as exc:
            raise LogUnchecked(f"the log at {visible(self.server, 300)} did not answer: "
                               f"{visible(str(exc), 200)}") from None
        if response.status_code != 200:
            raise LogUnchecked(f"{visible(url, 300)} answered {response.status_code}")
        return body
