"""Physical plausibility of the baseline (pure): decode speed is bounded by the hardware.

Decoding one token of a dense model reads (nearly) every weight once, so a baseline (no
speculation) cannot decode faster than the chip's memory bandwidth divided by the bytes it
reads per token. Issue 15: a 500 tok/s baseline for a 9B model on an Apple M2 (100 GB/s,
~6 GB of weights: ~16 tok/s at the very peak) was accepted, because the only bound was
0.01-10,000 tok/s per trial (NOMAD's lesson, peers.md section 7: fixed caps reject real
results on fast hardware; a bound must be relative to the hardware and the model).

    bound = SLACK x memory_bandwidth (known_chips.json) / model size (models[].size_bytes)

``SLACK`` = 2: the bytes read per token are less than the file (the embedding table is read
one row per token, which is up to ~30 % of a small model's file), and vendors' peak figures
are rounded. Real decoding reaches 50-80 % of the peak, so an honest dense baseline sits at
0.25-0.4 of the bound; one above it did not run as reported. Not assessed (no bound): a chip
outside the table, a model without a reported size, and mixture-of-experts models (they
read only their active experts per token, which the reported size does not say: their
honest results would exceed the bound, so they are never judged by it).

An implausible submission is not refused: it is stored *quarantined* (hidden, with the
reason) so that a maintainer can see it and release or reject it (docs/maintainers.md).
"""

from __future__ import annotations

import re
from statistics import median

from specschema.models import Submission
from specserver.ingest.names import canonical_chip, known_chips
from specserver.store import moderation

SLACK = 2.0
QUARANTINE_PREFIX = moderation.QUARANTINE_PREFIX
# Model names and families of mixture-of-experts models (active parameters < file size).
MOE = re.compile(r"moe|mixtral|-a\d+(\.\d+)?b\b|gpt-oss|deepseek-(v[23]|r1)|qwen3-?next|"
                 r"olmoe|granite.*-a\d|phi-?3\.5-moe|llama4", re.IGNORECASE)


def bandwidth_gbs(chip: str | None) -> float | None:
    """The table's peak memory bandwidth of the (canonical) chip, in GB/s."""
    name = canonical_chip(chip)
    for entry in known_chips():
        if entry["name"] == name:
            return float(entry["memory_bandwidth_gbs"])
    return None


def baseline_bound(chip: str | None, model_bytes: int | None) -> float | None:
    """The most decode tok/s a dense model of ``model_bytes`` can reach on ``chip``."""
    bandwidth = bandwidth_gbs(chip)
    if bandwidth is None or not model_bytes:
        return None
    return SLACK * bandwidth * 1e9 / model_bytes


def implausible_reason(submission: Submission) -> str | None:
    """Why the baseline's median decode rate is physically impossible, or None."""
    baseline = next((c for c in submission.configs if c.role == "baseline"), None)
    if baseline is None:
        return None
    model = next((m for m in submission.models if m.name == baseline.model), None)
    if model is None or MOE.search(f"{model.name} {model.family or ''}"):
        return None
    bound = baseline_bound(submission.fingerprint.chip, model.size_bytes)
    rates = [t.eval_count / t.eval_duration_ns * 1e9 for t in baseline.trials
             if t.eval_duration_ns > 0 and t.eval_count > 0]
    if bound is None or not rates:
        return None
    rate = median(rates)
    if rate <= bound:
        return None
    chip = canonical_chip(submission.fingerprint.chip)
    size_gb = (model.size_bytes or 0) / 1e9
    return (f"{QUARANTINE_PREFIX}baseline decodes {rate:.1f} tok/s; {chip} "
            f"({bandwidth_gbs(chip):g} GB/s) reads a {size_gb:.2f} GB model at most "
            f"{bound / SLACK:.1f} times a second (bound with slack {SLACK:g}: {bound:.1f} tok/s)")
