"""What an audit found: findings (something does not check out, with its proof) and notes
(what checked out, said once per kind), gathered in one ``AuditReport``.

Every proof line is the server's own signed or served data, or what anyone recomputes
from it (a root, an inclusion proof from the tiles), so a third party can check the
finding without trusting the auditor.
"""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass, field

from specschema.tlog import MemoryTree, inclusion_proof, leaf_hash


@dataclass(frozen=True)
class Finding:
    kind: str  # a short name, e.g. "root_mismatch", "submission_missing"
    subject: str  # what it is about: "log", "entry 3", "submission <id>", "snapshot"
    message: str
    proof: tuple[str, ...] = ()

    def line(self) -> str:
        return f"FAIL {self.subject}: {self.message} [{self.kind}]"


@dataclass
class AuditReport:
    findings: list[Finding] = field(default_factory=list)
    checked: Counter[str] = field(default_factory=Counter)  # what checked out, by kind
    notes: list[str] = field(default_factory=list)
    checkpoint: bytes | None = None  # the signed checkpoint the log was copied at

    @property
    def ok(self) -> bool:
        return not self.findings

    def fail(self, kind: str, subject: str, message: str, proof: tuple[str, ...] = ()) -> None:
        self.findings.append(Finding(kind, subject, message, proof))

    def passed(self, what: str, count: int = 1) -> None:
        self.checked[what] += count

    def note(self, line: str) -> None:
        self.notes.append(line)

    def summary(self) -> str:
        passed = ", ".join(f"{n} {what}" for what, n in sorted(self.checked.items()))
        verdict = "the log and the public data check out" if self.ok else \
            f"{len(self.findings)} finding(s): the log and the public data disagree"
        return f"audit: {verdict} (checked: {passed or 'nothing'})"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def note_lines(label: str, note: bytes) -> tuple[str, ...]:
    """A signed note as proof lines, each prefixed ``label |``."""
    text = note.decode("utf-8", errors="replace").rstrip("\n")
    return tuple(f"{label} | {line}" for line in text.split("\n"))


def entry_proof(tree: MemoryTree, index: int, entry: bytes, note: bytes) -> tuple[str, ...]:
    """Entry ``index`` as the log holds it, proven included in the signed checkpoint (its
    inclusion proof computed from the served tiles), with the checkpoint itself."""
    path = inclusion_proof(index, tree.size, tree.node)
    return (f"entry {index}: {entry.hex()}", f"leaf hash: {b64(leaf_hash(entry))}",
            f"inclusion proof ({tree.size} entries): "
            + (" ".join(b64(h) for h in path) or "(none: a tree of one)"),
            *note_lines("checkpoint", note))
