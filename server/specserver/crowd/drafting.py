"""What a pass of the draft cost in the crowd's runs of a draft model, in that draft's
plain decoding steps (``specschema.predict.drafting_factor``), from the stored rows and
probes.

A draft model's plain step (the draft probed as a target) leaves out what drafting adds
(the engine samples every drafted token over the whole vocabulary; the pass over each
checked batch is counted by ``specschema.predict`` itself).
A run of the draft tells the whole cost when its machine's costs are known: its measured
speedup, its acceptance per position and plain steps, the target's probed cost curve on
that machine and the draft's probed step there give the T_d the model needs to meet the
measurement. A row counts when its chip (and engine family) has both a verification probe
of the target (a prefill probe reads a round low, and so T_d high) and a probe of the
draft; the contributor's own probes there are used when they have any (their machine),
else every probe of that chip.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from specschema.crowd import CostUnit
from specschema.forecast import cost_curve
from specschema.predict import CostCurve, drafting_factor, plain_steps_per_round
from specschema.probe import VERIFICATION
from specschema.stats import median
from specserver.store import probes

__all__ = ["DraftRun", "drafting_factors"]


@dataclass(frozen=True)
class DraftRun:
    """One stored row of a draft model's config, per domain what its prediction needs:
    (measured speedup, acceptance per position, plain steps' share of decoded tokens)."""

    source: tuple[str, str]  # (submission, config)
    key: str
    chip: str | None
    depth: int
    target_digest: str
    draft_digest: str
    per_domain: Mapping[str, tuple[float, Sequence[float], float]]


def _by_key(found: Sequence[probes.StoredProbe]) -> dict[str, list[probes.StoredProbe]]:
    out: dict[str, list[probes.StoredProbe]] = defaultdict(list)
    for probe in found:
        out[probe.key_id].append(probe)
    return out


def _mine(found: Mapping[str, list[probes.StoredProbe]], key: str
          ) -> list[probes.StoredProbe]:
    """The key's own probes when it has any, else every one."""
    return found.get(key) or [p for ps in found.values() for p in ps]


def drafting_factors(conn: Connection, engine: str, found: Sequence[DraftRun]
                     ) -> list[tuple[DraftRun, dict[str, float]]]:
    """Per run whose machine's costs are known, per domain, a pass of the draft's cost in
    the draft's plain steps (module docstring)."""
    targets: dict[tuple[str, str], dict[str, list[probes.StoredProbe]]] = {}
    drafts: dict[tuple[str, str], dict[str, list[probes.StoredProbe]]] = {}
    out: list[tuple[DraftRun, dict[str, float]]] = []
    for run in found:
        if run.chip is None:
            continue
        where = (run.target_digest, run.chip)
        if where not in targets:
            targets[where] = _by_key([p for p in probes.probes_for(
                conn, target_digests=[run.target_digest], chip=run.chip, engine=engine)
                if p.measured == VERIFICATION])
        if (run.draft_digest, run.chip) not in drafts:
            drafts[(run.draft_digest, run.chip)] = _by_key(probes.probes_for(
                conn, target_digests=[run.draft_digest], chip=run.chip, engine=engine))
        target = _mine(targets[where], run.key)
        steps = [s for p in _mine(drafts[(run.draft_digest, run.chip)], run.key)
                 for s in p.samples.get(1, ())]
        if not target or not steps:
            continue
        curve: CostCurve = cost_curve([CostUnit(p.samples) for p in target])
        step = median(steps)
        factors = {}
        for domain, (speedup, rates, share) in run.per_domain.items():
            if speedup <= 0 or not rates or not 0 <= share < 1:
                continue
            plain = plain_steps_per_round(share, rates, run.depth)
            factors[domain] = drafting_factor(speedup, rates, run.depth, curve, step, plain)
        if factors:
            out.append((run, factors))
    return out
