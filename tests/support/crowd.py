"""Results and probes for the prediction tests: llamacpp-map results whose trials carry
llama-server's draft rounds and per-position counts (as its /metrics gives them), each
from its own "machine" and key, and signed cost probes.

The counts are invented within the client's rules (they sum to the accepted tokens, never
grow with the position, the first is at most the rounds); nothing real can stand for many
contributors' machines here.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, Literal

from specschema import Submission, TrialCounters, get_protocol, submission_bytes
from specschema.crowd import inputs_from_json
from specschema.envelope import envelope_bytes, sign_envelope
from specschema.examples import EXAMPLE_MACHINES, example_fingerprint, example_submission
from specschema.models import ClientInfo, Engine, ModelInfo
from specschema.probe import (
    MEASURED_BY_VERSION,
    PROBE_PAYLOAD_TYPE,
    CostPoint,
    CostProbe,
    probe_bytes,
)
from tests.support.served import Served
from tests.support.signed import sign_dict, signer

RUN = get_protocol("llamacpp-map").for_run({})  # no draft model: n-gram, MTP, baseline
M2, M3_PRO, RTX, RADEON = EXAMPLE_MACHINES
# Per contributor (by seed): rounds and per-position counts of 64 drafted, 48 accepted.
SHAPES = ((16, [16, 16, 10, 6]), (20, [20, 14, 10, 4]), (24, [20, 16, 12]),
          (18, [18, 14, 10, 6]))


def map_result(seed: int, machine: dict[str, object], target: ModelInfo | None = None
               ) -> Submission:
    """A llamacpp-map result on ``machine`` whose n-gram and MTP configs' trials carry
    rounds and per-position counts (the seed picks the contributor's shape); ``target``:
    another target model in place of the protocol's."""
    sub = example_submission(RUN, seed=seed, engine_version="b6000", schema_version=2,
                             runtime="ggml", counters_seen=True, blocks=True,
                             created_at=datetime.now().astimezone(), machine=machine,
                             draft_speedups={"ngram_simple_m8": 1.4, "ngram_mod_16": 1.3,
                                             "mtp_n3": 1.2})
    rounds, positions = SHAPES[seed % len(SHAPES)]
    configs = []
    for config in sub.configs:
        if config.role == "baseline":
            configs.append(config)
            continue
        trials = [t.model_copy(update={"counters": TrialCounters(
            drafted=64, accepted=48, source="engine_api", rounds=rounds,
            accepted_per_position=positions)}) for t in config.trials]
        spec = config.speculation.model_copy(update={
            "drafted_tokens": 64 * len(trials), "accepted_tokens": 48 * len(trials),
            "counters_source": "engine_api"})
        configs.append(config.model_copy(update={"trials": trials, "speculation": spec}))
    if target is not None:
        configs = [c.model_copy(update={"model": target.name}) for c in configs]
    return sub.model_copy(update={
        "models": [target] if target is not None else sub.models,
        "protocol": sub.protocol if target is None else sub.protocol.model_copy(
            update={"parameters": {**sub.protocol.parameters, "target": target.name}}),
        "configs": configs, "engine": sub.engine.model_copy(update={
            "name": "llama-server", "build": "0.5.0-dev (build 6000, commit 0c1e570)"})})


def signed_result(seed: int, machine: dict[str, object], key_seed: int,
                  target: ModelInfo | None = None) -> bytes:
    return sign_dict(json.loads(submission_bytes(map_result(seed, machine, target))), key_seed)


def target_of(sub: Submission) -> ModelInfo:
    return sub.models[0]


def cost_probe(target: ModelInfo, machine: dict[str, object], *, step_s: float = 0.02,
               per_token_s: float = 0.004, probe_id: uuid.UUID | None = None,
               version: Literal[1, 2] = 2) -> CostProbe:
    """A probe whose pass over k new tokens costs ``step_s + per_token_s (k - 1)``; of
    ``version`` (2: verification rounds, what the client sends; 1: prefills)."""
    return CostProbe(
        schema_version=version, measured=MEASURED_BY_VERSION[version],
        probe_id=probe_id or uuid.uuid4(), created_at=datetime.now().astimezone(),
        client=ClientInfo(name="specsubmit", version="0.1.0"),
        fingerprint=example_fingerprint(machine),
        engine=Engine(name="llama-server", version="b6000", runtime="ggml"),
        target=target, threads=4, context_tokens=512,
        points=[CostPoint(tokens=k, samples=[step_s + per_token_s * (k - 1)] * 3)
                for k in range(2, 17)],
        decode_samples=[step_s, step_s * 1.01, step_s * 0.99])


def signed_probe(probe: CostProbe, key_seed: int, payload_type: str = PROBE_PAYLOAD_TYPE
                 ) -> bytes:
    return envelope_bytes(sign_envelope(probe_bytes(probe), signer(key_seed), payload_type))


def probe_dict(probe: CostProbe) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(probe_bytes(probe))
    return data


DRAFT_BYTES = 600_000_000


def draft_result(seed: int, machine: dict[str, object]) -> Submission:
    """A llamacpp-draft result whose trials carry rounds and per-position counts, its
    models reporting their file sizes (the 0.6B draft's is ``DRAFT_BYTES``)."""
    run = get_protocol("llamacpp-draft")
    sub = map_result(seed, machine)  # the engine and counters' shape of the map results
    draft = example_submission(run, seed=seed, engine_version="b6000", schema_version=2,
                               runtime="ggml", counters_seen=True, blocks=True,
                               created_at=sub.created_at, machine=machine)
    deep = next(c for c in sub.configs if c.name == "ngram_simple_m8").trials[0].counters
    assert deep is not None
    shallow = deep.model_copy(update={"drafted": 48, "rounds": 16,
                                      "accepted_per_position": [16, 16, 16]})
    configs = []
    for config in draft.configs:
        if config.role == "draft":
            shaped = shallow if config.name.endswith("_n3") else deep
            config = config.model_copy(update={
                "trials": [t.model_copy(update={"counters": shaped}) for t in config.trials],
                "speculation": config.speculation.model_copy(update={
                    "drafted_tokens": shaped.drafted * len(config.trials),
                    "accepted_tokens": 48 * len(config.trials),
                    "counters_source": "engine_api"})})
        configs.append(config)
    models = [m.model_copy(update={"size_bytes": DRAFT_BYTES}) if m.name == "qwen3:0.6b"
              else m for m in draft.models]
    return draft.model_copy(update={"configs": configs, "models": models,
                                    "engine": sub.engine})


def post_results(served: Served, machines: list[dict[str, object]]) -> None:
    """One llamacpp-map result per machine, each from its own key and address range."""
    for seed, machine in enumerate(machines):
        peer = (f"198.51.{100 + seed}.7", 40000)
        response = served.client.post("/v1/submissions",
                                      content=signed_result(seed, machine, seed), peer=peer)
        assert response.status_code == 201, response.text


def predicted_entry(served: Served, target_digest: str, *, chip: str = "Apple M2",
                    draft: str = "qwen3:0.6b", depth: int = 8) -> dict[str, Any]:
    """``GET /v1/predict``'s candidate for this draft at this depth over every kind of work
    ("all"), its ``inputs`` parsed (``inputs_from_json``)."""
    answer = served.get("/v1/predict", params={"target": target_digest, "chip": chip}).json()
    found: dict[str, Any] = next(
        c for c in answer["candidates"] if c["domain"] == "all"
        and c["candidate"]["draft"] == draft and c["candidate"]["depth"] == depth)
    found["inputs"] = inputs_from_json(answer["inputs"])
    return found

