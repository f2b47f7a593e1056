"""Example submissions that satisfy every server rule: for docs, benchmarks and tests.

Deterministic for a given seed, so a benchmark can pre-generate thousands of distinct
valid submissions and a test can state what it expects.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from datetime import UTC, datetime
from typing import Literal

from specschema.capability import engine_can_honor, submission_verdicts, verdict
from specschema.models import (
    ClientInfo,
    ConfigResult,
    Cpu,
    Engine,
    Fingerprint,
    Gpu,
    ModelInfo,
    OsInfo,
    ProtocolRef,
    Runtime,
    SpeculationEvidence,
    Submission,
    Trial,
    TrialCounters,
    Warmup,
)
from specschema.protocol import Protocol
from specschema.protocol_files import get_protocol

EXAMPLE_MACHINES: list[dict[str, object]] = [
    {"chip": "Apple M2", "memory_gb": 24, "os": "macos", "os_version": "15.1", "arch": "arm64",
     "gpu_vendor": "apple", "unified": True},
    {"chip": "Apple M3 Pro", "memory_gb": 36, "os": "macos", "os_version": "15.2", "arch": "arm64",
     "gpu_vendor": "apple", "unified": True},
    {"chip": "NVIDIA GeForce RTX 4090", "memory_gb": 64, "os": "linux", "os_version": "6.8",
     "arch": "x86_64", "gpu_vendor": "nvidia", "unified": False},
    {"chip": "AMD Radeon RX 7900 XTX", "memory_gb": 32, "os": "linux", "os_version": "6.5",
     "arch": "x86_64", "gpu_vendor": "amd", "unified": False},
]


def example_fingerprint(machine: dict[str, object]) -> Fingerprint:
    chip = str(machine["chip"])
    memory_gb = int(str(machine["memory_gb"]))
    vendor = str(machine["gpu_vendor"])
    return Fingerprint(
        chip=chip,
        machine_model="Mac14,7" if vendor == "apple" else None,
        cpu=Cpu(brand_raw=chip if vendor == "apple" else "AMD Ryzen 9 7950X 16-Core Processor",
                name=chip if vendor == "apple" else "AMD Ryzen 9 7950X",
                arch=str(machine["arch"]), cores_total=8 if vendor == "apple" else 16,
                cores_performance=4 if vendor == "apple" else None,
                cores_efficiency=4 if vendor == "apple" else None),
        memory_bytes=memory_gb * 1024**3,
        memory_gb=memory_gb,
        unified_memory=bool(machine["unified"]),
        gpus=[Gpu(name_raw=chip, name=chip, vendor=vendor,  # type: ignore[arg-type]
                  memory_bytes=None if vendor == "apple" else 24 * 1024**3)],
        os=OsInfo(name=str(machine["os"]), version=str(machine["os_version"]),  # type: ignore[arg-type]
                  arch=str(machine["arch"])),
        virtualization="none",
        power_source="ac",
    )


def example_submission(
    protocol: Protocol | str = "hardnumbers-m2",
    *,
    seed: int = 0,
    engine_version: str = "0.12.8",
    target: str | None = None,
    machine: dict[str, object] | None = None,
    baseline_tps: float = 20.0,
    draft_speedups: dict[str, float] | None = None,
    counters_seen: bool = False,
    created_at: datetime | None = None,
    complete: bool = True,
    schema_version: Literal[1, 2] = 1,
    runtime: Runtime | None = None,
    blocks: bool = False,
    drift: float = 0.0,
) -> Submission:
    """A valid submission for ``protocol`` with plausible, seeded trial numbers.

    ``schema_version=2`` adds what a v2 client records: per-trial counters (drafted 240,
    accepted 180 per trial when ``counters_seen``; the config's totals are their sums),
    the engine's ``runtime`` and ``engine_log="read"``. The verdicts are
    ``submission_verdicts`` of that evidence. ``blocks`` (v2) records each trial's block
    (``Protocol.blocks``); ``drift``: the machine slows linearly by this fraction from the
    first trial to the last (0.4: the last runs at 60 % of the first's speed).
    """
    proto = get_protocol(protocol) if isinstance(protocol, str) else protocol
    rng = random.Random(seed)
    machine = machine or EXAMPLE_MACHINES[seed % len(EXAMPLE_MACHINES)]
    speedups = draft_speedups or {}
    target_model = target or proto.target or "qwen3.5:9b-mtp"
    options = proto.options
    trial_slots = {name: [] for name in (c.name for c in proto.configs)}  # type: dict[str, list[Trial]]
    base_text = hashlib.sha256(f"output-{seed}".encode()).hexdigest()
    schedule = proto.schedule()
    block_of = proto.blocks()
    for position, (config_name, index) in enumerate(schedule):
        config = proto.config(config_name)
        slowed = 1.0 - drift * position / max(len(schedule) - 1, 1)
        rate = baseline_tps * speedups.get(config.name, 1.0) * rng.uniform(0.93, 1.07) * slowed
        eval_count = options.num_predict
        eval_ns = int(eval_count / rate * 1e9)
        prompt_ns = rng.randint(80_000_000, 250_000_000)
        load_ns = rng.randint(20_000_000, 60_000_000)
        total_ns = load_ns + prompt_ns + eval_ns + rng.randint(1_000_000, 5_000_000)
        trial_slots[config_name].append(Trial(
            index=index, position=position,
            wall_s=round(total_ns / 1e9 + rng.uniform(0.001, 0.01), 6),
            ttft_s=round((load_ns + prompt_ns) / 1e9 + 0.002, 6),
            total_duration_ns=total_ns, load_duration_ns=load_ns,
            prompt_eval_count=58, prompt_eval_duration_ns=prompt_ns,
            eval_count=eval_count, eval_duration_ns=eval_ns, done_reason="length",
            output_chars=812, output_sha256=base_text, cold=False,
            block=block_of[position] if blocks else None,
        ))
    v2 = schema_version == 2
    configs = []
    for config in proto.configs:
        requested = config.role == "draft"
        can_honor = engine_can_honor(config.mechanism, engine_version)
        seen = counters_seen and requested and bool(can_honor)
        trials = trial_slots[config.name]
        # One drafted token per generated token (at least: the totals of the first
        # protocols, 5-6 trials of 200, are kept as they were), 75 % accepted.
        drafted, accepted = max(1200, 200 * len(trials)), max(900, 150 * len(trials))
        if v2 and seen:
            trials = [t.model_copy(update={"counters": TrialCounters(
                drafted=240, accepted=180, mean_accepted_len=3.0, source="llama_server_log",
            )}) for t in trials]
            drafted, accepted = 240 * len(trials), 180 * len(trials)
        configs.append(ConfigResult(
            name=config.name, role=config.role, model=proto.model_for(config, target_model),
            draft_model=config.draft_model,
            request_options=proto.request_options(config),
            request_fields=dict(config.request_fields),
            warmups=[Warmup(wall_s=3.2, load_duration_ns=3_000_000_000,
                            total_duration_ns=3_150_000_000)] * proto.warmups_for(config.name),
            trials=trials,
            speculation=SpeculationEvidence(
                requested=requested, mechanism=config.mechanism, engine_can_honor=can_honor,
                observed=verdict(requested=requested, can_honor=can_honor, counters_seen=seen),
                drafted_tokens=drafted if seen else None,
                accepted_tokens=accepted if seen else None,
                counters_source="llama_server_log" if seen else None,
                models_loaded=[proto.model_for(config, target_model)],
                outputs_match_baseline=True if config.role == "draft" else None,
            ),
        ))
    models = sorted({c.model for c in configs} | {c.draft_model for c in configs if c.draft_model})
    submission = Submission(
        schema_version=schema_version,
        submission_id=uuid.UUID(int=rng.getrandbits(128), version=4),
        created_at=created_at or datetime.now(UTC),
        client=ClientInfo(name="specsubmit", version="0.1.0"),
        fingerprint=example_fingerprint(machine),
        engine=Engine(version=engine_version, backend="100% GPU", gpu_fraction=1.0,
                      runtime=runtime if v2 else None),
        models=[ModelInfo(name=m, digest=hashlib.sha256(m.encode()).hexdigest(),
                          quantization="Q4_K_M", parameter_size="14.8B", family="qwen3",
                          size_bytes=9_276_198_565) for m in models],
        protocol=ProtocolRef(
            id=proto.id, version=proto.version, sha256=proto.sha256,
            parameters={} if proto.target else {"target": target_model},
        ),
        configs=configs,
        complete=complete,
        engine_log="read" if v2 else None,
    )
    if not v2:
        return submission
    verdicts = submission_verdicts(submission)
    return submission.model_copy(update={"configs": [
        c.model_copy(update={"speculation": c.speculation.model_copy(update={"observed": v})})
        for c, v in zip(submission.configs, verdicts, strict=True)
    ]})
