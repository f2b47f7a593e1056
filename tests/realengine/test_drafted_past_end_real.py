"""An identical copy of the target as its draft reads 100 % of the drafts it could finish,
at token limits where the last round's draft is cut short (23 and 50 tokens at depth 8:
neither is one more than a multiple of 9), through the client's own stream parsing and
counters: the pinned llama-server caps that draft at the tokens left less one instead of
drafting past the limit, so the client says none was drafted past the end, and the rounds
from /metrics show the cut (fewer drafted than rounds x depth)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specschema.breakdown import acceptance_of
from specsubmit.engines.llama_server.api import LlamaServerApi
from specsubmit.engines.llama_server.metrics import parse_spec_metrics, with_rounds
from specsubmit.run.submission import trial_from
from tests.support.realengine.server import running_server

pytestmark = pytest.mark.realengine

DEPTH = 8


@pytest.mark.parametrize("limit", [23, 50])
def test_an_identical_copy_reads_every_draft_it_could_finish(
        tmp_path: Path, llama_server_bin: Path, gemma_model: Path, limit: int) -> None:
    assert (limit - 1) % (DEPTH + 1) not in (0, 1)  # the last round cannot draft in full
    body = {"prompt": "Write a long story about a lighthouse keeper.", "n_predict": limit,
            "temperature": 0, "seed": 42, "top_k": 40, "top_p": 0.9, "repeat_penalty": 1.0,
            "min_p": 0, "cache_prompt": False, "stream": True, "ignore_eos": True}
    with running_server(llama_server_bin, gemma_model, tmp_path / "server.log",
                        draft=gemma_model, draft_n_max=DEPTH) as server:
        api = LlamaServerApi(server.base_url, timeout_s=300)
        try:
            before = parse_spec_metrics(api.metrics_text() or "")
            gen = api.completion(body)
            after = parse_spec_metrics(api.metrics_text() or "")
        finally:
            api.close()
    assert before is not None and after is not None
    counts = after.since(before)
    gen = with_rounds(gen, counts)
    assert gen.done_reason == "length" and gen.eval_count == limit
    trial = trial_from(gen, index=0, position=0, cold_load_ns=10**9)
    counters = trial.counters
    assert counters is not None and counters.rounds is not None
    # the last round's draft was cut by the limit: fewer drafted than full rounds
    assert counters.drafted < counters.rounds * DEPTH
    assert counters.drafted_past_end == 0
    assert counters.accepted == counters.drafted
    found = acceptance_of([trial])
    assert found is not None and found.rate == 1.0
