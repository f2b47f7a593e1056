"""The speculation evidence of each config (pure): capability by version and mechanism,
counters from the server log, the models Ollama had loaded, and output equality.

The verdict itself is ``specschema.capability.verdict`` so that the client and the server
can never disagree about what the evidence means.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from specschema import SpeculationEvidence, Trial, engine_can_honor, verdict
from specschema.conclusion import capability_reason as capability_reason  # re-exported
from specschema.protocol import ProtocolConfig
from specsubmit.engines.ollama.serverlog import DraftCounters


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
    counters: DraftCounters | None,
    models_loaded: Sequence[str],
    outputs_match: bool | None,
) -> SpeculationEvidence:
    requested = config.role == "draft"
    can_honor = engine_can_honor(config.mechanism, engine_version)
    seen = requested and can_honor is not False and counters is not None and counters.drafted > 0
    observed = verdict(requested=requested, can_honor=can_honor, counters_seen=seen)
    return SpeculationEvidence(
        requested=requested,
        mechanism=config.mechanism,
        engine_can_honor=can_honor,
        observed=observed,
        drafted_tokens=counters.drafted if seen and counters else None,
        accepted_tokens=counters.accepted if seen and counters else None,
        counters_source=counters.source if seen and counters else None,
        models_loaded=sorted(set(models_loaded))[:16],
        outputs_match_baseline=outputs_match if requested else None,
    )
