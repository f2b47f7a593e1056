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


def test_an_unverified_row_says_whether_it_had_counters() -> None:
    """The unverified board holds results without counters and unstable ones (counters,
    but a baseline that moved too much): a row of unstable results never reads 'no
    counters reported'."""
    from specserver.board.aggregate import GroupAggregate

    def group(verdicts: dict[str, int]) -> GroupAggregate:
        return GroupAggregate(key={}, submissions=3, contributors=3, median_speedup=1.2,
                              p25_speedup=None, p75_speedup=None, min_speedup=None,
                              max_speedup=None, median_speedup_wall=None,
                              median_baseline_tps=None, few_results=False, verdicts=verdicts)

    assert board.outcome_words(group({"unstable": 3}), "unverified") == (
        "unverified: unstable (baseline blocks disagree)")
    assert board.outcome_words(group({"not_observed": 2}), "unverified") == (
        "unverified: no counters reported")
    assert "unstable" in board.outcome_words(group({"not_observed": 1, "unstable": 2}),
                                               "unverified")
