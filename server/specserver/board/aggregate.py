"""Aggregation rules of the leaderboard: pure functions over plain rows.

The rules (documented for contributors in ``docs/aggregation.md``):

1. The unit is one *draft result*: one submission x one draft config, with the speedups
   that ``specschema.summary`` computed at ingest (median decode tok/s of the draft over
   median decode tok/s of the baseline, the same for wall time, and the bootstrap CI).
2. Rows are grouped by whitelisted dimensions (``DIMENSIONS``).
3. One contributor cannot dominate a group: each contributor's (key id's) rows in a group
   are reduced to their median first (``reduce_contributors``); the group's statistics
   are taken across those per-contributor medians (``aggregate_contributors``). Imported
   rows have no key id and each counts as its own contributor.
4. Percentiles (p25, p75) are reported only when a group has at least
   ``min_contributors`` contributors (default 3); otherwise the group is "few results".
5. Which verdicts go where is ``VIEW_VERDICTS`` (``store.verdicts``), the one place it is
   decided: the speedup board holds only ``confirmed`` rows, the only ratios that measure
   speculation; the ``unverified`` view holds ``not_observed`` rows (speculation could
   have run, nothing showed it) and ``unstable`` ones (the baseline's blocks disagree),
   always split by verdict, never in a speedup median; ``not_applied`` rows are A/A
   measurements and form the noise-floor view; every other verdict (``unknown``,
   ``baseline_speculated``, ``synthetic``, ``cannot_compare``, and any verdict added
   later) is in no view and only shows up in the verdict counts.
6. A ``confirmed`` row is on the speedup board only when its counters' evidence level
   (``specschema.evidence``) is corroborated (``engine_api`` or ``log``): counters that are
   only ``reported`` or ``implausible`` are claims the trials do not bear out, so such a
   row is in neither view and shows up only in the evidence counts (``on_board``).
7. Within a group of at least ``min_contributors``, each per-contributor median gets a
   robust score (modified z-score over the median absolute deviation,
   ``specschema.stats.robust_scores``); the group reports its MAD and how many contributors
   score beyond 3.5. They stay in the group: the median does not move for them, and a
   reader (or a maintainer) sees that the group holds results far from the rest.
8. No silent takeover (``board.groupstats``, ``newkeys`` rule 6): where the cohorts that
   left probation recently disagree with the group's established contributors beyond the
   established side's spread, the group is *disputed* (``Dispute``): its statistics are
   those without the recent side, both sides' medians and counts are shown, and the
   outlier scores keep the established side's centre and spread, until a maintainer
   accepts or hides the recent cohorts (``specserver disputes``).

The caller (``queries``) has already kept only complete, non-hidden submissions of keys
that are not banned. The board runs the first step of rule 3 on the store's rows
(``board.sql.contributor_columns``: in SQL on PostgreSQL, over numpy columns of rows
sorted by DuckDB; equal to ``reduce_contributors``: a test holds them together), and the
steps after it over the per-contributor rows as columns (``board.columns``, held equal to
the same rules written row by row in ``tests/support/reference_rules.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import NamedTuple

from specschema.evidence import LEVELS
from specschema.stats import (
    median,
)
from specserver.store import VERDICTS, dimensions, verdicts

# Rules 5 and 6 live in the store (``store.verdicts``: what ingestion records depends on
# them); named here as well, with the rest of the board's rules.
View = verdicts.View
VIEWS = verdicts.VIEWS
VIEW_VERDICTS = verdicts.VIEW_VERDICTS
BOARD_VERDICTS = verdicts.BOARD_VERDICTS
NOISE_VERDICTS = verdicts.NOISE_VERDICTS
on_board = verdicts.on_board

DEFAULT_MIN_CONTRIBUTORS = 3

# Views whose groups are always split by verdict (their verdicts mean different things).
_SPLIT_BY_VERDICT: frozenset[View] = frozenset({"unverified"})

# Dimension name -> the DraftResult fields that identify a value of it: the dimension
# table's (store/dimensions.py), which also gives their columns, filters and words.
DIMENSIONS: dict[str, tuple[str, ...]] = dimensions.GROUP_FIELDS

# The leaderboard never mixes results that measure different things: these dimensions are
# always part of a leaderboard group, whatever the caller's group_by. The engine is one: the
# same draft is not applied under Ollama (a noise-floor row) and measured under
# llama-server, and the two must stand side by side, never in one median.
COMPARISON_DIMENSIONS = ("protocol", "target", "draft", "engine")
DEFAULT_GROUP_BY = ("chip", "memory_gb")

SORTS = ("speedup", "-speedup", "contributors", "-contributors", "submissions",
         "-submissions", "baseline_tps", "-baseline_tps", "key")
DEFAULT_SORT = "-speedup"

KeyValue = dimensions.KeyValue


@dataclass(frozen=True, slots=True)
class DraftResult:
    """One submission x one draft config, as the leaderboard sees it."""

    submission_id: str
    key_id: str | None
    protocol_id: str
    protocol_version: int
    protocol_sha256: str
    target_model: str
    target_digest: str | None
    chip: str | None
    memory_gb: int | None
    ollama_version: str | None  # null for llama-server rows
    os: str | None
    backend: str | None
    config_name: str
    draft_model: str | None
    mechanism: str
    verdict: str
    speedup_tps: float | None
    speedup_wall: float | None
    baseline_tps: float | None
    evidence: str | None = None  # specschema.evidence level; None: not assessed
    engine: str = "ollama"
    engine_version: str | None = None
    target_quant: str | None = None
    draft_digest: str | None = None
    draft_quant: str | None = None
    spec_type: str | None = None
    depth: int | None = None
    # The kind of work: set on the per-domain rows (``store.domainview``), None otherwise.
    domain: str | None = None

    @property
    def contributor(self) -> str:
        return self.key_id if self.key_id is not None else f"imported:{self.submission_id}"


@dataclass(frozen=True)
class Dispute:
    """Rule 8: a group whose recent graduates disagree with its established contributors.
    ``recent_cohorts`` (the cohorts' first key ids) is for maintainers only: the public API
    leaves it out (it would tell which keys share an address range)."""

    established_median: float
    established_contributors: int
    recent_median: float
    recent_contributors: int
    recent_cohorts: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupAggregate:
    key: dict[str, dict[str, KeyValue]]
    submissions: int
    contributors: int
    median_speedup: float | None
    p25_speedup: float | None
    p75_speedup: float | None
    min_speedup: float | None
    max_speedup: float | None
    median_speedup_wall: float | None
    median_baseline_tps: float | None
    few_results: bool
    verdicts: dict[str, int] = field(default_factory=dict)
    # Robust spread of the per-contributor medians (specschema.stats, rule 7): the MAD, and
    # how many contributors score beyond OUTLIER_SCORE (flagged, never dropped: the median
    # is already robust to them). None / 0 below min_contributors.
    mad_speedup: float | None = None
    outlier_contributors: int = 0
    # Draft results per evidence level (specschema.evidence.LEVELS) among the group's rows.
    evidence: dict[str, int] = field(default_factory=dict)
    # More than half of the contributors are cohorts that arrived within one window of
    # each other (board/newkeys.py, rule 5): shown, so a reader can weigh the group.
    arrived_together: bool = False
    # Dimension -> its label on this board where the plain one would be ambiguous: one
    # model name with several digests or quantizations (``distinct_labels``).
    shown: dict[str, str] = field(default_factory=dict)
    # Rule 8: set when the group is disputed (its statistics are then the established
    # side's, with the block of new keys).
    dispute: Dispute | None = None
    # A group of a chip the known-chip table does not list, kept off the speedup board
    # until results on it come from enough address ranges (``board.chips``).
    uncorroborated: bool = False
    disputed: bool = field(init=False)  # dispute is not None (the API's flag)

    def __post_init__(self) -> None:
        object.__setattr__(self, "disputed", self.dispute is not None)

    def part_label(self, dimension: str) -> str:
        shown = self.shown.get(dimension)
        return shown if shown is not None else dimension_label(dimension, self.key[dimension])

    def label(self, dimensions: Sequence[str]) -> str:
        return " · ".join(self.part_label(d) for d in dimensions if d in self.key)


def view_of(verdict: str) -> View | None:
    return next((view for view in VIEWS if verdict in VIEW_VERDICTS[view]), None)


def in_view(rows: Iterable[DraftResult], view: View) -> list[DraftResult]:
    return [r for r in rows if view_of(r.verdict) == view and on_board(r.verdict, r.evidence)]


def evidence_counts(rows: Iterable[DraftResult]) -> dict[str, int]:
    counts = Counter(r.evidence or "none" for r in rows)
    return {level: counts.get(level, 0) for level in LEVELS}


def verdict_counts(rows: Iterable[DraftResult]) -> dict[str, int]:
    counts = Counter(r.verdict for r in rows)
    return {v: counts.get(v, 0) for v in VERDICTS}


def check_dimensions(names: Sequence[str]) -> list[str]:
    """The names that are not whitelisted dimensions."""
    return [n for n in names if n not in DIMENSIONS]


def leaderboard_dimensions(group_by: Sequence[str], view: View = "speedup") -> list[str]:
    """The comparison dimensions first (and the verdict, in a view split by it), then the
    caller's, without repeats."""
    ordered: list[str] = []
    forced = ("verdict",) if view in _SPLIT_BY_VERDICT else ()
    for name in (*COMPARISON_DIMENSIONS, *forced, *group_by):
        if name not in ordered:
            ordered.append(name)
    return ordered


def view_dimensions(group_by: Sequence[str], view: View) -> list[str]:
    """``group_by`` as a view groups it: with the verdict added in a view split by it."""
    dimensions = list(dict.fromkeys(group_by))
    if view in _SPLIT_BY_VERDICT and "verdict" not in dimensions:
        dimensions.append("verdict")
    return dimensions


def dimension_label(name: str, value: Mapping[str, KeyValue]) -> str:
    return dimensions.group_label(name, value)


# Dimension -> (its model-name field, the fields that tell variants of that model apart).
MODEL_VARIANTS: dict[str, tuple[str, str, str]] = {
    "target": ("target_model", "target_digest", "target_quant"),
    "draft": ("draft_model", "draft_digest", "draft_quant"),
}
SHORT_DIGEST = 8


def _variant_suffixes(found: set[tuple[KeyValue, KeyValue]]) -> dict[tuple[KeyValue, KeyValue],
                                                                      str]:
    """Words that tell one name's variants apart: the quantization, and the digest cut to
    the shortest length at which no two differ only after it (a client may send any
    digest, so one sharing a prefix with another is not allowed to look like it)."""
    digests = {str(d) for d, _ in found if d is not None}
    length = SHORT_DIGEST
    while length < 64 and len({d[:length] for d in digests}) < len(digests):
        length += 4
    suffixes = {}
    for digest, quant in found:
        parts = [str(quant)] if quant is not None else []
        parts.append(f"digest {str(digest)[:length]}" if digest is not None else "no digest")
        suffixes[(digest, quant)] = ", ".join(parts)
    return suffixes


def distinct_labels(groups: Sequence[GroupAggregate]) -> list[GroupAggregate]:
    """The groups, each model name that has several variants (digest, quantization) on
    this board labelled with what sets each apart: no two rows look alike."""
    suffix_of: dict[str, dict[KeyValue, dict[tuple[KeyValue, KeyValue], str]]] = {}
    for dimension, (name_field, digest_field, quant_field) in MODEL_VARIANTS.items():
        variants: dict[KeyValue, set[tuple[KeyValue, KeyValue]]] = {}
        for group in groups:
            value = group.key.get(dimension)
            if value is not None and value.get(name_field) is not None:
                variants.setdefault(value[name_field], set()).add(
                    (value[digest_field], value[quant_field]))
        suffix_of[dimension] = {name: _variant_suffixes(found)
                                for name, found in variants.items() if len(found) > 1}
    out = []
    for group in groups:
        shown = dict(group.shown)
        for dimension, (name_field, digest_field, quant_field) in MODEL_VARIANTS.items():
            value = group.key.get(dimension)
            suffixes = suffix_of[dimension].get(value.get(name_field)) if value else None
            if value is None or suffixes is None:
                continue
            suffix = suffixes[(value[digest_field], value[quant_field])]
            if dimension == "target":
                shown[dimension] = f"{value['target_model']} ({suffix})"
            else:
                shown[dimension] = f"{value['config_name']} ({value['draft_model']}, {suffix})"
        out.append(replace(group, shown=shown) if shown != group.shown else group)
    return out


def _key_getter(dimensions: Sequence[str]) -> Callable[[DraftResult], tuple[KeyValue, ...]]:
    fields = [f for d in dimensions for f in DIMENSIONS[d]]
    if len(fields) > 1:
        return attrgetter(*fields)
    if fields:
        single = attrgetter(fields[0])
        return lambda row: (single(row),)
    return lambda row: ()


GroupKey = dict[str, dict[str, KeyValue]]


def key_dict(dimensions: Sequence[str], flat: tuple[KeyValue, ...]) -> GroupKey:
    key: GroupKey = {}
    position = 0
    for name in dimensions:
        fields = DIMENSIONS[name]
        key[name] = dict(zip(fields, flat[position:position + len(fields)], strict=True))
        position += len(fields)
    return key


def flat_key(group: GroupAggregate) -> tuple[KeyValue, ...]:
    """The group's values in the order of ``ContributorResult.key``."""
    return tuple(v for part in group.key.values() for v in part.values())


def _median_or_none(values: list[float]) -> float | None:
    return median(values) if values else None


# ContributorResult's field for each evidence level, in specschema.evidence.LEVELS order.
LEVEL_FIELDS = ("engine_api", "log", "reported", "implausible", "no_counters")


class ContributorResult(NamedTuple):
    """Rule 3, first step: one contributor's rows in one group, reduced to medians.

    A NamedTuple: tens of thousands are built per cold aggregation, and tuples build fast.
    """

    key: tuple[KeyValue, ...]  # the group's values, in the order of its dimensions' fields
    contributor: str
    submissions: int
    speedup: float | None  # median of the contributor's speedup_tps in the group
    speedup_wall: float | None
    baseline_tps: float | None
    confirmed: int = 0
    not_observed: int = 0
    not_applied: int = 0
    unknown: int = 0
    baseline_speculated: int = 0
    synthetic: int = 0
    cannot_compare: int = 0
    unstable: int = 0
    incompatible: int = 0
    # Rows per evidence level, in specschema.evidence.LEVELS order (the SQL's too).
    engine_api: int = 0
    log: int = 0
    reported: int = 0
    implausible: int = 0
    no_counters: int = 0  # level "none"

    def evidence(self) -> dict[str, int]:
        return {level: getattr(self, name) for level, name in zip(LEVELS, LEVEL_FIELDS,
                                                                     strict=True)}


def reduce_contributors(rows: Iterable[DraftResult], dimensions: Sequence[str]
                        ) -> list[ContributorResult]:
    """Each contributor's rows in each group, reduced to their medians (None when absent).

    ``board.sql.contributor_columns`` computes the same from the store; a test holds the two
    equal.
    """
    getter = _key_getter(dimensions)
    pools: dict[tuple[tuple[KeyValue, ...], str], list[DraftResult]] = {}
    for row in rows:
        pools.setdefault((getter(row), row.contributor), []).append(row)
    reduced = []
    for (key, who), members in pools.items():
        counts = Counter(r.verdict for r in members)
        levels = evidence_counts(members)
        reduced.append(ContributorResult(
            key=key, contributor=who, submissions=len({r.submission_id for r in members}),
            speedup=_median_or_none([r.speedup_tps for r in members if r.speedup_tps is not None]),
            speedup_wall=_median_or_none(
                [r.speedup_wall for r in members if r.speedup_wall is not None]),
            baseline_tps=_median_or_none(
                [r.baseline_tps for r in members if r.baseline_tps is not None]),
            confirmed=counts["confirmed"], not_observed=counts["not_observed"],
            not_applied=counts["not_applied"], unknown=counts["unknown"],
            baseline_speculated=counts["baseline_speculated"], synthetic=counts["synthetic"],
            cannot_compare=counts["cannot_compare"], unstable=counts["unstable"],
            incompatible=counts["incompatible"],
            engine_api=levels["engine_api"], log=levels["log"], reported=levels["reported"],
            implausible=levels["implausible"], no_counters=levels["none"],
        ))
    return reduced


def _sort_value(value: KeyValue) -> tuple[int, str]:
    if value is None:
        return (1, "")
    if isinstance(value, int):
        return (0, f"{value:020d}")
    return (0, value.lower())


def _group_sort_key(group: GroupAggregate) -> tuple[tuple[int, str], ...]:
    return tuple(_sort_value(v) for part in group.key.values() for v in part.values())


def sort_groups(groups: Sequence[GroupAggregate], sort: str) -> list[GroupAggregate]:
    """Sort by a ``SORTS`` name; a leading '-' means descending; missing values go last."""
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}")
    by_key = sorted(groups, key=_group_sort_key)
    if sort == "key":
        return by_key
    name = sort.lstrip("-")
    descending = sort.startswith("-")
    attribute = {"speedup": "median_speedup", "contributors": "contributors",
                 "submissions": "submissions", "baseline_tps": "median_baseline_tps"}[name]

    def value(group: GroupAggregate) -> float | None:
        raw = getattr(group, attribute)
        return None if raw is None else float(raw)

    present = [g for g in by_key if value(g) is not None]
    missing = [g for g in by_key if value(g) is None]
    present.sort(key=lambda g: value(g) or 0.0, reverse=descending)  # stable: key order ties
    return present + missing
