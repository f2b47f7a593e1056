"""`specsubmit run --engine llama-server --protocol llamacpp-map` on the real engine with a
real model (Gemma 3 270M Q4_K_M from PyPI, tests/support/realengine/gemma.py): prompt
lookup and ngram-mod on six kinds of work, MTP refused for a target without MTP layers, a
draft whose vocabulary llama.cpp refuses recorded as incompatible while the run goes on,
every trial's rounds and accepted tokens per draft position read from /metrics, and a
result the server's own checks accept.

One run, shared by the tests (about 3-4 min on one thread here); --llama-threads 1 for the
reason given in test_specsubmit_llama_server.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specschema import Submission, envelope_bytes, sign_envelope, submission_bytes
from specschema.blocks import timed
from specschema.breakdown import acceptance_of, domain_results
from specschema.payload import parse_submission
from specschema.stability import baseline_stability
from specserver.ingest.prepare import CheckLimits, prepare_submission
from tests.reliability.hostile import signing_key
from tests.support.realengine.tiny_gguf import ModelSet

pytestmark = pytest.mark.realengine

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))
CONFIGS = "ngram_simple_m8,ngram_mod_16,mtp_n3,draft_n3"


@pytest.fixture(scope="module")
def map_run(tmp_path_factory: pytest.TempPathFactory, llama_server_bin: Path,
            gemma_model: Path, tiny_model_set: ModelSet
            ) -> Iterator[tuple[subprocess.CompletedProcess[str], Submission]]:
    tmp_path = tmp_path_factory.mktemp("map-run")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPECSUBMIT_", "OLLAMA_", "LLAMA_ARG_"))}
    env.update(HOME=str(tmp_path / "home"), SPECSUBMIT_HOME=str(tmp_path / "state"),
               SPECSUBMIT_LOCKS=str(tmp_path / "locks"),
               COLUMNS="160")
    # a draft llama.cpp refuses for Gemma: a 32,000-token vocabulary against 262,144
    refused_draft = tiny_model_set.by_role()["target"]
    argv = [SCRIPT, "run", "--engine", "llama-server", "--protocol", "llamacpp-map",
            "--target", str(gemma_model), "--draft", str(refused_draft),
            "--configs", CONFIGS, "--llama-server", str(llama_server_bin),
            "--llama-threads", "1", "--no-submit", "--json"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1500, env=env,
                            check=False, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    yield result, parse_submission(result.stdout.encode())


def test_every_mechanism_gets_its_verdict_and_refusals_say_why(
        map_run: tuple[subprocess.CompletedProcess[str], Submission]) -> None:
    result, sub = map_run
    assert sub.complete
    by_name = {c.name: c for c in sub.configs}
    assert list(by_name) == ["no_spec", "ngram_simple_m8", "ngram_mod_16", "mtp_n3",
                             "draft_n3"]
    # Confirmed by its counters; on a machine whose load moved the baseline's blocks past
    # the stability bound the verdict is unstable instead, and only then.
    stability = baseline_stability(by_name["no_spec"], timed(sub.configs))
    unstable = stability is not None and stability.unstable
    assert by_name["ngram_simple_m8"].speculation.observed == (
        "unstable" if unstable else "confirmed"), stability
    assert (by_name["ngram_simple_m8"].speculation.drafted_tokens or 0) > 0
    assert by_name["mtp_n3"].speculation.observed == "incompatible"
    assert "has no MTP layers" in (by_name["mtp_n3"].speculation.refusal or "")
    draft = by_name["draft_n3"].speculation
    assert draft.observed == "incompatible" and by_name["draft_n3"].trials == []
    assert "vocabularies differ" in (draft.refusal or "")
    # what the contributor read: the refusals with their reasons, and the run went on (the
    # conclusion is one paragraph wrapped at the terminal's width: a line may end anywhere)
    words = " ".join(result.stderr.split())
    assert "mtp_n3 was not run" in words and "draft_n3 was not run" in words
    assert str(Path.home()) not in result.stdout  # paths never published, digests instead


def test_ngram_lookup_is_confirmed_faster_on_code_edits_with_identical_text(
        map_run: tuple[subprocess.CompletedProcess[str], Submission]) -> None:
    _, sub = map_run
    baseline, ngram = sub.configs[0], sub.configs[1]
    results = {r.domain: r for r in domain_results(sub, ngram)}
    assert len(results) == 6 and all(r.speedup_tps is not None for r in results.values())
    edit = results["code_edit"]
    assert edit.speedup_tps is not None and edit.speedup_tps > 1.0, results
    assert edit.acceptance is not None and (edit.acceptance.rate or 0) > 0.5
    # The code edit's text: the baseline's answer to that prompt, token for token, or where
    # it is not, the place it parted recorded, late in the answer: the target's batched
    # verification arithmetic, seen here once at token 58 of 96 (compared with another
    # prompt's answer, it would part at once).
    edits = [t for t in ngram.trials if t.index % 6 == 1]
    base_edits = {t.output_sha256 for t in baseline.trials if t.index % 6 == 1}
    assert edits and len(base_edits) == 1
    for trial in edits:
        if trial.output_sha256 not in base_edits:
            assert trial.diverged_at is not None and trial.diverged_at >= 32, trial
    assert "Per kind of work" in map_run[0].stderr and "code edit" in map_run[0].stderr


def test_every_speculating_trial_has_rounds_and_positions(
        map_run: tuple[subprocess.CompletedProcess[str], Submission]) -> None:
    _, sub = map_run
    for config in sub.configs:
        if config.role != "draft" or not config.trials:
            continue
        counted = [t.counters for t in config.trials if t.counters is not None]
        assert counted, config.name
        for counters in counted:
            assert counters.rounds is not None and counters.rounds > 0, config.name
            per = counters.accepted_per_position
            assert per is not None and sum(per) == counters.accepted
        found = acceptance_of(config.trials)
        assert found is not None and found.per_position, config.name
        assert config.speculation.mean_accepted_len is not None


def test_the_server_accepts_the_result(
        map_run: tuple[subprocess.CompletedProcess[str], Submission]) -> None:
    _, sub = map_run
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(11)))
    prepared = prepare_submission(body, datetime.now(UTC),
                                  CheckLimits(timedelta(days=30), timedelta(minutes=5)))
    assert prepared.submission_id == str(sub.submission_id)
