"""The consent screen: a compact, complete account of what a submission sends.

Pure: a Submission in, lines of text out. Every top-level part of the payload is named,
so nothing is sent that the contributor was not shown.
"""

from __future__ import annotations

from specschema import Fingerprint, Submission, summarize
from specsubmit.outside_text import LINE_LIMIT, visible

NOT_SENT = (
    "Not in it: host name, user name, serial numbers, hardware UUIDs, MAC or IP addresses, "
    "the model outputs (only their length and sha256)."
)


def _gb(value: int | None) -> str:
    return f"{value} GB" if value is not None else "memory unknown"


def machine_line(fingerprint: Fingerprint) -> str:
    parts = [fingerprint.chip or "unknown chip", _gb(fingerprint.memory_gb)]
    if fingerprint.unified_memory:
        parts[-1] += " unified"
    os_info = fingerprint.os
    parts.append(" ".join(p for p in (os_info.name, os_info.version, os_info.arch) if p)
                 or "unknown OS")
    if fingerprint.machine_model:
        parts.append(fingerprint.machine_model)
    if fingerprint.power_source:
        parts.append("on battery" if fingerprint.power_source == "battery" else "on AC power")
    if fingerprint.virtualization not in (None, "none"):
        parts.append(f"virtualization: {fingerprint.virtualization}")
    return ", ".join(parts)


def cpu_gpu_line(fingerprint: Fingerprint) -> str:
    cpu = fingerprint.cpu
    cores = ""
    if cpu.cores_performance is not None and cpu.cores_efficiency is not None:
        cores = f" ({cpu.cores_performance}P+{cpu.cores_efficiency}E)"
    elif cpu.cores_total:
        cores = f" ({cpu.cores_total} cores)"
    gpus = "; ".join(
        (gpu.name or gpu.name_raw or "GPU")
        + (f" {round(gpu.memory_bytes / 1024**3)} GB" if gpu.memory_bytes else "")
        + (f" {gpu.compute_cores} cores" if gpu.compute_cores else "")
        for gpu in fingerprint.gpus
    )
    return f"cpu {cpu.name or cpu.brand_raw or 'unknown'}{cores}; gpus: {gpus or 'none'}"


def consent_lines(submission: Submission, server: str, key_id: str) -> list[str]:
    engine = submission.engine
    lines = [
        f"This result would be sent to {server}/v1/submissions,",
        f"signed with your pseudonymous key {key_id[:16]}…",
        f"  machine   {machine_line(submission.fingerprint)}",
        f"            {cpu_gpu_line(submission.fingerprint)}",
        f"  engine    Ollama {engine.version}" + (f", {engine.backend}" if engine.backend else ""),
        "  models    " + ", ".join(
            model.name + (f" ({model.quantization})" if model.quantization else "")
            for model in submission.models),
        f"  protocol  {submission.protocol.id} v{submission.protocol.version}",
    ]
    for summary in summarize(submission):
        tps = f"median {summary.median_tps:.1f} tok/s" if summary.median_tps else "no tok/s"
        speculation = f", speculation {summary.observed}" if summary.role == "draft" else ""
        lines.append(f"  config    {summary.name}: {summary.trials} trials, {tps}{speculation}")
    lines.append(
        f"  run       id {submission.submission_id}, {submission.created_at:%Y-%m-%d %H:%M} UTC, "
        f"{submission.client.name} {submission.client.version}"
        + (", with a note" if submission.note else ""))
    lines.append(NOT_SENT)
    # The fields came from an engine, the OS's tools or a file: shown, never obeyed.
    return [visible(line, LINE_LIMIT) for line in lines]
