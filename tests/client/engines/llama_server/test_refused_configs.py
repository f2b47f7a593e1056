"""A draft config llama-server cannot run is a per-config verdict, never the end of the run:
refused by llama.cpp's rule before any start (a retexted vocabulary tail), missing from the
models folder, refused at start (the log's two lines), refused silently (``/slots`` only),
or failing to load. Run through the real adapter and runner against the fake llama-server
(fake_llama_server.py); the same on the real engine: tests/realengine/test_refused_drafts.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specschema import Fingerprint, get_protocol
from specschema.conclusion import conclusion
from specschema.summary import summarize
from specserver.ingest import rules
from specsubmit.engines.base import RunListener
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.errors import ModelNotInStore
from specsubmit.run.runner import RunSettings, run_protocol
from tests.client.engines.llama_server.fake_llama_server import write_fake_binary
from tests.support.realengine.ollama_store import add_model
from tests.support.realengine.tiny_gguf import TinyModel, write_model

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24)
SMALL = TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5)
PROTOCOL = get_protocol("llamacpp-draft")
# llamacpp-draft's drafts: qwen3:0.6b (n3, n8), qwen3:1.7b, qwen2.5:0.5b, qwen2.5:1.5b


class Recorder(RunListener):
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gguf-refused")
    return {
        "target": write_model(folder / "target.gguf", SMALL),
        "draft": write_model(folder / "draft.gguf", SMALL.truncated(1)),
        # Same header as the draft but other weights: the fake refuses it by digest.
        "draft_b": write_model(folder / "draft_b.gguf", dataclasses.replace(SMALL, seed=6)),
        "draft_c": write_model(folder / "draft_c.gguf", dataclasses.replace(SMALL, seed=7)),
        "retext": write_model(folder / "retext.gguf", dataclasses.replace(SMALL, retext_tail=4)),
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _run(tmp_path: Path, folder: Path, recorder: Recorder | None = None):  # type: ignore[no-untyped-def]
    settings = RunSettings(protocol=PROTOCOL)
    binary = write_fake_binary(tmp_path / "bin")
    with LlamaServerEngine(settings, binary=binary, models_dir=folder,
                           startup_timeout_s=60) as engine:
        return run_protocol(engine, settings, fingerprint=MACHINE,
                            listener=recorder or Recorder())


def _server_rules(sub) -> list[rules.Violation]:  # type: ignore[no-untyped-def]
    ctx = rules.RuleContext(PROTOCOL, datetime.now(UTC), timedelta(days=30),
                             timedelta(minutes=5))
    return rules.violations(sub, ctx)


def test_refused_configs_are_incompatible_and_the_others_run(
        tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", files["target"])
    add_model(folder, "qwen3:0.6b", files["draft"])  # n3 and n8: both run
    add_model(folder, "qwen3:1.7b", files["draft_b"])  # refused at start (log + /slots)
    add_model(folder, "qwen2.5:0.5b", files["retext"])  # refused by the rule, never started
    add_model(folder, "qwen2.5:1.5b", files["draft_c"])  # refused silently (/slots only)
    monkeypatch.setenv("FAKE_LLAMA_DRAFTS", f"{_digest(files['draft_b'])}=refuse,"
                                            f"{_digest(files['draft_c'])}=silent")
    recorder = Recorder()
    outcome = _run(tmp_path, folder, recorder)
    sub = outcome.submission
    assert outcome.error is None and not outcome.interrupted and sub.complete
    observed = {c.name: c.speculation.observed for c in sub.configs}
    assert observed == {
        "no_draft": "not_applied", "draft_qwen3_0.6b_n3": "confirmed",
        "draft_qwen3_0.6b_n8": "confirmed", "draft_qwen3_1.7b_n8": "incompatible",
        "draft_qwen2.5_0.5b_n8": "incompatible", "draft_qwen2.5_1.5b_n8": "incompatible"}
    trials = {c.name: len(c.trials) for c in sub.configs}
    refused_names = {"draft_qwen3_1.7b_n8", "draft_qwen2.5_0.5b_n8", "draft_qwen2.5_1.5b_n8"}
    assert trials == {c.name: 0 if c.name in refused_names else PROTOCOL.trials_for(c.name)
                      for c in PROTOCOL.configs}
    refusal = {c.name: c.speculation.refusal for c in sub.configs}
    n = len(read_tokens(files["target"]))
    assert refusal["draft_qwen2.5_0.5b_n8"] == (
        f"llama.cpp refuses qwen2.5:0.5b as a draft for qwen3:14b: their vocabularies differ "
        f"(token {n - 4} is '<|retext_0|>' in the draft but {read_tokens(files['target'])[n - 4]!r}"
        " in the target), and llama-server would serve without the draft")
    assert refusal["draft_qwen3_1.7b_n8"] == (
        "llama-server started without speculation: it refused qwen3:1.7b as a draft for "
        "qwen3:14b (the target and draft vocabs are not compatible; failed to initialize "
        "speculative decoding context: draft model vocab type must match target model to use "
        "speculation)")
    assert refusal["draft_qwen2.5_1.5b_n8"] == (
        "llama-server started without speculation: it refused qwen2.5:1.5b as a draft for "
        "qwen3:14b (/slots shows speculative: false after the start)")
    assert refusal["no_draft"] is None and refusal["draft_qwen3_0.6b_n8"] is None
    # No --llama-threads: the default (threads.default_threads), the same in every launch.
    used = {launch.threads for c in sub.configs for launch in c.speculation.launches}
    assert len(used) == 1 and (used.pop() or 0) >= 1
    assert str(folder) not in sub.model_dump_json()
    # The positions of the trials that ran are the schedule's own; the server accepts it.
    assert _server_rules(sub) == []
    # Words: each refused config named with its reason, and never a speedup.
    words = conclusion(summarize(sub), {c.name: c.speculation for c in sub.configs},
                       engine_version=sub.engine.version, complete=True)
    assert "draft_qwen2.5_0.5b_n8 was not run: llama.cpp refuses qwen2.5:0.5b" in words
    assert "draft_qwen3_1.7b_n8 was not run: llama-server started without speculation" in words
    assert sum("recorded as incompatible" in w for w in recorder.warnings) == 3


def read_tokens(path: Path) -> tuple[str, ...]:
    from specsubmit.engines.llama_server.gguf_header import read_header

    return read_header(path).tokens


def test_a_draft_that_fails_to_load_and_a_missing_one(
        tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", files["target"])
    add_model(folder, "qwen3:0.6b", files["draft"])
    add_model(folder, "qwen3:1.7b", files["draft_b"])  # fails to load
    add_model(folder, "qwen2.5:0.5b", files["draft"])
    # qwen2.5:1.5b was never pulled
    monkeypatch.setenv("FAKE_LLAMA_DRAFTS", f"{_digest(files['draft_b'])}=fail")
    outcome = _run(tmp_path, folder)
    sub = outcome.submission
    assert sub.complete and outcome.error is None
    by_name = {c.name: c.speculation for c in sub.configs}
    assert by_name["draft_qwen2.5_1.5b_n8"].observed == "incompatible"
    assert by_name["draft_qwen2.5_1.5b_n8"].refusal == (
        "the draft model qwen2.5:1.5b is not in the models folder (run `ollama pull "
        "qwen2.5:1.5b`)")
    assert by_name["draft_qwen3_1.7b_n8"].observed == "incompatible"
    refusal = by_name["draft_qwen3_1.7b_n8"].refusal or ""
    assert refusal.startswith("llama-server could not load the draft model qwen3:1.7b: ")
    assert str(tmp_path) not in refusal and "sha256:" in refusal
    assert by_name["draft_qwen2.5_0.5b_n8"].observed == "confirmed"
    assert _server_rules(sub) == []


def test_when_every_draft_is_refused_before_any_start_the_run_stops(
        tmp_path: Path, files: dict[str, Path]) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", files["target"])  # no draft pulled at all
    with pytest.raises(ModelNotInStore, match="model 'qwen3:0.6b' is not in the Ollama"):
        _run(tmp_path, folder)


def test_a_baseline_refusal_or_counters_on_an_incompatible_config_are_refused_by_the_server(
        tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", files["target"])
    for name in ("qwen3:0.6b", "qwen3:1.7b", "qwen2.5:0.5b"):
        add_model(folder, name, files["draft"])
    add_model(folder, "qwen2.5:1.5b", files["retext"])
    sub = _run(tmp_path, folder).submission
    configs = list(sub.configs)
    i = next(i for i, c in enumerate(configs) if c.speculation.observed == "incompatible")
    # An incompatible config that claims trials with counters: not what the evidence says.
    donor = next(c for c in configs if c.speculation.observed == "confirmed")
    forged = configs[i].model_copy(update={
        "trials": donor.trials, "speculation": configs[i].speculation.model_copy(update={
            "drafted_tokens": donor.speculation.drafted_tokens,
            "accepted_tokens": donor.speculation.accepted_tokens,
            "counters_source": "engine_api"})})
    bad = sub.model_copy(update={"configs": [*configs[:i], forged, *configs[i + 1:]]})
    rules = {(v.rule, v.message) for v in _server_rules(bad)}
    assert ("speculation_coherent", "acceptance counters for a config that cannot speculate"
            ) in rules
    baseline = configs[0].model_copy(update={"speculation": configs[0].speculation.model_copy(
        update={"refusal": "made up"})})
    bad = sub.model_copy(update={"configs": [baseline, *configs[1:]]})
    assert any(v.path == "configs.0.speculation.refusal" for v in _server_rules(bad))
    # The wire: v1 has no refusal, and a draft config refused keeps zero trials only.
    assert sub.schema_version == 2


def test_outputs_compare_token_by_token_with_the_reason_in_words(
        tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every drafted config's tokens differ from the baseline's from token 83 on, the
    0 %-accepted one's too: the words say it is the target's batched arithmetic."""
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", files["target"])
    for name in ("qwen3:0.6b", "qwen3:1.7b", "qwen2.5:1.5b"):
        add_model(folder, name, files["draft"])
    add_model(folder, "qwen2.5:0.5b", files["draft_c"])  # accepts nothing
    monkeypatch.setenv("FAKE_LLAMA_DRAFTS", f"{_digest(files['draft_c'])}=blind")
    monkeypatch.setenv("FAKE_LLAMA_DIVERGE_AT", "82")
    sub = _run(tmp_path, folder).submission
    drafts = [c for c in sub.configs if c.role == "draft"]
    assert all(c.speculation.outputs_match_baseline is False for c in drafts)
    assert {c.speculation.diverged_at for c in drafts} == {82}
    assert all(t.diverged_at == 82 for c in drafts for t in c.trials)
    baseline = sub.configs[0]
    assert all(t.diverged_at is None for t in baseline.trials)
    blind = next(c for c in drafts if c.name == "draft_qwen2.5_0.5b_n8")
    assert blind.speculation.accepted_tokens == 0 and blind.speculation.drafted_tokens
    words = conclusion(summarize(sub), {c.name: c.speculation for c in sub.configs},
                       engine_version=sub.engine.version, complete=True, engine="llama-server")
    assert "its output differed from the baseline's from generated token 83 on" in words
    assert ("draft_qwen2.5_0.5b_n8 too, which had none of its drafted tokens accepted, so its "
            "output is the target's own: this is the target's batched verification "
            "arithmetic, not the draft") in words
    assert _server_rules(sub) == []


def test_the_same_tokens_are_the_same_output(
        tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", files["target"])
    for name in ("qwen3:0.6b", "qwen3:1.7b", "qwen2.5:0.5b", "qwen2.5:1.5b"):
        add_model(folder, name, files["draft"])
    sub = _run(tmp_path, folder).submission
    assert all(c.speculation.outputs_match_baseline is True and c.speculation.diverged_at
               is None for c in sub.configs if c.role == "draft")
    words = conclusion(summarize(sub), {c.name: c.speculation for c in sub.configs},
                       engine_version=sub.engine.version, complete=True, engine="llama-server")
    assert "differed" not in words
