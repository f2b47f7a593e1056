"""Every file path the docs cite exists: a renamed or moved module leaves no stale pointer
in the README, docs/ or RELIABILITY.md. BENCHMARKS.md and the history are records of past
states (their commands ran then) and are not held to today's tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "RELIABILITY.md",
        *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks-history.md")]
# A path in backquotes that starts in one of the project's folders.
CITED = re.compile(r"`((?:schema|client|server|tests|bench|docs|deploy|scripts|\.ci)/"
                   r"[A-Za-z0-9_./\-]+)`")
LINKED = re.compile(r"\]\(((?!https?:)[A-Za-z0-9_./\-]+\.[a-z]+)(?:#[^)]*)?\)")


def _cited(doc: Path) -> set[str]:
    text = doc.read_text(encoding="utf-8")
    cited = {m.group(1).rstrip(".") for m in CITED.finditer(text)}
    return cited | {str((doc.parent / m.group(1)).resolve().relative_to(ROOT))
                    for m in LINKED.finditer(text)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_path_exists(doc: Path) -> None:
    missing = sorted(p for p in _cited(doc) if not (ROOT / p).exists())
    assert not missing, f"{doc.name} cites files that do not exist: {missing}"


def test_the_docs_cite_paths_at_all() -> None:
    """The patterns read what the docs write (a pattern that matched nothing would pass)."""
    found = set().union(*(_cited(doc) for doc in DOCS))
    assert len(found) > 50 and "server/specserver/store/tables.py" in found
