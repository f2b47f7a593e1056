"""A config's speculative type and depth (``specschema.speculation``), and the acceptance
per draft position in two steps (``breakdown.position_totals``, ``position_rates``), held
equal to the definition ``acceptance_of`` had before them (kept here)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specschema import TrialCounters, get_protocol, shipped_protocols
from specschema.breakdown import acceptance_of, position_rates, position_totals
from specschema.examples import example_submission
from specschema.speculation import depth_of, spec_type_of
from tests.support.tiers import examples


def _reference_per_position(counted: Sequence[TrialCounters]) -> tuple[float, ...] | None:
    """``acceptance_of``'s per-position rule as it was written before the two steps."""
    rounds = None if any(c.rounds is None for c in counted) else sum(
        c.rounds or 0 for c in counted)
    lists = [c.accepted_per_position for c in counted]
    if not (rounds and all(p is not None for p in lists)):
        return None
    width = max(len(p or ()) for p in lists)
    totals = [sum((p or [])[i] if i < len(p or []) else 0 for p in lists) for i in range(width)]
    reached = [rounds, *totals[:-1]]
    return tuple(t / r if r else 0.0 for t, r in zip(totals, reached, strict=True))


_COUNTERS = st.builds(
    lambda rounds, positions: TrialCounters(drafted=10, accepted=4, source="engine_api",
                                            rounds=rounds, accepted_per_position=positions),
    st.none() | st.integers(0, 10**6),
    st.none() | st.lists(st.integers(0, 10**6), min_size=1, max_size=12))


@settings(max_examples=examples(300), deadline=None)
@given(counted=st.lists(_COUNTERS, min_size=1, max_size=8))
def test_the_two_steps_are_the_rule_they_replaced(counted: list[TrialCounters]) -> None:
    trial = example_submission("llamacpp-draft", seed=1, schema_version=2).configs[1].trials[0]
    found = acceptance_of([trial.model_copy(update={"counters": c}) for c in counted])
    assert found is not None and found.per_position == _reference_per_position(counted)


@settings(max_examples=examples(200), deadline=None)
@given(units=st.lists(st.tuples(st.integers(0, 1000), st.lists(st.integers(0, 1000),
                                                                max_size=6)),
                      min_size=1, max_size=9),
       cut=st.integers(0, 9))
def test_sums_of_sums_are_the_sums_of_their_units(
        units: list[tuple[int, list[int]]], cut: int) -> None:
    """A config's totals (its summaries row) add up to a group's like its trials do."""
    parts = [units[:cut], units[cut:]]
    sums = [position_totals(part) for part in parts if part]
    assert position_totals(s for s in sums if s is not None) == position_totals(units)


def test_the_rates_are_conditional_on_reaching_the_position() -> None:
    assert position_totals([(8, [7, 5, 2]), (8, [6, 3])]) == (16, (13, 8, 2))
    assert position_rates(16, (13, 8, 2)) == pytest.approx((13 / 16, 8 / 13, 2 / 8))
    assert position_rates(16, (0, 0)) == (0.0, 0.0)  # nobody reached position 1
    assert position_rates(0, (0,)) is None  # no rounds: nothing to divide by
    assert position_totals([(8, [1]), (None, [1])]) is None
    assert position_totals([(8, [1]), (8, None)]) is None


def test_rounds_with_no_positions_at_all_are_an_empty_profile() -> None:
    """Every list empty (an engine that drafted nothing): no positions, not a failure
    (the definition before the two steps raised on it)."""
    trial = example_submission("llamacpp-draft", seed=1, schema_version=2).configs[1].trials[0]
    empty = TrialCounters(drafted=0, accepted=0, source="engine_api", rounds=5,
                          accepted_per_position=[])
    found = acceptance_of([trial.model_copy(update={"counters": empty})])
    assert found is not None and found.per_position == ()


@pytest.mark.parametrize(("mechanism", "options", "draft", "expected"), [
    ("server_launch", {"spec_type": "ngram-simple", "spec_ngram_simple_size_n": 3,
                       "spec_ngram_simple_size_m": 8}, None, ("ngram-simple", 8)),
    ("server_launch", {"spec_type": "ngram-mod", "spec_ngram_mod_n_max": 16,
                       "spec_ngram_mod_n_min": 2}, None, ("ngram-mod", 16)),
    ("server_launch", {"spec_type": "draft-mtp", "spec_draft_n_max": 3}, None,
     ("draft-mtp", 3)),
    # a draft model and no type: draft-simple (the protocols before the option)
    ("server_launch", {"spec_draft_n_max": 8}, "qwen3:0.6b", ("draft-simple", 8)),
    ("server_launch", {"spec_type": "none"}, "qwen3:0.6b", ("draft-simple", None)),
    # no depth set: the engine's default, which the request does not say
    ("server_launch", {"spec_type": "ngram-simple"}, None, ("ngram-simple", None)),
    ("server_launch", {"spec_type": "draft-simple", "spec_draft_n_max": True}, "d",
     ("draft-simple", None)),
    ("none", {}, None, (None, None)),
    # Ollama: the type is the target's; the depth draft_num_predict, 0 drafting nothing
    ("draft_num_predict", {"draft_num_predict": 4}, None, (None, 4)),
    ("draft_num_predict", {"draft_num_predict": 0}, None, (None, None)),
    # a draft model per request (LM Studio, Ollama's ignored field): no type, no depth
    ("draft_model_field", {}, "qwen2.5-0.5b-instruct", (None, None)),
])
def test_type_and_depth(mechanism: str, options: dict[str, object], draft: str | None,
                        expected: tuple[str | None, int | None]) -> None:
    kind = spec_type_of(mechanism, options, draft)
    assert (kind, depth_of(kind, options)) == expected


def test_every_shipped_llama_server_config_has_the_type_its_command_line_gets() -> None:
    """The client's --spec-type is this rule (specsubmit's launch.spec_type calls it);
    here against the type each shipped protocol writes, or draft-simple for a draft."""
    for protocol_id in shipped_protocols():
        protocol = get_protocol(protocol_id)
        if protocol.engine_name != "llama-server":
            continue
        for config in protocol.configs:
            options = protocol.request_options(config)
            kind = spec_type_of(config.mechanism, options, config.draft_model)
            if config.role == "baseline":
                assert kind is None, (protocol_id, config.name)
            else:
                assert kind == options.get("spec_type", "draft-simple"), config.name
                assert depth_of(kind, options) is not None, (protocol_id, config.name)
