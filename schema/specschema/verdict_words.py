"""Verdicts and evidence levels in words (pure data): the labels, what each verdict means
and what to do about it, the badges of the server's evidence levels, and the outcome words.
``specschema.conclusion`` writes sentences with them; the CLI, the submission page, the
board and the JSON API all read these tables, so no two surfaces word a verdict apart.
"""

from __future__ import annotations

from typing import Literal

from specschema.stability import LOAD_MOVED, MAX_BASELINE_DRIFT, OFF_LINE, OFF_LINE_WITH_LOAD

VERDICT_WORDS = {"confirmed": "confirmed", "not_applied": "not applied (noise)",
                 "not_observed": "not observed", "unknown": "unknown",
                 "baseline_speculated": "baseline speculated (no comparison)",
                 "synthetic": "synthetic acceptance (invalid)",
                 "cannot_compare": "cannot be compared (MLX)",
                 "unstable": "unstable (baseline blocks disagree)",
                 "incompatible": "incompatible (not run)"}

# Each verdict: what it means (its evidence), and what the contributor can do about it.
# The CLI's conclusion, the submission page and the JSON API show these; docs/run.md
# ("Verdicts") says the same at length. None of the last three is ever a speedup.
VERDICT_HELP: dict[str, tuple[str, str]] = {
    "confirmed": ("acceptance counters (drafted / accepted tokens) were reported for this "
                  "config's trials, and none for the baseline",
                  "nothing: this ratio is a measured effect of speculation"),
    "not_applied": ("the engine cannot honor this config's mechanism, or every engine start "
                    "reported for it ran without speculation (on llama-server: started with "
                    "the draft, but no trial drafted a token)",
                    "use an engine version and a target that can speculate (see the "
                    "protocol's requirements)"),
    "not_observed": ("the engine could speculate, but no counters were found for the trials",
                     "pass the Ollama server log with --ollama-log so counters can be read"),
    "unknown": ("the engine version could not be read and no counters were reported",
                "rerun with an Ollama that reports its version"),
    "baseline_speculated": ("the baseline itself speculated (counters in its trials, or an "
                            "engine start with --spec-type), so there is no baseline without "
                            "speculation to compare against",
                            "use a target that does not draft by default, make sure the "
                            "baseline sends draft_num_predict 0, or run the GGUF on "
                            "llama-server (--engine llama-server)"),
    "synthetic": ("synthetic acceptance was on (--spec-synth-len / LLAMA_ARG_SPEC_SYNTH_LEN "
                  "or llama-server's 'synthetic' warning): output and timings are fake",
                  "unset LLAMA_ARG_SPEC_SYNTH_LEN / LLAMA_ARG_SPEC_SYNTH_RATES where "
                  "`ollama serve` runs, restart it, and run again"),
    "cannot_compare": ("the target runs on Ollama's MLX engine, where speculation cannot be "
                       "switched off per request: every config speculates, the baseline too",
                       "nothing on this engine; a GGUF build of the model runs on llama-server, "
                       "where the baseline can be measured"),
    "unstable": ("the baseline was measured in several blocks across the run, and one sits "
                 f"off the line between its neighbours (more than {OFF_LINE:.0%} off it, or "
                 f"more than {OFF_LINE_WITH_LOAD:.0%} while the machine's load average moved "
                 f"by {LOAD_MOVED:g} or more): "
                 "the machine's speed changed under the run in a way the design cannot "
                 "correct, so no ratio against that baseline measures speculation (a steady "
                 "drift is corrected and never makes a run unstable; results sent before "
                 "trials carried their times are judged by the older rule: the fastest "
                 f"baseline block more than {1 + MAX_BASELINE_DRIFT:g} times the slowest)",
                 "run again on a quieter machine (close other work, keep it on AC power, "
                 "use fewer engine threads than cores)"),
    "incompatible": ("the engine could not run this draft config as the protocol asks (llama.cpp "
                     "refused the draft's vocabulary for the target, the draft file is missing, "
                     "or speculation could not be started); its trials were not run, and the "
                     "other configs were measured as usual",
                     "use a draft whose GGUF token list matches the target's (same tokenizer; "
                     "the same token texts from id 5 on; at most 128 tokens more or fewer), "
                     "ideally both converted by the same tool"),
}
INVALID_COMPARISONS = ("baseline_speculated", "synthetic", "cannot_compare")
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

# What a measured ratio says, by its 95 % interval: the colour and the word on the page.
Outcome = Literal["faster", "no_clear_difference", "slower"]
OUTCOME_WORDS: dict[str, str] = {"faster": "faster", "no_clear_difference": "no clear difference",
                                 "slower": "slower"}
