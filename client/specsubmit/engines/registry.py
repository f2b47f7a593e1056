"""The engines the client can run: one registration line each.

Each adapter (``engines/<name>/adapter.py``) says how its engine is reached or started
and owns its options (its own class, and the flags that set its fields); its words are its
descriptor in ``specschema.engines``. The CLI only knows this registry and the interface
of ``engines/base.py``: it hands over the engine flags it was given, by flag.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specschema.engines import descriptor
from specsubmit.engines.base import DEFAULT_TIMEOUT_S, Adapter
from specsubmit.engines.llama_server.adapter import ADAPTER as LLAMA_SERVER
from specsubmit.engines.lmstudio.adapter import ADAPTER as LMSTUDIO
from specsubmit.engines.ollama.adapter import ADAPTER as OLLAMA
from specsubmit.errors import UsageError

__all__ = ["ADAPTERS", "adapter", "engine_options"]

ADAPTERS: dict[str, Adapter[Any]] = {a.name: a for a in (
    OLLAMA,
    LLAMA_SERVER,
    LMSTUDIO,
)}


def adapter(name: str) -> Adapter[Any]:
    found = ADAPTERS.get(name)
    if found is None:
        raise UsageError(f"--engine must be one of {', '.join(ADAPTERS)} (not {name!r})")
    descriptor(found.name)  # every adapter has its descriptor (a KeyError is a bug here)
    return found


def engine_options(chosen: Adapter[Any], given: Mapping[str, object], *,
                   timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """The chosen engine's own options from the engine flags of the command line ({flag:
    value}, None or False for one not given): a flag it does not own is an error naming the
    engines that do (an ambient one is ignored); then the adapter's own checks."""
    owned = {flag.name: flag for flag in chosen.flags}
    values: dict[str, object] = {}
    for name, value in given.items():
        if value is None or value is False:
            continue
        if name in owned:
            values[owned[name].field] = value
            continue
        takers = [(a.name, f) for a in ADAPTERS.values() for f in a.flags if f.name == name]
        if any(flag.ambient for _, flag in takers):
            continue
        raise UsageError(f"{name} needs --engine "
                         f"{' or '.join(engine for engine, _ in takers) or '(none)'}")
    options = chosen.options(timeout_s=timeout_s, **values)
    chosen.check(options)
    return options
