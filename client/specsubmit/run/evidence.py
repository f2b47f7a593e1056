"""The speculation evidence of each config (pure): capability by engine, version and
mechanism (the engine's descriptor), its counters (a log's or the engine API's), the models
the engine had loaded, and output equality.

The verdict itself is ``specschema.capability.verdict`` so that the client and the server
can never disagree about what the evidence means.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from specschema import SpeculationEvidence, Trial, engine_can_honor, verdict
from specschema.protocol import ProtocolConfig
from specsubmit.engines.base import DraftCounters

if TYPE_CHECKING:
    from specschema import Launch


def outputs_match_baseline(baseline: Sequence[Trial], trials: Sequence[Trial]) -> bool | None:
    """Whether every trial produced the baseline's output (its most common sha256).

    None when either side has no trials. Greedy decoding with speculation is meant to be
    lossless, so a mismatch is worth a look whatever the verdict.
    """
    if not baseline or not trials:
        return None
    reference, _ = Counter(t.output_sha256 for t in baseline).most_common(1)[0]
    return all(t.output_sha256 == reference for t in trials)


def build_evidence(
    config: ProtocolConfig,
    *,
    engine_version: str,
    engine: str = "ollama",
    counters: DraftCounters | None,
    models_loaded: Sequence[str],
    outputs_match: bool | None,
    launches: Sequence[Launch] = (),
) -> SpeculationEvidence:
    requested = config.role == "draft"
    can_honor = engine_can_honor(config.mechanism, engine_version, engine)
    seen = requested and can_honor is not False and counters is not None and counters.drafted > 0
    observed = verdict(requested=requested, can_honor=can_honor, counters_seen=seen)
    # v2 only (llama-server): the engine starts as the client ran them. The verdict is
    # then recomputed from the whole submission by specschema.submission_verdicts.
    v2: dict[str, Any] = {"launches": list(launches)} if launches else {}
    # Counters from the engine's API belong to their trials whatever the role: a baseline
    # that drafted must show its totals (they are the sums of its trials' counters).
    # So must a baseline whose log shows counters (wire v2: the evidence of
    # baseline_speculated). A draft whose mechanism cannot act keeps none (v1's rule).
    totals = counters if counters is not None and (
        seen or counters.source == "engine_api"
        or (config.role == "baseline" and counters.drafted > 0)) else None
    return SpeculationEvidence(
        requested=requested,
        mechanism=config.mechanism,
        engine_can_honor=can_honor,
        observed=observed,
        drafted_tokens=totals.drafted if totals else None,
        accepted_tokens=totals.accepted if totals else None,
        counters_source=totals.source if totals else None,
        models_loaded=sorted(set(models_loaded))[:16],
        outputs_match_baseline=outputs_match if requested else None,
        **v2,
    )
