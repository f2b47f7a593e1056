"""A saved run of bench/advise.py as its analysis reads it (pure): each block's rates per
prompt, each machine's probe samples, and how far its two probes disagree.

One rule for every reading (``advise_analysis`` and ``advise_noise``): the unit of a
measured speedup is the block, not the request. A block that asked each prompt more than
once (``--repeats``) is one ``Block`` with one rate per repeat, and a block's rate is their
median, as the product reads a block's trials (``specschema.block_ratios``): its repeats
share one engine start and the load of a few minutes, so they are not independent
measurements of the speedup, and counting them as such would narrow its spread.

A run probed with ``--probe-twice`` has a rounds probe before the machine's blocks
(``probe_before``) and one after (``probe``, the only one of older runs, on whose start
the version-1 prefill curve was measured); the blocks ran between them, so neither alone
saw their load, and the analysis pools each size's samples of both.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specschema.block_ratios import Block
from specschema.crowd import CostUnit
from specschema.forecast import cost_curve
from specschema.predict import CostCurve

NINE = 9  # a round checking 9 tokens: what depth 8, the deepest candidate, pays


def block_rates(found: Mapping[str, Any]) -> dict[tuple[str, str], list[Block]]:
    """A machine's blocks per (config, kind of work), in run order: each at its place with
    the rates of its requests for that prompt (one, or one per repeat)."""
    out: dict[tuple[str, str], list[Block]] = {}
    for place, block in enumerate(found["blocks"]):
        rates: dict[str, list[float]] = {}
        for row in block["rows"]:
            rates.setdefault(row["domain"], []).append(row["tokens"] / row["seconds"])
        for domain, values in rates.items():
            out.setdefault((block["config"], domain), []).append(
                Block(float(place), tuple(values)))
    return out


def _samples(probe: Mapping[str, Any]) -> dict[int, list[float]]:
    return {int(k): list(v) for k, v in probe["rounds"].items()} | {1: list(probe["steps"])}


def probe_samples(found: Mapping[str, Any]) -> dict[int, list[float]]:
    """A machine's probe, k -> seconds (k = 1: the plain steps); with one taken before the
    blocks too (``probe_before``), both probes' samples of each size."""
    out: dict[int, list[float]] = {}
    for name in ("probe_before", "probe"):
        if name in found:
            for k, values in _samples(found[name]).items():
                out.setdefault(k, []).extend(values)
    return out


@dataclass(frozen=True)
class ProbeDrift:
    """A machine's two probes: the median plain step and 9-token round of each, seconds
    (the round None where a probe did not measure that size)."""

    step_before: float
    step_after: float
    nine_before: float | None
    nine_after: float | None


def probe_drift(found: Mapping[str, Any]) -> ProbeDrift | None:
    """The machine's probes before and after its blocks; None for a run probed once."""
    if "probe_before" not in found:
        return None
    before, after = _samples(found["probe_before"]), _samples(found["probe"])
    return ProbeDrift(statistics.median(before[1]), statistics.median(after[1]),
                      statistics.median(before[NINE]) if before.get(NINE) else None,
                      statistics.median(after[NINE]) if after.get(NINE) else None)


def drift_line(machine: str, drift: ProbeDrift) -> str:
    """One machine's probe drift as printed: each median in ms, after over before in log."""
    parts = [f"step {drift.step_before * 1000:.1f} -> {drift.step_after * 1000:.1f} ms "
             f"({math.log(drift.step_after / drift.step_before):+.3f})"]
    if drift.nine_before is not None and drift.nine_after is not None:
        parts.append(f"round of {NINE} {drift.nine_before * 1000:.1f} -> "
                     f"{drift.nine_after * 1000:.1f} ms "
                     f"({math.log(drift.nine_after / drift.nine_before):+.3f})")
    else:
        parts.append(f"no round of {NINE} in both")
    return f"  {machine}: " + "; ".join(parts)


def curve(samples: Mapping[int, Sequence[float]], pick: random.Random | None = None
          ) -> CostCurve:
    """A probe's samples per size as the product's cost curve (``forecast.cost_curve`` of
    one unit); with ``pick``, of its samples drawn with replacement per size."""
    if pick is not None:
        samples = {k: [v[pick.randrange(len(v))] for _ in v] for k, v in samples.items()}
    return cost_curve([CostUnit({k: tuple(v) for k, v in samples.items()})])
