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

An implausible submission is not refused: it is stored *quarantined* (hidden, with the
reason) so that a maintainer can see it and release or reject it (docs/maintainers.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from statistics import median
from typing import Any

from specschema.models import Submission
from specserver.ingest.names import canonical_chip, canonical_model, canonical_optional, known_chips
from specserver.store import QUARANTINE_PREFIX

SLACK = 2.0


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
    reported = next((m for m in submission.models if m.name == baseline.model), None)
    size = model_size(baseline.model, reported.digest if reported else None,
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
    return (f"{QUARANTINE_PREFIX}baseline decodes {rate:.1f} tok/s; {chip} "
            f"({bandwidth_gbs(chip):g} GB/s) reads a {size_gb:.2f} GB model at most "
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
