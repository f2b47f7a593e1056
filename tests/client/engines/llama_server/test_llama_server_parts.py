"""The llama-server adapter's parts that need no running engine: the binary search, the
read-only Ollama models folder, the GGUF header and vocabulary rule, and the /completion
stream parser on llama-server's real output (tests/fixtures/llama_server/, captured from a
real llama-server built from the pinned sdist; see its README)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest

from specschema import get_protocol
from specsubmit.engines.base import RunSettings
from specsubmit.engines.llama_server.api import LlamaServerApi, StreamBroken
from specsubmit.engines.llama_server.binary import find_binary
from specsubmit.engines.llama_server.compatibility import vocab_mismatch
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.engines.llama_server.gguf_header import read_header
from specsubmit.engines.llama_server.store import resolve_model, split_name
from specsubmit.errors import BadModelFile, EngineNotFound, ModelNotInStore
from tests.support.realengine.ollama_store import add_model
from tests.support.realengine.tiny_gguf import TinyModel, tiny_vocab, write_model

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "llama_server"


def _exe(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# --- the binary ----------------------------------------------------------------------------


def test_binary_flag_wins_and_must_be_executable(tmp_path: Path) -> None:
    binary = _exe(tmp_path / "my-llama-server")
    assert find_binary(binary, which=lambda _: None).source == "flag"
    (tmp_path / "plain").write_text("")
    with pytest.raises(EngineNotFound, match="is not an executable file"):
        find_binary(tmp_path / "plain", which=lambda _: None)


def test_ollama_bundled_binary_on_linux_through_a_symlinked_cli(tmp_path: Path) -> None:
    install = tmp_path / "usr"
    cli = _exe(install / "bin" / "ollama")
    bundled = _exe(install / "lib" / "ollama" / "llama-server")
    link = tmp_path / "local-bin" / "ollama"
    link.parent.mkdir()
    link.symlink_to(cli)
    _exe(tmp_path / "path" / "llama-server")
    found = find_binary(None, which=lambda name: str(link) if name == "ollama"
                        else str(tmp_path / "path" / "llama-server"), platform="linux")
    assert (found.path, found.source) == (bundled.resolve(), "ollama")
    assert found.library_dir == bundled.resolve().parent


def test_ollama_app_bundle_on_macos(tmp_path: Path) -> None:
    resources = tmp_path / "Ollama.app" / "Contents" / "Resources"
    _exe(resources / "ollama")
    bundled = _exe(resources / "llama-server")
    found = find_binary(None, which=lambda name: str(resources / "ollama")
                        if name == "ollama" else None, platform="darwin",
                        macos_app=tmp_path / "nowhere")
    assert (found.path, found.source) == (bundled.resolve(), "ollama")
    # No `ollama` on PATH at all: the fixed app location is tried on macOS only.
    assert find_binary(None, which=lambda _: None, platform="darwin",
                       macos_app=bundled).source == "ollama"
    with pytest.raises(EngineNotFound):
        find_binary(None, which=lambda _: None, platform="linux", macos_app=bundled)


def test_path_is_the_last_resort_and_nothing_is_one_line(tmp_path: Path) -> None:
    on_path = _exe(tmp_path / "llama-server")
    _exe(tmp_path / "old" / "bin" / "ollama")  # an Ollama < 0.30: no bundled llama-server
    found = find_binary(None, which=lambda name: str(on_path) if name == "llama-server"
                        else str(tmp_path / "old" / "bin" / "ollama"), platform="linux")
    assert (found.path, found.source) == (on_path.resolve(), "path")
    with pytest.raises(EngineNotFound) as caught:
        find_binary(None, which=lambda _: None, platform="linux")
    assert "\n" not in caught.value.message and "--llama-server PATH" in caught.value.message


# --- the Ollama models folder --------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gguf")
    target = TinyModel(layers=2, embd=64, ff=128, heads=2, seed=5)
    return {
        "target": write_model(folder / "target.gguf", target),
        "truncated": write_model(folder / "truncated.gguf", target.truncated(1)),
        "other_vocab": write_model(folder / "other.gguf", TinyModel(
            layers=1, embd=64, ff=128, heads=2, seed=7, vocab="tiny-incompatible")),
    }


def test_names_resolve_through_manifests_to_blobs_and_nothing_is_written(
        tmp_path: Path, tiny_files: dict[str, Path]) -> None:
    models = tmp_path / "models"
    stored = add_model(models, "qwen3:14b", tiny_files["target"])
    add_model(models, "someone/tiny", tiny_files["truncated"])
    before = _snapshot(models)
    resolved = resolve_model("qwen3:14b", models)
    assert resolved.path == stored.blob and resolved.digest == stored.digest.split(":")[1]
    assert resolved.size == tiny_files["target"].stat().st_size
    assert resolve_model("someone/tiny", models).source == "ollama"  # tag "latest"
    assert resolve_model("registry.ollama.ai/library/qwen3:14b", models).path == stored.blob
    read_header(resolved.path)
    assert _snapshot(models) == before


@pytest.mark.parametrize("name", ["../../etc:passwd", "a/b/c:d", "qwen3:../../x", "", ":tag",
                                  "evil.example.com/library/qwen3:14b"])
def test_names_that_could_leave_the_folder_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ModelNotInStore):
        split_name(name)


def test_a_missing_model_or_blob_is_one_line_naming_the_pull(
        tmp_path: Path, tiny_files: dict[str, Path]) -> None:
    models = tmp_path / "models"
    with pytest.raises(ModelNotInStore) as caught:
        resolve_model("qwen3:0.6b", models)
    assert "ollama pull qwen3:0.6b" in caught.value.message and "\n" not in caught.value.message
    stored = add_model(models, "qwen3:0.6b", tiny_files["truncated"])
    stored.blob.unlink()
    with pytest.raises(ModelNotInStore, match="is missing"):
        resolve_model("qwen3:0.6b", models)


def test_a_gguf_path_is_hashed_not_looked_up(tiny_files: dict[str, Path]) -> None:
    import hashlib

    resolved = resolve_model(str(tiny_files["target"]), Path("/nonexistent"))
    assert resolved.source == "path"
    assert resolved.digest == hashlib.sha256(tiny_files["target"].read_bytes()).hexdigest()


# --- the GGUF header and the vocabulary rule -----------------------------------------------


def test_header_reads_what_the_writer_wrote(tiny_files: dict[str, Path]) -> None:
    header = read_header(tiny_files["target"])
    vocab = tiny_vocab()
    assert header.architecture == "llama" and header.tokenizer_model == "llama"
    assert list(header.tokens) == vocab.tokens
    assert (header.bos, header.eos, header.add_bos, header.add_eos) == (1, 2, True, False)


def test_vocabulary_rule(tiny_files: dict[str, Path]) -> None:
    target = read_header(tiny_files["target"])
    assert vocab_mismatch(target, read_header(tiny_files["truncated"])) is None
    why = vocab_mismatch(target, read_header(tiny_files["other_vocab"]))
    assert why is not None and why.startswith("token 259 ")
    # llama.cpp tolerates up to 128 extra tokens (padding) but not more.
    grown = target.__class__(**{**target.__dict__, "tokens": target.tokens + ("x",) * 128})
    assert vocab_mismatch(target, grown) is None
    grown = target.__class__(**{**target.__dict__, "tokens": target.tokens + ("x",) * 129})
    assert "more than 128 apart" in (vocab_mismatch(target, grown) or "")
    # Another EOS id with add_eos false is what llama.cpp accepts (test_compatibility.py).
    other_eos = target.__class__(**{**target.__dict__, "eos": 0})
    assert vocab_mismatch(target, other_eos) is None


def test_not_a_gguf_and_a_cut_header_are_bad_model_files(
        tmp_path: Path, tiny_files: dict[str, Path]) -> None:
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(BadModelFile, match="no GGUF magic"):
        read_header(tmp_path / "x.gguf")
    (tmp_path / "cut.gguf").write_bytes(tiny_files["target"].read_bytes()[:2000])
    with pytest.raises(BadModelFile, match="ends early"):
        read_header(tmp_path / "cut.gguf")


# --- the /completion stream, on llama-server's captured output -----------------------------


def _api_replaying(name: str) -> LlamaServerApi:
    body = (FIXTURES / name).read_bytes()

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/completion"
        return httpx.Response(200, content=body, headers={"Content-Type": "text/event-stream"})

    return LlamaServerApi("http://127.0.0.1:9", timeout_s=5,
                          transport=httpx.MockTransport(handler))


def test_stream_with_a_draft_gives_the_engines_counters_and_timings() -> None:
    gen = _api_replaying("completion-stream-draft-truncated.txt").completion({})
    # The final chunk of the captured stream: predicted_n 64, draft_n 141, accepted 44.
    assert (gen.eval_count, gen.draft_n, gen.draft_accepted) == (64, 141, 44)
    assert gen.eval_duration_ns == round(24.187 * 1e6)
    assert gen.prompt_eval_count == 5 and gen.done_reason == "length"
    assert gen.text and gen.ttft_s is not None and gen.load_duration_ns == 0


def test_stream_without_a_draft_has_no_counters() -> None:
    gen = _api_replaying("completion-stream-no-draft.txt").completion({})
    assert gen.eval_count == 64 and gen.draft_n is None and gen.draft_accepted is None


def test_a_stream_cut_before_its_final_chunk_is_an_error() -> None:
    body = (FIXTURES / "completion-stream-no-draft.txt").read_bytes()
    cut = body[: body.rindex(b"data: ")]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=cut)

    api = LlamaServerApi("http://127.0.0.1:9", timeout_s=5,
                         transport=httpx.MockTransport(handler))
    with pytest.raises(StreamBroken, match="without its final chunk"):
        api.completion({})


# --- the command line ----------------------------------------------------------------------


def test_command_line_names_models_by_digest_and_sets_the_launch_flags(
        tmp_path: Path, tiny_files: dict[str, Path]) -> None:
    models = tmp_path / "models"
    add_model(models, "qwen3:14b", tiny_files["target"])
    for name in ("qwen3:0.6b", "qwen3:1.7b", "qwen2.5:0.5b", "qwen2.5:1.5b"):
        add_model(models, name, tiny_files["truncated"])
    protocol = get_protocol("llamacpp-draft")
    with LlamaServerEngine(RunSettings(protocol=protocol), models_dir=models) as engine:
        for name in ["qwen3:14b", "qwen3:0.6b"]:
            engine.models[name] = resolve_model(name, models)
        draft = protocol.config("draft_qwen3_0.6b_n8")
        args = engine.launch_args(draft, 4242)
        shown = " ".join(engine.redacted(args))
        assert "--spec-type draft-simple" in shown and "--spec-draft-n-max 8" in shown
        assert "--poll 0" in shown and "--host 127.0.0.1 --port 4242" in shown
        assert "--ctx-size 4096" in shown
        assert str(models) not in shown and os.sep + "blobs" not in shown
        assert f"--spec-draft-model sha256:{engine.models['qwen3:0.6b'].digest}" in shown
        baseline = " ".join(engine.launch_args(protocol.baseline(), 4242))
        assert "--spec" not in baseline
        body = engine.request_body(draft)
        assert body["n_predict"] == 200 and body["min_p"] == 0.0 and body["stream"] is True
        warmup = engine.request_body(draft, warmup=True)  # the protocol's 16-token warm-up
        assert warmup == {**body, "n_predict": 16} and protocol.warmup_tokens == 16
        assert "spec_draft_n_max" not in body and "num_ctx" not in body
