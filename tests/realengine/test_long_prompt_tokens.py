"""llamacpp-draft-long's prompt is at least 4,000 tokens for a real tokenizer, and fits its
context. No Qwen tokenizer can be had here without a download; the closest real one is the
32,000-token Llama SentencePiece vocab that llama.cpp ships in the sdist
(models/ggml-vocab-llama-spm.gguf), tokenized by llama-server itself. Qwen's 151k-token BPE
is denser on code than Llama's 32k SPM, so its count is lower (estimated 5,000-6,000); the
lower bound is stated in the protocol's description as an estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from specschema import get_protocol
from tests.support.realengine import build
from tests.support.realengine.server import running_server
from tests.support.realengine.tiny_gguf import TinyModel, write_model

pytestmark = pytest.mark.realengine


# gguf's GGUFReader leaves its memmapped file to the garbage collector; a collection during
# this test (of a reader from an earlier test) raised an unraisable ResourceWarning in CI.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_long_prompt_is_over_4000_llama_tokens_and_fits(llama_server_bin: Path,
                                                        tmp_path: Path) -> None:
    model = write_model(tmp_path / "llama-vocab.gguf", TinyModel(
        layers=1, embd=64, ff=128, heads=2, vocab_file=build.vocab_path(), ctx=8192))
    protocol = get_protocol("llamacpp-draft-long")
    with running_server(llama_server_bin, model, tmp_path / "server.log", ctx=8192) as server:
        tokens = server.post("/tokenize", {"content": protocol.prompt})["tokens"]
    assert len(tokens) >= 4000
    assert len(tokens) + protocol.options.num_predict <= protocol.options.num_ctx
    print(f"llamacpp-draft-long prompt: {len(tokens)} Llama-SPM tokens")
