"""What a run is told (``RunSettings``) and whom it tells (``RunListener``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specschema import Protocol
from specsubmit.engines.base import RunListener

__all__ = ["COLD_LOAD_NS", "RunListener", "RunSettings"]

# A warm request's load_duration is queueing + scheduling: tens of milliseconds. Reading
# weights from disk takes far longer, so a load above this threshold means a (re)load.
COLD_LOAD_NS = 250_000_000


@dataclass(frozen=True)
class RunSettings:
    protocol: Protocol
    target: str | None = None
    pull: bool = False
    assume_yes: bool = False
    log_path: Path | None = None
    # --ollama-log as a command (journalctl, docker logs): read once after the trials
    log_command: tuple[str, ...] | None = None
    cold_load_ns: int = COLD_LOAD_NS
    # After each request, wait until the server log has been quiet this long (at most
    # LOG_SETTLE_MAX_S): counter lines that Ollama forwards late still land before the
    # next request starts, so they are attributed to the request that produced them.
    log_settle_s: float = 0.05
