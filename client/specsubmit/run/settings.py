"""What a run is told (``RunSettings``) and whom it tells (``RunListener``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specschema import Protocol, Trial
from specsubmit.engines.ollama.client import PullProgress

# A warm request's load_duration is queueing + scheduling: tens of milliseconds. Reading
# weights from disk takes far longer, so a load above this threshold means a (re)load.
COLD_LOAD_NS = 250_000_000


class RunListener:
    """Receives progress; every method is a no-op here. The CLI overrides them."""

    def warning(self, message: str) -> None: ...

    def phase(self, message: str) -> None: ...

    def pull_progress(self, model: str, progress: PullProgress) -> None: ...

    def trial_started(self, position: int, total: int, config: str, index: int) -> None: ...

    def trial_finished(self, position: int, total: int, config: str, trial: Trial) -> None: ...


@dataclass(frozen=True)
class RunSettings:
    protocol: Protocol
    target: str | None = None
    pull: bool = False
    assume_yes: bool = False
    log_path: Path | None = None
    cold_load_ns: int = COLD_LOAD_NS
    # After each request, wait until the server log has been quiet this long (at most
    # LOG_SETTLE_MAX_S): counter lines that Ollama forwards late still land before the
    # next request starts, so they are attributed to the request that produced them.
    log_settle_s: float = 0.05
