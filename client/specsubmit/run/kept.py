"""What a run keeps of its engine's report and counters: the report cut to the trials
kept (a block cut short is left out whole, ``runner``), and the counters the engine's API
gave per trial, summed per config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from specsubmit.engines import DraftCounters, EngineReport, counter_totals
from specsubmit.run.submission import ConfigState

__all__ = ["api_counters", "cut_report"]


def cut_report(report: EngineReport, keep: Mapping[str, int]) -> EngineReport:
    """The report without the log's evidence of the trials left out (a block cut short):
    each config's per-trial counters and reload flags cut to its kept trials, and its
    totals summed again from them."""
    cut = {name: n for name, n in keep.items()
           if max(len(report.trial_counters.get(name, ())),
                  len(report.reloaded.get(name, ()))) > n}
    if not cut:
        return report
    trial_counters = {name: list(found[:cut.get(name, len(found))])
                      for name, found in report.trial_counters.items()}
    reloaded = {name: list(found[:cut.get(name, len(found))])
                for name, found in report.reloaded.items()}
    counters = dict(report.counters)
    for name in cut:
        totals = counter_totals(trial_counters.get(name, []))
        if totals is None:
            counters.pop(name, None)
        else:
            counters[name] = totals
    return replace(report, trial_counters=trial_counters, reloaded=reloaded, counters=counters)


def api_counters(states: Mapping[str, ConfigState]) -> dict[str, DraftCounters]:
    """Per config, the sums of the trials' own counters (warm-ups excluded), for the
    configs where the engine's API reported any."""
    found: dict[str, DraftCounters] = {}
    for name, state in states.items():
        reported = [g for g in state.generations if g.draft_n is not None]
        if reported:
            rounds = [g.draft_rounds for g in reported]
            found[name] = DraftCounters(
                drafted=sum(g.draft_n or 0 for g in reported),
                accepted=sum(g.draft_accepted or 0 for g in reported),
                source="engine_api", lines=len(reported),
                rounds=None if None in rounds else sum(r or 0 for r in rounds))
    return found
