"""The server's check of drafts the answer's end cut (``counters.drafted_past_end``): a
count the trial's other counters allow is stored like any v2 result; more than the drafted
tokens left unaccepted, or than one round's depth, is refused naming
``counters_consistent`` and the field (the rule is ``specschema.capability``'s, shared with
the client)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specschema.payload import parse_submission
from specserver.ingest import rules
from tests.server.ingest.test_ingest_rules import ctx_for
from tests.server.ingest.test_ingest_v2 import v2

# v2()'s second config: 240 drafted and 180 accepted per trial, at depth 4
# (draft_num_predict)
WHERE = "configs.1.trials.0.counters.drafted_past_end"


def _violations(past_end: int) -> list[tuple[str, str, str]]:
    data: dict[str, Any] = v2()
    data["configs"][1]["trials"][0]["counters"]["drafted_past_end"] = past_end
    submission = parse_submission(json.dumps(data).encode())
    return [(v.rule, v.path, v.message) for v in rules.violations(submission, ctx_for(data))]


@pytest.mark.parametrize("past_end", [0, 4])
def test_a_count_the_counters_allow_breaks_no_rule(past_end: int) -> None:
    assert _violations(past_end) == []


@pytest.mark.parametrize(("past_end", "message"), [
    (5, "5 drafted past the end: more than one round's 4"),
    (61, "61 drafted past the end, but only 60 of the 240 drafted were not accepted"),
])
def test_a_count_the_counters_cannot_hold_is_refused(past_end: int, message: str) -> None:
    assert ("counters_consistent", WHERE, message) in _violations(past_end)
