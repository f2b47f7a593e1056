"""Physical plausibility of the baseline (pure): decode speed is bounded by the hardware.

Decoding one token of a dense model reads (nearly) every weight once, so a baseline (no
speculation) cannot decode faster than the chip's memory bandwidth divided by the bytes it
reads per token. Once, a 500 tok/s baseline for a 9B model on an Apple M2 (100 GB/s)
was accepted, because the only bound was 0.01-10,000 tok/s per trial (NOMAD's lesson,
peers.md section 7: fixed caps reject real results on fast hardware; a bound must be
relative to the hardware and the model).

    bound = SLACK x memory_bandwidth (known_chips.json) / bytes per token (known_models.json)

``SLACK`` = 2: the bytes read per token are less than the file (the embedding table is read
one row per token, which is up to ~30 % of a small model's file), and vendors' peak figures
are rounded. Real decoding reaches 50-80 % of the peak, so an honest dense baseline sits at
0.25-0.4 of the bound; one above it did not run as reported.

The model's size is the server's, never the client's (before, ``size_bytes`` null or 1, a
``family`` containing "moe", or the target left out of ``models[]`` each dodged the bound).
``model_size`` finds the target in ``known_models.json``: by digest, else by canonical name
and quantization, else by name alone (the smallest known variant of that name: the
loosest bound any honest variant needs). Mixture-of-experts models are those the table
gives ``active_bytes``: what they read per token. A target the table cannot size is not
judged here; the board does not count its rows as established until it can
(``unsized_reason``, shown on the page and in the API).

**Outside the tables** the bound is universal and generous: a chip the table does not list
is judged as if it had the fastest memory any accelerator has (``FASTEST_BANDWIDTH_GBS``),
and a model it cannot size by the parameter count its name states (``qwen3:14b``,
``gemma3:270m``; the active ``a3b`` of ``qwen3:30b-a3b``) at the fewest bits per weight a
GGUF quantization stores (``FEWEST_BITS_PER_WEIGHT``): the smallest file such a model can
be. The name is what the board shows, so a result is held to what its row claims; what the
client reports of the size is never used (it could only loosen the bound). A model whose
name states no size is not judged (and not established, as above).

An implausible submission is not refused: it is stored *quarantined* (hidden, with the
reason) so that a maintainer can see it and release or reject it (docs/maintainers.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from statistics import median
from typing import Any

from specschema.models import Submission
from specserver.ingest.names import canonical_chip, canonical_model, canonical_optional, known_chips
from specserver.store import QUARANTINE_PREFIX

SLACK = 2.0
# The fastest memory an accelerator reads, GB/s: NVIDIA B200's HBM3e, 8 TB/s (NVIDIA DGX
# B200 datasheet; the H100 SXM in known_chips.json reads 3.35 TB/s).
FASTEST_BANDWIDTH_GBS = 8000.0
# The fewest bits per weight a GGUF quantization stores (llama.cpp's IQ1_S: 1.5625).
FEWEST_BITS_PER_WEIGHT = 1.5
# A parameter count in a model name: 14b, 0.6b, 270m; "a3b" is a mixture's active count.
_PARAMETERS = re.compile(r"(?<![a-z0-9.])(a?)(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")


@dataclass(frozen=True)
class ModelSize:
    """What the server knows of a model's size, and how it matched the reported one."""

    name: str  # the table's entry
    quantization: str | None
    bytes_per_token: int  # size_bytes, or active_bytes for a mixture of experts
    matched_by: str  # "digest" | "name and quantization" | "name"
    source: str


@cache
def known_models() -> tuple[dict[str, Any], ...]:
    """The entries of ``known_models.json`` (package data), in file order."""
    raw = resources.files("specserver").joinpath("known_models.json").read_text("utf-8")
    entries: list[dict[str, Any]] = json.loads(raw)["models"]
    return tuple(entries)


def _quant(value: str | None) -> str | None:
    found = canonical_optional(value)
    return None if found is None else found.upper()


def _size(entry: dict[str, Any], matched_by: str) -> ModelSize:
    return ModelSize(entry["name"], entry.get("quantization"),
                     int(entry.get("active_bytes") or entry["size_bytes"]), matched_by,
                     entry["source"])


def model_size(name: str | None, digest: str | None, quantization: str | None
               ) -> ModelSize | None:
    """The server's size of a reported model, or None when its table cannot say."""
    entries = known_models()
    if digest is not None:
        for entry in entries:
            if digest in entry.get("digests", ()):
                return _size(entry, "digest")
    if name is None:
        return None
    named = [e for e in entries if e["name"] == canonical_model(name)]
    if not named:
        return None
    quant = _quant(quantization)
    for entry in named:
        if quant is not None and entry.get("quantization") == quant:
            return _size(entry, "name and quantization")
    smallest = min(named, key=lambda e: int(e.get("active_bytes") or e["size_bytes"]))
    return _size(smallest, "name")


def stated_parameters(name: str | None) -> float | None:
    """The parameters a model's name says it has per token (the active count of a mixture
    of experts when it states one, else the smallest count it states), or None."""
    if name is None:
        return None
    found = [(active == "a", float(n) * (1e9 if unit == "b" else 1e6))
             for active, n, unit in _PARAMETERS.findall(canonical_model(name))]
    active = [n for is_active, n in found if is_active]
    counts = active or [n for _, n in found]
    return min(counts) if counts and min(counts) > 0 else None


def bound_size(name: str | None, digest: str | None, quantization: str | None
               ) -> ModelSize | None:
    """The size the bound uses: the table's (``model_size``), else the smallest file the
    parameter count in the name can be; None when neither says."""
    known = model_size(name, digest, quantization)
    if known is not None or name is None:
        return known
    parameters = stated_parameters(name)
    if parameters is None:
        return None
    return ModelSize(canonical_model(name), None,
                     int(parameters * FEWEST_BITS_PER_WEIGHT / 8),
                     f"the {parameters / 1e9:g}B parameters its name states, at "
                     f"{FEWEST_BITS_PER_WEIGHT:g} bits each (the fewest a GGUF stores)",
                     "the model's name")


def unsized_reason(name: str | None, digest: str | None, quantization: str | None
                   ) -> str | None:
    """Why the board cannot count results of this target as established, or None."""
    if model_size(name, digest, quantization) is not None:
        return None
    return ("the server does not know this model's size, so its baseline cannot be checked "
            "against the chip's memory bandwidth")


def bandwidth_gbs(chip: str | None) -> float | None:
    """The table's peak memory bandwidth of the (canonical) chip, in GB/s."""
    name = canonical_chip(chip)
    for entry in known_chips():
        if entry["name"] == name:
            return float(entry["memory_bandwidth_gbs"])
    return None


def judged_bandwidth_gbs(chip: str | None) -> float:
    """The table's bandwidth of the chip, else the fastest there is."""
    known = bandwidth_gbs(chip)
    return FASTEST_BANDWIDTH_GBS if known is None else known


def baseline_bound(chip: str | None, model_bytes: int | None) -> float | None:
    """The most decode tok/s a dense model of ``model_bytes`` can reach on ``chip`` (a
    chip outside the table: on the fastest memory there is)."""
    if not model_bytes:
        return None
    return SLACK * judged_bandwidth_gbs(chip) * 1e9 / model_bytes


def implausible_reason(submission: Submission) -> str | None:
    """Why the baseline's median decode rate is physically impossible, or None."""
    baseline = next((c for c in submission.configs if c.role == "baseline"), None)
    if baseline is None:
        return None
    reported = next((m for m in submission.models if m.name == baseline.model), None)
    size = bound_size(baseline.model, reported.digest if reported else None,
                      reported.quantization if reported else None)
    if size is None:
        return None  # the board does not count it as established (unsized_reason)
    bound = baseline_bound(submission.fingerprint.chip, size.bytes_per_token)
    rates = [t.eval_count / t.eval_duration_ns * 1e9 for t in baseline.trials
             if t.eval_duration_ns > 0 and t.eval_count > 0]
    if bound is None or not rates:
        return None
    rate = median(rates)
    if rate <= bound:
        return None
    chip = canonical_chip(submission.fingerprint.chip)
    size_gb = size.bytes_per_token / 1e9
    speed = (f"{bandwidth_gbs(chip):g} GB/s" if bandwidth_gbs(chip) is not None else
             f"not in the table: judged at the fastest memory there is, "
             f"{FASTEST_BANDWIDTH_GBS:g} GB/s")
    return (f"{QUARANTINE_PREFIX}baseline decodes {rate:.1f} tok/s; {chip} "
            f"({speed}) reads a {size_gb:.2f} GB model at most "
            f"{bound / SLACK:.1f} times a second (bound with slack {SLACK:g}: {bound:.1f} tok/s; "
            f"the size is the server's, for {size.name}"
            f"{' ' + size.quantization if size.quantization else ''}, matched by "
            f"{size.matched_by})")


def target_unsized_reason(target: dict[str, Any] | None) -> str | None:
    """``unsized_reason`` of a board group's target key (board/aggregate.py DIMENSIONS)."""
    if target is None:
        return None
    return unsized_reason(target.get("target_model"), target.get("target_digest"),
                          target.get("target_quant"))
