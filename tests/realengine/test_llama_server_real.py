"""Speculative decoding on a real llama-server, with models loaded from an Ollama store.

Each configuration gets its own server (llama.cpp takes the draft at start-up only), serves
the same greedy request twice, and is stopped. The models are tiny and seeded, so the text
and the acceptance counters are exact: the same on every run and every build of the pinned
source (real-engine.md), which is what lets these tests assert numbers.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.realengine import server as server_module
from tests.support.realengine.ollama_store import StoredModel
from tests.support.realengine.server import (
    ACCEPTANCE_LINE,
    N_PREDICT,
    RECORDED_COUNTERS,
    ServerStartError,
    completion,
    running_server,
)
from tests.support.realengine.tiny_gguf import ModelSet

pytestmark = pytest.mark.realengine

REQUESTS_PER_RUN = 2
DRAFT_ROLES = ("draft_identical", "draft_truncated", "draft_unrelated")
METRIC = re.compile(r"^llamacpp:(spec_decode_num_\w+_tokens_total) (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class RunResult:
    responses: list[dict[str, Any]]
    log: str
    metrics: dict[str, int]
    model_path: str

    @property
    def texts(self) -> list[str]:
        return [r["content"] for r in self.responses]

    @property
    def timings(self) -> list[dict[str, Any]]:
        return [r["timings"] for r in self.responses]

    @property
    def counters(self) -> list[tuple[int, int]]:
        return [(t["draft_n"], t["draft_n_accepted"]) for t in self.timings]

    @property
    def acceptance_lines(self) -> list[str]:
        return [line for line in self.log.splitlines() if ACCEPTANCE_LINE.search(line)]


def _run(
    binary: Path, stored: dict[str, StoredModel], draft_role: str | None, log: Path,
    extra: tuple[str, ...] = (),
) -> RunResult:
    draft = stored[draft_role].blob if draft_role else None
    # Blob paths, as Ollama passes them: proves the store's files are what the engine loads.
    with running_server(binary, stored["target"].blob, log, draft=draft, extra=extra) as server:
        responses = [completion(server) for _ in range(REQUESTS_PER_RUN)]
        if "draft_n" in responses[0]["timings"]:
            server.wait_for_log(ACCEPTANCE_LINE, count=REQUESTS_PER_RUN)
        metrics = {name: int(value) for name, value in METRIC.findall(server.get_text("/metrics"))}
        model_path = server.get("/props")["model_path"]
    return RunResult(responses, log.read_text(), metrics, model_path)


@pytest.fixture(scope="module")
def runs(
    llama_server_bin: Path,
    ollama_stored_models: dict[str, StoredModel],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, RunResult]:
    logs = tmp_path_factory.mktemp("llama-server-logs")
    results = {
        "none": _run(llama_server_bin, ollama_stored_models, None, logs / "none.log"),
    }
    for role in (*DRAFT_ROLES, "draft_incompatible"):
        results[role] = _run(llama_server_bin, ollama_stored_models, role, logs / f"{role}.log")
    results["synthetic"] = _run(
        llama_server_bin, ollama_stored_models, "draft_unrelated", logs / "synthetic.log",
        extra=("--spec-synth-len", "4"),
    )
    return results


def test_without_a_draft_there_are_no_draft_counters(runs: dict[str, RunResult]) -> None:
    run = runs["none"]
    for timings in run.timings:
        assert timings["predicted_n"] == N_PREDICT
        assert "draft_n" not in timings and "draft_n_accepted" not in timings
    assert run.acceptance_lines == []
    assert all(value == 0 for value in run.metrics.values())


def test_the_target_was_loaded_from_the_ollama_store(
    runs: dict[str, RunResult], ollama_stored_models: dict[str, StoredModel]
) -> None:
    target = ollama_stored_models["target"]
    assert runs["none"].model_path == str(target.blob)
    assert target.blob.name == "sha256-" + target.digest.removeprefix("sha256:")


def test_an_identical_copy_has_every_drafted_token_accepted(runs: dict[str, RunResult]) -> None:
    for drafted, accepted in runs["draft_identical"].counters:
        assert drafted == accepted > 0


def test_an_unrelated_draft_has_no_token_accepted(runs: dict[str, RunResult]) -> None:
    for drafted, accepted in runs["draft_unrelated"].counters:
        assert drafted > 0 and accepted == 0


def test_a_truncated_draft_is_accepted_in_part(runs: dict[str, RunResult]) -> None:
    for drafted, accepted in runs["draft_truncated"].counters:
        assert 0 < accepted < drafted


@pytest.mark.parametrize("role", [*DRAFT_ROLES, "draft_incompatible"])
def test_a_draft_never_changes_the_greedy_text(role: str, runs: dict[str, RunResult]) -> None:
    baseline = runs["none"].texts[0]
    assert baseline  # the comparison means nothing on empty output
    assert runs[role].texts == [baseline] * REQUESTS_PER_RUN


@pytest.mark.parametrize("role", [*DRAFT_ROLES, "synthetic"])
def test_the_counters_repeat_exactly(role: str, runs: dict[str, RunResult]) -> None:
    counters = runs[role].counters
    assert counters == [counters[0]] * REQUESTS_PER_RUN
    if platform.machine() == "x86_64":  # floating-point paths differ on other CPUs
        assert counters[0] == RECORDED_COUNTERS[role]


@pytest.mark.parametrize("role", [*DRAFT_ROLES, "synthetic"])
def test_the_log_line_and_metrics_agree_with_the_timings(
    role: str, runs: dict[str, RunResult]
) -> None:
    run = runs[role]
    logged = []
    for line in run.acceptance_lines:
        match = ACCEPTANCE_LINE.search(line)
        assert match is not None
        logged.append((int(match["generated"]), int(match["accepted"])))
        assert float(match["rate"]) == pytest.approx(logged[-1][1] / logged[-1][0], abs=1e-5)
    assert logged == run.counters
    assert run.metrics["spec_decode_num_draft_tokens_total"] == sum(d for d, _ in run.counters)
    assert run.metrics["spec_decode_num_accepted_tokens_total"] == sum(a for _, a in run.counters)


def test_an_incompatible_vocab_is_logged_and_the_draft_silently_dropped(
    runs: dict[str, RunResult],
) -> None:
    # llama-server does not refuse to start: it logs an error and serves without the draft.
    # So "the draft was requested" never implies "the draft was used"; only counters do.
    run = runs["draft_incompatible"]
    assert "the target and draft vocabs are not compatible" in run.log
    assert "failed to initialize speculative decoding context" in run.log
    assert all("draft_n" not in timings for timings in run.timings)
    assert run.acceptance_lines == []


def test_synthetic_acceptance_is_announced_and_is_not_model_output(
    runs: dict[str, RunResult],
) -> None:
    run = runs["synthetic"]
    assert "synthetic speculative acceptance is enabled for benchmarking" in run.log
    # The unrelated draft really never agrees (above); here its tokens are accepted anyway...
    assert all(accepted > 0 for _, accepted in run.counters)
    # ...and so they end up in the output, which is no longer the target's greedy text.
    assert run.texts[0] != runs["none"].texts[0]


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)  # start_new_session: the server's pid is its process group's id
    except ProcessLookupError:
        return True
    return False


def test_the_server_and_its_process_group_are_gone_after_the_block(
    llama_server_bin: Path, tiny_model_set: ModelSet, tmp_path: Path
) -> None:
    with running_server(llama_server_bin, tiny_model_set.target, tmp_path / "log") as server:
        pid = server.pid
        assert not _gone(pid)
        assert server.get("/health")["status"] == "ok"
    assert _gone(pid)
    assert server.process.returncode is not None


def test_the_server_is_stopped_when_the_block_raises(
    llama_server_bin: Path, tiny_model_set: ModelSet, tmp_path: Path
) -> None:
    pids = []
    with (
        pytest.raises(KeyboardInterrupt),
        running_server(llama_server_bin, tiny_model_set.target, tmp_path / "log") as server,
    ):
        pids.append(server.pid)
        raise KeyboardInterrupt
    assert pids and _gone(pids[0])


def test_a_server_that_exits_at_start_raises_with_its_log(
    llama_server_bin: Path, tiny_model_set: ModelSet, tmp_path: Path
) -> None:
    # --draft-max was removed from llama.cpp (real-engine.md): the server rejects it.
    with pytest.raises(ServerStartError, match="the argument has been removed") as raised:
        with running_server(
            llama_server_bin, tiny_model_set.target, tmp_path / "log", extra=("--draft-max", "8")
        ):
            pytest.fail("the server started with a removed flag")
    assert "exited with" in str(raised.value)


def test_a_port_taken_before_the_server_binds_it_is_retried(
    llama_server_bin: Path, tiny_model_set: ModelSet, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # free_port() only finds a port that was free a moment ago; another process can take it.
    with socket.socket() as squatter:
        squatter.bind((server_module.HOST, 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken, server_module.free_port()])
        monkeypatch.setattr(server_module, "free_port", lambda: next(ports))
        with running_server(llama_server_bin, tiny_model_set.target, tmp_path / "log") as server:
            assert server.port != taken
            assert server.get("/health")["status"] == "ok"
        assert next(ports, None) is None  # the taken port was tried first
