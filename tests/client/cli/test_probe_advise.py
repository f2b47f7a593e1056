"""`specsubmit probe` and `specsubmit advise` as a contributor runs them (the fake
llama-server; the real engine in tests/realengine/test_speculation_map_real.py), and the
prediction model they rest on (specschema.predict, specschema.advice)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specschema.forecast import DEPTHS
from specschema.predict import (
    CostCurve,
    expected_tokens,
    implied_draft_seconds,
    mean_acceptance,
    predicted_speedup,
    textbook_speedup,
)
from specsubmit.engines.llama_server.probe import ROUND_SIZES
from tests.client.engines.llama_server.fake_llama_server import write_fake_binary
from tests.support.realengine.tiny_gguf import TinyModel, write_model

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_expected_tokens_and_the_speedup_of_the_general_form() -> None:
    assert expected_tokens([0.9, 0.5, 0.0], 3) == pytest.approx(1 + 0.9 + 0.45)
    assert expected_tokens([1.0, 1.0], 5) == 3.0  # unmeasured positions credit nothing
    flat = CostCurve({1: 0.01, 2: 0.01, 4: 0.01, 8: 0.01})
    # checking is free (the textbook's assumption): S is E[N] with a costless drafter
    assert predicted_speedup([0.8] * 3, 3, flat) == pytest.approx(expected_tokens([0.8] * 3, 3))
    assert textbook_speedup(0.8, 3, 0.0) == pytest.approx(expected_tokens([0.8] * 3, 3))
    # checking 4 tokens costs 3 steps here: the same acceptance barely pays
    dear = CostCurve({1: 0.01, 4: 0.03})
    assert predicted_speedup([0.8] * 3, 3, dear) == pytest.approx(
        expected_tokens([0.8] * 3, 3) / 3)
    assert dear.at(2) == pytest.approx(0.01 + 0.02 / 3) and dear.at(6) == pytest.approx(
        0.03 + 2 * 0.02 / 3)
    # a draft model that costs a step per pass, at depth 2: two passes that draft and one
    # over the checked batch (llama-server runs every target batch through the draft too),
    # three steps more per round: 3 tokens in 4 steps
    assert predicted_speedup([1.0, 1.0], 2, flat, 0.01) == pytest.approx(3 / 4)
    # ... and a plain step between rounds pays a pass of the draft as well: 4 tokens in 6
    assert predicted_speedup([1.0, 1.0], 2, flat, 0.01, plain_steps_per_round=1.0) == \
        pytest.approx(4 / 6)
    # solved back for the pass's cost, the same run gives the step it was built from
    assert implied_draft_seconds(3 / 4, [1.0, 1.0], 2, flat) == pytest.approx(0.01)
    assert implied_draft_seconds(4 / 6, [1.0, 1.0], 2, flat, 1.0) == pytest.approx(0.01)
    # a lookup that drafts in one step of two: each round (3 tokens) is followed by a plain
    # step (1 token), at a step's cost each: 4 tokens in 2 steps
    assert predicted_speedup([1.0, 1.0], 2, flat, plain_steps_per_round=1.0) == pytest.approx(2)
    assert predicted_speedup([1.0, 1.0], 2, dear, plain_steps_per_round=1.0) < \
        predicted_speedup([1.0, 1.0], 2, dear)
    alpha = mean_acceptance([0.9, 0.8, 0.7])
    assert sum(alpha ** k for k in range(4)) == pytest.approx(
        expected_tokens([0.9, 0.8, 0.7], 3), rel=1e-9)
    # past the largest measured size a curve never falls: a cheaper last size is a tile
    tiled = CostCurve({1: 0.01, 3: 0.03, 4: 0.025})
    assert tiled.at(4) == 0.025 and tiled.at(6) == 0.025 and tiled.at(2) == pytest.approx(0.02)
    assert not math.isnan(textbook_speedup(1.0, 4, 0.1))


def test_the_probe_measures_every_round_the_advisor_predicts() -> None:
    # a round at depth g checks g + 1 tokens; a size read between two measured ones would
    # read its neighbours' cost, which differs by the batch's tiles (predict.CostCurve)
    assert {d + 1 for d in DEPTHS} <= set(ROUND_SIZES)


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    found = {k: v for k, v in os.environ.items() if not k.startswith("SPECSUBMIT_")}
    # the engine lock in tmp too: a run of llama-server elsewhere on the machine holds
    # the shared one (local/enginelock.py)
    found.update(SPECSUBMIT_HOME=str(tmp_path / "state"), HOME=str(tmp_path / "home"),
                 SPECSUBMIT_LOCKS=str(tmp_path / "locks"), COLUMNS="160")
    return found


def _probe(tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path,
                                                          subprocess.CompletedProcess[str]]:
    """(the tiny target, the fake llama-server, `specsubmit probe --json` of them)."""
    target = write_model(tmp_path / "target.gguf",
                         TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5))
    binary = write_fake_binary(tmp_path / "bin")
    probe = subprocess.run([SCRIPT, "probe", "--target", str(target), "--llama-server",
                            str(binary), "--llama-threads", "1", "--json"],
                           capture_output=True, text=True, env=env, timeout=300, check=False)
    assert probe.returncode == 0, probe.stderr
    return target, binary, probe


def test_probe_measures_each_size_and_advise_predicts_from_a_result(
        tmp_path: Path, env: dict[str, str]) -> None:
    target, binary, probe = _probe(tmp_path, env)
    data = json.loads(probe.stdout)
    # the fake has synthetic acceptance: each point is a round checking k tokens, which
    # it spends 1 + 0.5 k ms on (a plain step: 1.5 ms); the probe read exactly those
    assert (data["schema_version"], data["measured"]) == (2, "verification")
    assert [p["tokens"] for p in data["points"]] == list(ROUND_SIZES)
    assert all(s == pytest.approx((1 + 0.5 * p["tokens"]) / 1000)
               for p in data["points"] for s in p["samples"])
    assert len(data["decode_samples"]) >= 4 and all(
        s == pytest.approx(1.5e-3) for s in data["decode_samples"])
    assert data["target"]["name"].startswith("sha256-") and str(tmp_path) not in probe.stdout
    saved = list((tmp_path / "state" / "probes").glob("*.json"))
    assert len(saved) == 1
    # a result to advise on: the speculation map's n-gram config on the same target
    run = subprocess.run([SCRIPT, "run", "--engine", "llama-server", "--protocol",
                          "llamacpp-map", "--target", str(target), "--configs",
                          "ngram_simple_m8", "--llama-server", str(binary), "--llama-threads",
                          "1", "--no-submit", "--output", str(tmp_path / "result.json")],
                         capture_output=True, text=True, env=env, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    advice = subprocess.run([SCRIPT, "advise", "--result", str(tmp_path / "result.json"),
                             "--json"], capture_output=True, text=True, env=env, timeout=60,
                            check=False)
    assert advice.returncode == 0, advice.stderr
    found = json.loads(advice.stdout)
    rows = [p for p in found["predictions"] if p["config"] == "ngram_simple_m8"]
    assert [p["depth"] for p in rows] == list(range(1, 9))
    assert all(p["predicted"] > 0 and len(p["by_domain"]) == 6 for p in rows)
    assert rows[-1]["measured"] is not None and rows[0]["measured"] is None
    assert found["acceptance_from"] == "this result"
    assert found["recommendation"].startswith(("use ngram_simple_m8 at depth",
                                               "leave speculation off"))
    shown = subprocess.run([SCRIPT, "advise", "--result", str(tmp_path / "result.json")],
                           capture_output=True, text=True, env=env, timeout=60, check=False)
    assert "Predicted decode speedup on this machine" in shown.stdout
    assert found["recommendation"] in shown.stdout


def test_a_build_without_synthetic_acceptance_is_probed_by_prefills(
        tmp_path: Path, env: dict[str, str]) -> None:
    _, _, probe = _probe(tmp_path, {**env, "FAKE_LLAMA_SYNTH": "absent"})
    data = json.loads(probe.stdout)
    assert (data["schema_version"], data["measured"]) == (1, "prefill")
    assert "no synthetic acceptance" in probe.stderr
    # the fake processes exactly the k new tokens at 1 + 0.5 k ms: the probe read that
    assert [p["tokens"] for p in data["points"]] == list(range(2, 17))
    assert all(s == pytest.approx((1 + 0.5 * p["tokens"]) / 1000)
               for p in data["points"] for s in p["samples"])


def test_probes_of_either_version_parse_and_say_what_they_measured() -> None:
    from specschema.errors import PayloadSchemaError
    from specschema.probe import CostPoint, parse_probe, probe_bytes

    # written by `specsubmit probe --json` at commit 99e2748 (before version 2), against
    # the fake llama-server: a probe as the first clients saved and sent them
    saved = (FIXTURES / "probes" / "probe-v1.json").read_bytes()
    assert b'"measured"' not in saved and json.loads(saved)["schema_version"] == 1
    first = parse_probe(saved)
    assert (first.schema_version, first.measured) == (1, "prefill")
    second = first.model_copy(update={"schema_version": 2, "measured": "verification",
                                      "points": [CostPoint(tokens=4, samples=[0.05])]})
    assert parse_probe(probe_bytes(second)).measured == "verification"
    for version, measured in ((2, "prefill"), (1, "verification")):
        bad = json.loads(probe_bytes(first))
        bad.update(schema_version=version, measured=measured)
        with pytest.raises(PayloadSchemaError):
            parse_probe(json.dumps(bad).encode())


def test_advise_without_a_probe_of_that_target_says_what_to_run(
        tmp_path: Path, env: dict[str, str]) -> None:
    from specschema.examples import example_submission
    from specschema.payload import submission_bytes

    result = tmp_path / "result.json"
    result.write_bytes(submission_bytes(example_submission("llamacpp-draft", seed=3,
                                                           schema_version=2, blocks=True)))
    advice = subprocess.run([SCRIPT, "advise", "--result", str(result)], capture_output=True,
                            text=True, env=env, timeout=60, check=False)
    assert advice.returncode == 2
    assert advice.stderr.strip().startswith("specsubmit: error: no probe of this result's "
                                            "target")
    assert "specsubmit probe --target MODEL" in advice.stderr
