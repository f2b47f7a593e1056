"""Aggregation rules of the leaderboard: pure functions over plain rows.

The rules (documented for contributors in ``docs/aggregation.md``):

1. The unit is one *draft result*: one submission x one draft config, with the speedups
   that ``specschema.summary`` computed at ingest (median decode tok/s of the draft over
   median decode tok/s of the baseline, the same for wall time, and the bootstrap CI).
2. Rows are grouped by whitelisted dimensions (``DIMENSIONS``).
3. One contributor cannot dominate a group: each contributor's (key id's) rows in a group
   are reduced to their median first (``board.sql.contributor_columns``); the group's statistics
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
sorted by DuckDB), and the steps after it over the per-contributor rows as columns
(``board.columns``). Tests hold them equal to the same rules written over plain rows:
the first step in ``tests/support/reference_board.py``, the others row by row in
``tests/support/reference_rules.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from specserver.store import dimensions, verdicts

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

# Dimension name -> the fields of a draft result that identify a value of it: the
# dimension table's (store/dimensions.py), which also gives their columns, filters and words.
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
    """The group's values in the order of its dimensions' fields (a contributor row's key)."""
    return tuple(v for part in group.key.values() for v in part.values())


# A contributor's count field for each evidence level, in specschema.evidence.LEVELS order
# (``columns.COUNT_FIELDS``).
LEVEL_FIELDS = ("engine_api", "log", "reported", "implausible", "no_counters")


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
