"""The page's first screen: "your machine" (chip, memory, engine and target, chosen from
menus and kept in the URL) and the candidates measured for that target on such a machine,
best first (pure: board groups in, plain data out; ``templates/machine.html`` draws it).

A candidate is one speculative config (a draft model, an n-gram drafter, a model's own MTP
heads) seen for the target on the chosen machine, under one protocol and engine. Only a
confirmed result is a measured speedup: it shows its median across contributors, its
spread and a bar, and per kind of work when the board is split by it. A config seen only
unverified (no counters, or a baseline that moved) or not applied (noise) shows its ratio
with what it is, never as a speedup, never with an interval, never as a bar. The predicted
column says "no prediction yet" until a prediction for this machine exists.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specschema.conclusion import OUTCOME_WORDS
from specschema.domains import DOMAINS, domain_label
from specserver.board import GroupAggregate
from specserver.http.page.board import OUTCOME_CLASS, group_outcome, row_verdict

# The menus of "your machine", in the dimension table's words (store/dimensions.py); the
# other menus are the board's further filters.
MACHINE = ("chip", "memory_gb", "engine", "target")
# Both must be chosen before the candidates mean "this machine": a target alone mixes
# every chip's results, a chip alone every model's.
REQUIRED = ("chip", "target")
DOMAIN = "domain"  # the board's kind-of-work dimension, where the store has one
NO_PREDICTION = "no prediction yet"
NOT_PREDICTED = "not predicted"  # the forecast refused, and says why
BAR_TOP = 3.0  # the speedup a full bar stands for
# A confirmed candidate whose contributors' spread includes 1.00x (its IQR or range follows).
UNRESOLVED = "speculated; speedup not resolved"


@dataclass(frozen=True)
class Measured:
    """A confirmed group's measured speedup, as one cell reads it."""

    median: float
    low: float | None  # the interquartile range, None while it has few results
    high: float | None
    contributors: int
    outcome: str  # faster / slower / unclear (the colour)
    words: str  # "faster", "speculated; speedup not resolved", "slower"

    @property
    def bar(self) -> float:
        """The bar's length, a share of 3x (longer ones are cut there)."""
        return min(self.median, BAR_TOP) / BAR_TOP


@dataclass(frozen=True)
class Seen:
    """A verdict that is not a measured speedup: its ratio and what it is."""

    ratio: float | None
    what: str  # "noise", "unstable", "not observed"
    submissions: int


@dataclass(frozen=True)
class Predicted:
    """A prediction for this machine: the speedup and its interval, or why there is none."""

    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    why: str = NO_PREDICTION  # the cell's words without a speedup
    reason: str = ""  # what is missing, one tap away ("" when the words say it all)


@dataclass
class Candidate:
    """One config seen for the target on this machine (one protocol, one engine)."""

    draft: str  # the config name and its draft model, as the board labels it
    protocol: str
    engine: str
    machine: str  # chip · memory where the reader left them open ("" when both chosen)
    measured: Measured | None = None
    by_domain: dict[str, Measured] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    predicted: Predicted = field(default_factory=Predicted)
    key: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # a group's board key


def _identity(group: GroupAggregate) -> tuple[str, ...]:
    """What makes two groups one candidate: everything of the key but the verdict (and the
    kind of work)."""
    return tuple(f"{name}={sorted(value.items())}" for name, value in sorted(group.key.items())
                 if name not in ("verdict", DOMAIN))


def _measured(group: GroupAggregate) -> Measured | None:
    found = group_outcome(group)
    if group.median_speedup is None or found is None:
        return None
    spread = not group.few_results and group.p25_speedup is not None
    return Measured(group.median_speedup, group.p25_speedup if spread else None,
                    group.p75_speedup if spread else None, group.contributors,
                    OUTCOME_CLASS[found],
                    # it speculated (confirmed), but its spread cannot tell which way
                    UNRESOLVED if found == "no_clear_difference" else OUTCOME_WORDS[found])


def _what(group: GroupAggregate, noise: bool) -> str:
    if noise:
        return "noise"
    unstable = group.verdicts.get("unstable", 0)
    if unstable and unstable == sum(group.verdicts.values()):
        return "unstable"
    return "not observed"


def _domain(group: GroupAggregate) -> str | None:
    value = group.key.get(DOMAIN)
    if not value:
        return None
    found = next(iter(value.values()))
    return None if found is None else str(found)


Predictor = Callable[[Candidate], Predicted]


def no_prediction(candidate: Candidate) -> Predicted:
    return Predicted()


def candidates(confirmed: Sequence[GroupAggregate], unverified: Sequence[GroupAggregate],
               noise: Sequence[GroupAggregate], by_domain: Sequence[GroupAggregate] = (),
               predict: Predictor = no_prediction, chosen: Collection[str] = ()
               ) -> list[Candidate]:
    """The candidates, best first: measured ones by their median speedup, largest first,
    then those seen without a measured speedup, by name. ``by_domain``: confirmed groups
    split by kind of work as well (empty where the board has no such split); ``chosen``:
    the machine's dimensions the reader chose (a candidate's line does not repeat them)."""
    found: dict[tuple[str, ...], Candidate] = {}

    def of(group: GroupAggregate) -> Candidate:
        key = _identity(group)
        if key not in found:
            found[key] = Candidate(
                group.part_label("draft"), group.part_label("protocol"),
                group.part_label("engine"),
                " · ".join(group.part_label(d) for d in ("chip", "memory_gb")
                           if d in group.key and d not in chosen), key=group.key)
        return found[key]

    for group in confirmed:
        if row_verdict(group) not in (None, "confirmed"):
            continue
        of(group).measured = _measured(group)
    for group in unverified:
        of(group).seen.append(Seen(group.median_speedup, _what(group, False),
                                   group.submissions))
    for group in noise:
        of(group).seen.append(Seen(group.median_speedup, "noise", group.submissions))
    for group in by_domain:
        domain, measured = _domain(group), _measured(group)
        key = _identity(group)
        if domain is not None and measured is not None and key in found:
            found[key].by_domain[domain] = measured
    for candidate in found.values():
        candidate.predicted = predict(candidate)
    return sorted(found.values(), key=lambda c: (
        c.measured is None, -(c.measured.median if c.measured else 0.0), c.draft, c.protocol,
        c.engine, c.machine))


def domains_of(found: Sequence[Candidate]) -> list[tuple[str, str]]:
    """The kinds of work any candidate was measured on, in the domain table's order:
    (name, label) pairs, one column each. Only the domain table's kinds: a result whose
    protocol labels no prompts is in the "all prompts" column already."""
    seen = {d for c in found for d in c.by_domain}
    return [(name, domain_label(name)) for name in DOMAINS if name in seen]


@dataclass(frozen=True)
class Menu:
    name: str  # the query parameter
    label: str
    values: list[Any]
    chosen: Any
    cut_at: int | None  # the menu holds only the most common values: it says so

    @property
    def options(self) -> list[str]:
        values = [str(v) for v in self.values]
        if self.chosen is not None and str(self.chosen) not in values:
            values.append(str(self.chosen))  # a rare value, below the cut, chosen by URL
        return values

    @property
    def cut(self) -> bool:
        return self.cut_at is not None and len(self.options) >= self.cut_at


def menus(labels: Mapping[str, str], values: Mapping[str, list[Any]],
          chosen: Callable[[str], Any], cut_at: int | None) -> tuple[list[Menu], list[Menu]]:
    """(the machine's menus, the other filters' menus), each from the dimension table's
    menus (``labels``: filter name to its label) and the values visible submissions have."""
    every = {name: Menu(name, label, list(values.get(name, [])), chosen(name), cut_at)
             for name, label in labels.items()}
    mine = [every[name] for name in MACHINE if name in every]
    return mine, [m for name, m in every.items() if name not in MACHINE]


def missing(chosen: Callable[[str], Any], labels: Mapping[str, str]) -> list[str]:
    """The menus still to choose before the candidates are this machine's, as labels."""
    return [labels.get(name, name) for name in REQUIRED if chosen(name) is None]
