"""The board's rules written row by row: the reference the fast paths are held equal to.

These are the definitions the board used before its rows became columns
(``specserver.board.columns``, ``newkeys.form_cohorts``); tests hold the columns' results
equal to these, to the last bit, on random inputs. Product code never imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import Connection

from specschema.evidence import LEVELS
from specschema.stats import (
    OUTLIER_SCORE,
    median,
    median_absolute_deviation,
    percentile,
    robust_scores,
)
from specserver.board import newkeys, sql
from specserver.board.aggregate import (
    Dispute,
    GroupAggregate,
    GroupKey,
    KeyValue,
    key_dict,
    sort_groups,
)
from specserver.board.columns import Codes
from specserver.board.newkeys import NEW_KEYS, Arrival, CohortRules, Cohorts, Standing
from specserver.store import VERDICTS, queries
from tests.support.reference_board import ContributorResult

_DAY = timedelta(days=1)
_HEAD = ("key", "contributor", "submissions", "speedup", "speedup_wall", "baseline_tps")
LEVEL_FIELDS = ("engine_api", "log", "reported", "implausible", "no_counters")
_FIELDS = ContributorResult._fields
_SUBMISSIONS, _SPEEDUP, _SPEEDUP_WALL, _BASELINE_TPS = (
    _FIELDS.index(name) for name in ("submissions", "speedup", "speedup_wall", "baseline_tps"))
_VERDICT_COLUMNS = tuple((v, _FIELDS.index(v)) for v in VERDICTS)
_LEVEL_COLUMNS = tuple(zip(LEVELS, (_FIELDS.index(name) for name in LEVEL_FIELDS),
                           strict=True))
DEFAULT_MIN_CONTRIBUTORS = 3


def _median_or_none(values: list[float]) -> float | None:
    return median(values) if values else None


def cohorts(found: Iterable[Arrival], rules: CohortRules) -> Cohorts:
    """Rules 1, 2 and 4 (pure). Ranges are independent of each other, and so is each key
    without a range: ``board.incremental`` recomputes only the ranges a change touched."""
    by_origin: dict[str | None, list[Arrival]] = {}
    for arrival in found:
        by_origin.setdefault(arrival.origin, []).append(arrival)
    cohort_of: dict[str, str] = {}
    arrived: dict[str, datetime] = {}
    aged: dict[str, datetime | None] = {}
    origin_of: dict[str, str | None] = {}
    for origin, members in by_origin.items():
        members.sort(key=lambda a: (a.first_seen, a.key_id))
        cohort: str | None = None
        last: datetime | None = None
        for arrival in members:
            chained = (origin is not None and rules.window > timedelta(0) and last is not None
                       and arrival.first_seen - last <= rules.window)
            if not chained or cohort is None:
                cohort = arrival.key_id
                arrived[cohort] = arrival.first_seen
                aged[cohort] = None
                origin_of[cohort] = origin
            cohort_of[arrival.key_id] = cohort
            last = arrival.first_seen
            start = aged[cohort]
            if arrival.aged_from is not None and (start is None or arrival.aged_from < start):
                aged[cohort] = arrival.aged_from
    graduation = _graduations(aged, origin_of, rules)
    return Cohorts(cohort_of, arrived, {c: graduation.get(c) for c in arrived})


def _graduations(aged: dict[str, datetime | None], origin_of: dict[str, str | None],
                 rules: CohortRules) -> dict[str, datetime]:
    """When each cohort that has started to age leaves probation (rule 4's cap per range)."""
    ranges: dict[str | None, list[tuple[datetime, str]]] = {}
    for cohort, start in aged.items():
        if start is not None:
            ranges.setdefault(origin_of[cohort], []).append((start + rules.probation, cohort))
    graduation: dict[str, datetime] = {}
    cap = rules.graduations_per_day
    for origin, eligible in ranges.items():
        eligible.sort()
        times: list[datetime] = []
        for at, cohort in eligible:
            if origin is not None and cap > 0 and len(times) >= cap:
                at = max(at, times[-cap] + _DAY)
            times.append(at)
            graduation[cohort] = at
    return graduation


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def _merged(key: tuple[KeyValue, ...], name: str, members: Sequence[ContributorResult]
            ) -> ContributorResult:
    if len(members) == 1 and members[0].contributor == name:
        return members[0]
    if tuple(ContributorResult._fields[:len(_HEAD)]) != _HEAD:
        raise TypeError("ContributorResult's leading fields changed: update newkeys._HEAD")
    counts = ContributorResult._fields[len(_HEAD):]
    return ContributorResult(
        key, name, sum(m.submissions for m in members),
        _median([m.speedup for m in members]), _median([m.speedup_wall for m in members]),
        _median([m.baseline_tps for m in members]),
        *(sum(getattr(m, field) for m in members) for field in counts),
    )


def fold(reduced: Iterable[ContributorResult], held: Standing) -> list[ContributorResult]:
    """Per group: each cohort's keys as one contributor (named by the cohort), and every
    new cohort together as one more (``NEW_KEYS``, the median of the cohorts' medians).
    Imported rows and keys outside ``held`` are unchanged. Established contributors keep
    their first member's position; the block comes last."""
    order: list[tuple[tuple[KeyValue, ...], str]] = []
    cohorts: dict[tuple[tuple[KeyValue, ...], str], list[ContributorResult]] = {}
    for item in reduced:
        cohort = held.cohort_of.get(item.contributor, item.contributor)
        slot = (item.key, cohort)
        if slot not in cohorts:
            cohorts[slot] = []
            order.append(slot)
        cohorts[slot].append(item)
    kept: list[ContributorResult] = []
    blocks: dict[tuple[KeyValue, ...], list[ContributorResult]] = {}
    for slot in order:
        key, cohort = slot
        one = _merged(key, cohort, cohorts[slot])
        if cohort in held.new:
            blocks.setdefault(key, []).append(one)
        else:
            kept.append(one)
    kept.extend(_merged(key, NEW_KEYS, members) for key, members in blocks.items())
    return kept


def arrived_together(reduced: Iterable[ContributorResult], held: Standing, window: timedelta,
                     min_contributors: int) -> frozenset[tuple[KeyValue, ...]]:
    """Rule 5: the keys of the groups where more than half of the contributors (cohorts
    and imported rows) are cohorts that arrived within one window."""
    units: dict[tuple[KeyValue, ...], dict[str, datetime | None]] = {}
    for item in reduced:
        cohort = held.cohort_of.get(item.contributor)
        name = cohort if cohort is not None else item.contributor
        units.setdefault(item.key, {})[name] = (
            held.arrived.get(cohort) if cohort is not None else None)
    flagged = set()
    for key, members in units.items():
        if len(members) < max(min_contributors, 2):
            continue
        times = sorted(t for t in members.values() if t is not None)
        most, start = 0, 0
        for end, at in enumerate(times):
            while at - times[start] > window:
                start += 1
            most = max(most, end - start + 1)
        if 2 * most > len(members):
            flagged.add(key)
    return frozenset(flagged)


def aggregate_group(
    key: GroupKey,
    contributors: Sequence[ContributorResult],
    min_contributors: int = DEFAULT_MIN_CONTRIBUTORS,
) -> GroupAggregate:
    """Rule 3, second step, and rule 4: the group's statistics across contributor medians."""
    # Column by column (a cold board at a million submissions aggregates ~300,000
    # contributor rows): the same values in the same order as row by row.
    columns = (list(zip(*contributors, strict=True)) if contributors
               else [()] * len(ContributorResult._fields))
    per_contributor = [s for s in columns[_SPEEDUP] if s is not None]
    enough = len(per_contributor) >= min_contributors
    return GroupAggregate(
        key=key,
        submissions=sum(columns[_SUBMISSIONS]),
        contributors=len(contributors),
        median_speedup=_median_or_none(per_contributor),
        p25_speedup=percentile(per_contributor, 0.25) if enough else None,
        p75_speedup=percentile(per_contributor, 0.75) if enough else None,
        min_speedup=min(per_contributor) if per_contributor else None,
        max_speedup=max(per_contributor) if per_contributor else None,
        median_speedup_wall=_median_or_none(
            [s for s in columns[_SPEEDUP_WALL] if s is not None]),
        median_baseline_tps=_median_or_none(
            [s for s in columns[_BASELINE_TPS] if s is not None]),
        few_results=not enough,
        verdicts={v: sum(columns[at]) for v, at in _VERDICT_COLUMNS},
        evidence={level: sum(columns[at]) for level, at in _LEVEL_COLUMNS},
        mad_speedup=median_absolute_deviation(per_contributor) if enough else None,
        outlier_contributors=sum(1 for score in robust_scores(per_contributor)
                                 if abs(score) > OUTLIER_SCORE) if enough else 0,
    )


def aggregate_contributors(
    reduced: Iterable[ContributorResult],
    dimensions: Sequence[str],
    min_contributors: int = DEFAULT_MIN_CONTRIBUTORS,
) -> list[GroupAggregate]:
    """Groups from per-contributor results; in key order."""
    groups: dict[tuple[KeyValue, ...], list[ContributorResult]] = {}
    for item in reduced:
        groups.setdefault(item.key, []).append(item)
    result = [aggregate_group(key_dict(dimensions, k), members, min_contributors)
              for k, members in groups.items()]
    return sort_groups(result, "key")




TOLERANCE = 0.10


def _outliers_against(values: Sequence[float], reference: Sequence[float]) -> int:
    """Values scoring beyond OUTLIER_SCORE on the reference's median and spread."""
    centre = median(reference)
    spread_of = [r - centre for r in reference]
    mad = median([abs(d) for d in spread_of])
    rounding = 1e-12 * abs(centre)
    if mad > rounding:
        scores = [0.6745 * (v - centre) / mad for v in values]
    else:
        mean_ad = math.fsum(abs(d) for d in spread_of) / len(spread_of)
        if not mean_ad > rounding:
            return 0
        scores = [0.7979 * (v - centre) / mean_ad for v in values]
    return sum(1 for score in scores if abs(score) > OUTLIER_SCORE)


def _speedups(items: Iterable[ContributorResult]) -> list[float]:
    return sorted(i.speedup for i in items if i.speedup is not None)


def _disputed(group: GroupAggregate, folded: list[ContributorResult], held: Standing,
              min_contributors: int) -> GroupAggregate:
    """Rule 8 (aggregate.py) on one group's folded voices: the established side (neither
    new nor recent), the recent one; disputed when the recent median or the median of all
    leaves the established side's band; outliers scored on the established side."""
    established = _speedups(f for f in folded
                            if f.contributor != NEW_KEYS and f.contributor not in held.recent)
    recent = _speedups(f for f in folded if f.contributor in held.recent)
    if not established or not recent:
        return group
    centre = median(established)
    low = min(percentile(established, 0.25), centre * (1.0 - TOLERANCE))
    high = max(percentile(established, 0.75), centre * (1.0 + TOLERANCE))
    pooled = median(_speedups(folded))
    if low <= median(recent) <= high and low <= pooled <= high:
        published = group
    else:
        kept = [f for f in folded if f.contributor not in held.recent]
        [published] = aggregate_contributors(kept, list(group.key), min_contributors)
        published = replace(published, submissions=group.submissions,
                            verdicts=group.verdicts, evidence=group.evidence,
                            dispute=Dispute(centre, len(established), median(recent),
                                            len(recent), tuple(sorted(held.recent & {
                                                f.contributor for f in folded}))))
    if published.few_results:
        return published
    values = _speedups(f for f in folded if f.contributor not in held.recent
                       or published.dispute is None)
    return replace(published, outlier_contributors=_outliers_against(values, established))


def board_groups(reduced: list[ContributorResult], dimensions: Sequence[str], held: Standing,
                 window: timedelta, min_contributors: int) -> list[GroupAggregate]:
    """What the board computed from per-contributor rows, row by row: rule 5 flagged, the
    fold, the groups' statistics (labels apart), rule 8's disputes."""
    together = arrived_together(reduced, held, window, min_contributors)
    folded = fold(reduced, held)
    groups = aggregate_contributors(folded, dimensions, min_contributors)
    by_key: dict[tuple[KeyValue, ...], list[ContributorResult]] = {}
    for item in folded:
        by_key.setdefault(item.key, []).append(item)
    out = []
    for g in groups:
        flat = tuple(v for part in g.key.values() for v in part.values())
        g = _disputed(g, by_key[flat], held, min_contributors)
        out.append(replace(g, arrived_together=True) if flat in together else g)
    return out


def contributor_results(conn: Connection, filters: queries.Filters,
                        dimensions: Sequence[str], verdicts: Iterable[str],
                        by_key_hash: bool = False) -> list[ContributorResult]:
    """``sql.contributor_columns`` as one ``ContributorResult`` per row, to compare with
    ``reference_board.reduce_contributors`` (``by_key_hash``: keys named by the hashes the keys'
    arrivals give, then named again by their ids)."""
    found = sql.contributor_columns(conn, filters, dimensions, verdicts, by_key_hash)
    if by_key_hash:
        codes = Codes()
        arrived = newkeys.arrival_columns(conn)
        assert arrived.key_hashes is not None
        codes.learn_hashes(codes.encode(arrived.key_ids), arrived.key_hashes)
        found.names = [codes.names[c] for c in found.coded(codes).tolist()]

    def value(v: float) -> float | None:
        return None if math.isnan(v) else v

    return [ContributorResult(found.keys[g], str(name), counts[0], value(speedup),
                              value(wall), value(baseline), *counts[1:])
            for g, name, (speedup, wall, baseline), counts in zip(
                found.group.tolist(), found.names, found.values.tolist(),
                found.counts.tolist(), strict=True)]
