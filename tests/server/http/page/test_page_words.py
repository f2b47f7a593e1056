"""The submission page's words that used to be wrong: "no counters were found in the server
log" when no log was given, "(wide with five trials)" on six-trial pages, "Client None 0.1.0"
on a hidden submission's page."""

from __future__ import annotations

from specschema import summarize
from specschema.examples import example_submission
from specserver.http.page import board, result, submission
from specserver.store.redaction import REDACTED_SUBMISSION_FIELDS, redact_row


def _v2(engine_log: str):  # type: ignore[no-untyped-def]
    sub = example_submission("ollama-draft", engine_version="0.34.1", target="m:mtp",
                             schema_version=2)
    return sub.model_copy(update={"engine_log": engine_log})


def test_a_run_without_a_log_never_reads_no_counters_found_on_the_page() -> None:
    sub = _v2("not_given")
    summaries = summarize(sub)
    evidence = sub.configs[1].speculation
    assert evidence.observed == "not_observed"
    _, reported = result.evidence_lines(summaries[1], evidence, "0.34.1", None, None,
                                        "ollama", "not_given")
    assert reported[0] == ("no Ollama server log was given (--ollama-log), so no counters "
                           "could be read")
    _, read = result.evidence_lines(summaries[1], evidence, "0.34.1", None, None,
                                    "ollama", "read")
    assert read[0] == "no counters were found in Ollama's server log"
    section = result.conclusion_section(summaries, {c.name: c.speculation for c in sub.configs},
                                        "0.34.1", True, "not_given")
    assert "no Ollama server log was given" in section and "found in" not in section


def test_the_interval_note_counts_this_runs_trials() -> None:
    six = [s.model_copy(update={"trials": 6}) for s in summarize(_v2("read"))]
    assert submission.few_trials(six) == "wide with 6 trials"
    five = summarize(example_submission("hardnumbers-m2"))
    assert submission.few_trials(five) == "wide with 5 trials"
    mixed = [six[0], six[1].model_copy(update={"trials": 2})]
    assert submission.few_trials(mixed) == "wide with 2–6 trials per config"


def test_a_hidden_submission_says_its_client_name_is_redacted() -> None:
    row = {"client_name": "specsubmit", "client_version": "0.1.0", "hidden": True}
    assert submission.client_words(row) == "specsubmit 0.1.0"
    hidden = redact_row(row, REDACTED_SUBMISSION_FIELDS)
    assert hidden["client_name"] is None
    assert submission.client_words(hidden) == "0.1.0 (name redacted: hidden submission)"
    assert "None" not in submission.client_words(hidden)


def _group(verdicts: dict[str, int], evidence: dict[str, int] | None = None,
           verdict: str | None = None, **spread: float | bool | None):  # type: ignore[no-untyped-def]
    from specserver.board.aggregate import GroupAggregate

    key = {"draft": {"config_name": "spec_4"}, "chip": {"chip": "Apple M2"},
           "memory_gb": {"memory_gb": 16}}
    if verdict is not None:
        key["verdict"] = {"verdict": verdict}
    values = {"median_speedup": 1.2, "p25_speedup": None, "p75_speedup": None,
              "min_speedup": None, "max_speedup": None, "few_results": False, **spread}
    return GroupAggregate(key=key, submissions=3, contributors=3, median_speedup_wall=None,
                          median_baseline_tps=None, verdicts=verdicts,
                          evidence=evidence or {}, **values)


def test_an_unverified_row_says_what_it_holds_and_whether_it_had_counters() -> None:
    """The unverified board holds results without counters (not observed) and unstable
    ones (a baseline that moved, with or without counters): a row never reads 'no counters
    reported' when its results reported counters."""
    counted = {"engine_api": 2, "log": 1, "reported": 0, "implausible": 0, "none": 0}
    assert board.outcome_words(_group({"unstable": 3}, counted), "unverified") == (
        "unverified: unstable (baseline blocks disagree); counters reported")
    assert board.outcome_words(_group({"unstable": 3}, {"none": 3}), "unverified") == (
        "unverified: unstable (baseline blocks disagree); no counters reported")
    assert board.outcome_words(_group({"not_observed": 2}, {"none": 2}), "unverified") == (
        "unverified: not observed; no counters reported")
    mixed = _group({"not_observed": 1, "unstable": 2}, {"log": 2, "none": 1})
    assert board.outcome_words(mixed, "unverified") == (
        "unverified: 1 not observed, 2 unstable (baseline blocks disagree); "
        "counters reported for 2 of 3")
    # A row split by verdict whose counts were not read still says its verdict.
    assert board.outcome_words(_group({}, {"log": 3}, verdict="unstable"), "unverified") == (
        "unverified: unstable (baseline blocks disagree); counters reported")


def test_a_confirmed_row_whose_spread_includes_one_says_it_speculated_unresolved() -> None:
    wide = _group({"confirmed": 3}, {"engine_api": 3}, verdict="confirmed",
                  p25_speedup=0.9, p75_speedup=1.3, min_speedup=0.8, max_speedup=1.5)
    assert board.row_kind(wide, "effect") == "unclear"
    assert board.outcome_words(wide, "effect") == (
        "speculated; speedup not resolved (contributors' IQR 0.90–1.30x includes 1.00x)")
    few = _group({"confirmed": 1}, {"log": 1}, verdict="confirmed", few_results=True,
                 min_speedup=0.95, max_speedup=1.1)
    assert board.outcome_words(few, "effect") == (
        "speculated; speedup not resolved (contributors' range 0.95–1.10x includes 1.00x)")
    faster = _group({"confirmed": 3}, {"log": 3}, verdict="confirmed",
                    p25_speedup=1.1, p75_speedup=1.3)
    assert board.outcome_words(faster, "effect") == "faster"


def _bar_widths(chart: str) -> list[float]:
    import re

    return [float(w) for w in re.findall(r'<rect class="bar [a-z]+" [^>]*width="([0-9.]+)"',
                                         chart)]


def test_only_confirmed_groups_are_drawn_as_speedup_bars() -> None:
    """Every verdict the table knows, as a row of the speedup board with a median of 1.2x:
    only the confirmed one has a bar; the others are listed at zero width."""
    from specschema.verdicts import ORDER

    groups = [_group({name: 3}, {"log": 3}, verdict=name) for name in ORDER]
    widths = _bar_widths(board.board_chart(groups, "speedup-x", "t", noise=False))
    assert len(widths) == len(ORDER)
    assert [name for name, width in zip(ORDER, widths, strict=True) if width > 0] == [
        "confirmed"]
    # A row not split by verdict is drawn only when all it holds is confirmed.
    merged = [_group({"confirmed": 3, "not_observed": 0}, p25_speedup=1.1, p75_speedup=1.3),
              _group({"confirmed": 2, "not_observed": 1})]
    assert [board.row_style(g, False) for g in merged] == ["effect", "unverified"]
    widths = _bar_widths(board.board_chart(merged, "speedup-x", "t", noise=False))
    assert widths[0] > 0 and widths[1] == 0.0
    # The noise floor draws its not-applied ratios (grey), nothing else.
    floor = [_group({"not_applied": 3}), _group({"unstable": 3})]
    widths = _bar_widths(board.board_chart(floor, "noise-x", "t", noise=True))
    assert widths[0] > 0 and widths[1] == 0.0


def test_the_legend_names_every_verdict_the_speedup_board_lists() -> None:
    legend = board.LEGEND
    assert legend.listed == "confirmed, not observed, unstable (baseline blocks disagree)"
    assert legend.unverified.startswith("not observed: the engine could speculate, but no "
                                        "counters were reported; unstable")
    assert "counters may have been reported" in legend.unverified
    assert [css for css, _ in legend.outcomes] == ["faster", "unclear", "slower"]
    assert "no clear difference" not in str(legend)


def test_a_submission_pages_config_is_coloured_by_its_verdicts_style() -> None:
    from specschema.verdicts import ORDER

    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             counters_seen=True, seed=3)
    baseline, draft = summarize(sub)[:2]
    evidence = sub.configs[1].speculation
    assert draft.speedup_tps_ci_low is not None and draft.speedup_tps_ci_high is not None
    assert draft.speedup_tps_ci_low < 1.0 < draft.speedup_tps_ci_high
    assert result.line_class(baseline, None) == "baseline"
    styles = {name: result.line_class(draft, evidence.model_copy(update={"observed": name}))
              for name in ORDER}
    # Confirmed but not resolved: the neutral outcome colour, never green or red.
    assert styles.pop("confirmed") == "unclear"
    assert styles.pop("not_applied") == "noise"
    assert set(styles.values()) == {"unverified"}


def test_the_submission_pages_table_says_a_confirmed_speedup_is_not_resolved() -> None:
    sub = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                             counters_seen=True, seed=3)
    summaries = summarize(sub)
    evidence = {c.name: c.speculation for c in sub.configs}
    table = result.results_table(summaries, evidence, [], "0.33.1")
    assert "confirmed (75% accepted); speedup not resolved (CI includes 1.00x)" in table
    lines = result.conclusion_section(summaries, evidence, "0.33.1", True, "read")
    low, high = summaries[1].speedup_tps_ci_low, summaries[1].speedup_tps_ci_high
    assert (f"spec_4: speculated; speedup not resolved (95% within-run CI {low:.2f}–"
            f"{high:.2f}x includes 1.00x)") in lines
    # Judged by the protocol's headline: a wall-time headline reads the wall interval.
    wide = summaries[1].model_copy(update={"speedup_wall": 1.5, "speedup_wall_ci_low": 1.2,
                                           "speedup_wall_ci_high": 1.8})
    walled = result.results_table([summaries[0], wide], evidence, [], "0.33.1",
                                  headline="wall")
    assert "confirmed (75% accepted)<" in walled and "not resolved" not in walled
