"""http."""

from importlib import import_module
from typing import TYPE_CHECKING

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specserver.http.app import build_store, create_app

_LAZY: dict[str, str] = {
    "build_store": "specserver.http.app",
    "create_app": "specserver.http.app",
}

__all__ = [
    "build_store",
    "create_app",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
