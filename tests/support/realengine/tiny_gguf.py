"""Tiny llama-architecture GGUF models with seeded random weights, for a real llama-server.

Nothing is downloaded: the weights come from numpy's seeded generator and the tokenizer is a
small SentencePiece-style ("llama") vocab made here, with byte fallback so any text
tokenizes. The models generate gibberish, but deterministically, which is all a test of
speculative decoding needs: greedy output and acceptance counters are exact.

Every tensor is drawn from its own generator, seeded by (model seed, tensor name). So two
models with the same seed share every tensor they both have, and a draft with fewer layers
is an exact truncation of the target (same embeddings, same output head, same first
layers). The layer outputs are scaled down (``residual_scale``) so the layers only perturb
the embedding -> output path: the truncated draft then agrees with the target often, but not
always, which puts its acceptance strictly between an identical copy (100 %) and an
unrelated model (0 %).

``write_model_set(directory)`` writes the five roles the tests use (see MODEL_ROLES);
``size="bench"`` makes the 311 MB target the speedup measurements in
/work/shared/reference/real-engine.md used.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gguf
import numpy as np
import numpy.typing as npt

WORDS = (
    "the of and to in is was for on that with as by at from it an be this are or which his "
    "her he she they we you not but have had has were all one two three speculative decoding "
    "draft model target token accept reject fast slow benchmark ollama llama server test tiny "
    "random weight hello world time day year people way new first last long great little own "
    "other old right big high different small large next early young important few public bad "
    "same able"
).split()
CHARS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    ".,!?;:'\"-()[]{}<>/\\|@#$%^&*_+=~`"
)
SPACE = "\u2581"  # SentencePiece's word-boundary marker

VocabKind = Literal["tiny", "tiny-incompatible"]
DType = Literal["f32", "f16"]


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    scores: list[float]
    types: list[int]


def tiny_vocab(kind: VocabKind = "tiny") -> Vocab:
    """The built-in vocab (about 900 tokens).

    ``tiny-incompatible`` has the same size and the same special and byte tokens, but its
    word pieces come in another order, so token ids >= 259 mean different text: llama.cpp's
    draft/target vocab check (which compares token texts from id 5 on) rejects the pair.
    """
    tokens: list[str] = []
    scores: list[float] = []
    types: list[int] = []
    seen: set[str] = set()

    def add(token: str, score: float, token_type: int) -> None:
        if token not in seen:
            seen.add(token)
            tokens.append(token)
            scores.append(score)
            types.append(token_type)

    add("<unk>", 0.0, gguf.TokenType.UNKNOWN)
    add("<s>", 0.0, gguf.TokenType.CONTROL)
    add("</s>", 0.0, gguf.TokenType.CONTROL)
    for byte in range(256):
        add(f"<0x{byte:02X}>", 0.0, gguf.TokenType.BYTE)
    pieces: list[tuple[str, float]] = [(SPACE, -1.0)]
    for char in CHARS:
        # Single characters score below any merge, so SPM prefers whole pieces.
        pieces += [(char, -1.0), (SPACE + char, -2.0)]
    score = -3.0
    for word in WORDS:
        piece = SPACE + word
        # SPM merges pair by pair, so every prefix must exist for the word to be reachable.
        pieces += [(piece[:end], score + 0.001 * end) for end in range(2, len(piece) + 1)]
        score -= 0.01
    if kind == "tiny-incompatible":
        pieces.reverse()
    for piece, piece_score in pieces:
        add(piece, piece_score, gguf.TokenType.NORMAL)
    return Vocab(tokens, scores, types)


@functools.lru_cache(maxsize=4)
def vocab_from_gguf(path: Path) -> Vocab:
    """The tokenizer of a GGUF file with an SPM ("llama") vocab, e.g. the sdist's
    ggml-vocab-llama-spm.gguf (32000 tokens; build.vocab_path()).

    Cached: opening a 32000-token file with GGUFReader takes seconds. Treat the result as
    read-only.
    """
    fields = gguf.GGUFReader(path).fields
    if fields["tokenizer.ggml.model"].contents() != "llama":
        raise ValueError(f"{path}: only SPM ('llama') vocabs are supported")
    return Vocab(
        tokens=list(fields["tokenizer.ggml.tokens"].contents()),
        scores=[float(x) for x in fields["tokenizer.ggml.scores"].contents()],
        types=[int(x) for x in fields["tokenizer.ggml.token_type"].contents()],
    )


@dataclass(frozen=True)
class TinyModel:
    """Everything that determines a model file's bytes."""

    layers: int = 4
    embd: int = 128
    ff: int = 384
    heads: int = 4
    kv_heads: int | None = None
    ctx: int = 2048
    seed: int = 41
    dtype: DType = "f32"
    vocab: VocabKind = "tiny"
    vocab_file: Path | None = None  # overrides `vocab` with a GGUF file's tokenizer
    # Small residual outputs: layers perturb the embedding->output path instead of replacing
    # it, so a truncated draft predicts the target's next token often (but not always).
    residual_scale: float = 0.03
    # Std of the output head in units of 1/sqrt(embd): peaked logits make the greedy argmax
    # stable against tiny numeric differences (batched verification vs. one-by-one decode).
    logit_scale: float = 4.0
    # Zero the output rows of <unk>, <s>, </s>: their logit stays 0 while the best of the
    # others is almost surely positive, so greedy decoding never stops early on EOS.
    suppress_special: bool = True
    # Zero the output rows of the byte-fallback tokens too: a lone byte is mostly invalid
    # UTF-8 (the server turns it into U+FFFD or holds it back while streaming), so without
    # them the generated gibberish is printable text that compares and reads cleanly.
    suppress_bytes: bool = True
    name: str = "specbench-tiny"
    # Give the last N tokens other texts (same vocab size), the way ids 151665-151668 are
    # padding in Qwen2.5 and tool/think tokens in Qwen3: llama.cpp refuses such a pair.
    retext_tail: int = 0
    # The EOS id and whether the tokenizer appends it: llama.cpp compares EOS ids only when
    # add_eos is true, so a draft with another EOS (and add_eos false) is still accepted.
    eos_id: int = 2
    add_eos: bool = False

    def truncated(self, layers: int, name: str | None = None) -> TinyModel:
        """This model cut down to its first `layers` layers (same seed: exact truncation)."""
        if not 0 < layers <= self.layers:
            raise ValueError(f"cannot truncate {self.layers} layers to {layers}")
        return dataclasses.replace(self, layers=layers, name=name or f"{self.name}-trunc{layers}")


def _rng(seed: int, tensor: str) -> np.random.Generator:
    # crc32 of the name, not hash(): Python's str hash is salted per process.
    return np.random.default_rng([seed, zlib.crc32(tensor.encode())])


def write_model(path: Path, model: TinyModel) -> Path:
    """Write `model` as a GGUF file at `path` (byte-for-byte reproducible); return `path`."""
    heads = model.heads
    kv_heads = model.kv_heads or heads
    head_dim = model.embd // heads
    if head_dim * heads != model.embd:
        raise ValueError(f"embd {model.embd} is not a multiple of heads {heads}")
    vocab = vocab_from_gguf(model.vocab_file) if model.vocab_file else tiny_vocab(model.vocab)
    if model.retext_tail:
        keep = len(vocab.tokens) - model.retext_tail
        vocab = Vocab(vocab.tokens[:keep] + [f"<|retext_{i}|>" for i in range(model.retext_tail)],
                      vocab.scores, vocab.types)
    n_vocab = len(vocab.tokens)
    dtype = np.float32 if model.dtype == "f32" else np.float16

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(model.name)
    writer.add_context_length(model.ctx)
    writer.add_embedding_length(model.embd)
    writer.add_block_count(model.layers)
    writer.add_feed_forward_length(model.ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(
        gguf.LlamaFileType.ALL_F32 if model.dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16
    )
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(model.eos_id)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(model.add_eos)
    # A minimal template so chat endpoints work too (llama-server applies it with its Jinja).
    writer.add_chat_template(
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )

    def normal(tensor: str, shape: Sequence[int], std: float) -> npt.NDArray[np.generic]:
        values = _rng(model.seed, tensor).standard_normal(tuple(shape), dtype=np.float32) * std
        return values.astype(dtype)

    embd, ff, kv_dim = model.embd, model.ff, kv_heads * head_dim
    # numpy shapes are (out, in); the gguf writer stores them reversed, as ggml expects.
    writer.add_tensor("token_embd.weight", normal("token_embd.weight", (n_vocab, embd), 1.0))
    inv_e, inv_f = 1.0 / np.sqrt(embd), 1.0 / np.sqrt(ff)
    for layer in range(model.layers):
        p = f"blk.{layer}."
        # Norm weights stay f32: ggml keeps 1-D tensors in f32 even in f16 models.
        writer.add_tensor(p + "attn_norm.weight", np.ones(embd, dtype=np.float32))
        writer.add_tensor(p + "attn_q.weight", normal(p + "attn_q.weight", (embd, embd), inv_e))
        writer.add_tensor(p + "attn_k.weight", normal(p + "attn_k.weight", (kv_dim, embd), inv_e))
        writer.add_tensor(p + "attn_v.weight", normal(p + "attn_v.weight", (kv_dim, embd), inv_e))
        writer.add_tensor(
            p + "attn_output.weight",
            normal(p + "attn_output.weight", (embd, embd), model.residual_scale * 0.5 * inv_e),
        )
        writer.add_tensor(p + "ffn_norm.weight", np.ones(embd, dtype=np.float32))
        writer.add_tensor(p + "ffn_gate.weight", normal(p + "ffn_gate.weight", (ff, embd), inv_e))
        writer.add_tensor(p + "ffn_up.weight", normal(p + "ffn_up.weight", (ff, embd), inv_e))
        writer.add_tensor(
            p + "ffn_down.weight",
            normal(p + "ffn_down.weight", (embd, ff), model.residual_scale * 0.5 * inv_f),
        )
    writer.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    output = normal("output.weight", (n_vocab, embd), model.logit_scale * inv_e)
    if model.suppress_special:
        output[:3] = 0
    if model.suppress_bytes:
        output[np.asarray(vocab.types) == gguf.TokenType.BYTE] = 0
    writer.add_tensor("output.weight", output)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


Size = Literal["tiny", "bench"]

# "tiny": about 4 MB per target, fast enough for the correctness tests on 2 cores. Its
# residual scale is larger than the default: with only 4 layers, 0.03 made the one-layer
# truncation agree on every token and the text fall into a short loop; 0.3 gives about 30 %
# acceptance on text that hardly repeats within the 64 tokens of the tests.
# "bench": the 311 MB f16 target of the measured 2.2-2.4x speedup (real-engine.md).
TARGETS: dict[Size, TinyModel] = {
    "tiny": TinyModel(
        layers=4, embd=128, ff=384, heads=4, dtype="f32", residual_scale=0.3,
        name="specbench-target",
    ),
    "bench": TinyModel(
        layers=12, embd=1024, ff=2816, heads=16, dtype="f16", name="specbench-target"
    ),
}

# The roles a model set has; ModelSet's fields and ollama_store.DEFAULT_NAMES use them.
MODEL_ROLES = (
    "target",  # the model being sped up
    "draft_truncated",  # the target's first layer(s), same embeddings and head
    "draft_identical",  # a byte-identical copy of the target: every draft token accepted
    "draft_unrelated",  # another seed, same vocab: (practically) nothing accepted
    "draft_incompatible",  # another vocab: llama-server must refuse the pair
)


@dataclass(frozen=True)
class ModelSet:
    target: Path
    draft_truncated: Path
    draft_identical: Path
    draft_unrelated: Path
    draft_incompatible: Path

    def by_role(self) -> dict[str, Path]:
        return {role: getattr(self, role) for role in MODEL_ROLES}


def model_set_specs(size: Size = "tiny", truncate_to: int = 1) -> dict[str, TinyModel]:
    """The model definitions per role (the identical copy has the target's)."""
    target = TARGETS[size]
    # The unrelated and incompatible drafts are small whatever the target's size: only their
    # vocab and seed matter, and a small draft keeps its cost out of the measurements.
    small = TinyModel(layers=2, embd=64, ff=192, heads=2, dtype="f32")
    return {
        "target": target,
        "draft_truncated": target.truncated(truncate_to, name="specbench-draft-truncated"),
        "draft_identical": target,
        "draft_unrelated": dataclasses.replace(small, seed=23, name="specbench-draft-unrelated"),
        "draft_incompatible": dataclasses.replace(
            small, seed=29, vocab="tiny-incompatible", name="specbench-draft-incompatible"
        ),
    }


def write_model_set(directory: Path, size: Size = "tiny", truncate_to: int = 1) -> ModelSet:
    """Write target.gguf and the four drafts into `directory` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    specs = model_set_specs(size, truncate_to)
    paths = {role: directory / f"{role}.gguf" for role in MODEL_ROLES}
    for role, spec in specs.items():
        if role == "draft_identical":
            continue
        write_model(paths[role], spec)
    # A copy, not a second write: "identical" should mean the same bytes, not merely the
    # same generator (it also gives the Ollama store two manifests sharing one blob).
    shutil.copyfile(paths["target"], paths["draft_identical"])
    return ModelSet(**paths)
