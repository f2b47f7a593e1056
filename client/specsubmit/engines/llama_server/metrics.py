"""llama-server's speculative counters in ``/metrics`` (``--metrics``), read before and after
each request: the only place this build counts draft rounds and accepted tokens per draft
position (the per-request ``timings`` give drafted and accepted totals only).

The counters (``tools/server/server-task.cpp`` of the pinned build) are cumulative over the
server's life and updated when a request's slot is released:
``llamacpp:spec_decode_num_drafts_total`` (verification steps: the rounds),
``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and, once any round
accepted a token, ``..._num_accepted_tokens_per_pos_total{position="i"}``: the rounds whose
first i + 1 drafted tokens were all accepted. One slot and one request at a time (the
engine's ``--parallel 1``) make the difference of two readings one request's counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from specsubmit.engines.base import Generation

__all__ = ["SpecMetrics", "parse_spec_metrics", "with_rounds"]

_PREFIX = "llamacpp:spec_decode_"
_LINE = re.compile(r'^llamacpp:spec_decode_([a-z_]+)(?:\{position="(\d{1,4})"\})?\s+'
                   r"([0-9.eE+\-]+)\s*$")
_MAX_POSITIONS = 64  # the wire's limit; llama.cpp has as many as the draft's depth


@dataclass(frozen=True)
class SpecMetrics:
    rounds: int
    drafted: int
    accepted: int
    per_position: tuple[int, ...]

    def since(self, before: SpecMetrics) -> SpecMetrics | None:
        """This reading less an earlier one; None when a counter went back (a restart)."""
        width = max(len(self.per_position), len(before.per_position))
        now = self.per_position + (0,) * (width - len(self.per_position))
        then = before.per_position + (0,) * (width - len(before.per_position))
        diff = SpecMetrics(self.rounds - before.rounds, self.drafted - before.drafted,
                           self.accepted - before.accepted,
                           tuple(a - b for a, b in zip(now, then, strict=True)))
        if min(diff.rounds, diff.drafted, diff.accepted, *diff.per_position, 0) < 0:
            return None
        return diff


def _whole(text: str) -> int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    if not value.is_integer() or value < 0 or value > 2**53:
        return None
    return int(value)


def parse_spec_metrics(text: str) -> SpecMetrics | None:
    """The speculative counters of one ``/metrics`` text; None when it has no rounds
    counter (a build without them, or not llama-server)."""
    totals: dict[str, int] = {}
    positions: dict[int, int] = {}
    for line in text.splitlines():
        if not line.startswith(_PREFIX):
            continue
        match = _LINE.match(line.strip())
        if match is None:
            continue
        name, position, raw = match.groups()
        value = _whole(raw)
        if value is None:
            continue
        if name == "num_accepted_tokens_per_pos_total" and position is not None:
            if int(position) < _MAX_POSITIONS:
                positions[int(position)] = value
        elif position is None:
            totals[name] = value
    if "num_drafts_total" not in totals:
        return None
    width = max(positions, default=-1) + 1
    return SpecMetrics(totals["num_drafts_total"], totals.get("num_draft_tokens_total", 0),
                       totals.get("num_accepted_tokens_total", 0),
                       tuple(positions.get(i, 0) for i in range(width)))


def with_rounds(generation: Generation, counts: SpecMetrics | None) -> Generation:
    """The generation with its rounds and per-position counts from /metrics, when they
    describe the same request (the same drafted and accepted totals as its timings)."""
    if counts is None or generation.draft_n is None:
        return generation
    if (counts.drafted, counts.accepted) != (generation.draft_n, generation.draft_accepted):
        return generation  # another request's counts, or none: say nothing rather than guess
    return replace(generation, draft_rounds=counts.rounds,
                   accepted_per_position=counts.per_position)
