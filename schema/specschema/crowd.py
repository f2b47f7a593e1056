"""The crowd's inputs to a prediction, as data (pure): acceptance profiles per candidate and
kind of work, cost curves per machine, and how contributors are counted.

A *candidate* is one way to speculate for a target (a draft model, an n-gram drafter, MTP)
with its engine family and speculative settings (type and the depth its runs used). Its
*profile* per kind of work is one acceptance-per-position vector per contributor
(``Profile.units``): each contributor's rows summed (their a_i), then a cohort's members
reduced to one median, and every key still on probation folded into one more unit, as the
board counts voices (``contributor_units``). A profile with fewer units than the minimum
is not predicted from. Beside it, per unit counted the same way, the share of the decoded
tokens that came from plain steps, which drafted nothing (``Profile.plain``; a lookup that
found no match: ``specschema.predict``'s p); the spread of their measured speedups as their
own runs measured them (``Profile.spread``: what a user's run moves by); and for a draft
model, what a pass of the draft cost in their runs in the draft's plain steps, from the
rows of machines whose probes of both the target and the draft are known
(``Profile.drafting``); for a drafter that costs nothing, how far the model missed on
their own machines, their runs against their probes (``Profile.residual``); and the tokens
their rounds drafted on average (``Profile.drafted_per_round``).

A *cost unit* is one contributor's measured cost of checking k tokens at once on a machine
(``specsubmit probe``): the seconds of each sample per k, k = 1 being a plain decoding step.
A *draft cost unit* is a draft model's own decoding step on a machine like it (that model
probed as a target there). Where there is none, the draft's and the target's file sizes
(``Profile.draft_bytes``, ``CrowdInputs.target_bytes``, as results reported them) let the
forecast estimate the step from the target's own (``forecast``).

``specschema.forecast`` turns these into predictions; the server sends them in ``/v1/predict``
beside its answer (``inputs_json``), so that a client can predict again with its own probe
and get what the server would have said for that probe.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from specschema.probe import CostProbe

__all__ = ["ALL_DOMAINS", "Candidate", "CostUnit", "CrowdInputs", "Measured", "Profile",
           "contributor_units", "cost_unit", "inputs_from_json", "inputs_json",
           "median_vector"]

ALL_DOMAINS = "all"  # a profile over every kind of work the runs had


@dataclass(frozen=True)
class Candidate:
    """One way to speculate for the target, as the store keys it."""

    engine: str  # the engine family (the wire's engine.name)
    mechanism: str
    spec_type: str | None  # llama-server's --spec-type; None: the engine's own
    depth: int | None  # the most tokens a round drafted in the runs; None: not set (adaptive)
    draft: str | None = None  # the draft model's name, for a candidate with one
    draft_digest: str | None = None
    adaptive: bool = False  # the engine picks its depth as it goes: measured rows only

    @property
    def costless(self) -> bool:
        """Whether drafting costs next to nothing beside the target's pass: an n-gram
        lookup in the text so far. A draft model's step, or the target's own draft layers
        (MTP, EAGLE), is a cost of its own."""
        return self.draft is None and (self.spec_type or "").startswith("ngram-")

    @property
    def kind(self) -> str:
        """``ngram-simple``, ``draft-simple with gemma-3-270m-trunc6``: what to switch on."""
        kind = self.spec_type or self.mechanism
        return f"{kind} with {self.draft}" if self.draft else kind

    @property
    def label(self) -> str:
        """The kind and the depth its runs used (two candidates may differ by that only)."""
        return f"{self.kind}, runs at depth {self.depth}" if self.depth else self.kind

    def json(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "engine": self.engine,
                "mechanism": self.mechanism, "spec_type": self.spec_type, "depth": self.depth,
                "draft": self.draft, "draft_digest": self.draft_digest, "adaptive": self.adaptive}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(str(data["engine"]), str(data["mechanism"]), _opt_str(data["spec_type"]),
                   _opt_int(data["depth"]), _opt_str(data["draft"]),
                   _opt_str(data["draft_digest"]), bool(data["adaptive"]))


@dataclass(frozen=True)
class Measured:
    """A speedup measured for the candidate on machines like the one asked about: the
    median across contributors of their medians, at the depth those runs used."""

    chip: str | None
    memory_gb: int | None
    depth: int | None
    speedup: float
    contributors: int

    def json(self) -> dict[str, Any]:
        return {"chip": self.chip, "memory_gb": self.memory_gb, "depth": self.depth,
                "speedup": self.speedup, "contributors": self.contributors}


@dataclass(frozen=True)
class CostUnit:
    """One contributor's seconds per sample for a forward pass over k new tokens (k = 1: a
    plain decoding step)."""

    samples: Mapping[int, tuple[float, ...]]

    def json(self) -> dict[str, list[float]]:
        return {str(k): list(v) for k, v in sorted(self.samples.items())}


@dataclass(frozen=True)
class Profile:
    """A candidate's acceptance per draft position for one kind of work, one vector per
    contributor unit (sorted: the order never depends on the store's)."""

    candidate: Candidate
    domain: str
    units: tuple[tuple[float, ...], ...]
    new_keys: int = 0  # keys on probation, folded into one of the units
    measured: tuple[Measured, ...] = ()
    draft_cost: tuple[CostUnit, ...] = ()  # the draft model's step on machines like it
    # per contributor unit (sorted), the plain steps' share of the decoded tokens; empty:
    # not known (no run recorded its tokens beside its rounds), taken as none
    plain: tuple[float, ...] = ()
    draft_bytes: int | None = None  # the draft model's file size, as a result reported it
    # per contributor unit (sorted), the log-sd of their measured speedups as their runs
    # measured them (``predict_measured.measured_spread``); empty: not known
    spread: tuple[float, ...] = ()
    # per contributor unit (sorted), what a pass of the draft cost in their runs, in the
    # draft's plain steps on their machine (``predict.drafting_factor``); empty: not known,
    # one step
    drafting: tuple[float, ...] = ()
    # per contributor unit (sorted), log(measured / predicted) of their runs, predicted
    # from their own acceptance and their machine's cost curve; empty: not known
    residual: tuple[float, ...] = ()
    # per contributor unit (sorted), the tokens a round of their runs drafted on average at
    # the candidate's depth (a lookup drafts fewer where the text it copies runs out);
    # empty: not known, every round the whole depth
    drafted_per_round: tuple[float, ...] = ()


@dataclass(frozen=True)
class CrowdInputs:
    target_digest: str
    target_name: str | None
    chip: str
    memory_gb: int | None
    engine: str
    min_contributors: int
    profiles: tuple[Profile, ...]
    cost: tuple[CostUnit, ...] = ()  # the crowd's cost curves for this machine and target
    cost_contributors: int = 0
    # what the cost units' samples are (``CostProbe.measured``): "verification" or, only
    # when no probe of this machine timed rounds, "prefill"; None without cost units
    cost_measured: str | None = None
    target_bytes: int | None = None  # the target's file size, where a draft needs it
    extra: Mapping[str, Any] = field(default_factory=dict)


def median_vector(vectors: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Per position, the median of the vectors that reach it."""
    lengths = sorted(map(len, vectors))
    # read a column at a time, a shorter vector's missing places filled with infinity, so
    # that the column's first ``reach`` values once sorted are the ones there (finite:
    # shares and rates; a forecast takes this median of every bootstrap draw, and the
    # columns are most of its time)
    out: list[float] = []
    for i, found in enumerate(zip_longest(*vectors, fillvalue=math.inf)):
        reach = len(lengths) - bisect_right(lengths, i)  # the vectors longer than i
        column = sorted(found)
        mid = reach // 2
        out.append(column[mid] if reach % 2 else (column[mid - 1] + column[mid]) / 2)
    return tuple(out)


def contributor_units(by_key: Mapping[str, Sequence[float]], cohort_of: Mapping[str, str],
                      new: AbstractSet[str], *, unknown_is_new: bool = False
                      ) -> tuple[tuple[tuple[float, ...], ...], int]:
    """The board's way of counting voices over per-key profiles: a cohort's keys are one
    unit (the median of theirs), and every cohort on probation together is one more unit
    (the median of those cohorts'). A key no cohort knows is its own cohort, on probation
    when ``unknown_is_new`` or named in ``new``. Returns the units, sorted, and the keys
    folded as new."""
    cohorts: dict[str, list[Sequence[float]]] = {}
    fresh: set[str] = set()
    for key, vector in by_key.items():
        cohort = cohort_of.get(key, key)
        if cohort in new or (unknown_is_new and key not in cohort_of):
            fresh.add(cohort)
        cohorts.setdefault(cohort, []).append(vector)
    units = [median_vector(v) for c, v in cohorts.items() if c not in fresh]
    folded = [median_vector(cohorts[c]) for c in sorted(fresh)]
    if folded:
        units.append(median_vector(folded))
    new_keys = sum(len(cohorts[c]) for c in fresh)
    return tuple(sorted(units)), new_keys


def cost_unit(probe: CostProbe) -> CostUnit:
    """A probe as a cost unit: its samples per k, k = 1 being its decoding steps."""
    samples: dict[int, tuple[float, ...]] = {
        p.tokens: tuple(p.samples) for p in probe.points if p.tokens > 1}
    samples[1] = tuple(probe.decode_samples)
    return CostUnit(samples)


def merge_cost_units(units: Iterable[CostUnit]) -> CostUnit:
    """One contributor's several probes as one unit: their samples together."""
    merged: dict[int, list[float]] = {}
    for unit in units:
        for k, values in unit.samples.items():
            merged.setdefault(k, []).extend(values)
    return CostUnit({k: tuple(v) for k, v in sorted(merged.items())})


# --- JSON, as /v1/predict sends the inputs -------------------------------------------------


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _cost_from_json(data: Mapping[str, Sequence[float]]) -> CostUnit:
    return CostUnit({int(k): tuple(float(x) for x in v) for k, v in data.items()})


def inputs_json(inputs: CrowdInputs) -> dict[str, Any]:
    return {
        "target_digest": inputs.target_digest, "target_name": inputs.target_name,
        "chip": inputs.chip, "memory_gb": inputs.memory_gb, "engine": inputs.engine,
        "min_contributors": inputs.min_contributors,
        "cost": [u.json() for u in inputs.cost], "cost_contributors": inputs.cost_contributors,
        "cost_measured": inputs.cost_measured, "target_bytes": inputs.target_bytes,
        "profiles": [{"candidate": p.candidate.json(), "domain": p.domain,
                      "units": [list(u) for u in p.units], "new_keys": p.new_keys,
                      "measured": [m.json() for m in p.measured],
                      "draft_cost": [u.json() for u in p.draft_cost],
                      "plain": list(p.plain), "draft_bytes": p.draft_bytes,
                      "spread": list(p.spread), "drafting": list(p.drafting),
                      "residual": list(p.residual),
                      "drafted_per_round": list(p.drafted_per_round)}
                     for p in inputs.profiles],
    }


def inputs_from_json(data: Mapping[str, Any]) -> CrowdInputs:
    """The inverse of ``inputs_json``; ValueError, KeyError or TypeError on another shape."""
    profiles = tuple(
        Profile(Candidate.from_json(p["candidate"]), str(p["domain"]),
                tuple(tuple(float(x) for x in u) for u in p["units"]), int(p["new_keys"]),
                tuple(Measured(_opt_str(m["chip"]), _opt_int(m["memory_gb"]),
                               _opt_int(m["depth"]), float(m["speedup"]),
                               int(m["contributors"])) for m in p["measured"]),
                tuple(_cost_from_json(u) for u in p["draft_cost"]),
                tuple(float(x) for x in p.get("plain", ())), _opt_int(p.get("draft_bytes")),
                tuple(float(x) for x in p.get("spread", ())),
                tuple(float(x) for x in p.get("drafting", ())),
                tuple(float(x) for x in p.get("residual", ())),
                tuple(float(x) for x in p.get("drafted_per_round", ())))
        for p in data["profiles"])
    return CrowdInputs(str(data["target_digest"]), _opt_str(data["target_name"]),
                       str(data["chip"]), _opt_int(data["memory_gb"]), str(data["engine"]),
                       int(data["min_contributors"]), profiles,
                       tuple(_cost_from_json(u) for u in data["cost"]),
                       int(data["cost_contributors"]), _opt_str(data.get("cost_measured")),
                       _opt_int(data.get("target_bytes")))
