"""specschema.verdicts: the one verdict table (words, order, style, board, bar) and the rule
that says whether a measured ratio is resolved."""

from __future__ import annotations

from typing import get_args

import pytest

from specschema.models import Observed
from specschema.verdict_words import INVALID_COMPARISONS, VERDICT_HELP, VERDICT_WORDS
from specschema.verdicts import (
    BOARDS,
    ORDER,
    VERDICTS,
    counters_words,
    drawn,
    listed_on,
    outcome_of,
    resolved,
    unresolved_words,
    unverified_words,
    verdict_of,
)


def test_the_table_holds_every_wire_verdict_once() -> None:
    assert sorted(ORDER) == sorted(get_args(Observed))
    assert len(set(ORDER)) == len(ORDER) == len(VERDICTS)
    # The labels and help every surface reads are the table's.
    assert list(VERDICT_WORDS) == list(ORDER)
    assert all(VERDICT_WORDS[v.name] == v.words and VERDICT_HELP[v.name] == (v.meaning, v.todo)
               for v in VERDICTS)
    assert set(INVALID_COMPARISONS) == {"baseline_speculated", "synthetic", "cannot_compare"}


def test_which_board_lists_each_verdict() -> None:
    """Rule 5 of the board: a measured speedup, the unverified rows beside it, the noise
    floor; every other verdict is on no board."""
    assert {board: [v.name for v in listed_on(board)] for board in BOARDS} == {
        "speedup": ["confirmed"], "unverified": ["not_observed", "unstable"],
        "noise_floor": ["not_applied"]}
    assert [v.name for v in VERDICTS if v.counts] == ["confirmed"]
    # Only an effect takes an outcome's colour; a noise ratio and the rest are neutral.
    assert {v.name: v.style for v in VERDICTS if v.style != "unverified"} == {
        "confirmed": "effect", "not_applied": "noise"}


@pytest.mark.parametrize("name", ORDER)
def test_only_a_confirmed_result_is_drawn_as_a_speedup_bar(name: str) -> None:
    assert drawn({name: 2}, "speedup") is (name == "confirmed")
    assert drawn({name: 2}, "unverified") is False  # listed, never drawn
    assert drawn({name: 2}, "noise_floor") is (name == "not_applied")


def test_a_group_is_drawn_only_when_all_it_holds_is_drawn() -> None:
    assert drawn({"confirmed": 3, "not_observed": 0}, "speedup")  # zero counts hold nothing
    assert not drawn({"confirmed": 3, "unstable": 1}, "speedup")
    assert not drawn({}, "speedup")
    assert not drawn({"future_verdict": 1}, "speedup")


def test_a_verdict_the_table_does_not_know_is_named_and_never_a_speedup() -> None:
    odd = verdict_of("future_verdict")
    assert odd.words == "future verdict" and odd.board is None
    assert not odd.counts and not odd.bar and odd.style == "unverified"
    assert odd.ratio_is == "not a speedup"


def test_a_ratio_is_resolved_only_when_its_interval_excludes_one() -> None:
    assert resolved(1.01, 1.4) is True and outcome_of(1.01, 1.4) == "faster"
    assert resolved(0.5, 0.99) is True and outcome_of(0.5, 0.99) == "slower"
    assert resolved(0.9, 1.4) is False
    # An interval that touches 1.00x includes it.
    assert resolved(1.0, 1.3) is False and resolved(0.7, 1.0) is False
    assert resolved(None, 1.2) is None and resolved(0.9, None) is None


def test_an_unresolved_ratio_says_it_speculated_and_which_interval() -> None:
    assert unresolved_words(0.9, 1.4) == (
        "speculated; speedup not resolved (95% within-run CI 0.90–1.40x includes 1.00x)")
    assert unresolved_words(0.95, 1.2, "IQR") == (
        "speculated; speedup not resolved (IQR 0.95–1.20x includes 1.00x)")


def test_an_unverified_group_says_what_it_holds() -> None:
    with_counters = {"engine_api": 2, "log": 1, "reported": 0, "implausible": 0, "none": 0}
    assert unverified_words({"unstable": 3}, with_counters) == (
        "unverified: unstable (baseline blocks disagree); counters reported")
    assert unverified_words({"unstable": 2}, {"none": 2}) == (
        "unverified: unstable (baseline blocks disagree); no counters reported")
    assert unverified_words({"not_observed": 2, "unstable": 0}, {"none": 2}) == (
        "unverified: not observed; no counters reported")
    # Mixed (the API's view without a split by verdict), in the table's order.
    assert unverified_words({"unstable": 2, "not_observed": 1}, {"log": 2, "none": 1}) == (
        "unverified: 1 not observed, 2 unstable (baseline blocks disagree); "
        "counters reported for 2 of 3")


def test_counters_words_count_results_with_any_level_but_none() -> None:
    assert counters_words({}) == "no counters reported"
    assert counters_words({"implausible": 1, "none": 0}) == "counters reported"
    assert counters_words({"reported": 1, "none": 3}) == "counters reported for 1 of 4"
