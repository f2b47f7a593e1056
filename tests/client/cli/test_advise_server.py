"""`specsubmit probe` then `specsubmit advise --target --server` against a real specserver
(uvicorn on a free port) that holds other machines' results for the same target: the
prediction printed is the one GET /v1/predict gives once this machine's probe is on the
server, and before that the same function over the server's inputs and the local probe.
The probe is measured on the fake llama-server (tests/client/engines/llama_server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import httpx
import pytest

from specschema.crowd import (
    Candidate,
    CostUnit,
    CrowdInputs,
    Profile,
    cost_unit,
    inputs_from_json,
    inputs_json,
)
from specschema.forecast import forecast
from specschema.probe import CostProbe
from tests.client.engines.llama_server.fake_llama_server import write_fake_binary
from tests.client.submit_server import RealServer
from tests.support.crowd import (
    M3_PRO,
    RADEON,
    RTX,
    cost_probe,
    map_result,
    signed_result,
    target_of,
)
from tests.support.realengine.tiny_gguf import TinyModel, write_model

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    found = {k: v for k, v in os.environ.items() if not k.startswith("SPECSUBMIT_")}
    found.update(SPECSUBMIT_HOME=str(tmp_path / "state"), HOME=str(tmp_path / "home"),
                 SPECSUBMIT_LOCKS=str(tmp_path / "locks"), COLUMNS="200")
    return found


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[RealServer]:
    # a small deployment: no probation, no cohorts (each test key its own voice)
    running = RealServer(tmp_path, new_key_probation_days=0, cohort_window_hours=0).start()
    yield running
    running.stop()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_probe_then_advise_prints_what_the_server_predicts(
        tmp_path: Path, env: dict[str, str], server: RealServer) -> None:
    model = write_model(tmp_path / "target.gguf",
                        TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5))
    binary = write_fake_binary(tmp_path / "bin")
    made = _cli(env, "probe", "--target", str(model), "--llama-server", str(binary),
                "--llama-threads", "1", "--json")
    assert made.returncode == 0, made.stderr
    probe = CostProbe.model_validate_json(made.stdout)
    saved = next((tmp_path / "state" / "probes").glob("*.json"))
    # three other machines ran the speculation map on the same model file
    for seed, machine in enumerate((RTX, M3_PRO, RADEON)):
        posted = httpx.post(f"{server.url}/v1/submissions",
                            content=signed_result(seed, machine, seed, probe.target))
        assert posted.status_code == 201, posted.text
    query = {"target": probe.target.digest, "chip": probe.fingerprint.chip,
             "engine": "llama-server", "memory_gb": str(probe.fingerprint.memory_gb)}

    # before this machine's probe is on the server: predicted here, from its inputs
    local = _cli(env, "advise", "--target", str(model), "--server", server.url, "--json")
    assert local.returncode == 0, local.stderr
    assert "pinned its log key" in local.stderr  # each contact checks the server's log
    mine = json.loads(local.stdout)
    assert mine["cost"]["source"] == "your probe"
    served = httpx.get(f"{server.url}/v1/predict", params=query).json()
    assert served["cost"] is None
    inputs = inputs_from_json(served["inputs"])
    assert mine["candidates"] == forecast(inputs, (cost_unit(probe),), "your probe")[
        "candidates"]

    sent = _cli(env, "probe", "--send", str(saved), "--server", server.url, "--yes")
    assert sent.returncode == 0, sent.stderr
    assert "This probe would be sent to" in sent.stderr and "probe sent:" in sent.stderr
    assert "pinned" not in sent.stderr and "not checked" not in sent.stderr  # kept, checked

    shown = _cli(env, "advise", "--target", str(model), "--server", server.url, "--json")
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    served = httpx.get(f"{server.url}/v1/predict", params=query).json()
    assert answer == served  # the same numbers, the same line
    assert answer["cost"] == {**served["cost"], "source": "crowd", "contributors": 1}
    ngram = next(c for c in answer["candidates"] if c["domain"] == "all"
                 and c["candidate"]["spec_type"] == "ngram-simple")
    assert ngram["contributors"] == 3 and ngram["predictions"]
    assert all(r["low"] <= r["predicted"] <= r["high"] for r in ngram["predictions"])
    assert {c["domain"] for c in answer["candidates"]} >= {"all", "code", "chat"}

    text = _cli(env, "advise", "--target", str(model), "--server", server.url)
    assert text.returncode == 0, text.stderr
    assert "Predicted decode speedup on" in text.stdout
    assert served["recommendation"] in " ".join(text.stdout.split())
    assert "draft-mtp, runs at depth 3: not predicted:" in text.stdout


def test_advise_refuses_what_it_cannot_answer(tmp_path: Path, env: dict[str, str],
                                              server: RealServer) -> None:
    none = _cli(env, "advise", "--target", "nothing-probed", "--server", server.url)
    assert none.returncode == 2
    assert "no probe of nothing-probed on this machine: run `specsubmit probe" in none.stderr
    both = _cli(env, "advise", "--target", "x", "--result", "y.json")
    assert both.returncode == 2 and "either --result FILE or --target NAME" in both.stderr
    no_server = _cli(env, "advise", "--target", "x")
    assert no_server.returncode == 2 and "pass --server URL" in no_server.stderr
    domain = _cli(env, "advise", "--target", "x", "--server", server.url, "--domain", "poems")
    assert domain.returncode == 2 and "--domain must be one of" in domain.stderr


@pytest.mark.parametrize("inputs", [
    {"profiles": [{"candidate": []}]},
    {"profiles": "many"},
    # a cost of nothing at all: no division by it
    inputs_json(CrowdInputs("a" * 64, None, "Apple M2", 24, "llama-server", 1, (Profile(
        Candidate("llama-server", "server_launch", "ngram-simple", 4), "all",
        ((0.9, 0.8, 0.7, 0.6),)),), (CostUnit({1: (0.0,), 5: (0.0,)}),), 1,
        cost_measured="verification")),
])
def test_an_answer_it_cannot_read_is_said_in_one_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inputs: dict[str, object]) -> None:
    import specsubmit.send
    from specsubmit.cli.prediction import crowd_advice
    from specsubmit.errors import SubmitError

    monkeypatch.setattr(specsubmit.send, "fetch_prediction",
                        lambda server, query: {"candidates": [], "inputs": inputs})
    probe = cost_probe(target_of(map_result(0, M3_PRO)), M3_PRO)
    with pytest.raises(SubmitError, match="sent a prediction this client cannot read"):
        crowd_advice("http://127.0.0.1:9", probe, None, own_probe=False)


@pytest.mark.parametrize(("crowd", "probe_version", "used"), [
    ("prefill", 2, "your probe"),  # the crowd's prefills read low: this machine's rounds
    ("verification", 2, "crowd"),
    ("prefill", 1, "crowd"),  # both prefills: the crowd's, as the server answers
])
def test_a_probe_that_timed_rounds_is_used_over_the_crowds_prefills(
        monkeypatch: pytest.MonkeyPatch, crowd: str, probe_version: Literal[1, 2],
        used: str) -> None:
    import specsubmit.send
    from specsubmit.cli.prediction import crowd_advice

    inputs = inputs_json(CrowdInputs("a" * 64, None, "Apple M2", 24, "llama-server", 1, (
        Profile(Candidate("llama-server", "server_launch", "ngram-simple", 4), "all",
                ((0.9, 0.8, 0.7, 0.6),)),), (CostUnit({1: (0.02,), 5: (0.03,)}),), 1,
        cost_measured=crowd))
    monkeypatch.setattr(specsubmit.send, "fetch_prediction",
                        lambda server, query: {"candidates": [], "inputs": inputs})
    probe = cost_probe(target_of(map_result(0, M3_PRO)), M3_PRO, version=probe_version)
    answer = crowd_advice("http://127.0.0.1:9", probe, None, own_probe=False)
    assert answer["cost"]["source"] == used
    assert answer["cost"]["measured"] == (crowd if used == "crowd" else "verification")


def test_a_draft_costed_from_its_size_is_said_so() -> None:
    from rich.console import Console

    from specsubmit.cli.prediction import show_advice

    draft = Candidate("llama-server", "server_launch", "draft-simple", 4, draft="small",
                      draft_digest="d" * 64)
    crowd = CrowdInputs("a" * 64, None, "Apple M2", 24, "llama-server", 1, (
        Profile(draft, "all", ((0.9, 0.8, 0.7, 0.6),), draft_bytes=250),),
        target_bytes=1000)
    answer = forecast(crowd, (CostUnit({1: (0.02,), 5: (0.03,)}),), "your probe")
    console = Console(record=True, width=200)
    show_advice(answer, console)
    text = " ".join(console.export_text().split())
    assert ("draft-simple with small, runs at depth 4: its draft was never probed on this "
            "chip: its time per token is this target's scaled by their file sizes") in text


def test_an_interval_that_carries_the_models_miss_says_so() -> None:
    from rich.console import Console

    from specsubmit.cli.prediction import show_advice

    ngram = Candidate("llama-server", "server_launch", "ngram-simple", 4)
    units = ((0.9, 0.8, 0.7, 0.6),) * 3
    missed = Profile(ngram, "all", units, residual=(-0.05, 0.06, -0.04))
    for profile, said in ((missed, True), (Profile(ngram, "all", units), False)):
        crowd = CrowdInputs("a" * 64, None, "Apple M2", 24, "llama-server", 3, (profile,))
        answer = forecast(crowd, (CostUnit({1: (0.02,), 5: (0.03,)}),), "your probe")
        console = Console(record=True, width=200)
        show_advice(answer, console)
        text = " ".join(console.export_text().split())
        assert ("ngram-simple, runs at depth 4: its interval carries how far the model "
                "missed on 3 contributors' own machines (their runs against their probes: "
                "5.1% typical)" in text) is said
