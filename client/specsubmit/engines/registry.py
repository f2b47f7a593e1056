"""The engines the client can run: one registration line each.

Each adapter (``engines/<name>/adapter.py``) says how its engine is reached or started
and which options it takes; its words are its descriptor in ``specschema.engines``. The
CLI only knows this registry and the interface of ``engines/base.py``.
"""

from __future__ import annotations

from dataclasses import fields

from specschema.engines import descriptor
from specsubmit.engines.base import AMBIENT_OPTIONS, OPTION_FLAGS, Adapter, EngineOptions
from specsubmit.engines.llama_server.adapter import ADAPTER as LLAMA_SERVER
from specsubmit.engines.lmstudio.adapter import ADAPTER as LMSTUDIO
from specsubmit.engines.ollama.adapter import ADAPTER as OLLAMA
from specsubmit.errors import UsageError

__all__ = ["ADAPTERS", "adapter", "check_options"]

ADAPTERS: dict[str, Adapter] = {a.name: a for a in (
    OLLAMA,
    LLAMA_SERVER,
    LMSTUDIO,
)}


def adapter(name: str) -> Adapter:
    found = ADAPTERS.get(name)
    if found is None:
        raise UsageError(f"--engine must be one of {', '.join(ADAPTERS)} (not {name!r})")
    descriptor(found.name)  # every adapter has its descriptor (a KeyError is a bug here)
    return found


def check_options(chosen: Adapter, options: EngineOptions) -> None:
    """Options the chosen engine does not take are an error naming the engines that do;
    then the adapter's own checks."""
    default = EngineOptions()
    for item in fields(EngineOptions):
        if (item.name not in OPTION_FLAGS or item.name in chosen.accepts
                or item.name in AMBIENT_OPTIONS):
            continue
        if getattr(options, item.name) != getattr(default, item.name):
            takers = [a.name for a in ADAPTERS.values() if item.name in a.accepts]
            raise UsageError(f"{OPTION_FLAGS[item.name]} needs --engine "
                             f"{' or '.join(takers) or '(none)'}")
    chosen.check(options)
