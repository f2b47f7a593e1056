"""When each trial ran and how busy the machine was (``Trial.started_s``, ``load_1m``,
``client_cpu_s``): the baseline is interpolated by time between its blocks, and its
stability rule reads the load beside each block (``specschema.stability``).

The clocks are passed in (the defaults are the process's own), so tests can drive them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def load_average() -> float | None:
    """The machine's 1-minute load average (all processes); None where the system has none
    (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


@dataclass
class TrialClock:
    """One run's clock: ``begin()`` just before a trial's request, ``fields()`` just after
    it, for ``submission.trial_from``."""

    monotonic: Callable[[], float] = time.monotonic
    process_time: Callable[[], float] = time.process_time
    load: Callable[[], float | None] = load_average
    origin: float | None = None
    _began: tuple[float, float] = field(default=(0.0, 0.0))

    def begin(self) -> None:
        now = self.monotonic()
        if self.origin is None:
            self.origin = now
        self._began = (now, self.process_time())

    def fields(self) -> dict[str, Any]:
        """The trial's time since the run's first request, the load now, and the client's
        CPU seconds since ``begin``."""
        began, cpu = self._began
        load = self.load()
        return {"started_s": round(max(0.0, began - (self.origin or began)), 3),
                "load_1m": None if load is None else round(max(0.0, load), 2),
                "client_cpu_s": round(max(0.0, self.process_time() - cpu), 4)}
