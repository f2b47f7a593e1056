"""crowd: the crowd's acceptance profiles and cost curves for a prediction, from the store."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specserver.crowd.profiles import Asked, crowd_inputs, resolve_target, standing_of

_LAZY: dict[str, str] = {
    "Asked": "specserver.crowd.profiles",
    "crowd_inputs": "specserver.crowd.profiles",
    "resolve_target": "specserver.crowd.profiles",
    "standing_of": "specserver.crowd.profiles",
}

__all__ = [
    "Asked",
    "crowd_inputs",
    "resolve_target",
    "standing_of",
]

__getattr__ = lazy_names(__name__, _LAZY)
