"""The words of the report: a not-applied draft is never a speedup or a slowdown."""

from __future__ import annotations

import io

from rich.console import Console

from specschema import summarize
from specschema.conclusion import vs_baseline
from specschema.examples import example_submission
from specsubmit.run.report import conclusion, render_result, verdict_label

EFFECT_WORDS = ("faster", "slower", "speedup", "slowdown", "speeds up", "slows down")


def _render(sub) -> str:  # type: ignore[no-untyped-def]
    buffer = io.StringIO()
    render_result(sub, Console(file=buffer, width=160))
    return buffer.getvalue()


def test_the_articles_slowdown_is_called_noise_when_the_draft_was_ignored() -> None:
    # The seed article's numbers: 0.95x and 0.90x on Ollama 0.12.8 with draft_model.
    sub = example_submission("hardnumbers-m2", engine_version="0.12.8", draft_speedups={
        "draft_qwen2.5_0.5b": 0.95, "draft_qwen2.5_1.5b": 0.90})
    text = conclusion(sub)
    assert "run-to-run noise" in text and "did not run in this test" in text
    assert not any(word in text.lower() for word in EFFECT_WORDS)
    summaries = summarize(sub)
    assert summaries[2].speedup_tps is not None and summaries[2].speedup_tps < 0.95
    assert all(verdict_label(sub, s) == "not applied (noise)" for s in summaries[1:])
    # the spread is given: min-max tok/s and CV for the draft and for the baseline
    assert text.count("tok/s, CV") == 4
    rendered = _render(sub)
    assert "not applied (noise)" in rendered and "Trials (in run order)" in rendered
    assert not any(word in rendered.lower() for word in EFFECT_WORDS)


def test_confirmed_speedup_and_slowdown_and_no_clear_difference() -> None:
    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             counters_seen=True, draft_speedups={"spec_4": 1.6, "spec_8": 0.6})
    text = conclusion(sub)
    assert ("spec_4 speculated (counters from the llama-server lines of Ollama's server log) "
            "and ran 1.") in text
    assert "faster than the baseline (95% within-run CI" in text
    assert "spec_8 speculated" in text and "slower than the baseline: 0." in text
    assert "1200 of 1600 drafted tokens accepted (75%)" in text  # 8 trials of 200
    summaries = summarize(sub)
    assert verdict_label(sub, summaries[1]) == "confirmed (75% accepted)"
    assert vs_baseline(summaries[0]) == "1.00x"
    assert vs_baseline(summaries[1]).startswith("1.") and "[" in vs_baseline(summaries[1])

    same = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                              counters_seen=True, seed=3)
    # Speculation confirmed, but the interval includes 1.00x: it speculated, and the run
    # cannot tell faster from slower. No surface calls that "no difference".
    said = conclusion(same)
    first = summarize(same)[1]
    low, high = first.speedup_tps_ci_low, first.speedup_tps_ci_high
    assert low is not None and high is not None and low < 1.0 < high
    assert (f"spec_4 speculated; speedup not resolved (95% within-run CI {low:.2f}–{high:.2f}x "
            "includes 1.00x)") in said
    assert "no clear difference" not in said and "faster" not in said
    assert verdict_label(same, first) == (
        "confirmed (75% accepted); speedup not resolved (CI includes 1.00x)")
    assert "speedup not resolved" in _render(same).split("Trials (in run order)")[0]


def test_not_observed_is_not_attributed_to_speculation() -> None:
    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             draft_speedups={"spec_4": 1.6})
    text = conclusion(sub)
    assert "spec_4 could not be checked: no counters were found in Ollama's server log" in text
    assert "cannot be attributed to speculation" in text
    assert verdict_label(sub, summarize(sub)[1]) == "not observed"


def test_incomplete_and_output_mismatch_are_said() -> None:
    sub = example_submission("hardnumbers-m2", complete=False)
    draft = sub.configs[1]
    evidence = draft.speculation.model_copy(update={"outputs_match_baseline": False})
    sub = sub.model_copy(update={
        "note": "stopped early: interrupted by the contributor after 10 of 15 trials",
        "configs": [sub.configs[0], draft.model_copy(update={"speculation": evidence}),
                    sub.configs[2]]})
    text = conclusion(sub)
    assert text.startswith("Incomplete run (15 trials measured).")
    assert "its output differed from the baseline's" in text
    assert "Incomplete result" in _render(sub)


def test_no_baseline_trials() -> None:
    sub = example_submission("hardnumbers-m2", complete=False)
    empty = sub.model_copy(update={"configs": [c.model_copy(update={"trials": []})
                                               for c in sub.configs]})
    assert conclusion(empty).endswith("No baseline trials were measured, so nothing can be "
                                      "compared.")
    assert "—" in _render(empty)


def test_a_narrow_terminal_keeps_every_config_name_whole() -> None:
    """At 40 columns the summary keeps the config, its headline ratio and its verdict,
    wrapped rather than cut: every config's name is there, none ends in an ellipsis."""
    import re

    from rich.console import Console

    from specsubmit.run.report import summary_table

    sub = example_submission("llamacpp-draft", seed=4, schema_version=2, blocks=True)
    console = Console(width=40, force_terminal=True, color_system=None, record=True)
    render_result(sub, console)
    shown = console.export_text()
    table = shown.split("Trials (in run order)")[0]
    assert "…" not in table
    column = "".join(re.findall(r"^  (\S+)", table, re.MULTILINE))
    for config in sub.configs:
        assert config.name in column, (config.name, table)
    wide = summary_table(sub, summarize(sub), 120)
    assert len(wide.columns) > len(summary_table(sub, summarize(sub), 40).columns)


def test_any_terminal_encoding_shows_the_result_and_where_it_was_saved(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys
    from pathlib import Path

    from specschema.payload import submission_bytes

    result = tmp_path / "result.json"
    result.write_bytes(submission_bytes(example_submission("llamacpp-draft", seed=4,
                                                           schema_version=2, blocks=True)))
    script = str(Path(sys.executable).with_name("specsubmit"))
    for encoding in ("ascii", "latin-1"):
        shown = subprocess.run([script, "show", str(result)], capture_output=True, text=True,
                               encoding="utf-8", errors="replace", timeout=60, check=False,
                               env={**os.environ, "PYTHONIOENCODING": encoding})
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
        assert "draft_qwen3_0.6b_n8" in shown.stdout
