"""Evidence levels: how far the server can vouch for a config's acceptance counters (pure).

Counters are claims: the server never sees the engine's log or its API. What it can check
is whether the counters are consistent with the trials it was sent, so a level says which
source the counters name and whether they survived those checks, from strongest to weakest
(``LEVELS``):

- ``engine_api``: every counter comes from the engine's own API (llama-server's
  ``timings.draft_n`` / ``draft_n_accepted``, one per trial; the sources each engine has
  are its descriptor's, ``specschema.engines``) and is consistent;
- ``log``: counters scraped from a log (Ollama's llama-server or MLX lines), consistent;
- ``reported``: counters the server cannot place: the engine version is not a version,
  a v2 submission names a log it says it did not read, v2 totals without any trial's
  counters, or sources that contradict each other;
- ``implausible``: the counters contradict the timings (``speedup_bound``): the measured
  speedup is more than the accepted tokens can explain, or more tokens were drafted than
  the passes could hold;
- ``none``: no counters.

Consistent means (``docs/aggregation.md``, "Evidence levels"): accepted <= drafted and
<= eval_count per trial, the trial counters add up to the config's totals (those two are
also ingest rules, 422 ``counters_consistent``), drafted <= n_max x eval_count, and the
decode speedup is at most ``speedup_bound`` x ``BOUND_SLACK``.

The bound, for greedy draft-and-verify: each target forward pass emits the accepted draft
tokens of its round plus one token of its own, so a trial that generated E tokens with A
accepted took P >= E - A passes; each pass drafts at most n_max tokens, so P >= D / n_max
for D drafted; and with a mean accepted length m per round, E / P <= 1 + m. A pass verifying
a draft costs at least a one-token pass (it reads every weight once too), so the trial's
decode rate is at most the baseline's one-token rate x E / P. The order statistics of the
trials keep that inequality, so the median speedup is at most the median of the trials'
E / P_min. ``BOUND_SLACK`` allows for the baseline's rate drifting between configs.

``evidence_level`` works on plain values, so the store's migration computes the same level
from stored rows as ingestion does from a submission (``submission_evidence``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from specschema.engines import descriptor
from specschema.models import ConfigResult, Submission
from specschema.stats import median

Level = Literal["engine_api", "log", "reported", "implausible", "none"]
LEVELS: tuple[Level, ...] = ("engine_api", "log", "reported", "implausible", "none")
# Levels whose counters the server found consistent: the only confirmed results that count
# as confirmed on the speedup board.
CORROBORATED: frozenset[str] = frozenset({"engine_api", "log"})
LOG_SOURCES = frozenset({"llama_server_log", "mlx_log"})
# The measured speedup may exceed the bound by this factor before it is implausible: the
# bound compares the draft config's passes with the baseline's median rate, measured
# minutes apart (thermal drift, background load). Honest A/A ratios stay within a few
# percent of 1.0 (the Hard Numbers noise floor, ±7 % in the example generator); 25 % is
# several times that.
BOUND_SLACK = 1.25
# The option or launch fields that cap the tokens drafted per pass (the n-gram drafters'
# depth options too: ``specschema.speculation``).
N_MAX_OPTIONS = ("draft_num_predict", "spec_draft_n_max", "spec_ngram_simple_size_m",
                 "spec_ngram_mod_n_max")


def rank(level: str) -> int:
    """Higher is stronger evidence; unknown levels rank lowest."""
    return len(LEVELS) - LEVELS.index(level) if level in LEVELS else 0


def version_known(engine_name: str | None, version: str) -> bool:
    """Whether the engine version can be placed: x.y[.z] for every engine, or a llama.cpp
    build number for the engines that use them (the descriptor's)."""
    return descriptor(engine_name).version_known(version)


class TrialCounts(NamedTuple):
    """One trial as the level needs it (drafted/accepted/source None: no counters). A
    NamedTuple: the server builds one per trial of every stored submission."""

    eval_count: int
    drafted: int | None = None
    accepted: int | None = None
    mean_accepted_len: float | None = None
    source: str | None = None


@dataclass(frozen=True)
class Evidence:
    level: Level
    reason: str
    bound: float | None = None  # the speedup the counters can explain (None: not computed)


def _passes(eval_count: int, drafted: int, accepted: int, n_max: int | None) -> float:
    """The fewest target passes that can have produced these counters (at least one)."""
    fewest = float(max(eval_count - accepted, 1))
    if n_max:
        fewest = max(fewest, drafted / n_max)
    return fewest


def _trial_bound(eval_count: int, drafted: int, accepted: int, n_max: int | None,
                 mean_len: float | None) -> float:
    bound = eval_count / _passes(eval_count, drafted, accepted, n_max)
    if mean_len is not None:
        bound = min(bound, 1.0 + mean_len)
    return max(bound, 0.0)


def speedup_bound(trials: Sequence[TrialCounts], *, drafted_total: int, accepted_total: int,
                  n_max: int | None, mean_len: float | None) -> float:
    """The largest median decode speedup the counters can explain (module docstring).

    With per-trial counters: the median of each trial's E / P_min (a trial without counters
    accepted nothing: 1.0). With totals only (v1), the totals' E / P_min over the trials.
    """
    if any(t.drafted is not None for t in trials):
        bounds = [1.0 if t.drafted is None or t.accepted is None
                  else _trial_bound(t.eval_count, t.drafted, t.accepted, n_max,
                                    t.mean_accepted_len if t.mean_accepted_len is not None
                                    else mean_len)
                  for t in trials]
        return median(bounds)
    eval_total = sum(t.eval_count for t in trials)
    return _trial_bound(eval_total, drafted_total, accepted_total, n_max, mean_len)


def n_max_of(request_options: Mapping[str, Any], launches: Sequence[Mapping[str, Any]]) -> (
        int | None):
    """The most tokens one pass can draft: the request's option or the logged launch."""
    found = [v for k in N_MAX_OPTIONS for v in [request_options.get(k)]
             if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    found += [v for launch in launches for v in [launch.get("draft_n_max")]
              if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return max(found) if found else None


def evidence_level(
    *,
    wire_version: int | None,
    engine_name: str | None,
    engine_version: str,
    engine_log: str | None,
    drafted: int | None,
    accepted: int | None,
    source: str | None,
    mean_accepted_len: float | None,
    trials: Sequence[TrialCounts],
    n_max: int | None,
    speedup_tps: float | None,
) -> Evidence:
    """The evidence level of one config's counters and why (see the module docstring)."""
    trial_sources = {t.source for t in trials if t.drafted is not None}
    if drafted is None or accepted is None or source is None:
        if trial_sources:
            return Evidence("reported", "trials carry counters but the config has no totals")
        return Evidence("none", "no acceptance counters")
    if not version_known(engine_name, engine_version):
        return Evidence("reported", f"engine version {engine_version!r} is not a version: "
                                    "nothing it reports can be placed")
    with_counters = [t for t in trials if t.drafted is not None and t.accepted is not None]
    if (wire_version or 1) >= 2 and not with_counters:
        return Evidence("reported", "totals without any trial's counters (a v2 client "
                                    "sends each trial's)")
    if trial_sources - {source}:
        return Evidence("reported", f"trial counters from {sorted(map(str, trial_sources))} "
                                    f"but totals from {source!r}")
    engine = descriptor(engine_name)
    if source == "engine_api" and source not in engine.counter_sources:
        return Evidence("reported", f"{engine.label} reports no counters from its API")
    if source in LOG_SOURCES and (wire_version or 1) >= 2 and engine_log != "read":
        return Evidence("reported", f"counters from a log the client did not read "
                                    f"(engine_log {engine_log!r})")
    # Consistency with the trials (accepted <= drafted <= n_max x eval_count, sums).
    if accepted > drafted:
        return Evidence("implausible", f"{accepted} accepted > {drafted} drafted")
    for t in with_counters:
        assert t.drafted is not None and t.accepted is not None
        if t.accepted > t.drafted or t.accepted > t.eval_count:
            return Evidence("implausible", f"a trial accepted {t.accepted} of {t.drafted} "
                                           f"drafted with {t.eval_count} generated")
        if n_max and t.drafted > n_max * t.eval_count:
            return Evidence("implausible", f"a trial drafted {t.drafted} tokens: more than "
                                           f"{n_max} per generated token")
    if with_counters and (sum(t.drafted or 0 for t in with_counters),
                          sum(t.accepted or 0 for t in with_counters)) != (drafted, accepted):
        return Evidence("implausible", "the trials' counters do not add up to the totals")
    eval_total = sum(t.eval_count for t in trials)
    if not with_counters and n_max and drafted > n_max * eval_total:
        return Evidence("implausible", f"{drafted} drafted: more than {n_max} per generated "
                                       "token")
    bound = speedup_bound(trials, drafted_total=drafted, accepted_total=accepted,
                          n_max=n_max, mean_len=mean_accepted_len)
    if speedup_tps is not None and math.isfinite(speedup_tps) and (
            speedup_tps > bound * BOUND_SLACK):
        rate = accepted / drafted if drafted else 0.0
        return Evidence("implausible", f"a {speedup_tps:.2f}x speedup at {rate:.0%} acceptance "
                                       f"is more than the counters explain (at most "
                                       f"{bound:.2f}x, {BOUND_SLACK:g}x slack)", bound)
    what = engine.counters_from(source)
    return Evidence("engine_api" if source == "engine_api" else "log",
                    f"counters from {what}, consistent with the trials (speedup within the "
                    f"{bound:.2f}x they explain)", bound)


def config_evidence(submission: Submission, config: ConfigResult,
                    speedup_tps: float | None) -> Evidence:
    s = config.speculation
    return evidence_level(
        wire_version=submission.schema_version, engine_name=submission.engine.name,
        engine_version=submission.engine.version, engine_log=submission.engine_log,
        drafted=s.drafted_tokens, accepted=s.accepted_tokens, source=s.counters_source,
        mean_accepted_len=s.mean_accepted_len,
        trials=[TrialCounts(t.eval_count) if t.counters is None else TrialCounts(
            t.eval_count, t.counters.drafted, t.counters.accepted, t.counters.mean_accepted_len,
            t.counters.source) for t in config.trials],
        n_max=n_max_of(config.request_options,
                       [launch.model_dump() for launch in s.launches]),
        speedup_tps=speedup_tps,
    )


def submission_evidence(submission: Submission, speedups: Mapping[str, float | None]
                        ) -> list[Evidence]:
    """Each config's evidence, in config order; ``speedups`` by config name (the server's
    own ``summarize``: never the client's)."""
    return [config_evidence(submission, c, speedups.get(c.name)) for c in submission.configs]


def launches_of(stored: str | None) -> list[dict[str, Any]]:
    """The stored ``configs.launches`` JSON as a list (None or malformed: none)."""
    if not stored:
        return []
    try:
        value = json.loads(stored)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
