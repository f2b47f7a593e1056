"""A protocol's run order (``Protocol.schedule``), one function per order.

Pure: (config name, trial index) pairs from the protocol's configs, trials and blocks, so
that client and server plan a run alike. The bracketed order is where a run's parameters
change the shape: fewer rounds (``rounds``) cut it after a round, and configs stopped by
the protocol's early-stop rule (``stopped``, ``specschema.earlystop``) are left out of every
round after the first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

Slot = tuple[str, int]

__all__ = ["Slot", "abba", "blocked", "bracketed", "interleaved", "named_drafts"]


def blocked(names: Sequence[str], trials: int) -> list[Slot]:
    """Every trial of a config, then the next config's."""
    return [(name, i) for name in names for i in range(trials)]


def interleaved(names: Sequence[str], trials: int) -> list[Slot]:
    """Trial i of every config, then trial i + 1 of every config."""
    return [(name, i) for i in range(trials) for name in names]


def abba(names: Sequence[str], trials: int, size: int) -> list[Slot]:
    """Blocks of ``size`` trials, the configs in order then reversed (A B C C B A ...)."""
    done = dict.fromkeys(names, 0)
    out: list[Slot] = []
    for _ in range(trials // (2 * size)):
        for name in [*names, *names[::-1]]:
            out.extend((name, done[name] + i) for i in range(size))
            done[name] += size
    return out


def bracketed(base: str, drafts: Sequence[str], trials: int, size: int,
              stopped: Collection[str] = ()) -> list[Slot]:
    """Rounds of baseline, drafts, baseline, drafts reversed, closed by one more baseline
    block; a draft in ``stopped`` runs in the first round only."""
    done = dict.fromkeys([base, *drafts], 0)
    blocks: list[str] = []
    for round_number in range(trials // (2 * size)):
        running = [d for d in drafts if round_number == 0 or d not in stopped]
        blocks += [base, *running, base, *running[::-1]]
    blocks.append(base)
    out: list[Slot] = []
    for name in blocks:
        out.extend((name, done[name] + i) for i in range(size))
        done[name] += size
    return out


def named_drafts(value: str, drafts: Sequence[str]) -> tuple[str, ...] | None:
    """The drafts a comma-separated run parameter names (``stopped``), each once and in
    their order; None when it names anything else."""
    names = tuple(value.split(","))
    return names if list(names) == [d for d in drafts if d in names] else None
