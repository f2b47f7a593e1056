"""What the client says of drafts past the answer's end, from llama-server's final chunk:
none at the token limit (the pinned build never drafts past it), nothing said when the
answer ended at an end-of-generation token or a stop word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsubmit.engines.llama_server.api import generation_from_final
from specsubmit.run.submission import trial_from

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "llama_server"


def _final(name: str) -> dict[str, object]:
    """The last ``data:`` chunk of a captured stream (the one with timings)."""
    lines = (FIXTURES / name).read_text().splitlines()
    final: dict[str, object] = json.loads([x for x in lines if x.startswith("data:")][-1][5:])
    return final


@pytest.mark.parametrize(("stop_type", "past_end"), [
    ("limit", 0),
    # The captured answer stopped at the limit; an answer ending at its end-of-generation
    # token or a stop word differs only in this field.
    ("eos", None),
    ("word", None),
])
def test_drafts_past_the_end_are_counted_only_where_the_engine_makes_it_exact(
        stop_type: str, past_end: int | None) -> None:
    final = _final("completion-stream-draft-truncated.txt") | {"stop_type": stop_type}
    gen = generation_from_final(final, wall_s=1.0, ttft_s=0.1, text="x")
    assert (gen.draft_n, gen.draft_accepted, gen.draft_past_end) == (141, 44, past_end)
    counters = trial_from(gen, index=0, position=0, cold_load_ns=10**9).counters
    assert counters is not None and counters.drafted_past_end == past_end


def test_a_request_that_drafted_nothing_says_nothing_of_its_end() -> None:
    gen = generation_from_final(_final("completion-stream-no-draft.txt"), wall_s=1.0,
                                ttft_s=0.1, text="x")
    assert gen.done_reason == "length" and gen.draft_n is None and gen.draft_past_end is None
    assert trial_from(gen, index=0, position=0, cold_load_ns=10**9).counters is None
