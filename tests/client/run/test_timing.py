"""When each trial ran and the load beside it: the client records them per trial, and a
run that has them is placed in time and judged by the baseline's off-line rule."""

from __future__ import annotations

from pathlib import Path

from specschema import Fingerprint, get_protocol, submission_verdicts
from specschema.blocks import timed
from specschema.stability import baseline_stability
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.run.runner import RunSettings, run_protocol
from specsubmit.run.timing import TrialClock, load_average
from tests.client.engines.llama_server.fake_llama_server import write_fake_binary
from tests.support.realengine.ollama_store import add_model
from tests.support.realengine.tiny_gguf import TinyModel, write_model

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24)
SMALL = TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5)


class Ticks:
    """A clock that moves 1.5 s per reading (one per trial), and a CPU clock 0.01 s per reading."""

    def __init__(self) -> None:
        self.now, self.cpu = 100.0, 3.0

    def monotonic(self) -> float:
        self.now += 1.5
        return self.now

    def process_time(self) -> float:
        self.cpu += 0.01
        return self.cpu


def test_the_clock_counts_from_the_first_trial_and_reads_the_load_after_it() -> None:
    ticks = Ticks()
    loads = iter([2.5, None])
    clock = TrialClock(ticks.monotonic, ticks.process_time, lambda: next(loads))
    clock.begin()
    assert clock.fields() == {"started_s": 0.0, "load_1m": 2.5, "client_cpu_s": 0.01}
    clock.begin()
    assert clock.fields() == {"started_s": 1.5, "load_1m": None, "client_cpu_s": 0.01}
    found = load_average()
    assert found is None or found >= 0.0


def test_a_run_records_times_and_load_and_is_judged_by_its_baseline_line(
        tmp_path: Path) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", write_model(tmp_path / "t.gguf", SMALL))
    add_model(folder, "qwen3:0.6b", write_model(tmp_path / "d.gguf", SMALL.truncated(1)))
    parameters = {"configs": "draft_qwen3_0.6b_n3"}
    settings = RunSettings(protocol=get_protocol("llamacpp-draft").for_run(parameters),
                           parameters=parameters)
    ticks = Ticks()
    clock = TrialClock(ticks.monotonic, ticks.process_time, lambda: 1.25)
    with LlamaServerEngine(settings, binary=write_fake_binary(tmp_path / "bin"),
                           models_dir=folder, startup_timeout_s=60, threads=1) as engine:
        sub = run_protocol(engine, settings, fingerprint=MACHINE, clock=clock).submission
    trials = sorted((t for c in sub.configs for t in c.trials), key=lambda t: t.position)
    assert [t.started_s for t in trials] == [1.5 * i for i in range(len(trials))]
    assert {t.load_1m for t in trials} == {1.25}
    assert {t.client_cpu_s for t in trials} == {0.01}
    assert timed(sub.configs)
    stability = baseline_stability(sub.configs[0], by_time=True)
    assert stability is not None and stability.rule == "off_line"
    assert submission_verdicts(sub)[1] in ("confirmed", "unstable")
