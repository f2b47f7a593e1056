"""The early-stop rule and the run parameter ``stopped``: which configs stop, the schedule
without their later blocks, and the parameter's checks."""

from __future__ import annotations

import json
from itertools import groupby

import pytest

from specschema.earlystop import first_round_end, round_one_counts, stopped_by_rule
from specschema.errors import ProtocolError
from specschema.protocol import Protocol
from specschema.protocol_files import get_protocol, load_protocol_bytes

DRAFTS = ["draft_qwen3_0.6b_n3", "draft_qwen3_0.6b_n8", "draft_qwen3_1.7b_n8",
          "draft_qwen2.5_0.5b_n8", "draft_qwen2.5_1.5b_n8"]
UNRELATED = "draft_qwen2.5_0.5b_n8,draft_qwen2.5_1.5b_n8"


def block_names(protocol: Protocol) -> list[str]:
    return [name for name, _ in groupby(name for name, _ in protocol.schedule())]


def test_stopped_configs_run_the_first_round_only() -> None:
    protocol = get_protocol("llamacpp-draft")
    run = protocol.for_run({"stopped": UNRELATED})
    assert run.stopped == ("draft_qwen2.5_0.5b_n8", "draft_qwen2.5_1.5b_n8")
    assert run.sha256 == protocol.sha256  # a run keeps its protocol's identity
    end = first_round_end(run)
    assert end == 24  # 12 blocks of 2 trials: baseline, 5 drafts, baseline, 5 drafts
    # the first round, and the baseline block that closes it, are the whole protocol's
    assert run.schedule()[:end + 2] == protocol.schedule()[:end + 2]
    later = block_names(run)[12:]
    assert later == ["no_draft", *DRAFTS[:3], "no_draft", *DRAFTS[:3][::-1], "no_draft"]
    assert run.trials_for("draft_qwen2.5_0.5b_n8") == 4
    assert run.trials_for("draft_qwen3_0.6b_n3") == 8
    assert run.warmups_for("draft_qwen2.5_1.5b_n8") == 2
    # a run's other parameters apply alike, in either order of application
    both = protocol.for_run({"rounds": "2", "stopped": UNRELATED})
    assert both.schedule() == run.schedule()


def test_the_parameter_names_draft_configs_of_a_run_with_a_second_round() -> None:
    protocol = get_protocol("llamacpp-draft")
    for bad in ("draft_qwen2.5_1.5b_n8,draft_qwen2.5_0.5b_n8",  # not the protocol's order
                "no_draft", "nothing", "", "draft_qwen3_0.6b_n3,draft_qwen3_0.6b_n3"):
        with pytest.raises(ProtocolError, match="cannot stop"):
            protocol.for_run({"stopped": bad})
    with pytest.raises(ProtocolError, match="cannot stop .* two rounds or more"):
        protocol.for_run({"rounds": "1", "stopped": "draft_qwen3_0.6b_n3"})
    with pytest.raises(ProtocolError, match="cannot stop .* early-stop rule"):
        get_protocol("ollama-draft").for_run({"stopped": "spec_4"})
    # a config left out by ``configs`` cannot be stopped
    with pytest.raises(ProtocolError, match="cannot stop"):
        protocol.for_run({"configs": "draft_qwen3_0.6b_n3", "stopped": "draft_qwen3_0.6b_n8"})


def test_the_rule_stops_exactly_the_drafts_that_accepted_none_of_enough() -> None:
    run = get_protocol("llamacpp-draft").for_run({})
    end = first_round_end(run)
    assert end is not None
    trials = [  # (config, position, drafted, accepted): two trials per first-round block
        ("draft_qwen3_0.6b_n3", 2, 300, 200), ("draft_qwen3_0.6b_n3", 3, 300, 200),
        ("draft_qwen3_0.6b_n8", 4, 500, 1), ("draft_qwen3_0.6b_n8", 5, 500, 0),
        ("draft_qwen3_1.7b_n8", 6, 100, 0), ("draft_qwen3_1.7b_n8", 7, 155, 0),
        ("draft_qwen2.5_0.5b_n8", 8, 128, 0), ("draft_qwen2.5_0.5b_n8", 9, 128, 0),
        ("draft_qwen2.5_1.5b_n8", 10, 1600, 0), ("draft_qwen2.5_1.5b_n8", 11, 1600, 0),
        # a second-round trial does not count toward the first round's
        ("draft_qwen3_1.7b_n8", end + 4, 800, 0),
        ("draft_qwen2.5_1.5b_n8", end + 6, 1600, 9),
    ]
    counts = round_one_counts(run, trials)
    assert counts["draft_qwen3_1.7b_n8"] == (255, 0)
    assert stopped_by_rule(run, counts) == ("draft_qwen2.5_0.5b_n8", "draft_qwen2.5_1.5b_n8")
    # one accepted token, or 255 drafted, or counters not known: the config runs on
    unknown = round_one_counts(run, [*trials, ("draft_qwen2.5_0.5b_n8", 14, None, None)])
    assert unknown["draft_qwen2.5_0.5b_n8"] is None
    assert stopped_by_rule(run, unknown) == ("draft_qwen2.5_1.5b_n8",)


def test_no_rule_or_one_round_stops_nothing() -> None:
    counts = {"draft_qwen2.5_0.5b_n8": (4000, 0)}
    one_round = get_protocol("llamacpp-draft").for_run({"rounds": "1"})
    assert first_round_end(one_round) is None and stopped_by_rule(one_round, counts) == ()
    older = get_protocol("ollama-draft")  # bracketed, without the rule
    assert older.rounds == 2 and older.early_stop is None
    assert stopped_by_rule(older, {"spec_4": (4000, 0)}) == ()


def test_an_early_stop_rule_needs_the_bracketed_order() -> None:
    data = json.loads(get_protocol("llamacpp-draft").model_dump_json())
    with pytest.raises(ProtocolError, match="early_stop needs order bracketed"):
        load_protocol_bytes(json.dumps({**data, "order": "abba"}).encode())
