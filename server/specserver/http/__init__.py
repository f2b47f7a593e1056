"""http."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

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

__getattr__ = lazy_names(__name__, _LAZY)
