"""The consent screen: a compact, complete account of what a submission sends.

Pure: a Submission in, lines of text out. Every top-level part of the payload is named,
so nothing is sent that the contributor was not shown.
"""

from __future__ import annotations

from specschema import Fingerprint, Gpu, Launch, ModelInfo, Submission, summarize
from specschema.engines import descriptor
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


def _join(parts: list[str | None]) -> str:
    return ", ".join(p for p in parts if p)


def _cpu_details(fingerprint: Fingerprint) -> str:
    cpu = fingerprint.cpu
    return _join([
        f"raw {cpu.brand_raw!r}" if cpu.brand_raw else None,
        f"arch {cpu.arch}" if cpu.arch else None,
        f"{cpu.threads} threads" if cpu.threads else None,
        f"{fingerprint.memory_bytes} bytes of memory" if fingerprint.memory_bytes else None,
        # machine_line names a hypervisor; "none" is sent too
        "virtualization none" if fingerprint.virtualization == "none" else None,
    ]) or "nothing more"


def _gpu_line(gpu: Gpu) -> str:
    return _join([
        gpu.name or "GPU",
        f"raw {gpu.name_raw!r}" if gpu.name_raw else None,
        gpu.vendor,
        f"{gpu.memory_bytes} bytes" if gpu.memory_bytes else None,
        f"driver {gpu.driver}" if gpu.driver else None,
        f"{gpu.compute_cores} cores" if gpu.compute_cores else None,
        f"Metal {gpu.metal_family}" if gpu.metal_family else None,
    ])


def _engine_line(submission: Submission) -> str:
    engine = submission.engine
    fraction = (f"gpu fraction {engine.gpu_fraction:g}" if engine.gpu_fraction is not None
                else None)
    return f"{descriptor(engine.name).label} {engine.version}" + "".join(
        f", {part}" for part in (
            f"build {engine.build!r}" if engine.build else None,
            f"runtime {engine.runtime}" if engine.runtime else None,
            engine.backend, fraction,
            f"server log {submission.engine_log}" if submission.engine_log else None,
        ) if part)


def _model_line(model: ModelInfo) -> str:
    details = _join([
        model.quantization, model.parameter_size, model.family, model.format,
        f"{model.size_bytes} bytes" if model.size_bytes else None,
        f"sha256 {model.digest}" if model.digest else None,
    ])
    return model.name + (f" ({details})" if details else "")


def _launch_text(launch: Launch) -> str:
    return _join([
        f"{launch.source} ("
        + ("started by the client" if launch.source == "engine_command" else "logged") + ")",
        f"--spec-type {launch.spec_type}" if launch.spec_type else "no --spec-type",
        f"n-max {launch.draft_n_max}" if launch.draft_n_max is not None else None,
        "a draft model" if launch.draft_model else None,
        f"draft sha256 {launch.draft_model_digest}" if launch.draft_model_digest else None,
        f"synthetic {' '.join(launch.synthetic_flags)}" if launch.synthetic_flags else None,
    ])


def _config_lines(submission: Submission) -> list[str]:
    lines: list[str] = []
    configs = {c.name: c for c in submission.configs}
    for summary in summarize(submission):
        config = configs[summary.name]
        s = config.speculation
        tps = f"median {summary.median_tps:.1f} tok/s" if summary.median_tps else "no tok/s"
        lines.append(f"  config    {summary.name}: {summary.trials} trials, {tps}, speculation "
                     f"{s.observed}")
        options = {**config.request_options, **config.request_fields}
        lines.append("            " + _join([
            f"{config.role} {config.model}",
            f"draft {config.draft_model}" if config.draft_model else None,
            f"mechanism {s.mechanism}",
            " ".join(f"{k}={v}" for k, v in options.items()),
        ]))
        if s.drafted_tokens is not None:
            lines.append(f"            counters: {s.accepted_tokens} of {s.drafted_tokens} "
                         f"drafted accepted, from {s.counters_source}")
        if s.models_loaded:
            lines.append(f"            engine had loaded: {', '.join(s.models_loaded)}")
        for launch in s.launches:
            lines.append(f"            engine start: {_launch_text(launch)}")
    return lines


def consent_lines(submission: Submission, server: str, key_id: str) -> list[str]:
    """Every field the payload carries, by part (the trials and warm-ups by what each
    holds: they are numbers and hashes)."""
    fingerprint = submission.fingerprint
    protocol = submission.protocol
    parameters = " ".join(f"{k}={v}" for k, v in protocol.parameters.items())
    lines = [
        f"This result would be sent to {server}/v1/submissions,",
        f"signed with your pseudonymous key {key_id[:16]}…",
        f"  machine   {machine_line(fingerprint)}",
        f"            {cpu_gpu_line(fingerprint)}",
        f"            cpu {_cpu_details(fingerprint)}",
        *(f"  gpu       {_gpu_line(gpu)}" for gpu in fingerprint.gpus),
        f"  engine    {_engine_line(submission)}",
        *(f"  model     {_model_line(model)}" for model in submission.models),
        f"  protocol  {protocol.id} v{protocol.version}, sha256 {protocol.sha256}"
        + (f", {parameters}" if parameters else ""),
        *_config_lines(submission),
        "  trials    each trial's and warm-up's timings, token counts, cold flag, stop "
        "reason, and its output's length and sha256 (never the text)"
        + (", and its acceptance counters" if any(
            t.counters for c in submission.configs for t in c.trials) else ""),
        f"  run       id {submission.submission_id}, {submission.created_at:%Y-%m-%d %H:%M} UTC, "
        f"{submission.client.name} {submission.client.version}, "
        + ("complete" if submission.complete else "incomplete")
        + f", wire format v{submission.schema_version}",
    ]
    if submission.note:
        lines.append(f"  note      {submission.note}")
    lines.append(NOT_SENT)
    # The fields came from an engine, the OS's tools or a file: shown, never obeyed.
    return [visible(line, LINE_LIMIT) for line in lines]
