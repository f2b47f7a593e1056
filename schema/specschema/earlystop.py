"""The early-stop rule a protocol may fix in advance (``Protocol.early_stop``), pure.

A bracketed protocol's draft config whose blocks of the first round drafted at least
``min_drafted`` tokens and accepted none of them runs no block after that round: with
none of n drafted tokens accepted, the acceptance rate is below 3 / n at 95 % (the rule of
three; 1.2 % at n = 256), so a speculative round yields at most about one token more
than a plain step would, for the draft's cost on top: the config cannot speed the target
up, and its later blocks would only spend the run's time. The rule reads the counters
alone, never the timings, so stopping cannot favour any speedup; the run records the
configs it stopped as the run parameter ``stopped`` (in the protocol's config order) and the
server checks that they are exactly the ones the rule names. Every other config, and the
run's rounds, are as they would have been.

When: at the end of the first round, before the second round's first draft block (the
second round's opening baseline block is also the first round's closing one), so the
decision is made at ``first_round_end`` and is about the first round's trials only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specschema.protocol import Protocol

__all__ = ["first_round_end", "round_one_counts", "stopped_by_rule"]


def first_round_end(protocol: Protocol) -> int | None:
    """The run position of the first trial after the first round's last draft block (the
    baseline block that closes it); None when the protocol has no early-stop rule or the
    run has no second round to stop before."""
    if protocol.early_stop is None or (protocol.rounds or 0) < 2:
        return None
    size = protocol.block_trials or 1
    drafts = sum(1 for c in protocol.configs if c.role == "draft")
    return size * (2 + 2 * drafts)  # baseline, drafts, baseline, drafts reversed


def round_one_counts(protocol: Protocol, trials: Iterable[tuple[str, int, int | None,
                                                                int | None]]
                     ) -> dict[str, tuple[int, int] | None]:
    """Per draft config, (drafted, accepted) over its trials of the first round, from
    (config, run position, drafted, accepted) for each trial; None for a config with a
    first-round trial whose counters are unknown (the rule cannot be applied to it)."""
    end = first_round_end(protocol)
    counts: dict[str, tuple[int, int] | None] = {
        c.name: (0, 0) for c in protocol.configs if c.role == "draft"}
    if end is None:
        return counts
    for name, position, drafted, accepted in trials:
        if name not in counts or position >= end:
            continue
        so_far = counts[name]
        if so_far is None or drafted is None or accepted is None:
            counts[name] = None
        else:
            counts[name] = (so_far[0] + drafted, so_far[1] + accepted)
    return counts


def stopped_by_rule(protocol: Protocol, counts: Mapping[str, tuple[int, int] | None]
                    ) -> tuple[str, ...]:
    """The draft configs the rule stops, in the protocol's config order, from each
    config's first-round (drafted, accepted) (``round_one_counts``)."""
    rule = protocol.early_stop
    if rule is None or first_round_end(protocol) is None:
        return ()
    stopped = []
    for config in protocol.configs:
        found = counts.get(config.name)
        if config.role == "draft" and found is not None:
            drafted, accepted = found
            if drafted >= rule.min_drafted and accepted == 0:
                stopped.append(config.name)
    return tuple(stopped)

