"""tiny_gguf's models and ollama_store's layout, read back with the gguf package."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from tests.support.realengine import build
from tests.support.realengine.ollama_store import (
    DEFAULT_NAMES,
    DRAFT_MEDIA_TYPE,
    MODEL_MEDIA_TYPE,
    StoredModel,
    add_model,
    blob_path,
    manifest_path,
    resolve,
    split_name,
    store_model_set,
)
from tests.support.realengine.server import running_server
from tests.support.realengine.tiny_gguf import (
    MODEL_ROLES,
    TARGETS,
    ModelSet,
    TinyModel,
    tiny_vocab,
    vocab_from_gguf,
    write_model,
)


def _tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in GGUFReader(path).tensors}


def _tokens(path: Path) -> list[str]:
    field = GGUFReader(path).fields["tokenizer.ggml.tokens"]
    return [bytes(field.parts[i]).decode() for i in field.data]


def test_a_model_file_is_reproducible_byte_for_byte(tmp_path: Path) -> None:
    model = TinyModel(layers=2, embd=64, ff=128, heads=2)
    first = write_model(tmp_path / "a.gguf", model).read_bytes()
    assert write_model(tmp_path / "b.gguf", model).read_bytes() == first
    other_seed = write_model(tmp_path / "c.gguf", TinyModel(layers=2, embd=64, ff=128, heads=2,
                                                            seed=7))
    assert other_seed.read_bytes() != first


def test_the_truncated_draft_is_exactly_the_targets_first_layer(tiny_model_set: ModelSet) -> None:
    target = _tensors(tiny_model_set.target)
    draft = _tensors(tiny_model_set.draft_truncated)
    assert {name.split(".")[1] for name in draft if name.startswith("blk.")} == {"0"}
    assert {name.split(".")[1] for name in target if name.startswith("blk.")} == {"0", "1", "2",
                                                                                "3"}
    for name, values in draft.items():
        assert np.array_equal(values, target[name]), name


def test_the_unrelated_draft_shares_the_vocab_and_nothing_else(tiny_model_set: ModelSet) -> None:
    assert _tokens(tiny_model_set.draft_unrelated) == _tokens(tiny_model_set.target)
    draft = _tensors(tiny_model_set.draft_unrelated)
    target = _tensors(tiny_model_set.target)
    assert draft["token_embd.weight"].shape != target["token_embd.weight"].shape


def test_the_identical_draft_is_a_byte_copy(tiny_model_set: ModelSet) -> None:
    assert tiny_model_set.draft_identical.read_bytes() == tiny_model_set.target.read_bytes()


def test_the_incompatible_vocab_differs_where_llama_cpp_compares(
    tiny_model_set: ModelSet,
) -> None:
    ours, theirs = _tokens(tiny_model_set.target), _tokens(tiny_model_set.draft_incompatible)
    # Same size and specials (so only the text check can reject it), other text from id 5 on.
    assert len(ours) == len(theirs) and ours[:3] == theirs[:3] == ["<unk>", "<s>", "</s>"]
    assert any(a != b for a, b in zip(ours[5:], theirs[5:], strict=True))


def test_the_tiny_vocab_has_byte_fallback_and_reachable_words() -> None:
    vocab = tiny_vocab()
    assert len(vocab.tokens) == len(set(vocab.tokens))
    assert [f"<0x{b:02X}>" for b in range(256)] == vocab.tokens[3:259]
    for prefix in ("\u2581s", "\u2581sp", "\u2581speculative"):
        assert prefix in vocab.tokens
    assert sorted(tiny_vocab("tiny-incompatible").tokens) == sorted(vocab.tokens)


def test_the_bench_target_is_the_measured_one() -> None:
    bench = TARGETS["bench"]
    assert (bench.layers, bench.embd, bench.ff, bench.heads, bench.dtype) == (
        12, 1024, 2816, 16, "f16"
    )
    assert bench.residual_scale == 0.03
    with pytest.raises(ValueError, match="cannot truncate"):
        bench.truncated(13)


def test_the_store_has_ollamas_layout(
    ollama_models_dir: Path, ollama_stored_models: dict[str, StoredModel],
    tiny_model_set: ModelSet,
) -> None:
    assert set(ollama_stored_models) == set(MODEL_ROLES)
    for role, stored in ollama_stored_models.items():
        name = DEFAULT_NAMES[role]
        model, tag = name.split(":")
        assert stored.manifest == (
            ollama_models_dir / "manifests" / "registry.ollama.ai" / "library" / model / tag
        )
        manifest = json.loads(stored.manifest.read_text())
        assert manifest["schemaVersion"] == 2
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == MODEL_MEDIA_TYPE
        source = getattr(tiny_model_set, role).read_bytes()
        assert layer["digest"] == "sha256:" + hashlib.sha256(source).hexdigest()
        assert layer["size"] == len(source)
        assert stored.blob == ollama_models_dir / "blobs" / (
            "sha256-" + hashlib.sha256(source).hexdigest()
        )
        assert stored.blob.read_bytes() == source
        assert resolve(ollama_models_dir, name) == stored.blob
        config = json.loads(blob_path(ollama_models_dir, manifest["config"]["digest"]).read_text())
        assert config["model_format"] == "gguf"
        assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    # One blob for the target and its identical copy, as Ollama deduplicates.
    assert ollama_stored_models["draft_identical"].blob == ollama_stored_models["target"].blob


def test_the_protocol_names_map_to_the_roles() -> None:
    assert DEFAULT_NAMES == {
        "target": "qwen3:14b",
        "draft_truncated": "qwen3:0.6b",
        "draft_identical": "qwen3:1.7b",
        "draft_unrelated": "qwen2.5:0.5b",
        "draft_incompatible": "qwen2.5:1.5b",
    }


def test_a_draft_layer_and_other_names(tmp_path: Path, tiny_model_set: ModelSet) -> None:
    stored = add_model(tmp_path, "someone/qwen3-spec", tiny_model_set.target,
                       draft=tiny_model_set.draft_truncated)
    assert stored.manifest == manifest_path(tmp_path, "someone/qwen3-spec:latest")
    assert "someone/qwen3-spec/latest" in stored.manifest.as_posix()
    assert resolve(tmp_path, "someone/qwen3-spec", DRAFT_MEDIA_TYPE) == stored.draft_blob
    assert stored.draft_blob is not None
    assert stored.draft_blob.read_bytes() == tiny_model_set.draft_truncated.read_bytes()
    with pytest.raises(LookupError):
        resolve(tmp_path, "someone/qwen3-spec", "x/none")


def test_a_subset_under_other_names(tmp_path: Path, tiny_model_set: ModelSet) -> None:
    stored = store_model_set(tmp_path, tiny_model_set, {"target": "llama3:8b"}, link=True)
    assert list(stored) == ["target"]
    assert resolve(tmp_path, "llama3:8b").read_bytes() == tiny_model_set.target.read_bytes()
    with pytest.raises(ValueError, match="unknown roles"):
        store_model_set(tmp_path, tiny_model_set, {"drafty": "x:y"})


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("qwen3:14b", ("library", "qwen3", "14b")),
        ("qwen3", ("library", "qwen3", "latest")),
        ("me/tiny:q4", ("me", "tiny", "q4")),
    ],
)
def test_split_name(name: str, parts: tuple[str, str, str]) -> None:
    assert split_name(name) == parts


@pytest.mark.parametrize("name", [":14b", "a/b/c:d", "qwen3/"])
def test_split_name_refuses(name: str) -> None:
    with pytest.raises(ValueError):
        split_name(name)


def test_blob_path_refuses_other_digests(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        blob_path(tmp_path, "md5:abc")


@pytest.mark.realengine
def test_a_model_with_the_sdist_vocab_tokenizes_like_llama(
    llama_server_bin: Path, tmp_path: Path
) -> None:
    vocab = vocab_from_gguf(build.vocab_path())
    assert len(vocab.tokens) == 32000
    model = write_model(
        tmp_path / "spm.gguf",
        TinyModel(layers=1, embd=64, ff=128, heads=2, vocab_file=build.vocab_path()),
    )
    with running_server(llama_server_bin, model, tmp_path / "log") as server:
        tokens = server.post("/tokenize", {"content": "Hello world,"})["tokens"]
    assert tokens == [15043, 3186, 29892]  # real-engine.md
