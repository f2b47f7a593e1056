"""An identical copy of the target as its draft reads 100 % of its drafts on the pinned
llama-server, every trial stopping at the token limit: the server never drafts past the
limit (``get_n_draft_max`` in tools/server/server-context.cpp caps a draft at the tokens
left less one), so the result says none was drafted past the end (``drafted_past_end``).
Through `specsubmit run --budget` on Gemma 3 270M (llamacpp-map, --draft the target's own
file, draft_n8), which also prints its plan before the first trial and ends in its budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specschema.payload import parse_submission

pytestmark = pytest.mark.realengine

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))
BUDGET_MIN = 10


def test_an_identical_copy_reads_every_draft_and_the_run_keeps_its_budget(
        tmp_path: Path, llama_server_bin: Path, gemma_model: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPECSUBMIT_", "OLLAMA_", "LLAMA_ARG_"))}
    env.update(HOME=str(tmp_path / "home"), SPECSUBMIT_HOME=str(tmp_path / "state"),
               SPECSUBMIT_LOCKS=str(tmp_path / "locks"),
               COLUMNS="160")
    argv = [SCRIPT, "run", "--engine", "llama-server", "--protocol", "llamacpp-map",
            "--target", str(gemma_model), "--draft", str(gemma_model), "--configs",
            "draft_n8", "--llama-server", str(llama_server_bin), "--llama-threads", "1",
            "--budget", str(BUDGET_MIN), "--no-submit", "--json"]
    began = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1500, env=env,
                            check=False, stdin=subprocess.DEVNULL)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr[-3000:]
    sub = parse_submission(result.stdout.encode())
    draft = sub.configs[1]
    assert draft.name == "draft_n8" and draft.speculation.observed in ("confirmed", "unstable")
    limit = draft.request_options["num_predict"]
    for trial in draft.trials:
        counters = trial.counters
        assert counters is not None and counters.drafted > 0
        assert counters.accepted == counters.drafted, trial  # 100 %, the last round too
        if trial.done_reason == "length":
            assert trial.eval_count == limit
            assert counters.drafted_past_end == 0
        # every round's draft accepted whole: tokens = accepted + one of the target's own
        # per round, up to the limit
        assert counters.rounds is not None
        assert counters.accepted + counters.rounds <= trial.eval_count
    assert any(t.done_reason == "length" for t in draft.trials)
    # the plan came before the trials, and the run ended within its budget and a fifth
    assert "plan: llamacpp-map v1, 1 round as the protocol asks" in result.stderr
    assert took <= BUDGET_MIN * 60 * 1.2, took
