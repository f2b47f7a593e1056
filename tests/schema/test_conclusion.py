"""specschema.conclusion: the words both the CLI and the submission page use (pure)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from specschema import SpeculationEvidence, summarize
from specschema.conclusion import (
    VERDICT_HELP,
    VERDICT_WORDS,
    capability_reason,
    conclusion,
    config_line,
    config_sentence,
    no_counters_reason,
    outcome,
    outcome_of,
    verdict_label,
    vs_baseline,
)
from specschema.examples import example_submission
from specschema.models import Observed

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


# --- words that match: one place, docs/run.md's table, the bugs people saw ----------------

DOCS_RUN = Path(__file__).resolve().parents[2] / "docs" / "run.md"


def _verdict_table() -> dict[str, tuple[str, str]]:
    """docs/run.md "Verdicts": verdict -> (evidence, what to do), as written there."""
    text = DOCS_RUN.read_text(encoding="utf-8")
    section = text[text.index("## Verdicts"):]
    section = section[:section.index("\n## ", 1)]
    rows = re.findall(r"^\| `([a-z_]+)` \| (.+?) \| (.+?) \|$", section, re.MULTILINE)
    return {name: (evidence, todo) for name, evidence, todo in rows}


def test_every_verdict_has_its_words_help_and_a_row_in_docs_run() -> None:
    table = _verdict_table()
    verdicts = set(get_args(Observed))
    assert set(table) == verdicts == set(VERDICT_WORDS) == set(VERDICT_HELP)


def test_the_what_to_do_of_each_verdict_names_what_docs_run_names() -> None:
    """Each option, environment variable or engine the table tells a contributor to use is
    in the words the CLI and the page show (VERDICT_HELP), and MLX is named where the table
    names it."""
    for verdict, (evidence, todo) in _verdict_table().items():
        meaning, help_todo = VERDICT_HELP[verdict]
        for token in re.findall(r"`(--[a-z-]+|[A-Z][A-Z0-9_]{3,})", todo):
            assert token in help_todo, (verdict, token)
        if "MLX" in evidence and verdict != "baseline_speculated":
            assert "MLX" in meaning + VERDICT_WORDS[verdict], verdict
        if "llama-server" in todo:
            assert "llama-server" in help_todo, verdict


def _v2_sub(engine_log: str, **kwargs):  # type: ignore[no-untyped-def]
    sub = example_submission("ollama-draft", engine_version="0.34.1", target="m:mtp",
                             schema_version=2, **kwargs)
    return sub.model_copy(update={"engine_log": engine_log})


def _sentence(sub, name: str, log_status: str | None) -> str:  # type: ignore[no-untyped-def]
    summaries = {s.name: s for s in summarize(sub)}
    config = next(c for c in sub.configs if c.name == name)
    return config_sentence(summaries[name], config.speculation, summaries["spec_off"],
                           sub.engine.version, log_status)


def test_a_run_without_a_log_never_reads_as_a_log_without_counters() -> None:
    sub = _v2_sub("not_given")
    assert sub.configs[1].speculation.observed == "not_observed"
    said = _sentence(sub, "spec_4", "not_given")
    assert "no Ollama server log was given (--ollama-log)" in said
    assert "found in Ollama's server log" not in said
    assert no_counters_reason("not_given") in said
    assert "found in Ollama's server log" in _sentence(sub, "spec_4", "read")
    assert "could not be read" in no_counters_reason("unreadable")


def test_an_incomplete_run_without_trials_of_a_config_says_so_in_words() -> None:
    sub = _v2_sub("not_given")
    summaries = summarize(sub)
    empty = summaries[1].model_copy(update={
        "trials": 0, "speedup_tps": None, "speedup_tps_ci_low": None,
        "speedup_tps_ci_high": None, "min_tps": None, "max_tps": None})
    said = config_sentence(empty, sub.configs[1].speculation, summaries[0], "0.34.1",
                           "not_given")
    assert "no trials to compare" in said and "its no trials" not in said
    assert "cannot be attributed" not in said
    line = config_line(empty, sub.configs[1].speculation)
    assert line.startswith("spec_4: no trials to compare")


def test_a_confirmed_config_without_trials_has_no_ratio_in_words() -> None:
    sub = _v2_sub("read", counters_seen=True, draft_speedups={"spec_4": 1.5})
    assert "(counters from the llama-server lines of Ollama's server log) and ran 1." in (
        _sentence(sub, "spec_4", "read"))
    summaries = summarize(sub)
    empty = summaries[1].model_copy(update={"speedup_tps": None, "speedup_tps_ci_low": None,
                                            "speedup_tps_ci_high": None})
    said = config_sentence(empty, sub.configs[1].speculation, summaries[0], "0.34.1", "read")
    assert said.startswith("spec_4 speculated (counters from")
    assert "has no trials to compare" in said
    assert "ran no trials" not in said


def test_the_short_line_leads_with_the_outcome_and_never_greens_a_slowdown() -> None:
    slow = _v2_sub("read", counters_seen=True, draft_speedups={"spec_4": 0.3, "spec_8": 1.6})
    summaries = {s.name: s for s in summarize(slow)}
    evidence = {c.name: c.speculation for c in slow.configs}
    assert outcome(summaries["spec_4"]) == "slower" and outcome(summaries["spec_8"]) == "faster"
    assert outcome(summaries["spec_off"]) is None
    line = config_line(summaries["spec_4"], evidence["spec_4"])
    assert line.startswith("spec_4: slower, 0.") and "speculation confirmed" in line
    assert config_line(summaries["spec_8"], evidence["spec_8"]).startswith("spec_8: faster, 1.")
    assert config_line(summaries["spec_off"], None).startswith("spec_off: the baseline, ")
    assert outcome_of(0.9, 1.1) == "no_clear_difference" and outcome_of(None, 1.0) is None
    noise = example_submission("hardnumbers-m2", draft_speedups={"draft_qwen2.5_0.5b": 0.6})
    first = summarize(noise)[1]
    said = config_line(first, noise.configs[1].speculation)
    assert said.endswith("is run-to-run noise") and "slower" not in said


def test_the_speedup_column_gives_an_interval_to_measured_speedups_only() -> None:
    from specschema.conclusion import speedup_cell

    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             counters_seen=True, draft_speedups={"spec_4": 1.6})
    baseline, draft = summarize(sub)[:2]
    assert draft.observed == "confirmed" and speedup_cell(draft) == vs_baseline(draft)
    assert "[" in speedup_cell(draft) and speedup_cell(baseline) == "1.00x"
    for observed, word in (("not_applied", "noise"), ("unstable", "unstable"),
                           ("not_observed", "not a speedup"), ("unknown", "not a speedup")):
        shown = speedup_cell(draft.model_copy(update={"observed": observed}))
        assert shown == f"{draft.speedup_tps:.2f}x, {word}" and "[" not in shown
        wall = speedup_cell(draft.model_copy(update={"observed": observed}), wall=True)
        assert "[" not in wall and wall.endswith(word)
    assert speedup_cell(draft.model_copy(update={"observed": "incompatible",
                                                 "speedup_tps": None})) == "—"
