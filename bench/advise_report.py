"""The advisor's validation printed: per task the model's errors, sign and interval
coverage beside the three baselines, split by kind of candidate and machine, and top-1
regret (the cases and their rules: ``advise_analysis``). Prints figures; asserts nothing."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from advise_analysis import Case, Run, cases, depth_of, drafting_factors, load
from advise_measurements import curve
from specschema.predict import draft_passes


def _error(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None else abs(predicted / measured - 1)


def _summary(label: str, pairs: Sequence[tuple[float | None, float]]) -> str:
    errors = [e for p, m in pairs if (e := _error(p, m)) is not None]
    signs = [(p > 1) == (m > 1) for p, m in pairs if p is not None]
    if not errors:
        return f"  {label:<22} n/a"
    return (f"  {label:<22} median |error| {statistics.median(errors):6.1%}   sign right "
            f"{sum(signs)}/{len(signs)} ({sum(signs) / len(signs):.0%})")


def _told(chosen: Sequence[Case]) -> str:
    """Sign right over the cells whose own measurement tells helps from hurts: 1.0 outside
    its 90 % range (measured x exp(+-1.645 its blocks' log-sd)); a cell at 0.97x +- 5 %
    neither helped nor hurt measurably, and either sign is a coin there."""
    told = [c for c in chosen if abs(math.log(c.measured)) > 1.645 * c.spread]
    right = sum((c.predicted > 1) == (c.measured > 1) for c in told)
    return (f"  model, sign where the measurement tells: {right}/{len(told)}"
            + (f" ({right / len(told):.0%})" if told else "")
            + f"; {len(chosen) - len(told)} cells within their noise of 1.0x")


def _split(chosen: Sequence[Case], machines: Sequence[str]) -> None:
    """The model's figures per kind of candidate and per machine."""
    parts = {"lookup": [c for c in chosen if c.cell[1].startswith("ngram")],
             "draft model": [c for c in chosen if c.cell[1].startswith("draft")],
             # the rest are the task "depths within reach", printed as one of its own
             "above reach": [c for c in chosen if c.above]}
    parts |= {f"on {m}": [c for c in chosen if c.cell[0] == m] for m in machines}
    for label, group in parts.items():
        if not group:
            continue
        errors = [c.predicted / c.measured - 1 for c in group]
        inside = sum(c.low <= c.measured <= c.high for c in group)
        right = sum((c.predicted > 1) == (c.measured > 1) for c in group)
        print(f"    {label:<12} |error| {statistics.median(abs(e) for e in errors):6.1%}, "
              f"signed {statistics.median(errors):+6.1%}, sign {right}/{len(group)}, "
              f"covers {inside}/{len(group)}")


def regret(found: Sequence[Case], pick: str) -> float | None:
    """Mean top-1 regret over (machine, kind of work) in the machines task."""
    groups: dict[tuple[str, str], list[Case]] = {}
    for case in found:
        if case.task == "machines":
            groups.setdefault((case.cell[0], case.cell[2]), []).append(case)
    regrets = []
    for group in groups.values():
        scored = [(getattr(c, pick), c.measured) for c in group if getattr(c, pick) is not None]
        if not scored:
            return None
        best_predicted, chosen = max(scored + [(1.0, 1.0)], key=lambda s: s[0])
        best = max([m for _, m in scored] + [1.0])
        regrets.append(best / chosen - 1)
    return statistics.fmean(regrets) if regrets else None


def analyse(data: Mapping[str, Any], board: bool = False) -> tuple[Run, list[Case]]:
    """Print the figures; return the run and its held-out cases (for ``advise_noise``)."""
    run = load(data, board)
    print(f"\nrun {data['started']}: {len(run.machines)} machines, candidates "
          f"{', '.join(run.candidates)}, {len(run.domains)} kinds of work; load "
          f"{data['load_start'][0]:.1f} at start, {data.get('load_end', ['?'])[0]} at end")
    print("\ncost of a round in plain steps (each against its own step, taken at its own "
          "time): probe (a round checking g + 1) / v1 prefill probe / implied by the runs")
    for m in run.machines:
        probe, old = curve(run.probes[m]), curve(run.prefill[m])
        parts = [f"step {probe.at(1) * 1000:.0f} ms (v1 {old.at(1) * 1000:.0f}, runs "
                 f"{run.base_step[m] * 1000:.0f})"]
        for c in run.candidates:
            g = depth_of(c)
            seen = run.implied_round.get((m, c))
            draft = (draft_passes(g) * statistics.median(run.draft_steps[m])
                     if c.startswith("draft") and run.draft_steps[m] else 0.0)
            parts.append(f"{c} {(probe.at(g + 1) + draft) / probe.at(1):.2f} / "
                         f"{(old.at(g + 1) + draft) / old.at(1):.2f} / "
                         + ("-" if seen is None else f"{seen / run.base_step[m]:.2f}"))
        print(f"  {m}: " + "; ".join(parts))
    print("\na pass of the draft in the draft's plain steps (drafting_factor), per kind of work:")
    for m in run.machines:
        factors = drafting_factors(run, [k for k in run.counts if k[0] == m])
        print(f"  {m}: " + " ".join(f"{f:.2f}" for f in factors))
    if run.draft_prefill:
        print("\nthe draft's prefill of k tokens (a round's pass over the checked batch) in "
              "its plain steps, k = 2 3 4 5 9:")
        for m in run.machines:
            if m in run.draft_prefill:
                step = statistics.median(run.draft_steps[m])
                pre = curve(run.draft_prefill[m])
                print(f"  {m}: " + " ".join(f"{pre.at(k) / step:.2f}" for k in (2, 3, 4, 5, 9)))
    found = cases(run)
    tasks = {task: [c for c in found if c.task == task]
             for task in ("depths", "shallower depths", "machines", "kinds of work")}
    # the depths the product predicts: none above every depth the known cells ran at
    tasks["depths within reach"] = [c for c in tasks["depths"] if not c.above]
    for task, chosen in tasks.items():
        if not chosen:
            continue
        inside = sum(c.low <= c.measured <= c.high for c in chosen)
        width = statistics.median(c.high / c.low for c in chosen)
        print(f"\n{task}: {len(chosen)} held-out cells; interval (90 %) covers "
              f"{inside}/{len(chosen)} ({inside / len(chosen):.0%}), median high / low "
              f"{width:.2f}")
        held = sum(c.held_out[0] <= c.measured <= c.held_out[1] for c in chosen)
        print(f"  with the known cells' misses held out: covers {held}/{len(chosen)} "
              f"({held / len(chosen):.0%}), median high / low "
              f"{statistics.median(c.held_out[1] / c.held_out[0] for c in chosen):.2f}")
        print(_summary("model", [(c.predicted, c.measured) for c in chosen]))
        print(_summary("model, own misses", [(c.corrected, c.measured) for c in chosen]))
        print(_summary("textbook", [(c.textbook, c.measured) for c in chosen]))
        print(_summary("pair's median", [(c.pair_median, c.measured) for c in chosen]))
        print(_summary("machine's median", [(c.other_pairs, c.measured) for c in chosen])
              + "  (other pairs)")
        print(_summary("machine's others", [(c.machine_others, c.measured) for c in chosen])
              + "  (other candidates, its depths too)")
        print(_told(chosen))
        _split(chosen, run.machines)
    for pick in ("predicted", "textbook", "pair_median"):
        value = regret(found, pick)
        print(f"top-1 regret (machines task), {pick}: "
              + ("n/a" if value is None else f"{value:.1%}"))
    print("\ncell (machine candidate kind): measured  predicted [interval]  textbook  task")
    for case in sorted(found, key=lambda c: (c.task, c.cell)):
        print(f"  {' '.join(case.cell):<34} {case.measured:5.2f}x  {case.predicted:5.2f}x "
              f"[{case.low:4.2f}-{case.high:4.2f}]  {case.textbook:5.2f}x  {case.task}")
    if math.isnan(sum(c.predicted for c in found)):
        print("a prediction is NaN")
    return run, found
