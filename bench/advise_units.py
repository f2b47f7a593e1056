"""A variant of the advisor analysis's acceptance (``--units``): the known cells as the
product's contributor units. The product's point is the median across contributor units
of their acceptance per position (``crowd.median_vector``) and of their plain steps'
share, its draws a bootstrap of those units (``forecast``); the analysis pools the known
cells' rounds and draws each position binomially from them, which carries how many rounds
there were but not how far the cells differ. With ``UNITS`` on, a task whose known cells
are all one candidate (held-out machines: one cell a machine, as a contributor unit;
kinds of work: one cell a kind) takes the product's way; the depth tasks, whose known
cells ran at different depths, stay pooled (the product predicts a shallower depth from
one run depth's units)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from specschema.crowd import median_vector
from specschema.stats import median

UNITS = False


class CellCounts(Protocol):
    @property
    def plain_steps(self) -> int: ...

    @property
    def decoded(self) -> int: ...

    def profile(self) -> list[float]: ...


Unit = tuple[tuple[float, ...], float]  # acceptance per position, plain steps' share


def units_of(counts: Sequence[CellCounts], candidates: set[str]) -> list[Unit] | None:
    """The known cells as units, or None (``UNITS`` off, or cells of several
    candidates)."""
    if not UNITS or len(candidates) != 1 or not counts:
        return None
    return [(tuple(c.profile()), c.plain_steps / c.decoded) for c in counts]


def point(units: Sequence[Unit]) -> tuple[list[float], float]:
    return list(median_vector([u[0] for u in units])), median([u[1] for u in units])


def draw(units: Sequence[Unit], rng: random.Random) -> tuple[list[float], float]:
    """One bootstrap draw of the units, as the forecast draws contributor units."""
    return point([units[rng.randrange(len(units))] for _ in units])
