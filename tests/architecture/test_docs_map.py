"""docs/architecture.md names every module, in its room's row; and no product text or code
(the three packages' code, templates and data, the user docs, the tests, benchmarks and
scripts) cites the project's issue numbers.

The history files (BENCHMARKS.md, docs/benchmarks-history.md) may: they record when and why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"specschema": ROOT / "schema" / "specschema",
            "specsubmit": ROOT / "client" / "specsubmit",
            "specserver": ROOT / "server" / "specserver"}
MAP = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)
HISTORY = {ROOT / "BENCHMARKS.md", ROOT / "docs" / "benchmarks-history.md"}
PRODUCT_SUFFIXES = {".py", ".html", ".css", ".json", ".md", ".toml", ".txt"}


def _section(package: str) -> str:
    start = MAP.index(f"## {package}")
    end = MAP.find("\n## ", start + 1)
    return MAP[start:end if end != -1 else len(MAP)]


def _rows(section: str) -> dict[str, str]:
    """Table rows by their first cell's room (``engines/ollama/``), whole row text."""
    rows = {}
    for line in section.splitlines():
        found = re.match(r"\| `([a-z_/]+/)` \|", line)
        if found:
            rows[found.group(1)] = line
    return rows


def _modules() -> list[tuple[str, Path]]:
    return [(package, path) for package, base in PACKAGES.items()
            for path in sorted(base.rglob("*.py"))
            if path.name not in ("__init__.py", "__main__.py")]


@pytest.mark.parametrize(("package", "path"), _modules(),
                         ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v)
def test_the_map_names_every_module_in_its_room(package: str, path: Path) -> None:
    section = _section(package)
    rooms = _rows(section)
    folder = path.parent.relative_to(PACKAGES[package]).as_posix()
    # the deepest room with a row of its own (http/page/ lives in the http/ row)
    parts = folder.split("/") if folder != "." else []
    where = next((rooms[room] for i in range(len(parts), 0, -1)
                  if (room := "/".join(parts[:i]) + "/") in rooms), section)
    assert f"`{path.name}`" in where, f"docs/architecture.md does not name {path.name} " \
                                      f"where {package} {folder}/ is described"


def _product_files() -> list[Path]:
    files = [p for base in PACKAGES.values() for p in base.rglob("*")
             if p.is_file() and p.suffix in PRODUCT_SUFFIXES]
    files += list((ROOT / "docs").glob("*.md"))
    files += [ROOT / "README.md", ROOT / "RELIABILITY.md"]
    # the tests, benchmarks and scripts are code too (this file's own pattern excepted)
    files += [p for folder in ("tests", "bench", "scripts") for p in (ROOT / folder).rglob("*.py")
              if p != Path(__file__).resolve()]
    return sorted(p for p in files if p not in HISTORY)


def test_no_product_text_cites_an_issue_number() -> None:
    found = []
    for path in _product_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)
