"""Whether llama.cpp accepts a draft for a target: its own rule, read from the GGUF headers.

The pinned build (llama.cpp 0c1e57098, vendored by the llama-cpp-python 0.3.36 sdist) decides
in ``common/speculative.cpp`` ``common_speculative_are_compatible``; this module is that
function over the header keys, with the defaults ``src/llama-vocab.cpp`` ``llama_vocab::
impl::load`` fills in when a key is absent:

1. the same vocab type (``tokenizer.ggml.model``: "llama" is SPM, "gpt2", "hybriddna",
   "whitespace" and "gemma4" are all BPE, ...);
2. the same add-BOS flag, and, only when it is true, the same BOS id; then the same for EOS
   (a draft with another EOS id is accepted when neither model appends EOS);
3. vocab sizes at most ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE`` (128) apart;
4. the same token text for every id from ``SPEC_VOCAB_CHECK_START_TOKEN_ID`` (5) up to the
   smaller size (``strcmp``: the text up to its first NUL; an empty text is loaded as
   ``[EMPTY_<id>]``).

A tokenizer or BPE pre-tokenizer this build does not know makes llama.cpp refuse to load
the model at all; the rule then says nothing (``undecided``) and the engine's own start
gives the reason. Whatever this rule says, the engine's log and ``/slots`` after the start
are checked too (``engine.py``): they are the last word.

Why check before the start at all: this build logs "the target and draft vocabs are not
compatible" and then serves the target *without* speculation, so the config would measure
the target against itself. The check names the reason in words before any trial.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsubmit.engines.llama_server.gguf_header import GgufHeader

MAX_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE (it was 100 in 2024)
CHECK_START_TOKEN_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID
NULL = -1  # LLAMA_TOKEN_NULL

# tokenizer.ggml.model -> (vocab type, default BOS, default EOS, default add_bos, add_eos);
# a BPE vocab's add_bos default comes from its pre-tokenizer (below).
_TYPES: dict[str, tuple[str, int, int, bool, bool]] = {
    "no_vocab": ("none", NULL, NULL, False, False),
    "none": ("none", NULL, NULL, False, False),
    "llama": ("spm", 1, 2, True, False),
    "bert": ("wpm", 101, NULL, True, False),
    "gpt2": ("bpe", 11, 11, False, False),
    "hybriddna": ("bpe", 11, 11, False, False),
    "whitespace": ("bpe", 11, 11, False, False),
    "t5": ("ugm", NULL, 1, False, True),
    "rwkv": ("rwkv", NULL, NULL, False, False),
    "test": ("test", NULL, NULL, False, False),
    "plamo2": ("plamo2", 1, 2, False, False),
    "gemma4": ("bpe", NULL, NULL, True, False),
}
# The BPE pre-tokenizers of this build (llama-vocab.cpp's ``tokenizer_pre == "..."`` names;
# "" is "default"): any other makes llama.cpp refuse to load the model. Those whose branch
# sets add_bos = true, those that reset the default BOS to none, and the two that force
# add_bos to true even against the file's key (the Gemma 4 workaround).
_BPE_PRE = frozenset({
    "", "a.x-4.0", "afmoe", "bailingmoe", "bailingmoe2", "bloom", "chameleon", "chatglm-bpe",
    "codeshell", "cohere2moe", "command-r", "dbrx", "deepseek-coder", "deepseek-llm",
    "deepseek-r1-qwen", "deepseek-v3", "default", "exaone", "exaone-moe", "exaone4",
    "f2llmv2", "falcon", "falcon-h1", "falcon3", "gemma4", "gigachat", "glm4", "glm5",
    "gpt-2", "gpt-4o", "gpt3-finnish", "granite-docling", "granite-embed-multi-311m",
    "granite-embed-multi-97m", "grok-2", "hunyuan", "hunyuan-dense", "hy_v4", "jais",
    "jais-2", "jina-de", "jina-es", "jina-v1-en", "jina-v2-code", "jina-v2-de", "jina-v2-es",
    "jina-v5-nano", "joyai-llm", "kanana2", "kimi-k2", "kormo", "laguna", "lfm2", "llada-moe",
    "llama-bpe", "llama-v3", "llama3", "llama4", "megrez", "mellum", "mellum2", "midm-2.0",
    "minerva-7b", "minicpm5", "minimax-m2", "modern-bert", "mpt", "olmo", "phi-2", "pixtral",
    "poro-chat", "qwen2", "qwen35", "refact", "roberta-bpe", "sarvam-moe", "seed-coder",
    "smaug-bpe", "smollm", "solar-open", "spark2_5", "stablelm2", "starcoder", "superbpe",
    "talkie", "tekken", "tiny_aya", "trillion", "ufakzeka", "viking", "whitespace", "youtu",
})
_BPE_ADD_BOS = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                          "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon"})
_NO_BOS_PRE = frozenset({"chatglm-bpe", "glm4", "glm5"})
_GEMMA4_PRE = frozenset({"gemma4", "granite-embed-multi-311m"})


@dataclass(frozen=True)
class EffectiveVocab:
    """What llama.cpp's loaded vocab holds, as far as the rule looks."""

    vocab_type: str | None  # None: llama.cpp would not load this vocab at all
    add_bos: bool | None
    add_eos: bool | None
    bos: int | None
    eos: int | None
    texts: tuple[str, ...]


def _special(key_value: int | None, default: int, n_tokens: int) -> int:
    """A special token id as ``llama_vocab::impl::load`` sets it: a default outside the
    vocab is none, a key outside the vocab keeps the default."""
    if default >= n_tokens:
        default = NULL
    if key_value is None or not 0 <= key_value < n_tokens:
        return default
    return key_value


def effective_vocab(header: GgufHeader) -> EffectiveVocab:
    n_tokens = len(header.tokens)
    texts = tuple(text.split("\0", 1)[0] if text else f"[EMPTY_{i}]"
                  for i, text in enumerate(header.tokens))
    known = _TYPES.get(header.tokenizer_model or "")
    if known is None:  # llama.cpp refuses to load it at all ("unknown tokenizer")
        return EffectiveVocab(None, header.add_bos, header.add_eos, header.bos, header.eos,
                              texts)
    vocab_type, bos_default, eos_default, add_bos, add_eos = known
    pre = header.tokenizer_pre or ""
    if header.tokenizer_model == "gemma4":
        pre = "gemma4"
    if vocab_type == "bpe":
        if pre not in _BPE_PRE:  # llama.cpp refuses to load it ("unknown pre-tokenizer")
            return EffectiveVocab(None, header.add_bos, header.add_eos, header.bos,
                                  header.eos, texts)
        add_bos = pre in _BPE_ADD_BOS
        if pre in _NO_BOS_PRE:
            bos_default = NULL
    if header.add_bos is not None:
        add_bos = header.add_bos
    if header.add_eos is not None:
        add_eos = header.add_eos
    if pre in _GEMMA4_PRE and vocab_type == "bpe":
        add_bos = True
    return EffectiveVocab(
        vocab_type=vocab_type, add_bos=add_bos, add_eos=add_eos,
        bos=_special(header.bos, bos_default, n_tokens),
        eos=_special(header.eos, eos_default, n_tokens), texts=texts,
    )


def _shown(text: str) -> str:
    """A token text as a reason quotes it: repr (every control or format character
    escaped), at most 40 characters of it."""
    return repr(text[:40]) + ("…" if len(text) > 40 else "")


def vocab_mismatch(target: GgufHeader, draft: GgufHeader) -> str | None:
    """Why llama.cpp refuses `draft` for `target`, in words; None when it accepts it, or
    when it would not load one of them at all (``undecided``: the engine says why)."""
    if not target.tokens or not draft.tokens:
        return "a model has no token list (tokenizer.ggml.tokens)"
    t, d = effective_vocab(target), effective_vocab(draft)
    if t.vocab_type is None or d.vocab_type is None:
        return None  # the engine will refuse to load it and say why
    if t.vocab_type != d.vocab_type:
        return (f"tokenizer {draft.tokenizer_model!r} is not the target's "
                f"{target.tokenizer_model!r}")
    for label, t_add, d_add, t_id, d_id in (("BOS", t.add_bos, d.add_bos, t.bos, d.bos),
                                            ("EOS", t.add_eos, d.add_eos, t.eos, d.eos)):
        if t_add != d_add:
            return (f"the draft {'adds' if d_add else 'does not add'} {label} and the target "
                    f"{'does' if t_add else 'does not'}")
        if t_add and t_id != d_id:
            return f"the {label} token differs ({d_id} vs the target's {t_id})"
    n_target, n_draft = len(t.texts), len(d.texts)
    if abs(n_target - n_draft) > MAX_SIZE_DIFFERENCE:
        return (f"{n_draft} tokens vs the target's {n_target} (more than "
                f"{MAX_SIZE_DIFFERENCE} apart)")
    for index in range(CHECK_START_TOKEN_ID, min(n_target, n_draft)):
        if t.texts[index] != d.texts[index]:
            return (f"token {index} is {_shown(d.texts[index])} in the draft but "
                    f"{_shown(t.texts[index])} in the target")
    return None


def undecided(target: GgufHeader, draft: GgufHeader) -> bool:
    """Whether ``vocab_mismatch`` could not decide from the headers (the engine decides)."""
    return None in (effective_vocab(target).vocab_type, effective_vocab(draft).vocab_type)


__all__ = ["CHECK_START_TOKEN_ID", "MAX_SIZE_DIFFERENCE", "EffectiveVocab", "effective_vocab",
           "undecided", "vocab_mismatch"]
