"""The cost probe on llama-server: the target alone, one start.

What a speculative round costs is measured as the engine spends it (``measure_rounds``):
the server runs prompt lookup (``ngram-simple``) with llama.cpp's synthetic acceptance
(``--spec-synth-rates``, every draft accepted; the output is not valid, the costs are).
The prompt is a context followed by the start of it again, so the lookup finds the
continuation and drafts. The round's first token is the target's own, so a target that
would not copy the repeated text (a small or damaged model does not) is made to, with a
logit bias on the token that continues it (one token's bias: no cost the round would not
have); without it such a target's lookup found nothing to draft at any cut. A completion
of ``n_predict = k + 1`` tokens is then exactly one round checking k tokens (the first
token comes from the prompt, then k - 1 drafted and checked in one batch with an output at
every position, the sampler run at each, plus the round's bookkeeping), and its
``predicted_ms`` is that round; ``n_predict = 2`` is one plain decoding step. Each
request's counts are checked (``draft_n`` and ``draft_n_accepted`` must be k - 1), so a
round that drafted less is retried, never counted.

A build without synthetic acceptance is probed as before (``measure``, probe version 1):
the prefill of k new tokens after the cached context, whose output is computed for the
last token only, which reads low where the output layer is much of the work.

Sizes are measured in rounds, every size once per round (ascending, then descending), so
that a change of load falls on all of them alike; rounds stop at ``ROUNDS``, or (two at
least) when one more, as long as the last, would end past ``BUDGET_S`` from the start.
A round is about 50 plain steps (Gemma 3 270M on one core: the nine checks ~32 steps, the
few tokens each request processes again and two plain steps the rest), so at 0.25 s a
step (a 14B-class target on a CPU) two rounds take ~26 s; with loading the model and the
context's prefill that is an estimate near a minute, not a measurement.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from specschema import ClientInfo, Fingerprint
from specsubmit import __version__
from specsubmit.engines.base import RunListener, RunSettings
from specsubmit.engines.llama_server import process
from specsubmit.engines.llama_server.api import LlamaServerApi
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.engines.llama_server.options import LlamaServerOptions
from specsubmit.errors import LlamaServerError, RunAborted

if TYPE_CHECKING:
    from specschema.probe import CostProbe

SIZES = tuple(range(2, 17))  # the prefill probe's sizes (cheap: no sampling, no rounds)
# The verification probe's sizes: a round at depth g checks g + 1 tokens, so the sizes the
# advisor predicts at (``specschema.forecast.DEPTHS`` + 1: 2, 3, 4, 5, 7, 9, 13, 17) and 6
# for depth 5. Measured, not interpolated: a batch's cost is not smooth in its size (on the
# advisor bench's CPU a round of 3 or 5 tokens cost more than one of 4 or 6), so a size read
# between two neighbours reads theirs. As many tokens a round as the sizes before (66).
ROUND_SIZES = (2, 3, 4, 5, 6, 7, 9, 13, 17)
ROUNDS = 3
BUDGET_S = 35.0
CONTEXT = 256
DECODE_TOKENS = 32
SYNTH_FLAG = "--spec-synth-rates"
LOOKUP = 3  # the n-gram the lookup matches: short enough to find the repeated context
CUT_TRIES = 8  # places to cut the repeated context before a round counts as impossible
FORCED = 1000.0  # the logit bias that makes the continuation's token the target's pick


def verification_args(largest: int) -> list[str]:
    """The server's flags for rounds of up to ``largest`` checked tokens."""
    drafted = largest - 1
    return ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(LOOKUP),
            "--spec-ngram-simple-size-m", str(drafted), "--spec-draft-n-max", str(drafted),
            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
            SYNTH_FLAG, ",".join(["1"] * drafted)]


def knows_synthetic_acceptance(binary: Path, env: Mapping[str, str] | None = None) -> bool:
    """Whether this llama-server build has synthetic acceptance (its ``--help``)."""
    try:
        result = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                                timeout=60, check=False,
                                env=dict(env) if env is not None else None)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return SYNTH_FLAG in result.stdout + result.stderr


def _tokens(api: LlamaServerApi, text: str, context: int, spare: int
            ) -> tuple[list[int], int]:
    """The text's tokens and how many of them make the context (``spare`` left after)."""
    tokens = api.tokenize(text)
    if len(tokens) < 8 + spare:
        raise LlamaServerError(f"the probe's text is {len(tokens)} tokens for this target; "
                               f"it needs {8 + spare}")
    return tokens, min(context, len(tokens) - spare)


def _round_s(api: LlamaServerApi, prompt: list[int], tokens: int, continuation: int
             ) -> float | None:
    """One request: a round checking ``tokens`` (> 1) or a plain step (1), its first token
    made ``continuation``; its seconds, or None when the server did not do exactly that
    (the lookup found less to draft)."""
    generation = api.completion({"prompt": prompt, "n_predict": tokens + 1,
                                 "cache_prompt": True, "temperature": 0.0, "stream": True,
                                 "ignore_eos": True,
                                 "logit_bias": [[continuation, FORCED]]})
    drafted = generation.draft_n or 0
    if generation.eval_count != tokens + 1 or generation.eval_duration_ns <= 0:
        return None
    if drafted != tokens - 1 or (drafted and generation.draft_accepted != drafted):
        return None
    return generation.eval_duration_ns / 1e9


def measure_rounds(api: LlamaServerApi, text: str, listener: RunListener, *,
                   sizes: Sequence[int] = ROUND_SIZES, rounds: int = ROUNDS,
                   budget_s: float = BUDGET_S, context: int = CONTEXT,
                   stop: threading.Event | None = None,
                   clock: Callable[[], float] = time.monotonic
                   ) -> tuple[int, dict[int, list[float]], list[float]]:
    """(the context's tokens, seconds per round per size, seconds per plain step) on a
    server started with ``verification_args(max(sizes))``."""
    largest = max(sizes)
    tokens, context = _tokens(api, text, context, 2 * largest + CUT_TRIES * 8 + 16)
    base = tokens[:context]
    cut = min(len(base) // 2, 24)
    found: dict[int, list[float]] = {k: [] for k in sizes}
    steps: list[float] = []
    started = clock()

    def timed(tokens: int) -> float:
        nonlocal cut
        for _ in range(CUT_TRIES):
            if cut >= len(base) - largest:
                break  # cut so often that the repeat would run past the context
            seconds = _round_s(api, base + base[:cut], tokens, base[cut])
            if seconds is not None:
                return seconds
            cut += 8  # the lookup matched something else here: cut elsewhere
        raise LlamaServerError(
            f"llama-server did not run a round checking {tokens} tokens in {CUT_TRIES} "
            "tries (the prompt lookup found nothing to draft)")

    timed(largest)  # a warm-up, and a place to cut where the lookup drafts in full
    last_s = 0.0
    for round_ in range(rounds):
        if round_ >= 2 and clock() - started + last_s > budget_s:
            break  # another round would end past the budget
        began = clock()
        listener.phase(f"probe: round {round_ + 1} of {rounds}, {len(sizes)} sizes")
        order = list(sizes) if round_ % 2 == 0 else list(reversed(sizes))
        steps.append(timed(1))
        for k in order:
            if stop is not None and stop.is_set():
                raise RunAborted("interrupted during the probe; nothing was saved")
            found[k].append(timed(k))
        steps.append(timed(1))
        last_s = clock() - began
    return len(base) + cut, found, steps


def measure(api: LlamaServerApi, text: str, listener: RunListener, *,
            sizes: Sequence[int] = SIZES, rounds: int = ROUNDS, context: int = CONTEXT,
            stop: threading.Event | None = None
            ) -> tuple[int, dict[int, list[float]], list[float]]:
    """The version-1 probe: (the context's tokens, seconds per prefill of k new tokens per
    round, seconds per decoded token per round)."""
    spare = 2 * max(sizes) * (rounds * len(sizes) + 1)
    tokens, context = _tokens(api, text, context, spare)
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


def run_probe(settings: RunSettings, options: LlamaServerOptions, fingerprint: Fingerprint,
              listener: RunListener, stop: threading.Event | None = None) -> CostProbe:
    """Start the target alone (the protocol's baseline config), measure, stop."""
    from specschema.probe import CostPoint, CostProbe

    protocol = settings.protocol
    text = "\n\n".join(p.text for p in protocol.prompts or ()) or protocol.prompt
    with LlamaServerEngine(settings, binary=options.binary, models_dir=options.models_dir,
                           timeout_s=options.timeout_s, threads=options.threads) as engine:
        pre = engine.preflight(fingerprint, listener, stop)
        assert engine.binary is not None
        rounds = knows_synthetic_acceptance(
            engine.binary.path, process.clean_env(engine.binary.library_dir))
        if not rounds:
            listener.phase("probe: this llama-server has no synthetic acceptance "
                           f"({SYNTH_FLAG}); measuring prefills, which read low")
        # A sliding-window cache (Gemma 3's) is cut to its window, so a cached context is
        # not reused whole and more than the k new tokens are processed; the full cache
        # keeps it (and changes nothing for a model without sliding windows).
        engine.extra_args = ["--swa-full"] + (verification_args(max(ROUND_SIZES)) if rounds
                                              else [])
        baseline = protocol.baseline()
        engine.begin_config(baseline, listener)
        try:
            context, found, decoded = (
                measure_rounds(engine.api, text * 4, listener, stop=stop) if rounds
                else measure(engine.api, text * 4, listener, stop=stop))
        finally:
            engine.end_config(baseline, last=True)
        wire, _ = engine.wire_engine(pre, engine.report(pre, listener))
    return CostProbe(
        schema_version=2 if rounds else 1, measured="verification" if rounds else "prefill",
        probe_id=uuid.uuid4(), created_at=datetime.now(UTC),
        client=ClientInfo(name="specsubmit", version=__version__), fingerprint=fingerprint,
        engine=wire, target=pre.models[0], threads=engine.threads, context_tokens=context,
        points=[CostPoint(tokens=k, samples=[round(s, 6) for s in found[k]])
                for k in sorted(found)],
        decode_samples=[round(s, 6) for s in decoded])
