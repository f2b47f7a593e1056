"""The consistency rules by name, what each holds, and their documented bounds
(docs/server.md, "Consistency rules"): the table ``ingest.rules`` checks by, read by the
docs and the tests too."""

from __future__ import annotations

from typing import Literal, get_args

# Decode speed is bounded by memory bandwidth / bytes read per token. The fastest consumer
# GPUs move ~1.8 TB/s and the smallest chat models weigh ~0.3 GB, i.e. ~6,000 tok/s before
# speculation; accepted drafts can multiply that a few times at most. Anything above
# 10,000 tok/s, or below 0.01 tok/s (200 tokens in 5.5 hours), is not a measurement.
MAX_DECODE_TPS = 10_000.0
MIN_DECODE_TPS = 0.01
# Rates over a handful of tokens are noise (one token's eval_duration can be microseconds).
RATE_MIN_TOKENS = 16
# Engine durations come from two processes (server and runner): allow this much overlap.
DURATION_TOLERANCE_NS = 5_000_000
DURATION_TOLERANCE_FRACTION = 0.01
# The client's wall clock should cover the engine's total_duration, within this tolerance.
WALL_TOLERANCE_S = 0.05
DONE_REASONS = ("stop", "length")
MAX_VIOLATIONS = 20
# Imports' submission ids are uuid5 (name-based, of the imported file); signed ones may not be.
IMPORT_UUID_VERSION = 5

RuleName = Literal[
    "configs_match_protocol",
    "trials_fit_schedule",
    "eval_count_fits_num_predict",
    "durations_coherent",
    "decode_rate_plausible",
    "created_at_recent",
    "speculation_coherent",
    "counters_consistent",
    "names_printable",
    "submission_id_not_reserved",
]
# The rules in report order (docs/server.md, "Consistency rules", says what each refuses).
RULE_NAMES: tuple[RuleName, ...] = get_args(RuleName)
RULES: dict[RuleName, str] = {
    "configs_match_protocol":
        "each config is one of the protocol's, sent exactly as the protocol says",
    "trials_fit_schedule":
        "trial counts and indices per config, and positions in the protocol's run order",
    "eval_count_fits_num_predict":
        "eval_count <= num_predict; done_reason is stop or length, and length means the limit",
    "durations_coherent":
        "engine durations fit inside total_duration; the client's wall time covers it",
    "decode_rate_plausible":
        "decode tok/s inside [MIN_DECODE_TPS, MAX_DECODE_TPS]; every trial decodes something",
    "created_at_recent":
        "created_at is neither in the future (beyond the skew) nor older than the max age",
    "speculation_coherent":
        "the evidence agrees with what the engine can honor and with its own counters; each "
        "verdict is the one specschema.capability.submission_verdicts derives",
    "counters_consistent":
        "counters agree with the trials (specschema.capability.counter_problems: accepted <= "
        "drafted, accepted <= eval_count, trial counters add up to the config's totals), and "
        "only llama-server reports counters from its own API",
    "names_printable":
        "no name holds a control, format or invisible character or one outside UTS #39's "
        "recommended set, mixes scripts or digit systems, renders like other Latin text, or "
        "is a lookalike of a known chip or model (ingest.names; docs/aggregation.md, "
        "\"Names\")",
    "submission_id_not_reserved":
        "a signed submission's id is not a version-5 (name-based) UUID: those are the "
        "imports' (ingest.hardnumbers: uuid5 of the public file), so no key can take one first",
}
