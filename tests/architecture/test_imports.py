"""The import graph of our three packages, read from the source (imports inside functions
count too: a cycle broken by a late import is still a cycle).

Rules: no cycle between modules, nor between folders (a folder is a package's room:
``specsubmit.run`` and ``specsubmit.engines`` may not import each other both ways, even
through different modules); the schema imports nothing of ours; the client never
imports the server (nor the server the client); inside the server, arrows run from the
edges (``http``, ``cli``) down to the core, so ``store`` and ``ingest`` never import
``http``, ``store`` imports neither ``ingest`` nor ``board``, and ``board`` never imports
``http`` or ``ingest``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"specschema": ROOT / "schema", "specsubmit": ROOT / "client",
           "specserver": ROOT / "server"}
OURS = tuple(SOURCES)


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    modules: dict[str, Path] = {}
    for base in SOURCES.values():
        for path in base.rglob("*.py"):
            modules[module_name(path, base)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against this module's package
                    base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join([*base_parts, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                # `from pkg import module` is an arrow to the module; any other name is an
                # arrow to what defines it (a package's re-exports are its __init__'s).
                for alias in node.names:
                    sub = f"{origin}.{alias.name}"
                    targets.add(sub if sub in modules else origin)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def arrows_into(graph: dict[str, set[str]], sources: str, target: str) -> list[str]:
    def inside(module: str, prefix: str) -> bool:
        return module == prefix or module.startswith(prefix + ".")

    return sorted(f"{a} -> {b}" for a, targets in graph.items() if inside(a, sources)
                  for b in targets if inside(b, target))


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


GRAPH = import_graph()


def test_the_graph_is_read() -> None:
    # A reader that found nothing would pass every rule below.
    assert "specserver.store.writer" in GRAPH["specserver.store.database"]
    assert "specserver.http.errors" in GRAPH["specserver.http.app"] or any(
        t.startswith("specserver.http") for t in GRAPH["specserver.http.app"])


def test_no_import_cycle() -> None:
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH) or [])


def folder_of(module: str) -> str:
    """The room a module lives in: its package's first level (``specsubmit.engines.ollama.
    client`` -> ``specsubmit.engines``); a top-level module is its own room."""
    return ".".join(module.split(".")[:2])


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = folder_of(module)
        found = folders.setdefault(source, set())
        found.update(t for t in map(folder_of, targets) if t != source)
    return folders


def test_no_folder_cycle() -> None:
    folders = folder_graph(GRAPH)
    assert folders["specsubmit.run"] >= {"specsubmit.engines"}  # the graph is read
    assert find_cycle(folders) is None, " -> ".join(find_cycle(folders) or [])


def test_the_folder_graph_sees_a_cycle_through_different_modules() -> None:
    # run.a -> engines.x and engines.y -> run.b: no module cycle, but a folder cycle.
    graph = {"p.run.a": {"p.engines.x"}, "p.engines.y": {"p.run.b"}, "p.run.b": set(),
             "p.engines.x": set()}
    assert find_cycle(graph) is None
    assert find_cycle(folder_graph(graph)) == ["p.engines", "p.run", "p.engines"]


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize(("sources", "target"), [
    ("specschema", "specsubmit"),
    ("specschema", "specserver"),
    ("specsubmit", "specserver"),
    ("specserver", "specsubmit"),
    ("specserver.store", "specserver.http"),
    ("specserver.ingest", "specserver.http"),
    ("specserver.store", "specserver.ingest"),
    ("specserver.store", "specserver.board"),
    ("specserver.board", "specserver.http"),
    ("specserver.board", "specserver.ingest"),
    ("specserver.errors", "specserver.http"),
])
def test_no_arrow(sources: str, target: str) -> None:
    assert arrows_into(GRAPH, sources, target) == []


def test_domain_errors_and_workers_do_not_load_fastapi() -> None:
    for module in ("specserver.errors", "specserver.ingest.workers", "specserver.ingest.checks"):
        path = SOURCES["specserver"].joinpath(*module.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {n for n in names if n.split(".")[0] in ("fastapi", "starlette")}, module


@pytest.mark.parametrize("module", ["specserver.ingest.checks", "specserver.ingest.workers"])
def test_check_workers_load_neither_sqlalchemy_nor_duckdb(module: str) -> None:
    """A check worker is a process of its own per core: what it imports (the checks and the
    rows, ``store.rowset`` not ``store.tables``) stays light. A fresh interpreter, because
    this one has loaded everything already."""
    heavy = ("sqlalchemy", "duckdb", "fastapi", "starlette")
    probe = (f"import sys, {module}; "
             f"print(' '.join(m for m in {heavy!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == [], f"{module} loads {done.stdout.strip()}"
