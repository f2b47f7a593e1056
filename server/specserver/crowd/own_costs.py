"""A stored run beside its machine's probes: what ``crowd.drafting`` and ``crowd.residuals``
read the crowd's runs against.

A run's machine is known by its chip and its key: the key's own probes there are used when
it has any (its machine), else every probe of that chip (engine family alike). The
target's cost curve counts only probes that timed verification rounds (a prefill probe
reads a round low); a draft model's step is its own probe as a target there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection

from specschema.crowd import CostUnit
from specschema.forecast import cost_curve
from specschema.predict import CostCurve, plain_steps_per_round
from specschema.probe import VERIFICATION
from specschema.stats import median
from specserver.store import probes

__all__ = ["MachineCosts", "MeasuredRun"]


@dataclass(frozen=True)
class MeasuredRun:
    """One stored row of a speculating config, per domain what its prediction needs:
    (measured speedup, acceptance per position, plain steps' share of decoded tokens, the
    tokens a round drafted on average or None when not known)."""

    source: tuple[str, str]  # (submission, config)
    key: str
    chip: str | None
    depth: int
    target_digest: str
    draft_digest: str | None
    per_domain: Mapping[str, tuple[float, Sequence[float], float, float | None]]

    def domains(self) -> Iterator[tuple[str, float, Sequence[float], float, float | None]]:
        """Per domain whose counts a prediction can use: (domain, measured speedup,
        acceptance per position, plain steps per round at the run's depth, tokens a round
        drafted or None)."""
        for domain, (speedup, rates, share, drafted) in self.per_domain.items():
            if speedup > 0 and rates and 0 <= share < 1:
                yield (domain, speedup, rates,
                       plain_steps_per_round(share, rates, self.depth), drafted)


def _by_key(found: Sequence[probes.StoredProbe]) -> dict[str, list[probes.StoredProbe]]:
    out: dict[str, list[probes.StoredProbe]] = defaultdict(list)
    for probe in found:
        out[probe.key_id].append(probe)
    return out


def _mine(found: Mapping[str, list[probes.StoredProbe]], key: str
          ) -> list[probes.StoredProbe]:
    """The key's own probes when it has any, else every one."""
    return found.get(key) or [p for ps in found.values() for p in ps]


@dataclass
class MachineCosts:
    """The probes of one engine family, read once per (model, chip)."""

    conn: Connection
    engine: str
    _targets: dict[tuple[str, str], dict[str, list[probes.StoredProbe]]] = field(
        default_factory=dict)
    _drafts: dict[tuple[str, str], dict[str, list[probes.StoredProbe]]] = field(
        default_factory=dict)
    # per (target, chip, the key or "" for every probe there): a curve is computed once,
    # however many runs of a chip without probes of their own fall back to it
    _curves: dict[tuple[str, str, str], CostCurve] = field(default_factory=dict)
    _steps: dict[tuple[str, str, str], float | None] = field(default_factory=dict)

    def target_curve(self, run: MeasuredRun) -> CostCurve | None:
        """The run's machine's verification curve of its target; None when unknown."""
        if run.chip is None:
            return None
        where = (run.target_digest, run.chip)
        if where not in self._targets:
            self._targets[where] = _by_key([p for p in probes.probes_for(
                self.conn, target_digests=[run.target_digest], chip=run.chip,
                engine=self.engine) if p.measured == VERIFICATION])
        by_key = self._targets[where]
        whose = run.key if run.key in by_key else ""
        if (*where, whose) not in self._curves:
            found = _mine(by_key, run.key)
            if not found:
                return None
            self._curves[(*where, whose)] = cost_curve([CostUnit(p.samples) for p in found])
        return self._curves[(*where, whose)]

    def draft_step(self, run: MeasuredRun) -> float | None:
        """The run's machine's plain decoding step of its draft model; None when unknown."""
        if run.chip is None or run.draft_digest is None:
            return None
        where = (run.draft_digest, run.chip)
        if where not in self._drafts:
            self._drafts[where] = _by_key(probes.probes_for(
                self.conn, target_digests=[run.draft_digest], chip=run.chip,
                engine=self.engine))
        by_key = self._drafts[where]
        whose = (*where, run.key if run.key in by_key else "")
        if whose not in self._steps:
            steps = [s for p in _mine(by_key, run.key) for s in p.samples.get(1, ())]
            self._steps[whose] = median(steps) if steps else None
        return self._steps[whose]
