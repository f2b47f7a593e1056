"""llamacpp-map through the real adapter and runner against the fake llama-server: the
draftless mechanisms launched with their own flags, MTP refused for a target without MTP
layers, the draft configs only with --draft, every trial's rounds and per-position counts
from /metrics, results per kind of work, and a result the server's rules accept.
The same on the real engine with a real model: tests/realengine/test_speculation_map_real.py.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specschema import Fingerprint, get_protocol, submission_bytes
from specschema.breakdown import acceptance_of, domain_results
from specserver.ingest import rules
from specserver.ingest.prepare import CheckLimits, prepare_submission
from specsubmit.engines.base import RunListener
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.run.runner import RunOutcome, RunSettings, run_protocol
from tests.client.engines.llama_server.fake_llama_server import write_fake_binary
from tests.support.realengine.tiny_gguf import TinyModel, write_model

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24)
SMALL = TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5)
MAP = get_protocol("llamacpp-map")


class Recorder(RunListener):
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.commands: dict[str, list[str]] = {}

    def warning(self, message: str) -> None:
        self.warnings.append(message)

    def launched(self, config: str, command: list[str]) -> None:
        self.commands[config] = command


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gguf-map")
    return {"target": write_model(folder / "target.gguf", SMALL),
            "draft": write_model(folder / "draft.gguf", dataclasses.replace(SMALL, seed=6))}


def _run(tmp_path: Path, target: Path, parameters: dict[str, str],
         recorder: Recorder) -> RunOutcome:
    protocol = MAP.for_run(parameters)
    settings = RunSettings(protocol=protocol, target=str(target), parameters=parameters)
    binary = write_fake_binary(tmp_path / "bin")
    with LlamaServerEngine(settings, binary=binary, models_dir=tmp_path / "none",
                           startup_timeout_s=60, threads=1) as engine:
        return run_protocol(engine, settings, fingerprint=MACHINE, listener=recorder)


def test_every_mechanism_runs_with_its_flags_and_mtp_needs_mtp_layers(
        tmp_path: Path, files: dict[str, Path]) -> None:
    recorder = Recorder()
    outcome = _run(tmp_path, files["target"], {}, recorder)
    sub = outcome.submission
    assert outcome.error is None and sub.complete
    observed = {c.name: c.speculation.observed for c in sub.configs}
    assert observed == {"no_spec": "not_applied", "ngram_simple_m8": "confirmed",
                        "ngram_mod_16": "confirmed", "mtp_n3": "incompatible"}
    mtp = next(c for c in sub.configs if c.name == "mtp_n3")
    assert mtp.trials == [] and "has no MTP layers" in (mtp.speculation.refusal or "")
    assert any("mtp_n3" in w and "incompatible" in w for w in recorder.warnings)
    ngram = " ".join(recorder.commands["ngram_simple_m8"])
    assert ("--spec-type ngram-simple --spec-ngram-simple-size-n 3 "
            "--spec-ngram-simple-size-m 8") in ngram
    assert "--spec-draft-model" not in ngram and "--metrics" in ngram
    assert "--spec-draft-p-min 0.0" in ngram  # the pinned settings: every speculating start
    assert "--spec-type ngram-mod" in " ".join(recorder.commands["ngram_mod_16"])
    assert "--spec" not in " ".join(recorder.commands["no_spec"])
    launch = next(c for c in sub.configs if c.name == "ngram_mod_16").speculation.launches[0]
    assert launch.spec_type == "ngram-mod" and not launch.draft_model
    assert launch.flags["spec-ngram-mod-n-max"] == "16"
    # the target, a path, is published by its digest only
    assert str(tmp_path) not in submission_bytes(sub).decode()
    assert sub.protocol.parameters["target"].startswith("sha256-")


def test_rounds_and_positions_per_trial_and_results_per_kind_of_work(
        tmp_path: Path, files: dict[str, Path]) -> None:
    sub = _run(tmp_path, files["target"], {"configs": "ngram_simple_m8"},
               Recorder()).submission
    assert [c.name for c in sub.configs] == ["no_spec", "ngram_simple_m8"]
    ngram = sub.configs[1]
    for trial in ngram.trials:
        counters = trial.counters
        assert counters is not None and counters.rounds == -(-trial.eval_count // 8)
        assert counters.accepted_per_position is not None
        assert sum(counters.accepted_per_position) == counters.accepted
        assert counters.mean_accepted_len == pytest.approx(
            1 + counters.accepted / counters.rounds, abs=1e-4)
    found = acceptance_of(ngram.trials)
    assert found is not None and found.per_position is not None
    assert found.per_position[0] == 1.0 and found.per_position[-1] == 0.0
    assert ngram.speculation.mean_accepted_len == pytest.approx(found.mean_accepted_len,
                                                                abs=1e-4)
    domains = [r.domain for r in domain_results(sub, ngram)]
    assert domains == list(MAP.domains)
    # each prompt has its own answer: a trial is compared with the baseline's answers to
    # the same prompt, so nothing differs here (one reference for all said "from token 1")
    assert len({t.output_sha256 for t in ngram.trials}) == len(MAP.domains)
    assert ngram.speculation.outputs_match_baseline is True
    assert ngram.speculation.diverged_at is None
    assert sub.protocol.parameters["configs"] == "ngram_simple_m8"
    # the server plans the same run from the parameters and accepts it, bytes and all
    ctx = rules.RuleContext(MAP, datetime.now(UTC), timedelta(days=30), timedelta(minutes=5))
    assert rules.violations(sub, ctx) == []
    from specschema import envelope_bytes, sign_envelope
    from tests.reliability.hostile import signing_key
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(3)))
    prepared = prepare_submission(body, datetime.now(UTC),
                                  CheckLimits(timedelta(days=30), timedelta(minutes=5)))
    assert prepared.submission_id == str(sub.submission_id)


def test_a_target_whose_header_claims_mtp_but_fails_to_start_it_is_a_refusal(
        tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre-flight trusts the header; llama-server then exits at load. That config is
    incompatible with the engine's words, and the run goes on."""
    monkeypatch.setenv("FAKE_LLAMA_MTP", "absent")
    parameters = {"configs": "ngram_simple_m8,mtp_n3"}
    protocol = MAP.for_run(parameters)
    settings = RunSettings(protocol=protocol, target=str(files["target"]),
                           parameters=parameters)
    recorder = Recorder()
    with LlamaServerEngine(settings, binary=write_fake_binary(tmp_path / "bin"),
                           models_dir=tmp_path / "none", startup_timeout_s=60,
                           threads=1) as engine:
        pre = engine.preflight(MACHINE, recorder)
        pre.refused.pop("mtp_n3")  # as if the header declared MTP layers
        outcome = run_protocol(engine, settings, fingerprint=MACHINE, listener=recorder,
                               pre=pre)
    sub = outcome.submission
    assert outcome.error is None and sub.complete
    mtp = next(c for c in sub.configs if c.name == "mtp_n3")
    assert mtp.speculation.observed == "incompatible" and mtp.trials == []
    assert mtp.speculation.refusal == (
        "llama-server could not start MTP speculation for this target: context type MTP "
        "requested but model doesn't contain MTP layers; failed to create MTP context")
    assert sub.configs[1].speculation.observed == "confirmed"


def test_a_draft_joins_the_run_only_when_given(tmp_path: Path,
                                               files: dict[str, Path]) -> None:
    recorder = Recorder()
    sub = _run(tmp_path, files["target"],
               {"draft": str(files["draft"]), "configs": "draft_n3"}, recorder).submission
    assert [c.name for c in sub.configs] == ["no_spec", "draft_n3"]
    draft = sub.configs[1]
    assert draft.speculation.observed == "confirmed"
    assert draft.draft_model is not None and draft.draft_model.startswith("sha256-")
    assert sub.protocol.parameters["draft"] == draft.draft_model
    assert "--spec-draft-n-max 3" in " ".join(recorder.commands["draft_n3"])
    ctx = rules.RuleContext(MAP, datetime.now(UTC), timedelta(days=30), timedelta(minutes=5))
    assert rules.violations(sub, ctx) == []
    # a forged run: the draft config without the parameter that brings it
    forged = sub.model_copy(update={"protocol": sub.protocol.model_copy(update={
        "parameters": {k: v for k, v in sub.protocol.parameters.items() if k != "draft"}})})
    assert any(v.rule == "configs_match_protocol" for v in rules.violations(forged, ctx))


def test_the_submission_page_shows_each_kind_of_work_and_the_acceptance_by_position(
        tmp_path: Path, files: dict[str, Path]) -> None:
    from specschema import envelope_bytes, sign_envelope
    from tests.reliability.apps import app_on
    from tests.reliability.hostile import signing_key
    from tests.support.inprocess import InProcessClient

    sub = _run(tmp_path, files["target"], {"configs": "ngram_simple_m8,mtp_n3"},
               Recorder()).submission
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(5)))
    with app_on("duckdb", tmp_path, admin_token="t" * 32) as app, \
            InProcessClient(app) as client:
        posted = client.post("/v1/submissions", content=body, peer=("203.0.113.5", 1))
        assert posted.status_code == 201, posted.text
        page = client.get(f"/submissions/{sub.submission_id}").text
        hidden = client.post("/admin/v1/hide", headers={
            "Authorization": f"Bearer {'t' * 32}", "Content-Type": "application/json"},
            content=json.dumps({"submission_id": str(sub.submission_id), "reason": "test"}))
        after = client.get(f"/submissions/{sub.submission_id}").text
    assert "<h2>Per kind of work</h2>" in page
    for label in ("code edit", "translation", "maths"):
        assert f"<th>{label}</th>" in page
    section = page.split("<h2>Per kind of work</h2>", 1)[1].split("</table>", 1)[0]
    assert section.count("<tr><td>") == 1  # the one config that ran: mtp_n3 was refused
    assert "ngram_simple_m8" in section and "x<br>" in section  # confirmed: speedups shown
    assert "acceptance by draft position" in page and 'class="pos"' in page
    # the refused config is said to be not run, never "no counters for these trials"
    mtp_row = page.split('<span class="config-name">mtp_n3</span>', 1)[1].split("</tr>", 1)[0]
    assert "not run: the engine could not run it" in mtp_row
    assert "no draft counters" not in mtp_row
    assert hidden.status_code == 200, hidden.text
    assert "<h2>Per kind of work</h2>" not in after  # a hidden submission's envelope is not
    assert "Hidden by a maintainer" in after  # public, nor are its numbers by kind of work
