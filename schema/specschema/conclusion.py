"""A result in words (pure): the verdict labels, the ratio with its interval, and the one
plain-language conclusion that the CLI prints and the submission page leads with.

Both sides call these with the summaries (``summarize``) and the speculation evidence per
config name, so a contributor's terminal and the public page can never word the same run
differently.

Rule: a draft whose verdict is ``not_applied`` is never called a speedup or a slowdown.
Whatever its ratio, that ratio is run-to-run noise, and the text says so with the spread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specschema.capability import CounterProblem
from specschema.engines import descriptor
from specschema.models import SpeculationEvidence
from specschema.ratio_text import (
    headline_ratio,
    outcome,
    ratio_words,
    speedup_cell,
    vs_baseline,
    vs_baseline_wall,
)
from specschema.stability import LOAD_MOVED, MAX_BASELINE_DRIFT, OFF_LINE, OFF_LINE_WITH_LOAD
from specschema.summary import ConfigSummary
from specschema.verdict_words import (
    INVALID_COMPARISONS,
    LEVEL_BADGES,
    LEVEL_CHECKS,
    LEVEL_WORDS,
    NEVER_DRAFTED,
    OUTCOME_WORDS,
    VERDICT_HELP,
    VERDICT_WORDS,
    Outcome,
)
from specschema.verdicts import outcome_of, resolved, unresolved_words, verdict_of

# The tables are ``specschema.verdict_words``'s; they are named here too, so that a caller
# finds every word of a result in one place.
__all__ = [
    "INVALID_COMPARISONS", "LEVEL_BADGES", "LEVEL_CHECKS", "LEVEL_WORDS", "NEVER_DRAFTED",
    "OUTCOME_WORDS", "VERDICT_HELP", "VERDICT_WORDS", "Outcome", "acceptance_rate",
    "batched_arithmetic", "capability_reason", "conclusion", "config_line", "config_sentence",
    "drift_words", "effect", "interval_method_words", "no_counters_reason", "off_line_words",
    "headline_ratio", "other_speedup", "outcome", "outcome_of", "problem_words", "ratio_words",
    "speedup_cell",
    "resolved", "spread", "stability_words", "unresolved_words", "verdict_help", "verdict_label",
    "vs_baseline", "vs_baseline_wall",
]

def no_counters_reason(log_status: str | None, observed: str = "not_observed",
                       engine: str | None = "ollama", *, mechanism: str = "none",
                       engine_version: str = "") -> str:
    """Why a config that could speculate shows no counters, in the engine's words, from the
    submission's ``engine_log``: a log that was never given is not a log without counters."""
    described = descriptor(engine)
    if observed == "unknown":
        return (f"{capability_reason(mechanism, engine_version, engine)}, and no counters "
                "were found")
    if described.log_option:
        if log_status == "not_given":
            return (f"no {described.label} server log was given ({described.log_option}), so "
                    "no counters could be read")
        if log_status == "unreadable":
            return f"the {described.label} server log could not be read"
    return described.no_counters


def verdict_help(observed: str, engine: str | None = "ollama",
                 interval: tuple[float | None, float | None] = (None, None)
                 ) -> tuple[str, str]:
    """``VERDICT_HELP[observed]`` with the engine's own advice where it differs (what to do
    when no counters were seen, or the version could not be read); ``interval``: the
    headline speedup's 95 % within-run interval, which a confirmed config whose interval
    includes 1.00x is worded by (it speculated; its speedup is not resolved)."""
    meaning, todo = VERDICT_HELP.get(observed, ("", ""))
    described = descriptor(engine)
    low, high = interval
    if observed == "confirmed" and low is not None and high is not None and not resolved(
            low, high):
        meaning = f"{meaning}; it {unresolved_words(low, high)}"
        todo = ("to resolve the speedup, run again with more blocks or on a quieter machine: "
                "this ratio does not tell faster from slower")
    elif observed == "not_observed":
        todo = described.no_counters_todo
    elif observed == "unknown":
        todo = described.unknown_todo or f"rerun with a {described.label} that reports its version"
    elif observed == "baseline_speculated" and described.baseline_speculated_todo:
        todo = described.baseline_speculated_todo
    return meaning, todo


def capability_reason(mechanism: str, engine_version: str, engine: str | None = "ollama") -> str:
    """Why a mechanism can or cannot work on this version of the engine, in one phrase (the
    engine's descriptor's words)."""
    return descriptor(engine).reason(mechanism, engine_version)


def problem_words(problem: CounterProblem) -> str:
    """``counters_consistent (configs.2.trials.0.counters.accepted: 280 accepted > 200
    generated (eval_count))``: a broken counter rule as the CLI names it."""
    return f"{problem.rule} ({problem.path}: {problem.message})"


def drift_words(baseline: ConfigSummary | None) -> str | None:
    """How far the baseline's blocks disagreed, in words (None without two blocks)."""
    if baseline is None or baseline.block_drift is None:
        return None
    return (f"the baseline's fastest block ran {baseline.block_drift:.0%} faster than its "
            f"slowest ({baseline.blocks} blocks)")


def off_line_words(baseline: ConfigSummary | None) -> str | None:
    """The baseline block farthest off the line between its neighbours, in words (None
    unless the run is timed and has one: ``ConfigSummary.off_line``)."""
    if baseline is None or baseline.off_line is None or baseline.off_line_block is None:
        return None
    how = "faster" if baseline.off_line > 0 else "slower"
    text = (f"the baseline's block {baseline.off_line_block + 1} of {baseline.blocks} ran "
            f"{abs(baseline.off_line):.0%} {how} than the line between its neighbours")
    if baseline.off_line_load is not None:
        text += (f" (its load average {abs(baseline.off_line_load):.1f} "
                 f"{'above' if baseline.off_line_load >= 0 else 'below'} theirs)")
    return text


def stability_words(baseline: ConfigSummary | None) -> str | None:
    """What the baseline's blocks say about the run, by the rule that judged it
    (``specschema.stability``): the block off its line with the bounds, or the drift with
    its bound; None without blocks to compare."""
    off = off_line_words(baseline)
    if off is not None:
        return (f"{off}; the bounds are {OFF_LINE:.0%} off the line, or "
                f"{OFF_LINE_WITH_LOAD:.0%} while the load average moved by {LOAD_MOVED:g} "
                "or more (a steady drift is corrected, not counted)")
    drift = drift_words(baseline)
    if drift is None:
        return None
    return f"{drift}; the bound is {MAX_BASELINE_DRIFT:.0%}"


def acceptance_rate(evidence: SpeculationEvidence) -> float | None:
    if not evidence.drafted_tokens:
        return None
    return (evidence.accepted_tokens or 0) / evidence.drafted_tokens


def verdict_label(summary: ConfigSummary, evidence: SpeculationEvidence | None,
                  inconsistent: str | None = None, headline: str = "decode") -> str:
    """``baseline``, ``confirmed (75% accepted)``, ``not applied (noise)``, ...;
    ``inconsistent``: the shared counter rule this config breaks (the client's own check,
    ``capability.submission_counter_problems``), which wins over any verdict. A confirmed
    config whose headline interval includes 1.00x says its speedup is not resolved."""
    if inconsistent is not None:
        return f"inconsistent ({inconsistent})"
    if summary.role == "baseline":
        return "baseline"
    observed = evidence.observed if evidence is not None else summary.observed
    # A verdict this module has no words for yet is shown by its name, never as a speedup.
    label = verdict_of(observed).words
    if observed == "confirmed":
        rate = acceptance_rate(evidence) if evidence is not None else None
        label += "" if rate is None else f" ({rate:.0%} accepted)"
        _, low, high = headline_ratio(summary, headline)
        if resolved(low, high) is False:
            label += "; speedup not resolved (CI includes 1.00x)"
    return label


def spread(summary: ConfigSummary) -> str:
    if summary.min_tps is None or summary.max_tps is None:
        return "no trials"
    text = f"{summary.min_tps:.1f}–{summary.max_tps:.1f} tok/s"
    if summary.cv_tps is not None:
        text += f", CV {summary.cv_tps:.1%}"
    return text


def effect(summary: ConfigSummary, headline: str = "decode") -> str:
    """Faster/slower/no clear difference, only for configs where speculation can act;
    ``headline`` (the protocol's): "decode" words the decode-rate speedup, "wall" the
    wall-time one (prompt included)."""
    ratio, low, high = headline_ratio(summary, headline)
    what, of = (" in wall time (prompt included)", "wall time") if headline == "wall" else (
        "", "tok/s")
    if ratio is None:
        return "no trials to compare"
    if low is None or high is None:
        return f"{ratio:.2f}x the baseline's {of} (too few trials for an interval)"
    interval = f"95% within-run CI {low:.2f}–{high:.2f}"
    found = outcome_of(low, high)
    if found == "faster":
        return f"{ratio:.2f}x faster than the baseline{what} ({interval})"
    if found == "slower":
        return f"slower than the baseline{what}: {ratio:.2f}x ({interval})"
    return (f"no clear difference from the baseline{what}: {ratio:.2f}x "
            f"({interval} includes 1.00)")


def other_speedup(summary: ConfigSummary, headline: str = "decode") -> str:
    """The speedup that is not the headline, as a clause: both are always shown."""
    if headline == "wall":
        return f"decode rate {vs_baseline(summary)}"
    return f"wall time with the prompt {vs_baseline_wall(summary)}"


def config_sentence(summary: ConfigSummary, evidence: SpeculationEvidence,
                    baseline: ConfigSummary | None, engine_version: str,
                    log_status: str | None = None, engine: str | None = "ollama",
                    headline: str = "decode", inconsistent: str | None = None,
                    batched: str | None = None) -> str:
    """``log_status``: the submission's ``engine_log`` (wire v2), to say why nothing was seen;
    ``engine``: the wire's ``engine.name``, whose descriptor words the counters' source;
    ``headline``: the protocol's headline speedup ("decode" or "wall");
    ``inconsistent``: the counter rule the config breaks and how (see ``verdict_label``);
    ``batched``: ``batched_arithmetic``'s words, added where the output differed."""
    described = descriptor(engine)
    if inconsistent is not None:
        return (f"{summary.name} is inconsistent: its counters break the shared rule "
                f"{inconsistent}, so no ratio of it is a measured speedup and the server "
                "would refuse this result")
    if evidence.observed == "not_applied":
        base = f"; baseline {spread(baseline)}" if baseline else ""
        ratio = f"its {summary.speedup_tps:.2f}x" if summary.speedup_tps is not None else "any"
        honoured = described.can_honor(evidence.mechanism, engine_version) is not False
        reason = (NEVER_DRAFTED if described.counts_every_draft and honoured
                  and evidence.mechanism != "none"
                  else capability_reason(evidence.mechanism, engine_version, engine))
        sentence = (f"{summary.name} was not applied: {reason}, "
                    f"so {ratio} difference from the baseline is run-to-run noise "
                    f"({spread(summary)}{base})")
    elif evidence.observed == "incompatible":
        why = evidence.refusal or "the engine could not run it"
        sentence = (f"{summary.name} was not run: {why}; so nothing of it is measured and it is "
                    "no speedup, while every other config ran as usual")
    elif evidence.observed == "confirmed":
        counts = ""
        rate = acceptance_rate(evidence)
        if rate is not None:
            counts = (f"; {evidence.accepted_tokens} of {evidence.drafted_tokens} drafted tokens "
                      f"accepted ({rate:.0%})")
        headline_x, low, high = headline_ratio(summary, headline)
        source = f"counters from {described.counters_from(evidence.counters_source)}"
        if headline_x is not None and low is not None and high is not None and not resolved(
                low, high):
            # It speculated; whether that made it faster or slower, the run cannot tell.
            of = "wall time" if headline == "wall" else "tok/s"
            sentence = (f"{summary.name} {unresolved_words(low, high)}: {headline_x:.2f}x the "
                        f"baseline's {of} ({source}; {other_speedup(summary, headline)})"
                        f"{counts}")
        else:
            ran = (f"ran {effect(summary, headline)} ({other_speedup(summary, headline)})"
                   if summary.speedup_tps is not None else "has no trials to compare")
            sentence = f"{summary.name} speculated ({source}) and {ran}{counts}"
    elif evidence.observed == "unstable":
        todo = VERDICT_HELP["unstable"][1]
        words = stability_words(baseline) or "the baseline blocks disagree"
        ratio = f"its {summary.speedup_tps:.2f}x" if summary.speedup_tps is not None else "it"
        sentence = (f"{summary.name} is unstable: {words}; so {ratio} is not counted as a "
                    f"speedup; what to do: {todo}")
    elif evidence.observed in INVALID_COMPARISONS:
        meaning, todo = verdict_help(evidence.observed, engine)
        ratio = f"its {summary.speedup_tps:.2f}x" if summary.speedup_tps is not None else "it"
        sentence = (f"{summary.name} cannot be compared ({VERDICT_WORDS[evidence.observed]}): "
                    f"{meaning}, so {ratio} is not a speedup; what to do: {todo}")
    elif evidence.observed in ("not_observed", "unknown"):
        why = no_counters_reason(log_status, evidence.observed, engine,
                                 mechanism=evidence.mechanism, engine_version=engine_version)
        if summary.speedup_tps is None:
            sentence = f"{summary.name} could not be checked: {why}; it has no trials to compare"
        else:
            sentence = (f"{summary.name} could not be checked: {why}, so its "
                        f"{effect(summary, headline)} cannot be attributed to speculation")
    else:
        words = VERDICT_WORDS.get(evidence.observed, evidence.observed.replace("_", " "))
        ratio = f"its {summary.speedup_tps:.2f}x" if summary.speedup_tps is not None else "it"
        sentence = (f"{summary.name} has the verdict {words}, so {ratio} is not counted "
                    "as a measured speedup")
    if evidence.outputs_match_baseline is False:
        sentence += "; its output differed from the baseline's"
        if evidence.diverged_at is not None:
            sentence += f" from generated token {evidence.diverged_at + 1} on"
        if batched is not None:
            sentence += batched
    return sentence


def batched_arithmetic(evidence: Mapping[str, SpeculationEvidence]) -> str | None:
    """The reason in words when every draft whose output differs diverges at the same token
    and one of them had none of its drafted tokens accepted: that draft's output is all the
    target's own tokens, only verified in batches, so the difference is the target's batched
    arithmetic (a batch of positions rounds differently from one at a time), not the draft.
    None when the facts do not show it."""
    differing = [(name, e) for name, e in evidence.items()
                 if e.requested and e.outputs_match_baseline is False]
    places = {e.diverged_at for _, e in differing}
    if not differing or len(places) != 1 or None in places:
        return None
    blind = [name for name, e in differing
             if e.drafted_tokens and e.accepted_tokens == 0]
    if not blind:
        return None
    every = "every draft that differs" if len(differing) > 1 else "it"
    return (f" ({every} diverges at this same token, {blind[0]} too, which had none of its "
            "drafted tokens accepted, so its output is the target's own: this is the target's "
            "batched verification arithmetic, not the draft)")


def config_line(summary: ConfigSummary, evidence: SpeculationEvidence | None) -> str:
    """The conclusion of one config in one short line (the submission page's list; the
    sentence of ``config_sentence`` is the detail): the outcome in words first, then
    whether speculation is what made it.

    ``spec_4: faster, 1.42x [1.31–1.55], speculation confirmed (75% of drafted tokens
    accepted)``; ``spec_8: slower, 0.30x [0.27–0.33], speculation confirmed (0% ...)``;
    ``draft_a: not applied: 0.98x is run-to-run noise``.
    """
    if summary.role == "baseline":
        rate = f", {summary.median_tps:.2f} tok/s" if summary.median_tps is not None else ""
        return f"{summary.name}: the baseline{rate}"
    observed = evidence.observed if evidence is not None else summary.observed
    ratio = vs_baseline(summary)
    if summary.speedup_tps is None:
        return f"{summary.name}: no trials to compare ({verdict_label(summary, evidence)})"
    found = outcome(summary)
    said = OUTCOME_WORDS[found] + ", " if found is not None else ""
    if observed == "not_applied":
        return f"{summary.name}: not applied: {ratio} is run-to-run noise"
    if observed == "confirmed":
        accepted_rate = acceptance_rate(evidence) if evidence is not None else None
        accepted = ("" if accepted_rate is None
                    else f" ({accepted_rate:.0%} of drafted tokens accepted)")
        low, high = summary.speedup_tps_ci_low, summary.speedup_tps_ci_high
        if low is not None and high is not None and not resolved(low, high):
            return (f"{summary.name}: {unresolved_words(low, high)}; "
                    f"{summary.speedup_tps:.2f}x{accepted}")
        return f"{summary.name}: {said}{ratio}, speculation confirmed{accepted}"
    if observed in ("not_observed", "unknown"):
        return f"{summary.name}: {said}{ratio}, not attributed to speculation (no counters)"
    words = VERDICT_WORDS.get(observed, observed.replace("_", " "))
    return f"{summary.name}: {words}: {ratio} is not a speedup"


def conclusion(summaries: Sequence[ConfigSummary], evidence: Mapping[str, SpeculationEvidence],
               *, engine_version: str, complete: bool, log_status: str | None = None,
               engine: str | None = "ollama", headline: str = "decode",
               inconsistent: Mapping[str, str] | None = None) -> str:
    """One plain-language paragraph on what speculative decoding did in this run.

    ``evidence``: the speculation evidence by config name (a draft without one is worded
    as ``unknown``: nothing was seen). ``log_status``: the submission's ``engine_log``;
    ``engine``: its ``engine.name`` (None: Ollama, as in v1). ``inconsistent``: {config
    name: the counter rule it breaks, in words} (the client's check before it shows a
    verdict; the server never stores such a result).
    """
    inconsistent = inconsistent or {}
    baseline = next((s for s in summaries if s.role == "baseline"), None)
    drafts = [s for s in summaries if s.role == "draft"]
    done = sum(s.trials for s in summaries)
    prefix = "" if complete else f"Incomplete run ({done} trials measured). "
    if baseline is None or not baseline.trials:
        return prefix + "No baseline trials were measured, so nothing can be compared."
    nothing = SpeculationEvidence(requested=True, mechanism="none", engine_can_honor=None,
                                  observed="unknown")
    found = {s.name: evidence.get(s.name, nothing) for s in drafts}
    batched = batched_arithmetic(found)
    sentences = [config_sentence(s, found[s.name], baseline, engine_version, log_status, engine,
                                 headline, inconsistent.get(s.name), batched)
                 for s in drafts]
    sentences += [f"the baseline is inconsistent: its counters break the shared rule {why}"
                  for s in summaries if s.role == "baseline"
                  and (why := inconsistent.get(s.name)) is not None]
    if drafts and all(e.observed == "not_applied" for e in found.values()):
        label = descriptor(engine).label
        lead = (f"Speculative decoding did not run in this test: {label} {engine_version} "
                "applied none of the drafts, so every config measured the same thing. ")
    elif drafts and all(e.observed == "baseline_speculated" for e in found.values()):
        lead = ("The baseline speculated too, so this run has no baseline without "
                "speculation: no ratio below measures what speculation does. ")
    elif drafts and all(e.observed == "unstable" for e in found.values()):
        lead = ("The machine's speed changed during this run (the baseline's blocks "
                "disagree), so no ratio below is counted as a measured speedup. ")
    elif drafts and all(e.observed == "cannot_compare" for e in found.values()):
        lead = ("On the MLX engine speculation cannot be switched off per request, so the "
                "baseline speculated too and nothing here can be compared. ")
    else:
        lead = ""
    return prefix + lead + "; ".join(sentences) + "."


def interval_method_words(interval: str, blocked: bool) -> str:
    """How the ratios to the baseline and their 95 % intervals were computed, in words:
    ``interval`` is the protocol's (``Protocol.interval``), ``blocked`` whether the trials
    carried blocks (without, neither block method applies). Every interval is a within-run
    interval, and the words say so: it covers how this run's trials or blocks varied, not
    how a run at another time, under another load, would read."""
    within = ("; a within-run interval: it covers how this run's {what} varied, not how "
              "another run, at another time or under another load, would read")
    if not blocked:
        return ("median tok/s ÷ the baseline's, with a 95% percentile-bootstrap interval over "
                "trials" + within.format(what="trials"))
    if interval == "block_t":
        return ("each draft block ÷ the baseline at its place in the run, the geometric mean "
                "of those block ratios, with a 95% Student t interval over the blocks (wide "
                "when the blocks disagree or are few, and, in a run with trial times, by how "
                "far the baseline blocks they share sit off their line)"
                + within.format(what="blocks"))
    return ("each draft block ÷ the baseline at its place in the run, the median of those "
            "block ratios, with a 95% two-stage bootstrap interval over blocks and trials"
            + within.format(what="blocks"))
