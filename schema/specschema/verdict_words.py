"""Verdicts and evidence levels in words (pure data): the labels, what each verdict means
and what to do about it, the badges of the server's evidence levels, and the outcome words.
``specschema.conclusion`` writes sentences with them; the CLI, the submission page, the
board and the JSON API all read these tables, so no two surfaces word a verdict apart.
"""

from __future__ import annotations

from specschema.verdicts import OUTCOME_WORDS, VERDICTS, Outcome

# The verdicts' labels and help are the verdict table's (``specschema.verdicts``), keyed by
# the wire value as the CLI, the submission page and the JSON API read them; docs/run.md
# ("Verdicts") says the same at length. None of the invalid comparisons is ever a speedup.
VERDICT_WORDS: dict[str, str] = {v.name: v.words for v in VERDICTS}
# Each verdict: what it means (its evidence), and what the contributor can do about it.
VERDICT_HELP: dict[str, tuple[str, str]] = {v.name: (v.meaning, v.todo) for v in VERDICTS}
INVALID_COMPARISONS = tuple(v.name for v in VERDICTS if v.invalid)
# Why a llama-server draft config is not_applied (capability.never_drafted).
NEVER_DRAFTED = ("llama-server was started with the draft but drafted no token in any trial "
                 "(it served without speculation)")

# The server's evidence levels (specschema.evidence.LEVELS) as a reader sees them: long on a
# submission page, short as a board's badge. Only the first two count as confirmed.
LEVEL_WORDS = {"engine_api": "engine API counters, consistent",
               "log": "log counters, consistent",
               "reported": "reported only: not counted as confirmed",
               "implausible": "implausible: not counted as confirmed",
               "none": "no counters"}
# The badges name the counters' source as the client's report: the server never sees an
# engine, so no badge or word says the counters were "seen".
LEVEL_BADGES = {"engine_api": "API counters, reported", "log": "log counters, reported",
                "reported": "reported, not placed", "implausible": "implausible",
                "none": "no counters"}
# Each level: what the client reported, and what the server checked (the badges' titles,
# the API's ``evidence_levels``).
LEVEL_CHECKS: dict[str, tuple[str, str]] = {
    "engine_api": ("the client reports per-trial counters from the engine's own API",
                   "the server checked them against the trials and timings: consistent"),
    "log": ("the client reports counters it read from the engine's log",
            "the server checked them against the trials and timings: consistent"),
    "reported": ("the client reports counters",
                 "the server cannot place them (an unknown engine version, a log the client "
                 "says it did not read, totals without trials, or sources that disagree)"),
    "implausible": ("the client reports counters",
                    "the server checked them: they cannot explain the measured speedup"),
    "none": ("the client reports no counters", "nothing to check"),
}

# The outcome of a measured ratio (``Outcome``, ``OUTCOME_WORDS``) is the verdict table's too.
__all__ = ["INVALID_COMPARISONS", "LEVEL_BADGES", "LEVEL_CHECKS", "LEVEL_WORDS", "NEVER_DRAFTED",
           "OUTCOME_WORDS", "VERDICT_HELP", "VERDICT_WORDS", "Outcome"]
