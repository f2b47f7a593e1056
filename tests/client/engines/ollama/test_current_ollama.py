"""Verdicts that stay honest on the Ollama contributors run today (0.34-0.40,
GGML and MLX), end to end against the fake Ollama, whose behaviours follow
shared/reference/ollama-api.md "Read first", and the log parser on real llama-server lines.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing

from specschema import get_protocol, submission_verdicts
from specschema.envelope import envelope_bytes, sign_envelope
from specschema.payload import parse_submission, submission_bytes
from specserver.board.aggregate import view_of
from specserver.ingest.checks import check_submission
from specsubmit.engines.ollama.preflight import MLX_NOTICE
from specsubmit.engines.ollama.serverlog import Segment, parse_log, read_requests
from specsubmit.run.report import conclusion
from tests.client.run.test_runner import MTP, Recorder, _run
from tests.fakeollama import FakeModel, FakeOllama, default_models
from tests.support.realengine.fixture_files import verbatim

# Slow enough that 2x from speculation stays inside the server's 10,000 tok/s bound.
SPEED = 1500.0

# --- the parser on real llama-server output (tests/fixtures/llama_server/README.md) -------


def test_every_real_acceptance_line_parses_with_its_mean_length() -> None:
    events = parse_log(verbatim("acceptance-lines.txt").encode())
    assert [(e.drafted, e.accepted, e.mean_len) for e in events] == [  # type: ignore[union-attr]
        (56, 56, 9.0), (141, 44, 3.44), (141, 44, 3.44), (141, 44, 3.44), (468, 0, 1.0),
        (153, 43, 3.15)]
    assert {e.source for e in events} == {"llama_server_log"}  # type: ignore[union-attr]


def test_the_real_synthetic_warning_marks_the_start_synthetic() -> None:
    data = verbatim("log-draft-synthetic.txt").encode()
    [request] = read_requests(data, [Segment("spec", True, 0, datetime.now(UTC))]) or []
    assert request.synthetic_warning
    assert request.all_launches()[0].synthetic_flags == ["warning"]
    assert request.trial_counters() is not None  # the counters are there, but fake


def test_the_old_line_form_still_parses() -> None:
    # Ollama <= 0.33.1 (llama.cpp before PR #24536): two lines, no mean length.
    [event] = parse_log(b"slot print_timing: id  0 | task 7 | \n"
                        b"draft acceptance rate = 0.98260 ( 1186 accepted /  1207 generated)\n")
    assert (event.drafted, event.accepted, event.mean_len) == (1207, 1186, None)  # type: ignore[union-attr]


def test_the_starting_line_gives_what_the_engine_ran_with_never_a_path() -> None:
    # The form of llm/llama_server.go:433 (ollama-api.md "Read first" 2), slog-quoted.
    blob = "ab" * 32
    line = ('time=2026-12-01T10:00:00.000Z level=INFO source=llama_server.go:433 '
            'msg="starting llama-server" cmd="/usr/lib/ollama/llama-server --model '
            f'/home/me/.ollama/models/blobs/sha256-{"cd" * 32} --ctx-size 4096 --spec-type '
            f'draft-simple --spec-draft-n-max 6 --spec-draft-model /home/me/models/blobs/'
            f'sha256-{blob} --spec-synth-rates 0.9,0.8"')
    [event] = parse_log(line.encode())
    launch = event.launch  # type: ignore[union-attr]
    assert launch is not None
    assert (launch.spec_type, launch.draft_n_max, launch.draft_model_digest) == (
        "draft-simple", 6, blob)
    assert launch.synthetic_flags == ["--spec-synth-rates"]
    assert "/home/me" not in launch.model_dump_json()


# --- runs against the fake ----------------------------------------------------------------


def test_a_ggml_0_34_run_with_an_mtp_target_is_confirmed_per_trial(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with FakeOllama(version="0.34.1", models=[FakeModel(MTP, mtp=True)], log_path=log) as fake:
        sub = _run(fake, "ollama-draft", target=MTP, log_path=log).submission
    assert "draft acceptance = " in log.read_text()  # the new line form, only
    assert "draft acceptance rate" not in log.read_text()
    assert sub.schema_version == 2 and sub.engine.runtime == "ggml"
    assert sub.engine_log == "read"
    assert [c.speculation.observed for c in sub.configs] == [
        "not_applied", "confirmed", "confirmed"]
    for config in sub.configs[1:]:
        assert all(t.counters is not None and t.counters.mean_accepted_len for t in config.trials)
        assert config.speculation.drafted_tokens == sum(
            t.counters.drafted for t in config.trials if t.counters)
        depth = config.request_options["draft_num_predict"]
        assert [launch.spec_type for launch in config.speculation.launches] == ["draft-mtp"]
        assert config.speculation.launches[0].draft_n_max == depth
    base = sub.configs[0]
    assert all(t.counters is None for t in base.trials)
    assert [launch.spec_type for launch in base.speculation.launches] == [None]
    # v2: the warm-up after each switch takes the reload; the trials after it are warm
    assert not any(t.cold for c in sub.configs for t in c.trials)
    assert submission_verdicts(sub) == [c.speculation.observed for c in sub.configs]


def test_reloads_cost_and_cold_flags_v1_against_v2(tmp_path: Path) -> None:
    """draft_num_predict is a load-time option: v1's interleaved order reloads before every
    trial (each one cold, the reload inside its timing); v2 and v3 reload once per block, in
    the warm-up. The fake's load takes 50 ms, so the cost shows in load_duration."""
    found = {}
    from specschema.protocol_files import all_protocols

    for protocol in [p for p in all_protocols() if p.id == "ollama-draft"]:
        log = tmp_path / f"v{protocol.version}.log"
        with FakeOllama(version="0.34.1", models=[FakeModel(MTP, mtp=True, load_s=0.05)],
                        log_path=log) as fake:
            sub = _run(fake, protocol, target=MTP, log_path=log).submission
        trials = [t for c in sub.configs for t in c.trials]
        found[protocol.version] = (
            log.read_text().count('msg="starting llama-server"'),
            sum(t.cold for t in trials), len(trials),
            sum(t.load_duration_ns for t in trials) / 1e9,
            sum(w.load_duration_ns or 0 for c in sub.configs for w in c.warmups) / 1e9,
        )
    starts1, cold1, n1, trial_load1, _ = found[1]
    starts2, cold2, n2, _, warm_load2 = found[2]
    starts3, cold3, n3, _, warm_load3 = found[3]
    assert (starts1, cold1, n1) == (18, 15, 15)  # every one of the 18 requests restarts
    assert (starts2, cold2, n2) == (5, 0, 18)  # one start per block (5), each in its warm-up
    assert (starts3, cold3, n3) == (7, 0, 21)  # bracketed: 7 blocks, the baseline in 3
    # each start sleeps the fake's 50 ms load: in v1 inside the trials' timings, in v2/v3
    # inside the warm-ups (lower bounds only: a busy machine can only add to them)
    assert trial_load1 >= 15 * 0.05 and warm_load2 >= 5 * 0.05 and warm_load3 >= 7 * 0.05
    assert all(t.block is not None for c in sub.configs for t in c.trials)


def _signed(sub_bytes: bytes) -> bytes:
    key = nacl.signing.SigningKey(b"\x07" * 32)
    return envelope_bytes(sign_envelope(sub_bytes, key))


def _server_checked(sub_bytes: bytes):  # type: ignore[no-untyped-def]
    return check_submission(_signed(sub_bytes), now=datetime.now(UTC),
                            max_age=timedelta(days=30), max_future_skew=timedelta(minutes=5))


def test_an_mlx_0_40_run_with_a_draft_head_never_reaches_the_board(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    recorder = Recorder()
    models = [FakeModel(MTP, mtp=True, format="safetensors", tokens_per_s=SPEED)]
    with FakeOllama(version="0.40.2", models=models, log_path=log) as fake:
        sub = _run(fake, "ollama-draft", target=MTP, log_path=log,
                   listener=recorder).submission
    # said plainly before any trial, in one line
    assert MLX_NOTICE.format(model=MTP) in recorder.warnings
    assert sub.engine.runtime == "mlx" and sub.models[0].format == "safetensors"
    assert {c.speculation.counters_source for c in sub.configs} == {"mlx_log"}
    verdicts = [c.speculation.observed for c in sub.configs]
    # The baseline's own counters are MLX's doing: the verdict docs/run.md promises, naming MLX.
    assert verdicts == ["cannot_compare"] * 3
    text = conclusion(sub)
    assert "MLX" in text and "cannot be switched off per request" in text
    assert "is not a speedup" in text
    checked = _server_checked(submission_bytes(sub))  # the server derives the same
    assert [s.observed for s in checked.summaries] == verdicts
    assert all(view_of(v) is None for v in verdicts)  # on neither board


def test_an_mlx_run_without_a_log_is_cannot_compare(tmp_path: Path) -> None:
    models = [FakeModel(MTP, mtp=True, format="safetensors", tokens_per_s=SPEED)]
    with FakeOllama(version="0.40.2", models=models) as fake:
        sub = _run(fake, "ollama-draft", target=MTP).submission
    assert sub.engine_log == "not_given"
    assert [c.speculation.observed for c in sub.configs] == ["cannot_compare"] * 3
    assert "cannot be switched off per request" in conclusion(sub)
    assert all(view_of(s.observed) is None
               for s in _server_checked(submission_bytes(sub)).summaries)


def test_a_synthetic_run_is_never_confirmed(tmp_path: Path) -> None:
    for on_cmdline in (True, False):  # the flag on the starting line, or only the warning
        log = tmp_path / f"server-{on_cmdline}.log"
        with FakeOllama(version="0.34.1", models=[FakeModel(MTP, mtp=True, tokens_per_s=SPEED)],
                        log_path=log, spec_synth_len=4, synth_on_cmdline=on_cmdline) as fake:
            sub = _run(fake, "ollama-draft", target=MTP, log_path=log).submission
        verdicts = [c.speculation.observed for c in sub.configs]
        assert "confirmed" not in verdicts and verdicts[1:] == ["synthetic", "synthetic"]
        assert [s.observed for s in _server_checked(submission_bytes(sub)).summaries] == verdicts


def test_the_seed_setup_stays_not_applied(tmp_path: Path) -> None:
    # The seed article's setup: hardnumbers-m2, qwen3:14b without MTP, the qwen2.5 drafts.
    for version in ("0.12.8", "0.34.1", "0.40.2"):
        log = tmp_path / f"{version}.log"
        with FakeOllama(version=version, models=default_models(), log_path=log) as fake:
            sub = _run(fake, log_path=log).submission
        assert [c.speculation.observed for c in sub.configs] == ["not_applied"] * 3, version


def test_without_a_log_the_summary_says_so(tmp_path: Path) -> None:
    recorder = Recorder()
    with FakeOllama(version="0.34.1", models=[FakeModel(MTP, mtp=True)]) as fake:
        sub = _run(fake, "ollama-draft", target=MTP, listener=recorder).submission
    assert sub.engine_log == "not_given"
    assert [c.speculation.observed for c in sub.configs[1:]] == ["not_observed"] * 2
    text = conclusion(sub)
    assert "no Ollama server log was given (--ollama-log)" in text
    assert "no counters were found" not in text


def test_the_stored_json_carries_the_v2_evidence(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with FakeOllama(version="0.34.1", models=[FakeModel(MTP, mtp=True)], log_path=log) as fake:
        sub = _run(fake, "ollama-draft", target=MTP, log_path=log).submission
    data = json.loads(submission_bytes(sub))
    assert data["schema_version"] == 2
    assert data["configs"][1]["trials"][0]["counters"]["source"] == "llama_server_log"
    assert parse_submission(submission_bytes(sub)) == sub
    assert get_protocol("ollama-draft").version >= 1


def test_the_preflight_names_a_missing_log_before_the_first_trial(tmp_path: Path) -> None:
    events: list[str] = []

    class Order(Recorder):
        def warning(self, message: str) -> None:
            super().warning(message)
            events.append("warning: " + message)

        def trial_started(self, position, total, config, index) -> None:  # type: ignore[no-untyped-def]
            events.append("trial")

    gone = tmp_path / "nowhere.log"
    with FakeOllama(version="0.34.1", models=default_models()) as fake:
        _run(fake, log_path=gone, listener=Order())  # hardnumbers: only the log shows a
    first_trial = events.index("trial")              # model that drafts by itself
    said = [e for e in events[:first_trial] if "does not exist" in e]
    assert len(said) == 1 and "--ollama-log" in said[0] and str(gone) in said[0]
