"""Front doors: a room (a folder of specsubmit or specserver: ``store/``, ``engines/``, ...)
is entered only through its ``__init__``. Code in another room imports the names its
``__all__`` lists (``from specserver.store import Filters``, or a public module it lists,
``from specserver.store import queries``), never a module inside it
(``from specserver.store.dimensions import Filters``). The schema is one published
library; its modules are its public surface (tests/schema/test_public_api.py).
"""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASES = {"specsubmit": ROOT / "client", "specserver": ROOT / "server"}


def _module(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


ROOMS = {f"{package}.{init.parent.name}": init for package, base in BASES.items()
         for init in (base / package).glob("*/__init__.py")}


def _room(module: str) -> str | None:
    head = ".".join(module.split(".")[:2])
    return head if head in ROOMS else None


def _exported(init: Path) -> set[str]:
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            value = ast.literal_eval(node.value)
            return set(value)
    return set()


def _sources() -> list[tuple[str, Path]]:
    return [(_module(path, base), path) for package, base in BASES.items()
            for path in sorted((base / package).rglob("*.py"))]


def test_every_name_a_front_door_lists_is_there() -> None:
    for room, init in ROOMS.items():
        door = import_module(room)
        for name in _exported(init):  # a public module, or a name loaded on first use
            assert (init.parent / f"{name}.py").exists() or hasattr(door, name), (room, name)


@pytest.mark.parametrize(("module", "path"), _sources(), ids=lambda v: str(v))
def test_other_rooms_are_entered_only_through_their_front_door(module: str, path: Path
                                                               ) -> None:
    mine = _room(module)
    wrong = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [(node.module, [a.name for a in node.names])]
        else:
            continue
        for target, names in targets:
            room = _room(target)
            if room is None or room == mine:
                continue
            if target != room:
                wrong.append(f"line {node.lineno}: {target} is inside {room}")
                continue
            missing = sorted(set(names or ()) - _exported(ROOMS[room]))
            if missing:
                wrong.append(f"line {node.lineno}: {room} does not export {missing}")
    assert not wrong, f"{path.relative_to(ROOT)}: " + "; ".join(wrong)


def test_a_front_door_loads_its_names_lazily_and_gives_the_modules_own_objects() -> None:
    from specserver import store
    from specserver.store import dimensions

    assert store.Filters is dimensions.Filters
    with pytest.raises(AttributeError):
        store.NoSuchName  # noqa: B018
