"""Which speculation mechanisms an Ollama version can honor (pure).

Facts (shared/reference/ollama-api.md): Ollama has never had a top-level ``draft_model``
request field; unknown fields are dropped silently, so that mechanism is never applied.
``options.draft_num_predict`` exists from v0.30.0 (PR #16031) and only does anything on a
model with MTP layers or a Modelfile DRAFT.
"""

from __future__ import annotations

import re

from specschema.models import Mechanism, Observed

DRAFT_NUM_PREDICT_SINCE = (0, 30, 0)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """'0.33.1-rc2' -> (0, 33, 1); None when it is not a version at all."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def engine_can_honor(mechanism: Mechanism, engine_version: str) -> bool | None:
    """True/False when known; None when the version cannot be read."""
    if mechanism == "none":
        return True
    if mechanism == "draft_model_field":
        return False
    version = parse_version(engine_version)
    if version is None:
        return None
    return version >= DRAFT_NUM_PREDICT_SINCE


def verdict(
    *, requested: bool, can_honor: bool | None, counters_seen: bool
) -> Observed:
    """The speculation verdict of a draft config.

    confirmed: acceptance counters were seen; not_applied: the engine cannot honor the
    mechanism; not_observed: it could, but no evidence either way; unknown: the version
    could not be read and nothing was seen.
    """
    if not requested:
        return "not_applied"
    if can_honor is False:
        return "not_applied"
    if counters_seen:
        return "confirmed"
    if can_honor is None:
        return "unknown"
    return "not_observed"
