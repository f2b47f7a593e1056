"""The verdicts as one table (pure data): for each wire verdict, its words, its place in
the order every list uses, its style on the page, which board lists it, whether it counts
as a measured speedup and whether a chart draws it as a bar.

Every surface reads this table: ``verdict_words`` (the labels and help the CLI, the
submission page and the JSON API show), the server's boards (which view holds a verdict,
``specserver.store.verdicts``), the order the API and the board count verdicts in
(``specserver.store.dimensions.VERDICTS``), the page's rows, legends and charts. A new
verdict is one entry here, its value in ``models.Observed`` (the wire's; a test holds the
two equal), the rule that gives it (``capability.verdict``), its count field in the
server's ``board.aggregate.ContributorResult`` (tested to follow this order) and its row in
docs/run.md's table (tested too).

Also here, the rule that says whether a measured ratio is resolved: a confirmed config
whose interval includes 1.00x has shown that it speculated, not that it is faster or
slower, and every surface says so (``unresolved_words``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from specschema.stability import LOAD_MOVED, MAX_BASELINE_DRIFT, OFF_LINE, OFF_LINE_WITH_LOAD

# The boards a draft result can be listed on (the server's views): the speedup board
# (measured speedups), its unverified rows (listed beside them in grey, never in their
# median) and the noise floor (not applied: the run-to-run difference).
Board = Literal["speedup", "unverified", "noise_floor"]
BOARDS: tuple[Board, ...] = ("speedup", "unverified", "noise_floor")
# How a verdict's row, ratio and line are coloured on the page (the CSS classes): "effect"
# takes the colour of its outcome (faster / unclear / slower); the others are neutral.
Style = Literal["effect", "unverified", "noise"]


@dataclass(frozen=True)
class Verdict:
    """One verdict (``SpeculationEvidence.observed``) as every surface shows it."""

    name: str  # the wire value, never changed
    words: str  # the short label: a table's verdict column, a count's name
    meaning: str  # what the verdict means: its evidence
    todo: str  # what the contributor can do about it
    style: Style
    board: Board | None = None  # the board that lists it; None: on no board
    counts: bool = False  # a measured speedup: only these reach the speedup board's median
    bar: bool = False  # drawn as a bar on its board's chart
    row: str = ""  # a board row's evidence words (verdicts on a board)
    ratio_is: str = "not a speedup"  # what its ratio is, in a speedup column
    invalid: bool = False  # no comparison against the baseline measures speculation
    legend: str = ""  # what a board's row of it is, in its legend (verdicts on a board)


VERDICTS: tuple[Verdict, ...] = (
    Verdict("confirmed", "confirmed",
            "acceptance counters (drafted / accepted tokens) were reported for this "
            "config's trials, and none for the baseline",
            "nothing: this ratio is a measured effect of speculation",
            "effect", "speedup", counts=True, bar=True,
            row="confirmed: reported counters consistent", ratio_is="speedup",
            legend="the engine's acceptance counters were reported and found consistent"),
    Verdict("not_observed", "not observed",
            "the engine could speculate, but no counters were found for the trials",
            "pass the Ollama server log with --ollama-log so counters can be read",
            "unverified", "unverified", row="not observed: unverified",
            legend="the engine could speculate, but no counters were reported"),
    Verdict("not_applied", "not applied (noise)",
            "the engine cannot honor this config's mechanism, or every engine start "
            "reported for it ran without speculation (on llama-server: started with the "
            "draft, but no trial drafted a token)",
            "use an engine version and a target that can speculate (see the protocol's "
            "requirements)",
            "noise", "noise_floor", bar=True, row="not applied: noise", ratio_is="noise",
            legend="the engine did not apply the draft: the same computation measured twice"),
    Verdict("unknown", "unknown",
            "the engine version could not be read and no counters were reported",
            "rerun with an Ollama that reports its version", "unverified"),
    Verdict("baseline_speculated", "baseline speculated (no comparison)",
            "the baseline itself speculated (counters in its trials, or an engine start "
            "with --spec-type), so there is no baseline without speculation to compare "
            "against",
            "use a target that does not draft by default, make sure the baseline sends "
            "draft_num_predict 0, or run the GGUF on llama-server (--engine llama-server)",
            "unverified", invalid=True),
    Verdict("synthetic", "synthetic acceptance (invalid)",
            "synthetic acceptance was on (--spec-synth-len / LLAMA_ARG_SPEC_SYNTH_LEN or "
            "llama-server's 'synthetic' warning): output and timings are fake",
            "unset LLAMA_ARG_SPEC_SYNTH_LEN / LLAMA_ARG_SPEC_SYNTH_RATES where `ollama "
            "serve` runs, restart it, and run again",
            "unverified", invalid=True),
    Verdict("cannot_compare", "cannot be compared (MLX)",
            "the target runs on Ollama's MLX engine, where speculation cannot be switched "
            "off per request: every config speculates, the baseline too",
            "nothing on this engine; a GGUF build of the model runs on llama-server, where "
            "the baseline can be measured",
            "unverified", invalid=True),
    Verdict("unstable", "unstable (baseline blocks disagree)",
            "the baseline was measured in several blocks across the run, and one sits off "
            f"the line between its neighbours (more than {OFF_LINE:.0%} off it, or more "
            f"than {OFF_LINE_WITH_LOAD:.0%} while the machine's load average moved by "
            f"{LOAD_MOVED:g} or more): the machine's speed changed under the run in a way "
            "the design cannot correct, so no ratio against that baseline measures "
            "speculation (a steady drift is corrected and never makes a run unstable; "
            "results sent before trials carried their times are judged by the older rule: "
            f"the fastest baseline block more than {1 + MAX_BASELINE_DRIFT:g} times the "
            "slowest)",
            "run again on a quieter machine (close other work, keep it on AC power, use "
            "fewer engine threads than cores)",
            "unverified", "unverified", row="unstable: baseline blocks disagree",
            ratio_is="unstable",
            legend="counters may have been reported, but the machine's speed changed under "
                   "the run in a way the design cannot correct"),
    Verdict("incompatible", "incompatible (not run)",
            "the engine could not run this draft config as the protocol asks (llama.cpp "
            "refused the draft's vocabulary for the target, the draft file is missing, or "
            "speculation could not be started); its trials were not run, and the other "
            "configs were measured as usual",
            "use a draft whose GGUF token list matches the target's (same tokenizer; the "
            "same token texts from id 5 on; at most 128 tokens more or fewer), ideally both "
            "converted by the same tool",
            "unverified"),
)
BY_NAME: dict[str, Verdict] = {v.name: v for v in VERDICTS}
# The order the API, the board and their counts list verdicts in.
ORDER: tuple[str, ...] = tuple(v.name for v in VERDICTS)


def verdict_of(name: str) -> Verdict:
    """The table's entry; a verdict it does not know (a newer client's) is named by its
    value, on no board, never a speedup and never a bar."""
    found = BY_NAME.get(name)
    if found is not None:
        return found
    return Verdict(name, name.replace("_", " "), "", "", "unverified")


def listed_on(board: Board) -> tuple[Verdict, ...]:
    """The verdicts a board lists, in the table's order."""
    return tuple(v for v in VERDICTS if v.board == board)


def drawn(names: Mapping[str, int], board: Board) -> bool:
    """Whether a chart of ``board`` draws a group holding these verdicts ({verdict: count})
    as a bar: only when every verdict it holds is one that board draws (a speedup chart
    draws confirmed results only; an empty group is not drawn)."""
    held = [verdict_of(name) for name, count in names.items() if count]
    return bool(held) and all(v.bar and v.board == board for v in held)


# --- resolved or not -------------------------------------------------------------------

Outcome = Literal["faster", "no_clear_difference", "slower"]
# The outcome's words. An interval that includes 1.00x resolves no speedup either way: it
# is "not resolved", never "no difference" (the run cannot tell a difference from none).
OUTCOME_WORDS: dict[str, str] = {"faster": "faster", "no_clear_difference": "not resolved",
                                 "slower": "slower"}
# The outcome's style on the page (its CSS class: the colour of the ratio, bar and words).
OUTCOME_STYLE: dict[str, str] = {"faster": "faster", "no_clear_difference": "unclear",
                                 "slower": "slower"}


def outcome_of(low: float | None, high: float | None) -> Outcome | None:
    """faster when the whole interval is above 1.0, slower when below, else no clear
    difference; None without an interval."""
    if low is None or high is None:
        return None
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "no_clear_difference"


def resolved(low: float | None, high: float | None) -> bool | None:
    """Whether an interval resolves a speedup or a slowdown (it excludes 1.00x); None
    without one."""
    found = outcome_of(low, high)
    return None if found is None else found != "no_clear_difference"


def unresolved_words(low: float, high: float, interval: str = "95% within-run CI") -> str:
    """A confirmed ratio whose interval includes 1.00x, in words: it speculated, and the
    speedup is not resolved (``interval`` names which interval)."""
    return (f"speculated; speedup not resolved ({interval} {low:.2f}–{high:.2f}x "
            "includes 1.00x)")


def between_runs_words(name: str, runs: int, low: float, high: float) -> str:
    """The same contributor's confirmed runs of one config, beside a run's within-run
    interval: the between-run spread is what another run on that machine reads."""
    return (f"{name}: {low:.2f}–{high:.2f}x over this contributor's {runs} confirmed runs of "
            f"it (between-run spread {high / low:.2f}x); the 95% within-run CI covers "
            "one run only")


# --- a board row of unverified results --------------------------------------------------


def counters_words(evidence: Mapping[str, int]) -> str:
    """Whether a group's results reported counters ({evidence level: count}, "none" for
    results without): "counters reported", "no counters reported", or for how many."""
    total = sum(evidence.values())
    seen = total - evidence.get("none", 0)
    if seen == 0:
        return "no counters reported"
    if seen == total:
        return "counters reported"
    return f"counters reported for {seen} of {total}"


def unverified_words(verdicts: Mapping[str, int], evidence: Mapping[str, int]) -> str:
    """An unverified group in words, from what it holds: its verdicts ({verdict: count})
    and whether they reported counters. ``unverified: unstable (baseline blocks disagree);
    counters reported``; ``unverified: not observed; no counters reported``."""
    held = [(name, count) for name, count in verdicts.items() if count]
    held.sort(key=lambda item: ORDER.index(item[0]) if item[0] in ORDER else len(ORDER))
    if len(held) == 1:
        what = verdict_of(held[0][0]).words
    else:
        what = ", ".join(f"{count} {verdict_of(name).words}" for name, count in held)
    return f"unverified: {what or 'no results'}; {counters_words(evidence)}"
