"""Drafted tokens the answer's end cut (``TrialCounters.drafted_past_end``): the rules a
result must keep, the share accepted over the drafts that could finish, and the bytes of
results that do not carry the field."""

from __future__ import annotations

import pytest

from specschema.breakdown import acceptance_of, acceptance_words
from specschema.capability import counter_problems
from specschema.examples import example_submission
from specschema.models import ConfigResult, Launch, Submission, TrialCounters
from specschema.payload import parse_submission, submission_bytes


def _example() -> Submission:
    return example_submission("llamacpp-draft", seed=1, schema_version=2, blocks=True)


def _with(config: ConfigResult, counters: list[TrialCounters]) -> ConfigResult:
    """The config with these counters on its first trials and totals that add up."""
    trials = [t.model_copy(update={"counters": c})
              for t, c in zip(config.trials, counters, strict=False)]
    spec = config.speculation.model_copy(update={
        "drafted_tokens": sum(c.drafted for c in counters),
        "accepted_tokens": sum(c.accepted for c in counters)})
    return config.model_copy(update={"trials": trials, "speculation": spec})


def _counters(drafted: int, accepted: int, past_end: int | None) -> TrialCounters:
    return TrialCounters(drafted=drafted, accepted=accepted, source="engine_api",
                         drafted_past_end=past_end)


def _past_end_problems(config: ConfigResult) -> list[str]:
    return [message for where, message in counter_problems(config)
            if where.endswith("drafted_past_end")]


def test_drafts_cut_by_the_end_are_some_of_those_not_accepted_within_one_round() -> None:
    config = _example().configs[1]
    assert config.request_options["spec_draft_n_max"] == 3
    assert _past_end_problems(_with(config, [_counters(24, 20, 3), _counters(24, 24, 0)])) == []
    # more cut than were left unaccepted
    found = _past_end_problems(_with(config, [_counters(24, 22, 3)]))
    assert found == ["3 drafted past the end, but only 2 of the 24 drafted were not accepted"]
    # more than the one round the answer ended in can hold (depth 3)
    found = _past_end_problems(_with(config, [_counters(24, 10, 4)]))
    assert found == ["4 drafted past the end: more than one round's 3"]


def test_the_depth_comes_from_the_launch_when_the_request_does_not_name_it() -> None:
    config = _example().configs[1]
    options = {k: v for k, v in config.request_options.items() if k != "spec_draft_n_max"}
    bare = _with(config.model_copy(update={"request_options": options}),
                 [_counters(24, 10, 4)])
    assert _past_end_problems(bare) == []  # no depth known: only the first rule applies
    launch = Launch(source="engine_command", spec_type="draft-simple", draft_n_max=3)
    spec = bare.speculation.model_copy(update={"launches": [launch]})
    assert _past_end_problems(bare.model_copy(update={"speculation": spec})) == [
        "4 drafted past the end: more than one round's 3"]


def test_the_share_accepted_is_of_the_drafts_the_end_did_not_cut() -> None:
    config = _example().configs[1]
    cut = acceptance_of(_with(config, [_counters(24, 20, 4), _counters(24, 24, None)]).trials)
    assert cut is not None and cut.past_end == 4 and cut.could_finish == 44
    assert cut.rate == pytest.approx(44 / 44)
    assert acceptance_words(cut) == ("44 of 48 drafted tokens accepted (100% of the 44 drafts "
                                     "the answer's end did not cut)")
    for past_end in (0, None):  # nothing cut, or nothing said: the words as before
        whole = acceptance_of(_with(config, [_counters(24, 18, past_end)]).trials)
        assert whole is not None and whole.rate == pytest.approx(18 / 24)
        assert acceptance_words(whole) == "18 of 24 drafted tokens accepted (75%)"
    everything = acceptance_of(_with(config, [_counters(3, 0, 3)]).trials)
    assert everything is not None and everything.rate is None


def test_results_without_the_field_keep_their_bytes_and_one_with_it_keeps_it() -> None:
    example = _example()
    config = _with(example.configs[1], [_counters(24, 20, None)])
    without = example.model_copy(update={"configs": [example.configs[0], config]})
    assert b"drafted_past_end" not in submission_bytes(without)
    config = _with(example.configs[1], [_counters(24, 20, 0), _counters(24, 20, None)])
    with_it = example.model_copy(update={"configs": [example.configs[0], config]})
    data = submission_bytes(with_it)
    assert data.count(b'"drafted_past_end":0') == 1
    assert data.count(b'"drafted_past_end":null') == 1
    again = parse_submission(data)
    assert [t.counters.drafted_past_end for t in again.configs[1].trials[:2]
            if t.counters is not None] == [0, None]
    assert submission_bytes(again) == data
