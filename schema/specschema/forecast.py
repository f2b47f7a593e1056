"""Predicted speedups for one machine from the crowd's acceptance and a cost curve (pure).

``forecast`` is the one answer ``GET /v1/predict`` gives and ``specsubmit advise --server``
prints: per candidate and kind of work, S at each depth up to the one its runs used
(``specschema.predict``: S(g) = T_t(1) (E[N](g) + p) / (g T_d + T_t(g + 1) + o + p T_t(1)),
a draft model paying one pass more a round and one a plain step, p the plain steps per
round at depth g from the contributors' share of plain steps), with
the median across contributors' profiles, plain shares and cost units as the point, and an
interval from resampling them (``DRAWS`` bootstrap draws: contributor units with
replacement, at most ``RESAMPLE_MAX`` a draw; within a cost unit, its samples with
replacement), each draw times the noise of a measurement (``predict_measured``: the
median of the contributors' own measured spreads, or where contributors' runs of the
candidate can be held against their machines' probes, what the model missed by there,
``model_error``), so that the interval says where a user's run would land, not only where
its expectation is. Beside each, the speedups
measured on machines like the one asked about, and one line that answers.

A draft model's T_d is its own decoding step probed on this chip (``Profile.draft_cost``,
resampled like the target's); where it never was, it is estimated from the file sizes:
T_d = T_t(1) * draft bytes / target bytes, T_t(1) from the cost curve in use (so from the
asker's own probe when that is the cost). Decoding one token reads every weight once, so at
one effective bandwidth the step scales with the bytes; the fixed cost of a step is scaled
with it, which reads a much smaller draft's step low and its speedup high. The answer says
which (``draft_cost``: "probed" or "size"). A pass of the draft costs more than that step
(the engine samples every draft token over the whole vocabulary): where
contributors' runs of the draft and probes of their machines tell it (from as many
contributor units as the acceptance needs), T_d is the step times the median of what a
pass cost in their runs, in their draft's steps (``Profile.drafting``,
``predict.drafting_factor``; ``drafting_steps`` in the answer), else the step alone; each
draw takes that cost as a machine none of theirs would read it (``drafting_draw``: their
machines differ by up to twice, and the asker's is another), not their median's draw.
A round checks the tokens it drafted and the target's own: an n-gram lookup drafts fewer
than its depth where the text it copies runs out, so each depth's round is priced at what
the contributors' rounds drafted (``Profile.drafted_per_round``, ``predict.drafted_at``)
where they tell it.

Not predicted, and said why: a candidate whose engine picks its depth as it runs (only
its measured rows stand), a pair with fewer contributor units than the minimum (what is
missing is said), a draft model whose own step was never probed on this chip and whose
size is unknown, a drafter that runs the target's own draft layers (MTP: their cost is not
probed yet), and any candidate when there is no cost curve for this machine and target.
Only n-gram drafters are taken as costless (T_d = 0).

Deterministic: every random draw comes from a generator seeded by the inputs' names, so
a client predicting again from the server's inputs and the same cost gets the same numbers.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specschema.crowd import (
    ALL_DOMAINS,
    CostUnit,
    CrowdInputs,
    Profile,
    median_vector,
)
from specschema.predict import (
    CostCurve,
    drafted_at,
    plain_steps_per_round,
    predicted_speedup,
)
from specschema.predict_measured import (
    ModelError,
    measured_interval,
    model_error,
    new_machine_draw,
    new_machine_spread,
)

__all__ = ["DRAWS", "LEVEL", "MARGIN", "Row", "cost_curve", "drafting_draw", "drafting_steps",
           "forecast", "measurement_spread", "miss", "recommendation"]

DRAWS = 200
LEVEL = 0.90  # the interval's nominal coverage
MARGIN = 1.05  # a predicted gain below 5 % is not worth a recommendation
DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16)
DIGITS = 4
# A draw takes at most this many contributor units (an m-out-of-n bootstrap past it): the
# interval of a larger crowd comes out wider than it is, never narrower, and one answer
# stays under a second of CPU however many contributed.
RESAMPLE_MAX = 100


@dataclass(frozen=True)
class Row:
    depth: int
    predicted: float
    low: float
    high: float

    def json(self) -> dict[str, Any]:
        return {"depth": self.depth, "predicted": round(self.predicted, DIGITS),
                "low": round(self.low, DIGITS), "high": round(self.high, DIGITS)}


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _unit_medians(samples: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """A unit's curve as ``CostProbe.curve`` makes it: each size's own median (k = 1 the
    decoding step). Not smoothed across sizes: a pass over more tokens can cost less
    (``predict.CostCurve``), so pooling a size with its neighbour moves it off what the
    engine spends on it."""
    return {k: _median(v) for k, v in samples.items() if v}


def cost_curve(units: Sequence[CostUnit]) -> CostCurve:
    """Per k, the median across units of each unit's median."""
    return _across([_unit_medians(u.samples) for u in units])


def _across(per_unit: Sequence[Mapping[int, float]]) -> CostCurve:
    sizes = sorted({k for curve in per_unit for k in curve})
    return CostCurve({k: _median([c[k] for c in per_unit if k in c]) for k in sizes})


def _picks(rng: random.Random, n: int, count: int) -> list[int]:
    """``count`` indices below ``n`` (n > 0), each what ``rng.randrange(n)`` returns, from
    the same draws of the generator (getrandbits of n's bit length, drawn again at n or
    above): a bootstrap's picks are most of an answer's CPU, and the general call's
    argument checks most of theirs. Written out, the draws no longer rest on how a Python
    version implements randrange."""
    bits, draw = n.bit_length(), rng.getrandbits
    out = []
    for _ in range(count):
        r = draw(bits)
        while r >= n:
            r = draw(bits)
        out.append(r)
    return out


def _resampled(units: Sequence[CostUnit], rng: random.Random) -> list[dict[int, float]]:
    """One bootstrap draw's units as ``_unit_medians`` reads them: the units with
    replacement, within each its samples per size with replacement (drawn in that order,
    the units first)."""
    out = []
    for chosen in _picks(rng, len(units), len(units)):
        medians = {}
        for k, v in units[chosen].samples.items():
            if v:
                medians[k] = _median([v[i] for i in _picks(rng, len(v), len(v))])
        out.append(medians)
    return out


def _step(per_unit: Sequence[Mapping[int, float]]) -> float:
    """A draft model's seconds per token: the median of its units' decoding steps (each
    unit's median per size, ``_unit_medians``)."""
    return _median([m[1] for m in per_unit if 1 in m])


def _rng(*parts: str) -> random.Random:
    seed = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return random.Random(int.from_bytes(seed[:8], "big"))


def _depths(run_depth: int) -> list[int]:
    return sorted({d for d in DEPTHS if d <= run_depth} | {run_depth})


def _why_not(profile: Profile, inputs: CrowdInputs, have_cost: bool) -> str | None:
    candidate = profile.candidate
    if candidate.adaptive or candidate.depth is None:
        return ("the engine picks its depth as it runs, which no fixed-depth model "
                "describes: only measured speedups are shown")
    have = len(profile.units)
    if have == 0:
        return ("no run of it recorded acceptance per draft position (its engine does not "
                "report one): only measured speedups are shown")
    if have < inputs.min_contributors:
        folded = (f", the {profile.new_keys} keys still new counted as one"
                  if profile.new_keys > 1 else "")
        return (f"needs acceptance from {inputs.min_contributors} contributors for this "
                f"pair; has {have}{folded}: {inputs.min_contributors - have} more needed")
    if not have_cost:
        return ("no cost curve of this target on a machine like this: run `specsubmit "
                "probe` with it")
    if candidate.draft is not None and not profile.draft_cost and not _sized(profile, inputs):
        return (f"the draft {candidate.draft} was never probed on this chip and no result "
                "reported its size: its time per token is unknown")
    if candidate.draft is None and not candidate.costless:
        return ("its drafting runs the target's own draft layers, whose cost no probe "
                "measures yet: only measured speedups are shown")
    return None


def _sized(profile: Profile, inputs: CrowdInputs) -> bool:
    return bool(profile.draft_bytes and inputs.target_bytes)


def _draft_steps(profile: Profile, inputs: CrowdInputs, curve: CostCurve,
                 curves: Sequence[CostCurve], salt: str) -> tuple[list[float], str]:
    """T_d for the point and each draw, and what it rests on (module docstring)."""
    if profile.draft_cost:
        key = profile.candidate.draft_digest or profile.candidate.draft or ""
        draft_rng = _rng(salt, "draft", key)
        return [_step([_unit_medians(u.samples) for u in profile.draft_cost])] + [
            _step(_resampled(profile.draft_cost, draft_rng)) for _ in range(DRAWS)], "probed"
    assert profile.draft_bytes is not None and inputs.target_bytes is not None
    ratio = profile.draft_bytes / inputs.target_bytes
    return [c.at(1) * ratio for c in (curve, *curves)], "size"


def _drawn_median(values: Sequence[float], rng: random.Random) -> float:
    """The median of one bootstrap draw of ``values`` (at most ``RESAMPLE_MAX`` of them)."""
    return _median([values[i] for i in _picks(rng, len(values),
                                               min(len(values), RESAMPLE_MAX))])


def measurement_spread(profile: Profile) -> float:
    """The log-sd a user's measured speedup has beside the prediction: the median of the
    contributors' own (``Profile.spread``; 0 when none is known)."""
    return _median(profile.spread) if profile.spread else 0.0


def miss(profile: Profile, min_contributors: int = 1) -> ModelError:
    """The noise a user's run has beside the prediction (``predict_measured.model_error``):
    the contributors' misses on their own machines (``Profile.residual``) when known from
    at least ``min_contributors`` units, the measured spread at least."""
    return model_error(profile.residual, measurement_spread(profile), min_contributors)


def drafting_steps(profile: Profile, min_contributors: int = 1) -> float:
    """A pass of the draft's cost in the draft's plain steps: the median of the contributors'
    (``Profile.drafting``), from at least ``min_contributors`` units (it moves the point, so
    one contributor's own probes and runs must not set it alone where the acceptance needs
    several); 1 otherwise."""
    known = profile.drafting
    return _median(known) if known and len(known) >= min_contributors else 1.0


def drafting_draw(center: float, spread: ModelError, rng: random.Random) -> float:
    """One draw of a draft pass's cost in the draft's steps on this machine, from the
    contributor units' (``Profile.drafting``: ``center`` their median, ``spread`` from
    ``new_machine_spread``): as a machine none of them came from would read it
    (``new_machine_draw``), never below one step (as ``predict.drafting_factor`` reads
    it)."""
    return max(new_machine_draw(center, spread, rng), 1.0)


def _predict(profile: Profile, curve: CostCurve, curves: Sequence[CostCurve],
             draft_steps: Sequence[float] | None, salt: str, min_contributors: int
             ) -> list[Row]:
    assert profile.candidate.depth is not None
    depths = _depths(profile.candidate.depth)
    point_profile = median_vector(profile.units)
    # the drafting costs only from enough contributors (``drafting_steps``)
    drafting = profile.drafting if len(profile.drafting) >= min_contributors else ()
    drafting_spread = new_machine_spread(drafting)
    drafting_center = _median(drafting) if drafting else 1.0  # ``drafting_steps``
    point_draft = draft_steps[0] * drafting_center if draft_steps else 0.0
    rng = _rng(salt, profile.candidate.label, profile.candidate.engine,
               profile.candidate.draft_digest or "", profile.domain)
    units, plain = profile.units, profile.plain
    point_plain = _median(plain) if plain else 0.0
    # the tokens a round drafts at each depth, from what the runs' rounds drafted
    run_depth, known = profile.candidate.depth, profile.drafted_per_round
    drafted = _median(known) if known else None
    sizes: dict[int, float | None] = {d: None if drafted is None else drafted_at(
        d, run_depth, drafted) for d in depths}
    draws: dict[int, list[float]] = {d: [] for d in depths}
    size = min(len(units), RESAMPLE_MAX)
    for b, drawn_curve in enumerate(curves):
        drawn = median_vector([units[i] for i in _picks(rng, len(units), size)])
        t_d = draft_steps[b + 1] if draft_steps else 0.0
        # drawn after the units, and only when known, so that a profile without plain
        # shares (or drafting costs) draws what it drew before they were carried
        share = _drawn_median(plain, rng) if plain else 0.0
        if draft_steps and drafting:
            t_d *= drafting_draw(drafting_center, drafting_spread, rng)
        for d in depths:
            draws[d].append(predicted_speedup(drawn, d, drawn_curve, t_d,
                                              plain_steps_per_round(share, drawn, d),
                                              sizes[d]))
    noise = miss(profile, min_contributors)
    rows = []
    for d in depths:
        point = predicted_speedup(point_profile, d, curve, point_draft,
                                  plain_steps_per_round(point_plain, point_profile, d),
                                  sizes[d])
        low, high = measured_interval(draws[d], noise.scale, LEVEL, rng, noise.dof)
        rows.append(Row(d, point, low, high))
    return rows


def forecast(inputs: CrowdInputs, cost: Sequence[CostUnit], cost_source: str,
             domain: str | None = None, measured: str | None = None) -> dict[str, Any]:
    """The answer (module docstring) as JSON-ready data; ``cost``: the units of the cost
    curve to predict with (the crowd's for this machine, or the asker's own probe), named
    by ``cost_source``, whose samples are ``measured`` (``CostProbe.measured``: a
    "prefill" curve reads a round low, so its predictions read high; the answer says it);
    ``domain``: one kind of work only (else every one the runs had)."""
    salt = inputs.target_digest
    have_cost = bool(cost)
    curve = cost_curve(cost) if have_cost else None
    cost_rng = _rng(salt, "cost")
    curves = [_across(_resampled(cost, cost_rng)) for _ in range(DRAWS)] if have_cost else []
    draft_steps: dict[str, tuple[list[float], str]] = {}
    candidates: list[dict[str, Any]] = []
    for profile in inputs.profiles:
        if domain is not None and profile.domain not in (domain, ALL_DOMAINS):
            continue
        why = _why_not(profile, inputs, have_cost)
        rows: list[Row] = []
        basis = None
        if why is None:
            assert curve is not None
            steps = None
            if profile.candidate.draft is not None:
                key = profile.candidate.draft_digest or profile.candidate.draft
                if key not in draft_steps:
                    draft_steps[key] = _draft_steps(profile, inputs, curve, curves, salt)
                steps, basis = draft_steps[key]
            rows = _predict(profile, curve, curves, steps, salt, inputs.min_contributors)
        candidates.append({
            "candidate": profile.candidate.json(), "domain": profile.domain,
            "contributors": len(profile.units), "new_keys": profile.new_keys,
            "predictions": [r.json() for r in rows],
            "measured": [m.json() for m in profile.measured], "why_not_predicted": why,
            "draft_cost": basis,
            "drafting_steps": (round(drafting_steps(profile, inputs.min_contributors), DIGITS)
                               if basis is not None else None),
            "measurement_spread": round(measurement_spread(profile), DIGITS),
            "model_error": _miss_json(profile, inputs.min_contributors)})
    answer: dict[str, Any] = {
        "target": {"digest": inputs.target_digest, "name": inputs.target_name},
        "machine": {"chip": inputs.chip, "memory_gb": inputs.memory_gb,
                    "engine": inputs.engine},
        "cost": ({"source": cost_source, "contributors": len(cost), "measured": measured,
                  "seconds": {str(k): round(v, 6) for k, v in sorted(curve.seconds.items())}}
                 if curve is not None else None),
        "min_contributors": inputs.min_contributors,
        "interval": LEVEL, "draws": DRAWS,
        "domain": domain,
        "candidates": candidates,
    }
    answer["recommendation"] = recommendation(candidates, domain or ALL_DOMAINS)
    return answer


def _miss_json(profile: Profile, min_contributors: int) -> dict[str, Any] | None:
    """The model's misses on contributors' own machines, as the answer carries them (None
    while too few contributors tell them to be used)."""
    noise = miss(profile, min_contributors)
    if noise.dof is None:
        return None
    return {"log_sd": round(noise.scale, DIGITS), "contributors": len(profile.residual)}


def recommendation(candidates: Sequence[Mapping[str, Any]], domain: str) -> str:
    """One line: the candidate and depth predicted fastest for ``domain``, when predicted to
    help by more than ``MARGIN``; else to leave speculation off; else what is missing."""
    best: tuple[float, Mapping[str, Any], Mapping[str, Any]] | None = None
    for entry in candidates:
        if entry["domain"] != domain:
            continue
        for row in entry["predictions"]:
            if best is None or row["predicted"] > best[0]:
                best = (row["predicted"], entry, row)
    where = "" if domain == ALL_DOMAINS else f" for {domain}"
    if best is None:
        reasons = [e["why_not_predicted"] for e in candidates if e["why_not_predicted"]]
        return ("nothing can be predicted" + where
                + (f" yet: {reasons[0]}" if reasons else ": no candidate has a profile"))
    speed, entry, row = best
    label = entry["candidate"]["kind"]
    span = f"{speed:.2f}x ({row['low']:.2f}-{row['high']:.2f})"
    if speed < MARGIN or row["high"] < 1.0:
        return (f"leave speculation off{where}: the best predicted is {label} at depth "
                f"{row['depth']}, {span}")
    risk = (f"; it may also slow this machine down (the interval reaches {row['low']:.2f}x)"
            if row["low"] < 1.0 else "")
    return f"use {label} at depth {row['depth']}{where}: predicted {span}{risk}"
