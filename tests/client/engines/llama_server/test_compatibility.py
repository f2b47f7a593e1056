"""llama.cpp's draft/target rule (engines/llama_server/compatibility.py) on real GGUF headers
written by the project's tiny writer, and on header variants for the cases the rule treats
specially (BOS/EOS compared only when the tokenizer adds them, the 128-token margin, token
texts from id 5, the defaults llama.cpp fills in for absent keys).

The same pairs on the real engine: tests/realengine/test_refused_drafts.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specsubmit.engines.llama_server.compatibility import (
    effective_vocab,
    undecided,
    vocab_mismatch,
)
from specsubmit.engines.llama_server.gguf_header import GgufHeader, read_header
from tests.support.realengine.tiny_gguf import TinyModel, write_model

SMALL = TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5)


@pytest.fixture(scope="module")
def headers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GgufHeader]:
    folder = tmp_path_factory.mktemp("gguf-rule")
    variants = {
        "target": SMALL,
        "retext4": dataclasses.replace(SMALL, retext_tail=4),
        "retext1": dataclasses.replace(SMALL, retext_tail=1),
        "other_eos": dataclasses.replace(SMALL, eos_id=0),
        "other_eos_added": dataclasses.replace(SMALL, eos_id=0, add_eos=True),
    }
    return {name: read_header(write_model(folder / f"{name}.gguf", model))
            for name, model in variants.items()}


def test_a_retexted_tail_is_refused_naming_the_first_token(
        headers: dict[str, GgufHeader]) -> None:
    target = headers["target"]
    n = len(target.tokens)
    for name, changed in (("retext4", 4), ("retext1", 1)):
        why = vocab_mismatch(target, headers[name])
        first = n - changed
        assert why == (f"token {first} is '<|retext_0|>' in the draft but "
                       f"{target.tokens[first]!r} in the target")


def test_eos_is_compared_only_where_llama_cpp_compares_it(
        headers: dict[str, GgufHeader]) -> None:
    target = headers["target"]
    # Neither adds EOS: another EOS id is accepted (llama-server drafts with it: real test).
    assert headers["other_eos"].eos == 0 and vocab_mismatch(target, headers["other_eos"]) is None
    # The draft adds EOS and the target does not: refused, as llama.cpp's W line says.
    assert vocab_mismatch(target, headers["other_eos_added"]) == (
        "the draft adds EOS and the target does not")
    # Both add EOS with other ids: refused on the id.
    both = dataclasses.replace(target, add_eos=True, eos=2)
    assert vocab_mismatch(both, dataclasses.replace(both, eos=0)) == (
        "the EOS token differs (0 vs the target's 2)")


def test_bos_is_compared_only_when_it_is_added(headers: dict[str, GgufHeader]) -> None:
    target = headers["target"]
    assert target.add_bos is True
    assert vocab_mismatch(target, dataclasses.replace(target, bos=0)) == (
        "the BOS token differs (0 vs the target's 1)")
    plain = dataclasses.replace(target, add_bos=False)
    assert vocab_mismatch(plain, dataclasses.replace(plain, bos=0)) is None


def test_size_margin_is_128_and_texts_count_from_id_5(headers: dict[str, GgufHeader]) -> None:
    target = headers["target"]
    assert vocab_mismatch(target, dataclasses.replace(
        target, tokens=target.tokens + ("x",) * 128)) is None
    assert vocab_mismatch(target, dataclasses.replace(
        target, tokens=target.tokens + ("x",) * 129)) == (
        f"{len(target.tokens) + 129} tokens vs the target's {len(target.tokens)} "
        "(more than 128 apart)")
    # Ids 0-4 are never compared; id 5 is.
    early = list(target.tokens)
    early[4] = "<anything>"
    assert vocab_mismatch(target, dataclasses.replace(target, tokens=tuple(early))) is None
    early[5] = "<anything>"
    assert (vocab_mismatch(target, dataclasses.replace(target, tokens=tuple(early))) or ""
            ).startswith("token 5 ")


def test_vocab_types_not_tokenizer_names_are_compared() -> None:
    tokens = tuple(f"t{i}" for i in range(300))
    gpt2 = GgufHeader(None, None, None, None, "gpt2", "qwen2", tokens, 1, 2, False, False)
    # "whitespace" and "hybriddna" load as BPE too: the same vocab type.
    assert vocab_mismatch(gpt2, dataclasses.replace(gpt2, tokenizer_model="whitespace")) is None
    spm = dataclasses.replace(gpt2, tokenizer_model="llama")
    assert vocab_mismatch(gpt2, spm) == "tokenizer 'llama' is not the target's 'gpt2'"


def test_absent_keys_take_llama_cpps_defaults() -> None:
    tokens = tuple(f"t{i}" for i in range(300))
    spm = GgufHeader(None, None, None, None, "llama", None, tokens, None, None, None, None)
    vocab = effective_vocab(spm)
    assert (vocab.add_bos, vocab.add_eos, vocab.bos, vocab.eos) == (True, False, 1, 2)
    # An SPM draft that says add_bos true explicitly is the same as one that leaves it out.
    assert vocab_mismatch(spm, dataclasses.replace(spm, add_bos=True, bos=1)) is None
    # BPE: add_bos from the pre-tokenizer (llama3 sets it, qwen2 does not).
    llama3 = dataclasses.replace(spm, tokenizer_model="gpt2", tokenizer_pre="llama3")
    qwen2 = dataclasses.replace(llama3, tokenizer_pre="qwen2")
    assert effective_vocab(llama3).add_bos is True and effective_vocab(qwen2).add_bos is False
    assert vocab_mismatch(llama3, qwen2) == "the draft does not add BOS and the target does"
    # A special id outside the vocab keeps the default.
    assert effective_vocab(dataclasses.replace(spm, eos=10_000)).eos == 2
    # An empty token text loads as [EMPTY_<id>]; strcmp stops at a NUL.
    texts = list(tokens)
    texts[7], texts[8] = "", "t8\0tail"
    assert effective_vocab(dataclasses.replace(spm, tokens=tuple(texts))).texts[7:9] == (
        "[EMPTY_7]", "t8")
    assert vocab_mismatch(spm, dataclasses.replace(spm, tokens=tuple(texts))) == (
        "token 7 is '[EMPTY_7]' in the draft but 't7' in the target")


def test_unknown_tokenizers_are_left_to_the_engine() -> None:
    tokens = tuple(f"t{i}" for i in range(300))
    odd = GgufHeader(None, None, None, None, "gpt2", "no-such-pre", tokens, 1, 2, False, False)
    known = dataclasses.replace(odd, tokenizer_pre="qwen2")
    assert undecided(known, odd) and vocab_mismatch(known, odd) is None
    assert not undecided(known, known)


def test_the_rule_reads_real_files(tmp_path: Path) -> None:
    target = read_header(write_model(tmp_path / "t.gguf", SMALL))
    truncated = read_header(write_model(tmp_path / "d.gguf", SMALL.truncated(1)))
    assert target.tokenizer_pre == "default"
    assert vocab_mismatch(target, truncated) is None
