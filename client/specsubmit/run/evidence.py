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
from specsubmit.engines import DraftCounters, Generation

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


def token_reference(generations: Sequence[Generation]) -> tuple[int, ...] | None:
    """The baseline's most common generated token sequence (None: no token ids)."""
    sequences = [g.token_ids for g in generations if g.token_ids is not None]
    if not sequences or len(sequences) != len(generations):
        return None
    reference, _ = Counter(sequences).most_common(1)[0]
    return reference


def first_divergence(reference: Sequence[int], tokens: Sequence[int]) -> int | None:
    """The first index where `tokens` differs from `reference`, over the tokens both have;
    when one is a prefix of the other, the shorter one's length; None when they are equal.
    (Equal token counts are compared, never a longer output with a shorter one's hash.)"""
    for index, (a, b) in enumerate(zip(reference, tokens, strict=False)):
        if a != b:
            return index
    return None if len(reference) == len(tokens) else min(len(reference), len(tokens))


def divergences(reference: tuple[int, ...] | None, generations: Sequence[Generation]
                ) -> list[int | None] | None:
    """Per generation, ``first_divergence`` from the reference; None when either side has
    no token ids (the outputs are then compared by their text's sha256 only)."""
    if reference is None or any(g.token_ids is None for g in generations):
        return None
    return [first_divergence(reference, g.token_ids or ()) for g in generations]


def build_evidence(
    config: ProtocolConfig,
    *,
    engine_version: str,
    engine: str = "ollama",
    counters: DraftCounters | None,
    models_loaded: Sequence[str],
    outputs_match: bool | None,
    launches: Sequence[Launch] = (),
    refusal: str | None = None,
) -> SpeculationEvidence:
    requested = config.role == "draft"
    can_honor = engine_can_honor(config.mechanism, engine_version, engine)
    seen = requested and can_honor is not False and counters is not None and counters.drafted > 0
    observed = verdict(requested=requested, can_honor=can_honor, counters_seen=seen)
    # v2 only (llama-server): the engine starts as the client ran them. The verdict is
    # then recomputed from the whole submission by specschema.submission_verdicts.
    v2: dict[str, Any] = {"launches": list(launches)} if launches else {}
    if refusal is not None and requested:  # the engine could not run it: incompatible
        v2["refusal"] = refusal[:300]
    # Counters from the engine's API belong to their trials whatever the role: a baseline
    # that drafted must show its totals (they are the sums of its trials' counters).
    # So must a baseline whose log shows counters (wire v2: the evidence of
    # baseline_speculated). A draft whose mechanism cannot act keeps none (v1's rule).
    totals = counters if counters is not None and (
        seen or counters.source == "engine_api"
        or (config.role == "baseline" and counters.drafted > 0)) else None
    if totals is not None and totals.rounds:  # llama-server's "mean len", the target's included
        v2["mean_accepted_len"] = round(1.0 + totals.accepted / totals.rounds, 4)
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
