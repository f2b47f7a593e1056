"""The cost probe on llama-server: the target alone, no speculation, one start.

After a fixed context (the prompt set's prompts, tokenized by the target, cut to
``context`` tokens) has been processed once and cached in the slot, each measurement sends
the context plus k new tokens that differ from the last request's from their first, so the
server processes exactly those k in one forward pass (``timings.prompt_n``, checked) and
says how long it took (``prompt_ms``). Sizes are measured in rounds, every size once per
round, so that a change of load falls on all of them alike. Plain decoding is timed on a
short generation of the same context.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from specschema import ClientInfo, Fingerprint
from specsubmit import __version__
from specsubmit.engines.base import EngineOptions, RunListener, RunSettings
from specsubmit.engines.llama_server.api import LlamaServerApi
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.errors import LlamaServerError, RunAborted

if TYPE_CHECKING:
    from specschema.probe import CostProbe

SIZES = tuple(range(2, 17))
ROUNDS = 3
CONTEXT = 256
DECODE_TOKENS = 32


def measure(api: LlamaServerApi, text: str, listener: RunListener, *,
            sizes: Sequence[int] = SIZES, rounds: int = ROUNDS, context: int = CONTEXT,
            stop: threading.Event | None = None
            ) -> tuple[int, dict[int, list[float]], list[float]]:
    """(the context's tokens, seconds per size per round, seconds per decoded token per
    round)."""
    tokens = api.tokenize(text)
    spare = 2 * max(sizes) * (rounds * len(sizes) + 1)
    if len(tokens) < 8 + spare:
        raise LlamaServerError(f"the probe's text is {len(tokens)} tokens for this target; "
                               f"it needs {8 + spare}")
    context = min(context, len(tokens) - spare)
    base, pool = tokens[:context], tokens[context:]
    api.timed_prefill(base)  # cached in the slot from now on
    found: dict[int, list[float]] = {k: [] for k in sizes}
    decoded: list[float] = []
    offset, first = 0, -1
    for round_ in range(rounds):
        listener.phase(f"probe: round {round_ + 1} of {rounds}, {len(sizes)} sizes")
        for k in sizes:
            if stop is not None and stop.is_set():
                raise RunAborted("interrupted during the probe; nothing was saved")
            offset += 1  # a new first token: nothing of the last request is reused
            while offset < len(pool) - k and pool[offset] == first:
                offset += 1
            extra, first = pool[offset:offset + k], pool[offset]
            processed, ms = api.timed_prefill(base + extra)
            if processed != k:
                raise LlamaServerError(f"llama-server processed {processed} tokens where the "
                                       f"probe sent {k} new ones: its cache did not hold the "
                                       "context, so the timing would not be of k tokens")
            found[k].append(ms / 1000)
        decoded.append(_decode_step_s(api, base))
    return context, found, decoded


def _decode_step_s(api: LlamaServerApi, base: list[int]) -> float:
    generation = api.completion({"prompt": base, "n_predict": DECODE_TOKENS,
                                 "cache_prompt": True, "temperature": 0.0, "stream": True,
                                 "ignore_eos": True})
    if generation.eval_count < 2 or generation.eval_duration_ns <= 0:
        raise LlamaServerError("llama-server decoded nothing to time")
    return generation.eval_duration_ns / 1e9 / generation.eval_count


def run_probe(settings: RunSettings, options: EngineOptions, fingerprint: Fingerprint,
              listener: RunListener, stop: threading.Event | None = None) -> CostProbe:
    """Start the target alone (the protocol's baseline config), measure, stop."""
    from specschema.probe import CostPoint, CostProbe

    protocol = settings.protocol
    text = "\n\n".join(p.text for p in protocol.prompts or ()) or protocol.prompt
    with LlamaServerEngine(settings, binary=options.llama_server,
                           models_dir=options.ollama_models, timeout_s=options.timeout_s,
                           threads=options.llama_threads) as engine:
        pre = engine.preflight(fingerprint, listener, stop)
        # A sliding-window cache (Gemma 3's) is cut to its window, so a cached context is
        # not reused whole and more than the k new tokens are processed; the full cache
        # keeps it (and changes nothing for a model without sliding windows).
        engine.extra_args = ["--swa-full"]
        baseline = protocol.baseline()
        engine.begin_config(baseline, listener)
        try:
            context, found, decoded = measure(engine.api, text * 4, listener, stop=stop)
        finally:
            engine.end_config(baseline, last=True)
        wire, _ = engine.wire_engine(pre, engine.report(pre, listener))
    return CostProbe(
        probe_id=uuid.uuid4(), created_at=datetime.now(UTC),
        client=ClientInfo(name="specsubmit", version=__version__), fingerprint=fingerprint,
        engine=wire, target=pre.models[0], threads=engine.threads, context_tokens=context,
        points=[CostPoint(tokens=k, samples=[round(s, 6) for s in found[k]])
                for k in sorted(found)],
        decode_samples=[round(s, 6) for s in decoded])
