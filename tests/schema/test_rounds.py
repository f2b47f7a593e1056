"""The run parameter ``rounds``: a bracketed protocol run in fewer rounds (``--budget``)."""

from __future__ import annotations

import pytest

from specschema import Protocol, ProtocolError, get_protocol, shipped_protocols
from specschema.protocol_files import all_protocols

BRACKETED = sorted(p.id for p in shipped_protocols().values() if p.order == "bracketed")


def test_every_current_bracketed_protocol_is_here() -> None:
    assert {"llamacpp-draft", "llamacpp-map", "ollama-draft", "lmstudio-draft"} <= set(
        BRACKETED)


@pytest.mark.parametrize("protocol_id", BRACKETED)
def test_fewer_rounds_are_the_first_part_of_the_whole_schedule(protocol_id: str) -> None:
    whole = get_protocol(protocol_id).for_run({"draft": "d.gguf"})  # every config
    most = whole.rounds
    assert most is not None and most >= 1
    size = whole.block_trials or 1
    drafts = [c.name for c in whole.configs if c.role == "draft"]
    base = whole.baseline().name
    for rounds in range(1, most + 1):
        run = get_protocol(protocol_id).for_run({"draft": "d.gguf", "rounds": str(rounds)})
        assert run.sha256 == get_protocol(protocol_id).sha256 and run.rounds == rounds
        schedule = run.schedule()
        assert schedule == whole.schedule()[:len(schedule)]
        assert run.blocks() == whole.blocks()[:len(schedule)]
        assert len(set(run.blocks())) == rounds * 2 * (len(drafts) + 1) + 1
        assert run.trials_for(base) == (2 * rounds + 1) * size
        assert all(run.trials_for(d) == 2 * rounds * size for d in drafts)
        assert run.warmups_for(base) == (2 * rounds + 1) * run.warmups_per_config
    assert whole.for_run({"rounds": str(most)}).schedule() == whole.schedule()


def test_rounds_go_with_the_other_parameters_in_any_order() -> None:
    shipped = get_protocol("llamacpp-draft")
    both = shipped.for_run({"configs": "draft_qwen3_0.6b_n3", "rounds": "1"})
    assert [c.name for c in both.configs] == ["no_draft", "draft_qwen3_0.6b_n3"]
    assert both.schedule() == shipped.for_run({"configs": "draft_qwen3_0.6b_n3"}).for_run(
        {"rounds": "1"}).schedule()
    assert [name for name, _ in both.schedule()] == (
        ["no_draft"] * 2 + ["draft_qwen3_0.6b_n3"] * 2) * 2 + ["no_draft"] * 2


@pytest.mark.parametrize("value", ["0", "3", "01", " 1", "1.0", "", "x", "\u0661", "-1"])
def test_rounds_the_protocol_cannot_make_are_refused(value: str) -> None:
    protocol = get_protocol("llamacpp-draft")  # two rounds
    with pytest.raises(ProtocolError, match=f"runs 1 to 2 rounds, not {value!r}"):
        protocol.for_run({"rounds": value})


@pytest.mark.parametrize("protocol", [p for p in all_protocols() if p.order != "bracketed"],
                         ids=lambda p: f"{p.id}-v{p.version}-{p.order}")
def test_a_protocol_without_rounds_refuses_the_parameter(protocol: Protocol) -> None:
    assert protocol.rounds is None
    with pytest.raises(ProtocolError, match="does not run in bracketed rounds"):
        protocol.for_run({"rounds": "1"})
