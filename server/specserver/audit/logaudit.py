"""The log part of an audit: copy the whole log from its tiles and check it holds together.

1. The checkpoint opens with the log's key (given, or the one ``/log/key`` serves).
2. Every entry bundle is fetched; the entries' leaf hashes build the tree again (RFC 6962),
   whose root must be the checkpoint's.
3. Every hash tile of every level is fetched and must hold exactly the recomputed hashes
   (a tile that disagrees would give its readers false proofs).
4. Every bundle's index (``/log/index/N``: what each entry names) is fetched and must
   describe the same entries, of the same kinds, in order. A refused entry names nothing
   more: the bytes it hashes were never public.

The copy (``LogCopy``) is what the rest of the audit checks the public data against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specschema import tlog
from specschema.errors import NoteInvalid, TileInvalid
from specschema.tlog import (
    TILE_HEIGHT,
    TILE_WIDTH,
    Checkpoint,
    MemoryTree,
    TileRef,
    Verifier,
    decode_entries,
    leaf_hash,
    open_checkpoint,
    parse_vkey,
    tile_width,
)
from specserver.audit.findings import AuditReport, b64, note_lines
from specserver.audit.source import PublicSource

# The entry kinds (specschema.tlog.entries): envelope, moderation, refused (an envelope
# refused after its signature verified) and probe (a stored cost probe), whose bytes no
# one but their sender has: only their place and kind can be checked.
ENVELOPE, MODERATION, KINDS = tlog.ENVELOPE, tlog.MODERATION, tlog.ENTRY_KINDS
ENTRY_BYTES = tlog.ENTRY_SIZE


@dataclass
class LogCopy:
    checkpoint: Checkpoint
    note: bytes
    verifier: Verifier
    entries: list[bytes] = field(default_factory=list)
    tree: MemoryTree = field(default_factory=MemoryTree)
    index: dict[int, dict[str, Any]] = field(default_factory=dict)  # entry -> what it names

    @property
    def size(self) -> int:
        return self.checkpoint.size

    def by_submission(self) -> dict[str, int]:
        """Submission id -> the index of the envelope entry that names it."""
        return {str(item["submission_id"]): i for i, item in self.index.items()
                if item.get("kind") == "envelope" and item.get("submission_id")}


def open_log(source: PublicSource, log_key: str | None, report: AuditReport) -> LogCopy | None:
    served_key = source.key()
    try:
        verifier = parse_vkey(log_key or served_key)
    except NoteInvalid as exc:
        report.fail("log_key", "log", f"not a log key: {exc}")
        return None
    if log_key and served_key != log_key:
        report.fail("log_key", "log", "the server's /log/key is not the key given",
                    (f"given: {log_key}", f"served: {served_key}"))
    note = source.checkpoint()
    try:
        checkpoint = open_checkpoint(note, verifier, verifier.name)
    except NoteInvalid as exc:
        report.fail("checkpoint_signature", "log", f"the checkpoint does not open with the "
                    f"log key: {exc}", (f"key: {verifier.vkey}", *note_lines("checkpoint", note)))
        return None
    report.passed("signed checkpoint")
    return LogCopy(checkpoint, note, verifier)


def _read_entries(source: PublicSource, log: LogCopy, report: AuditReport) -> None:
    size = log.size
    for bundle in range((size + TILE_WIDTH - 1) // TILE_WIDTH):
        width = tile_width(0, bundle, size)
        ref = TileRef(None, bundle, width)
        body = source.tile(ref)
        try:
            entries = decode_entries(body) if body is not None else None
        except TileInvalid as exc:
            report.fail("bundle_invalid", f"bundle {ref.path}", str(exc))
            entries = None
        if entries is None or len(entries) != width:
            got = "not served" if entries is None else f"{len(entries)} entries"
            report.fail("bundle_missing", f"bundle {ref.path}",
                        f"the checkpoint promises {width} entries here; {got}",
                        note_lines("checkpoint", log.note))
            raise _Stop
        for offset, entry in enumerate(entries):
            if len(entry) != ENTRY_BYTES or entry[0] not in KINDS:
                report.fail("entry_invalid", f"entry {bundle * TILE_WIDTH + offset}",
                            f"not a type byte and a SHA-256: {entry.hex()[:80]}")
        log.entries.extend(entries)
        for entry in entries:
            log.tree.append(leaf_hash(entry))


class _Stop(Exception):
    """The log cannot be copied further (a bundle is missing): later checks need it all."""


def _check_tiles(source: PublicSource, log: LogCopy, report: AuditReport) -> None:
    size, level, checked = log.size, 0, 0
    while size >> (TILE_HEIGHT * level):
        count = size >> (TILE_HEIGHT * level)
        for index in range((count + TILE_WIDTH - 1) // TILE_WIDTH):
            width = tile_width(level, index, size)
            ref = TileRef(level, index, width)
            want = b"".join(log.tree.node(TILE_HEIGHT * level, index * TILE_WIDTH + i)
                            for i in range(width))
            got = source.tile(ref)
            if got != want:
                report.fail("tile_mismatch", f"tile {ref.path}",
                            "not served" if got is None else
                            "its hashes are not those of the entries the bundles hold",
                            (f"recomputed: {b64(want)[:88]}...",
                             *note_lines("checkpoint", log.note)))
            else:
                checked += 1
        level += 1
    report.passed("tiles", checked)


def _read_index(source: PublicSource, log: LogCopy, report: AuditReport) -> None:
    size = log.size
    for bundle in range((size + TILE_WIDTH - 1) // TILE_WIDTH):
        width = tile_width(0, bundle, size)
        items = source.index(bundle, width) or []
        first = bundle * TILE_WIDTH
        for item in items:
            index = item.get("index")
            if isinstance(index, int) and first <= index < first + width:
                log.index[index] = item
        for index in range(first, first + width):
            described = log.index.get(index)
            kind = KINDS.get(log.entries[index][0])
            if described is None or described.get("kind") != kind:
                said = described.get("kind") if described else "nothing"
                report.fail("index_mismatch", f"entry {index}",
                            f"the log's index does not describe this {kind} entry "
                            f"(it says {said})")
                log.index.pop(index, None)
            elif kind == KINDS[tlog.REFUSED]:
                report.passed("refused envelopes described (their hashes only)")
            elif kind == KINDS[tlog.PROBE]:
                report.passed("cost probes described (their hashes only: not served)")


def check_kept(log: LogCopy, kept: bytes, report: AuditReport) -> None:
    """The log must extend the checkpoint an earlier audit kept (Go's checksum database
    does the same): a smaller log, or other entries below the kept size, is a fork."""
    try:
        old = open_checkpoint(kept, log.verifier, log.verifier.name)
    except NoteInvalid as exc:
        report.fail("kept_checkpoint", "log", f"the kept checkpoint does not open with the "
                    f"log key: {exc}", note_lines("kept checkpoint", kept))
        return
    proof = (*note_lines("kept checkpoint", kept), *note_lines("checkpoint now", log.note))
    if old.size > log.size:
        report.fail("log_shrank", "log", f"the log had {old.size} entries at the last audit; "
                    f"it now has {log.size}", proof)
    elif log.tree.root(old.size) != old.root:
        report.fail("log_rewritten", "log", f"the log's first {old.size} entries no longer "
                    "hash to the root kept from the last audit",
                    (f"recomputed root of the first {old.size}: "
                     f"{b64(log.tree.root(old.size))}", *proof))
    else:
        report.passed("consistent with the kept checkpoint")


def copy_log(source: PublicSource, log_key: str | None, report: AuditReport) -> LogCopy | None:
    """The whole log, checked against its signed checkpoint (module doc); None when it
    cannot be read far enough to check the public data against it."""
    log = open_log(source, log_key, report)
    if log is None:
        return None
    try:
        _read_entries(source, log, report)
    except _Stop:
        return None
    root = log.tree.root()
    if root != log.checkpoint.root:
        report.fail("root_mismatch", "log",
                    f"the {log.size} entries served do not hash to the checkpoint's root",
                    (f"recomputed root: {b64(root)}", *note_lines("checkpoint", log.note)))
        return None
    report.passed("entries", log.size)
    report.passed("recomputed root")
    _check_tiles(source, log, report)
    _read_index(source, log, report)
    return log
