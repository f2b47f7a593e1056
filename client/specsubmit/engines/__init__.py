"""engines."""

from typing import TYPE_CHECKING

from specsubmit.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specsubmit.engines.base import (
        COLD_LOAD_NS,
        DEFAULT_TIMEOUT_S,
        DraftCounters,
        Engine,
        EngineReport,
        Flag,
        Generation,
        Preflight,
        PullProgress,
        RunListener,
        RunSettings,
        counter_totals,
        unrequested,
    )
    from specsubmit.engines.registry import ADAPTERS, adapter, engine_options

_LAZY: dict[str, str] = {
    "ADAPTERS": "specsubmit.engines.registry",
    "COLD_LOAD_NS": "specsubmit.engines.base",
    "DEFAULT_TIMEOUT_S": "specsubmit.engines.base",
    "DraftCounters": "specsubmit.engines.base",
    "Engine": "specsubmit.engines.base",
    "Flag": "specsubmit.engines.base",
    "EngineReport": "specsubmit.engines.base",
    "Generation": "specsubmit.engines.base",
    "Preflight": "specsubmit.engines.base",
    "PullProgress": "specsubmit.engines.base",
    "RunListener": "specsubmit.engines.base",
    "RunSettings": "specsubmit.engines.base",
    "adapter": "specsubmit.engines.registry",
    "engine_options": "specsubmit.engines.registry",
    "counter_totals": "specsubmit.engines.base",
    "unrequested": "specsubmit.engines.base",
}

__all__ = [
    "ADAPTERS",
    "COLD_LOAD_NS",
    "DEFAULT_TIMEOUT_S",
    "DraftCounters",
    "Engine",
    "Flag",
    "EngineReport",
    "Generation",
    "Preflight",
    "PullProgress",
    "RunListener",
    "RunSettings",
    "adapter",
    "engine_options",
    "counter_totals",
    "unrequested",
]

__getattr__ = lazy_names(__name__, _LAZY)
