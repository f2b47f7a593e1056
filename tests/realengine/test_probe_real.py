"""`specsubmit probe` on the real engine: Gemma 3 270M on the pinned llama-server, one thread.

The probe's points are speculative rounds as llama-server runs them (synthetic acceptance,
every draft accepted), so what they say about this CPU can be checked against what a CPU
does: checking k tokens in one batch costs more than one plain step (k outputs over a
262,144-token vocabulary, the sampler at each) and less than k steps (the weights are read
once); and the largest round costs more than one checking 2. No figure is pinned: the
machine is shared and its load moves every time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specsubmit.engines.llama_server.probe import ROUND_SIZES

pytestmark = pytest.mark.realengine

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))


def _probe(tmp_path: Path, llama_server_bin: Path, target: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECSUBMIT_")}
    env.update(SPECSUBMIT_HOME=str(tmp_path / "state"), HOME=str(tmp_path / "home"),
               SPECSUBMIT_LOCKS=str(tmp_path / "locks"))
    done = subprocess.run([SCRIPT, "probe", "--target", str(target), "--llama-server",
                           str(llama_server_bin), "--llama-threads", "1", "--json"],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_the_probe_measures_rounds_that_cost_between_one_and_k_steps(
        tmp_path: Path, llama_server_bin: Path, gemma_model: Path) -> None:
    probe = _probe(tmp_path, llama_server_bin, gemma_model)
    assert (probe["schema_version"], probe["measured"]) == (2, "verification")
    rounds = {p["tokens"]: statistics.median(p["samples"]) for p in probe["points"]}
    step = statistics.median(probe["decode_samples"])
    largest = max(ROUND_SIZES)
    assert sorted(rounds) == sorted(ROUND_SIZES)
    assert all(len(p["samples"]) >= 2 for p in probe["points"])
    assert rounds[largest] > rounds[2], rounds
    for k in (9, largest):
        assert step < rounds[k] < k * step, (k, rounds[k], step)
    assert probe["context_tokens"] >= 64


def test_a_target_that_does_not_copy_the_repeated_text_is_probed(
        tmp_path: Path, llama_server_bin: Path, gemma_first6: Path) -> None:
    """The model's first 6 blocks continue a repeated passage with something else: left to
    itself, its prompt lookup found nothing to draft at any cut, and the probe failed."""
    probe = _probe(tmp_path, llama_server_bin, gemma_first6)
    assert probe["measured"] == "verification"
    assert sorted(p["tokens"] for p in probe["points"]) == sorted(ROUND_SIZES)
    assert all(len(p["samples"]) >= 2 for p in probe["points"])
