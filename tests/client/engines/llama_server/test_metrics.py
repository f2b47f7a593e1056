"""llama-server's /metrics as the adapter reads it, on the real build's output
(tests/fixtures/llama_server/metrics-*.txt, captured from the pinned build)."""

from __future__ import annotations

from specsubmit.engines.llama_server.metrics import SpecMetrics, parse_spec_metrics
from tests.support.realengine.fixture_files import verbatim


def test_the_real_builds_counters_after_drafted_requests() -> None:
    found = parse_spec_metrics(verbatim("metrics-draft-truncated.txt"))
    assert found is not None
    assert (found.rounds, found.drafted, found.accepted) == (54, 423, 132)
    assert found.per_position == (48, 36, 24, 12, 9, 3, 0, 0)  # n-max 8: eight positions
    # what the wire's rules hold for every trial: a prefix accepted per round
    assert sum(found.per_position) == found.accepted
    assert found.per_position[0] <= found.rounds
    assert found.drafted <= found.rounds * len(found.per_position)


def test_a_server_that_never_drafted_has_rounds_but_no_positions() -> None:
    found = parse_spec_metrics(verbatim("metrics-no-draft.txt"))
    assert found == SpecMetrics(0, 0, 0, ())


def test_text_without_the_counters_is_none_and_bad_lines_are_skipped() -> None:
    assert parse_spec_metrics("llamacpp:prompt_tokens_total 15\n") is None
    assert parse_spec_metrics("<html>not metrics</html>") is None
    text = ("llamacpp:spec_decode_num_drafts_total 3\n"
            "llamacpp:spec_decode_num_draft_tokens_total 1.5\n"  # not a count: left out
            "llamacpp:spec_decode_num_accepted_tokens_total 4\n"
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="999"} 7\n')
    assert parse_spec_metrics(text) == SpecMetrics(3, 0, 4, (0, 1))


def test_one_requests_counts_are_the_difference_of_two_readings() -> None:
    before = SpecMetrics(10, 80, 40, (9, 8))
    after = SpecMetrics(16, 128, 52, (14, 11, 3, 2))
    assert after.since(before) == SpecMetrics(6, 48, 12, (5, 3, 3, 2))
    assert before.since(after) is None  # counters went back: another server's readings
