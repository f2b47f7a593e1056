"""`specsubmit run --engine llama-server` end to end against a real llama-server (built from
the pinned sdist, tests/support/realengine/build.py) and tiny generated GGUF models laid out
as an Ollama models folder, plus every bad input a contributor can give: one line, exit 1, the
partial result kept as incomplete, and no llama-server process left behind.

Threads: the runs use --llama-threads 1. With two threads on these two busy cores every
drafted token waits for a descheduled thread, and drafted runs were up to 20x slower
(measured while writing this); the counters are the same either way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specschema import Submission, get_protocol
from specschema.payload import parse_submission
from specserver.ingest import chip_is_known
from tests.support.realengine.fixtures import RUN_NAMES
from tests.support.realengine.tiny_gguf import ModelSet

pytestmark = pytest.mark.realengine

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))
# The seeded unrelated draft under both qwen2.5 names: it accepts nothing (RUN_NAMES)
UNRELATED = ("draft_qwen2.5_0.5b_n8", "draft_qwen2.5_1.5b_n8")

def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPECSUBMIT_", "OLLAMA_", "LLAMA_ARG_"))}
    env.update(HOME=str(tmp_path / "home"), SPECSUBMIT_HOME=str(tmp_path / "specsubmit-home"),
               SPECSUBMIT_LOCKS=str(tmp_path / "locks"),
               COLUMNS="160")
    return env


def _argv(binary: Path | None, models: Path, *extra: str,
          protocol: str = "llamacpp-draft") -> list[str]:
    argv = [SCRIPT, "run", "--engine", "llama-server", "--protocol", protocol,
            "--ollama-models", str(models), "--llama-threads", "1", "--no-submit"]
    if binary is not None:
        argv += ["--llama-server", str(binary)]
    return argv + list(extra)


def _run(tmp_path: Path, argv: list[str], timeout: float = 1200,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=env or _env(tmp_path), check=False, stdin=subprocess.DEVNULL)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("specsubmit: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def _saved(tmp_path: Path) -> list[Submission]:
    folder = tmp_path / "specsubmit-home" / "results"
    return [parse_submission(p.read_bytes()) for p in sorted(folder.glob("*.json"))]


def _llama_servers_using(marker: Path) -> list[int]:
    """Live llama-server processes whose command line mentions `marker` (a test's folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and argv and argv[0].endswith(b"llama-server") and any(
                str(marker).encode() in arg for arg in argv):
            found.append(int(entry.name))
    return found


def _snapshot_all(folder: Path) -> dict[str, object]:
    entries: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        st = path.stat()
        entries[str(path.relative_to(folder))] = (
            path.read_bytes() if path.is_file() else None, st.st_mtime_ns, st.st_mode)
    return entries


# --- the whole protocol -------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory, llama_server_bin: Path,
             run_models_dir: Path) -> Iterator[tuple[subprocess.CompletedProcess[str], Submission,
                                                 dict[str, object], dict[str, object]]]:
    tmp_path = tmp_path_factory.mktemp("full-run")
    before = _snapshot_all(run_models_dir)
    output = tmp_path / "result.json"
    result = _run(tmp_path, _argv(llama_server_bin, run_models_dir, "--output", str(output)))
    after = _snapshot_all(run_models_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    yield result, parse_submission(output.read_bytes()), before, after


def test_the_run_completes_as_a_v2_llama_server_result(full_run) -> None:  # type: ignore[no-untyped-def]
    result, sub, _, _ = full_run
    protocol = get_protocol("llamacpp-draft")
    assert sub.complete and sub.schema_version == 2
    assert sub.engine.name == "llama-server" and sub.engine.runtime == "ggml"
    assert sub.engine.build is not None and "0c1e570" in sub.engine.build
    assert sub.protocol.sha256 == protocol.sha256
    # bracketed blocks, two rounds: 10 baseline trials in 5 blocks, 8 per draft in 4, each
    # block its own start; the unrelated drafts accept none of what they draft, so the
    # protocol's early-stop rule stops them after the first round: 4 trials in 2 blocks
    assert sub.protocol.parameters.get("stopped") == ",".join(UNRELATED)
    run = protocol.for_run(sub.protocol.parameters)
    assert [len(c.trials) for c in sub.configs] == [run.trials_for(c.name)
                                                    for c in protocol.configs]
    assert [len(c.trials) for c in sub.configs] == [10, 8, 8, 8, 4, 4]
    by_name = {c.name: c for c in sub.configs}
    blocks = {c.name: len({t.block for t in c.trials}) for c in sub.configs}
    assert blocks == {c.name: 5 if c.role == "baseline" else 2 if c.name in UNRELATED else 4
                      for c in protocol.configs}
    drafted = {name: sum(t.counters.drafted for t in by_name[name].trials if t.counters)
               for name in UNRELATED}
    for name in UNRELATED:
        assert drafted[name] >= 256
        assert (f"{name}: stopped after the first round by the protocol's rule: none of its "
                f"{drafted[name]:,} drafted tokens accepted") in " ".join(result.stderr.split())
    # Models by digest, as Ollama named them; never a path.
    assert {m.name for m in sub.models} == set(RUN_NAMES) and all(m.digest for m in sub.models)
    assert str(sub.models) and "blobs" not in json.dumps(sub.model_dump(mode="json"))
    # The launches: the baseline without --spec-type, each draft with its n-max and digest.
    launches = {c.name: c.speculation.launches for c in sub.configs}
    assert {(x.spec_type, x.draft_model) for x in launches["no_draft"]} == {(None, False)}
    # the pinned settings, as launched (the spec ones only with a draft)
    assert launches["no_draft"][0].flags == {"n-gpu-layers": "999", "flash-attn": "off"}
    digests = {m.name: m.digest for m in sub.models}
    for config in protocol.configs[1:]:
        assert len(launches[config.name]) == blocks[config.name]  # one start per block
        launch = launches[config.name][0]
        assert launch.spec_type == "draft-simple" and launch.draft_model_digest == (
            digests[config.draft_model or ""])
        assert launch.draft_n_max == protocol.request_options(config)["spec_draft_n_max"]
        assert launch.flags["spec-draft-p-min"] == "0.0"
    # The command line, paths replaced by digests, is shown as each config starts.
    assert "--spec-draft-model sha256:" in result.stderr and "--poll 0" in result.stderr


def test_exact_counters_from_the_engines_api(full_run) -> None:  # type: ignore[no-untyped-def]
    _, sub, _, _ = full_run
    by_name = {c.name: c for c in sub.configs}
    for config in sub.configs:
        counters = [t.counters for t in config.trials]
        if config.role == "baseline":
            assert counters == [None] * len(config.trials)  # no draft_n: it did not speculate
            continue
        assert all(c is not None and c.source == "engine_api" for c in counters)
        # Greedy and seeded: every trial of a config drafts and accepts exactly the same.
        assert len({(c.drafted, c.accepted) for c in counters if c}) == 1
        assert config.speculation.drafted_tokens == sum(c.drafted for c in counters if c)
        assert config.speculation.counters_source == "engine_api"
    identical = by_name["draft_qwen3_1.7b_n8"].trials[0].counters
    assert identical is not None and identical.drafted > 0
    assert identical.accepted == identical.drafted  # a copy of the target: 100 %
    for name in UNRELATED:
        unrelated = by_name[name].trials[0].counters
        assert unrelated is not None and unrelated.drafted > 0 and unrelated.accepted == 0
    truncated = by_name["draft_qwen3_0.6b_n8"].trials[0].counters
    assert truncated is not None and 0 < truncated.accepted < truncated.drafted


def test_identical_text_with_and_without_a_draft(full_run) -> None:  # type: ignore[no-untyped-def]
    _, sub, _, _ = full_run
    hashes = {t.output_sha256 for c in sub.configs for t in c.trials}
    assert len(hashes) == 1
    assert all(c.speculation.outputs_match_baseline for c in sub.configs if c.role == "draft")
    assert all(t.eval_count == 200 for c in sub.configs for t in c.trials)


def test_verdicts(full_run) -> None:  # type: ignore[no-untyped-def]
    result, sub, _, _ = full_run
    from specschema.blocks import timed
    from specschema.stability import baseline_stability

    observed = {c.name: c.speculation.observed for c in sub.configs}
    # On a busy shared machine a baseline block can sit off the line between its
    # neighbours beyond the bounds: then every draft is unstable, and the run says so
    # instead of claiming a speedup. The client records times, so the off-line rule judges.
    assert timed(sub.configs)
    stability = baseline_stability(sub.configs[0], by_time=True)
    assert stability is not None and stability.rule == "off_line"
    expected = "unstable" if stability.unstable else "confirmed"
    print(f"baseline drift {stability.drift:.1%}, farthest off its line {stability.worst}: "
          f"drafts {expected}")
    assert observed == {"no_draft": "not_applied", **{
        c.name: expected for c in sub.configs if c.role == "draft"}}
    assert ("unstable" if expected == "unstable" else "speculated") in result.stdout


def test_the_ollama_models_folder_is_untouched(full_run) -> None:  # type: ignore[no-untyped-def]
    _, _, before, after = full_run
    assert before == after  # same files, bytes, mtimes and modes


def test_no_llama_server_is_left_after_the_run(full_run, run_models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    assert _llama_servers_using(run_models_dir) == []


# --- bad input: one line, exit 1, no orphan ----------------------------------------------


# --- to a real specserver and onto its board -----------------------------------------------


@pytest.fixture
def specserver(tmp_path: Path) -> Iterator[str]:
    """A real `specserver serve` on a free loopback port with its own DuckDB file (as in
    tests/e2e)."""
    import httpx

    from tests.support.liveserver import free_port

    port = free_port()
    env = {**os.environ, "SPECSERVER_DATABASE_URL": str(tmp_path / "store.duckdb")}
    log = tmp_path / "specserver.log"
    with log.open("wb") as sink:
        server = subprocess.Popen([str(Path(sys.executable).with_name("specserver")), "serve",
                                   "--port", str(port)], env=env, stdout=sink,
                                  stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"specserver did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def test_the_result_is_accepted_and_shown_under_engine_llama_server(
        tmp_path: Path, llama_server_bin: Path, run_models_dir: Path, specserver: str,
        tiny_model_set: ModelSet) -> None:
    import httpx

    env = _env(tmp_path)
    env["SPECSUBMIT_SERVER"] = specserver
    # The target by its own file: the tiny model under the protocol's name (qwen3:14b)
    # decodes faster than any memory can feed a 14B model, which the server's physical
    # bound rightly quarantines (tests/reliability/test_integrity_plausibility.py).
    target = tmp_path / "tiny-target.gguf"
    target.write_bytes(tiny_model_set.target.read_bytes())
    argv = [a for a in _argv(llama_server_bin, run_models_dir, "--target", str(target))
            if a != "--no-submit"] + ["--yes"]
    result = _run(tmp_path, argv, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (sub,) = _saved(tmp_path)
    sid = str(sub.submission_id)
    assert f"{specserver}/submissions/{sid}" in result.stdout + result.stderr
    stored = httpx.get(f"{specserver}/v1/submissions/{sid}").json()
    row = stored["submission"]
    assert (row["engine_name"], row["engine_runtime"], row["wire_version"]) == (
        "llama-server", "ggml", 2)
    assert "0c1e570" in row["engine_build"]
    assert {c["config_name"]: c["observed"] for c in stored["configs"]} == {
        c.name: c.speculation.observed for c in sub.configs}
    board = httpx.get(f"{specserver}/v1/leaderboard",
                      params={"protocol": "llamacpp-draft"}).json()
    # Exactly the confirmed drafts are measured speedups (or slowdowns): on a loaded
    # machine the baseline's blocks may disagree, and an unstable config stays off.
    observed = {c.name: c.speculation.observed for c in sub.configs}
    assert observed["draft_qwen3_0.6b_n8"] in {"confirmed", "unstable"}, observed
    confirmed = {name for name, verdict in observed.items() if verdict == "confirmed"}
    # This machine's chip: on the speedup board if the known-chip table lists it, else
    # listed apart until other address ranges corroborate it (board/chips.py).
    where = "groups" if chip_is_known(sub.fingerprint.chip) else "uncorroborated_groups"
    drafts = {g["key"]["draft"]["config_name"] for g in board[where]}
    assert drafts == confirmed, board
    if confirmed:
        assert {g["key"]["draft"]["mechanism"] for g in board[where]} == {"server_launch"}
        # The engine is a comparison dimension of the leaderboard, and the page's board
        # rows name it.
        assert {g["key"]["engine"]["engine"] for g in board[where]} == {"llama-server"}
        only = httpx.get(f"{specserver}/v1/leaderboard",
                         params={"protocol": "llamacpp-draft", "engine": "llama-server"}).json()
        assert only[where] == board[where]
        page = httpx.get(f"{specserver}/", params={"protocol": "llamacpp-draft"})
        assert page.status_code == 200
        assert '<span class="engine">llama-server</span>' in page.text
    detail = httpx.get(f"{specserver}/submissions/{sid}")
    assert detail.status_code == 200 and "llama-server" in detail.text


def test_a_target_given_as_a_gguf_path_is_published_by_digest(
        tmp_path: Path, llama_server_bin: Path, run_models_dir: Path,
        tiny_model_set: ModelSet) -> None:
    import hashlib

    target = tmp_path / "alice-private" / "my-finetune.gguf"
    target.parent.mkdir()
    target.write_bytes(tiny_model_set.target.read_bytes())
    result = _run(tmp_path, _argv(llama_server_bin, run_models_dir, "--target", str(target)))
    assert result.returncode == 0, result.stderr[-3000:]
    (sub,) = _saved(tmp_path)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    public = f"sha256-{digest[:16]}.gguf"
    text = json.dumps(sub.model_dump(mode="json"))
    assert "alice-private" not in text and "my-finetune" not in text
    # the unrelated drafts accept nothing and stop after the first round (the rule)
    assert sub.protocol.parameters == {"target": public, "stopped": ",".join(UNRELATED)}
    assert {c.model for c in sub.configs} == {public}
    assert any(m.name == public and m.digest == digest for m in sub.models)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_killing_specsubmit_mid_run_leaves_no_llama_server(
        tmp_path: Path, llama_server_bin: Path, run_models_dir: Path, signum: int) -> None:
    """SIGTERM: specsubmit exits through its handler and stops the server itself; SIGKILL:
    nothing of specsubmit runs, and the kernel ends the server (PR_SET_PDEATHSIG)."""
    log = tmp_path / "stderr.txt"
    with log.open("wb") as sink:
        proc = subprocess.Popen(_argv(llama_server_bin, run_models_dir), env=_env(tmp_path),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=sink)
    try:
        deadline = time.monotonic() + 300
        while not _llama_servers_using(run_models_dir) and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.02)
        servers = _llama_servers_using(run_models_dir)
        assert servers, "no llama-server started"
        proc.send_signal(signum)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while _llama_servers_using(run_models_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _llama_servers_using(run_models_dir) == []
    assert proc.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum), (
        log.read_text()[-2000:])
