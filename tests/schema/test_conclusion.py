"""specschema.conclusion: the words both the CLI and the submission page use (pure)."""

from __future__ import annotations

from specschema import SpeculationEvidence, summarize
from specschema.conclusion import (
    capability_reason,
    conclusion,
    config_sentence,
    verdict_label,
    vs_baseline,
)
from specschema.examples import example_submission

EFFECT_WORDS = ("faster", "slower", "speedup", "slowdown")


def _words(sub):  # type: ignore[no-untyped-def]
    return conclusion(summarize(sub), {c.name: c.speculation for c in sub.configs},
                      engine_version=sub.engine.version, complete=sub.complete)


def test_a_not_applied_draft_is_noise_whatever_its_ratio() -> None:
    sub = example_submission("hardnumbers-m2", engine_version="0.12.8", draft_speedups={
        "draft_qwen2.5_0.5b": 0.6, "draft_qwen2.5_1.5b": 1.8})
    text = _words(sub)
    assert text.startswith("Speculative decoding did not run in this test: Ollama 0.12.8")
    assert text.count("is run-to-run noise") == 2
    assert not any(w in text.lower() for w in EFFECT_WORDS)


def test_a_draft_without_evidence_is_worded_as_unknown_not_as_a_speedup() -> None:
    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             counters_seen=True, draft_speedups={"spec_4": 1.6})
    summaries = summarize(sub)
    text = conclusion(summaries, {}, engine_version="0.33.1", complete=True)
    assert "spec_4 could not be checked" in text and "cannot be attributed" in text
    assert verdict_label(summaries[1], None) == "confirmed"  # the stored verdict, no rate


def test_a_verdict_without_words_is_never_counted_as_a_speedup() -> None:
    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             counters_seen=True, draft_speedups={"spec_4": 1.6})
    summaries = summarize(sub)
    odd = SpeculationEvidence.model_construct(
        requested=True, mechanism="draft_num_predict", engine_can_honor=True,
        observed="future_verdict", drafted_tokens=None, accepted_tokens=None,
        counters_source=None, models_loaded=[], outputs_match_baseline=None)
    sentence = config_sentence(summaries[1], odd, summaries[0], "0.33.1")
    assert sentence.startswith("spec_4 has the verdict future verdict")
    assert "is not counted as a measured speedup" in sentence
    assert verdict_label(summaries[1].model_copy(update={"observed": "future_verdict"}),
                         odd) == "future verdict"


def test_ratio_and_interval_and_reasons() -> None:
    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             counters_seen=True, draft_speedups={"spec_4": 1.6})
    baseline, draft = summarize(sub)[:2]
    assert vs_baseline(baseline) == "1.00x"
    assert vs_baseline(draft.model_copy(update={"speedup_tps_ci_low": None})) == (
        f"{draft.speedup_tps:.2f}x")
    assert capability_reason("draft_num_predict", "0.12.8").startswith(
        "options.draft_num_predict needs Ollama 0.30.0")
    assert capability_reason("none", "0.12.8") == "no speculation requested"
    assert capability_reason("server_launch", "b1234") == (
        "speculation requested through server_launch")
