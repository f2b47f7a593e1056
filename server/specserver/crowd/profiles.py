"""The crowd's inputs to a prediction for one machine, read from the store
(``specschema.crowd.CrowdInputs``), with the board's way of counting voices.

What counts, as on the speedup board: complete, visible results from keys that are not
banned, draft configs whose verdict is ``confirmed`` with corroborated counters (a config
that cannot be shown to have speculated teaches nothing about acceptance). A candidate's
acceptance profile comes from the rows that recorded draft rounds and per-position counts
(llama-server's), on any machine: acceptance travels between machines; so do the shares
of plain steps beside it (``crowd.plain``), counted per key and cohort the same way. Per
kind of work, from the results per domain of the protocol's prompt set that ingestion stored
(``domain_results``), with the measured speedups per domain beside them, the spread of each
row's speedup within its run (``crowd.spread``) and, for a draft model, what a drafted
token cost in its runs (``crowd.drafting``), and for an n-gram lookup how far the model
missed on the contributors' own machines (``crowd.residuals``), each counted per key and
cohort the same way. Each key's rows are summed into its a_i, a cohort's keys are one
voice and the keys on probation one more (``board.newkeys``; the settings ``min_contributors`` and
``new_key_probation_days`` apply here as on the board).

Measured speedups beside them come from the same rows on the asker's chip only ("measured on
machines like yours"), per contributor then across. Cost curves are the probes of the target
on that chip and engine family (and memory, when given): a probe is one machine's own
measurement, so no minimum applies, but a cohort's probes are one unit and the new keys'
probes one more. Probes that timed verification rounds are used whenever there is any;
prefill probes (the first version, which read a round 30-50 % low) only when there is none,
and the inputs say which (``CrowdInputs.cost_measured``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, func, select

from specschema.breakdown import position_rates, position_totals
from specschema.crowd import (
    ALL_DOMAINS,
    Candidate,
    CostUnit,
    CrowdInputs,
    Measured,
    Profile,
    contributor_units,
    merge_cost_units,
)
from specserver.board import newkeys
from specserver.crowd.drafting import drafting_factors
from specserver.crowd.own_costs import MachineCosts, MeasuredRun
from specserver.crowd.plain import plain_counts, shares
from specserver.crowd.residuals import model_residuals
from specserver.crowd.sizes import model_sizes
from specserver.crowd.spread import speedup_spreads
from specserver.errors import Invalid, NotFound
from specserver.store import positions_of, probes, queries, tables, visible_clause

__all__ = ["Asked", "crowd_inputs", "resolve_target", "standing_of"]

DIGEST = re.compile(r"^[0-9a-f]{64}$")
IMPORTED = "imported:"  # an imported result's contributor: its own voice


@dataclass(frozen=True)
class Asked:
    """The machine a prediction is for."""

    target: str  # a sha256 digest, or a model name that one stored digest goes by
    chip: str
    engine: str
    memory_gb: int | None = None


def resolve_target(conn: Connection, target: str) -> tuple[str, str | None]:
    """(digest, name): a digest stands for itself; a name must name exactly one stored
    digest (a name is anyone's to choose: two files under one name are not mixed)."""
    sub = tables.submissions
    if DIGEST.match(target):
        name = conn.execute(select(sub.c.target_model).where(sub.c.target_digest == target)
                            .limit(1)).scalar()
        return target, name
    found = sorted({str(d) for d in conn.execute(
        select(sub.c.target_digest).where(sub.c.target_model == target,
                                          sub.c.target_digest.is_not(None), visible_clause())
        .distinct()).scalars()})
    if not found:
        raise NotFound(f"no result names the target {target!r}: pass its sha256 digest",
                       code="not_found")
    if len(found) > 1:
        raise Invalid(f"{len(found)} different model files are named {target!r}: pass the "
                      "sha256 digest of yours", {"digests": found[:20]},
                      code="invalid_request")
    return found[0], target


@dataclass(frozen=True)
class _Row:
    key: str
    candidate: Candidate
    chip: str | None
    speedup: float | None
    rounds: int | None
    drafted: int | None
    positions: list[int] | None
    submission_id: str
    config_name: str


def _rows(conn: Connection, digest: str, engine: str) -> list[_Row]:
    sub, sm, cf = tables.submissions, tables.summaries, tables.configs
    engine_name = func.coalesce(sub.c.engine_name, "ollama")  # v1 knew no other engine
    found = conn.execute(select(
        sub.c.key_id, sub.c.submission_id, sub.c.chip, sub.c.engine_name, sub.c.engine_runtime,
        sm.c.config_name, sm.c.mechanism, sm.c.spec_type, sm.c.depth, sm.c.draft_model,
        sm.c.draft_digest, sm.c.speedup_tps, sm.c.rounds, sm.c.accepted_per_position,
        cf.c.drafted_tokens,
    ).join(sm, sm.c.submission_id == sub.c.submission_id).join(
        cf, (cf.c.submission_id == sm.c.submission_id) & (cf.c.config_name == sm.c.config_name)
    ).where(
        sub.c.target_digest == digest, visible_clause(), sm.c.role == "draft",
        sm.c.observed == "confirmed", queries.on_board_clause(sm),
        engine_name == engine,
    ).order_by(sub.c.submission_id, sm.c.config_name)).all()
    rows = []
    for r in found:
        adaptive = r.depth is None or r.engine_runtime == "mlx"
        rows.append(_Row(
            r.key_id or f"{IMPORTED}{r.submission_id}",
            Candidate(engine, r.mechanism, r.spec_type, r.depth, r.draft_model,
                      r.draft_digest, adaptive),
            r.chip, r.speedup_tps, r.rounds, r.drafted_tokens,
            positions_of(r.accepted_per_position), r.submission_id, r.config_name))
    return rows


# Per (submission, config), per domain: (rounds, per-position counts, speedup, drafted).
DomainRows = dict[tuple[str, str], dict[str, tuple[int | None, list[int] | None, float | None,
                                                   int | None]]]


def _per_domain(conn: Connection, digest: str, rows: Sequence[_Row]) -> DomainRows:
    """Each row's result per domain of its protocol's prompt set, as ingestion stored it
    (``tables.domain_results``, by ``specschema.breakdown``'s rule); none for a protocol
    without one."""
    wanted = {(r.submission_id, r.config_name) for r in rows}
    if not wanted:
        return {}
    dr, sub = tables.domain_results, tables.submissions
    found: DomainRows = defaultdict(dict)
    for r in conn.execute(select(dr.c.submission_id, dr.c.config_name, dr.c.domain,
                                 dr.c.rounds, dr.c.accepted_per_position, dr.c.speedup_tps,
                                 dr.c.drafted)
                          .join(sub, sub.c.submission_id == dr.c.submission_id)
                          .where(sub.c.target_digest == digest)):
        if (r.submission_id, r.config_name) in wanted:
            found[(r.submission_id, r.config_name)][r.domain] = (
                r.rounds, positions_of(r.accepted_per_position), r.speedup_tps, r.drafted)
    return found


def _per_round(rounds: int | None, drafted: int | None) -> float | None:
    """The tokens a round drafted on average; None when either count is missing."""
    return drafted / rounds if rounds and drafted is not None and drafted >= 0 else None


def _middle(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _rates(units: Iterable[tuple[int | None, Sequence[int] | None]]) -> tuple[float, ...] | None:
    totals = position_totals(units)
    return None if totals is None else position_rates(*totals)


def _folded_medians(folded: Callable[[Mapping[str, Sequence[float]]],
                                     tuple[tuple[tuple[float, ...], ...], int]],
                    by_key: Mapping[str, Sequence[float]]) -> tuple[float, ...]:
    """Per contributor unit, the median of its keys' values (each key's own median)."""
    units, _ = folded({k: (_middle(v),) for k, v in by_key.items() if v})
    return tuple(u[0] for u in units)


def _cost_units(found: Sequence[probes.StoredProbe], cohort_of: Mapping[str, str],
                new: AbstractSet[str], unknown_is_new: bool) -> tuple[CostUnit, ...]:
    """One unit per cohort (its probes' samples together), the new keys' one more; a key
    known by its probes only is its own cohort, new while probation is on."""
    by_cohort: dict[str, list[CostUnit]] = defaultdict(list)
    fresh: list[CostUnit] = []
    for probe in found:
        cohort = cohort_of.get(probe.key_id)
        unit = CostUnit(probe.samples)
        if (cohort is None and unknown_is_new) or cohort in new:
            fresh.append(unit)
        else:
            by_cohort[cohort or probe.key_id].append(unit)
    units = [merge_cost_units(by_cohort[c]) for c in sorted(by_cohort)]
    if fresh:
        units.append(merge_cost_units(fresh))
    return tuple(units)


PerDomainKey = dict[str, dict[str, list[float]]]


def _measured_runs(rows: Sequence[_Row], per_domain: DomainRows, plain_of: Mapping[
        tuple[str, str], Mapping[str, tuple[int, int]]], digest: str) -> list[MeasuredRun]:
    """The rows of a draft model or a costless drafter at a fixed depth, with what
    ``crowd.drafting`` and ``crowd.residuals`` need per domain."""
    out = []
    for r in rows:
        c = r.candidate
        if (c.draft_digest is None and not c.costless) or c.depth is None or c.adaptive:
            continue
        plain = plain_of.get((r.submission_id, r.config_name), {})
        found = {ALL_DOMAINS: (r.rounds, r.positions, r.speedup, r.drafted)} | dict(
            per_domain.get((r.submission_id, r.config_name), {}))
        wanted = {}
        for domain, (rounds, positions, speedup, drafted) in found.items():
            rates = _rates([(rounds, positions)])
            steps, decoded = plain.get(domain, (0, 0))
            if speedup is not None and rates is not None:
                wanted[domain] = (speedup, rates, steps / decoded if decoded else 0.0,
                                  _per_round(rounds, drafted))
        out.append(MeasuredRun((r.submission_id, r.config_name), r.key, r.chip, c.depth,
                               digest, c.draft_digest, wanted))
    return out


def standing_of(conn: Connection, rules: newkeys.CohortRules) -> newkeys.Standing:
    """Every key's cohort and which cohorts are new (``board.newkeys``): one read of every
    key's arrival, which a caller keeps while the store's data version holds."""
    return newkeys.standing(newkeys.arrivals(conn), newkeys.newest_receipt(conn), rules)


def crowd_inputs(conn: Connection, asked: Asked, rules: newkeys.CohortRules,
                 min_contributors: int, standing: newkeys.Standing | None = None
                 ) -> CrowdInputs:
    digest, name = resolve_target(conn, asked.target)
    rows = _rows(conn, digest, asked.engine)
    standing = standing or standing_of(conn, rules)
    cohort_of, new = standing.cohort_of, standing.new
    unknown_is_new = rules.probation > timedelta(0)

    def folded(by_key: Mapping[str, Sequence[float]]) -> tuple[tuple[tuple[float, ...], ...],
                                                                int]:
        # A key the standing does not know arrived after it was read: new, while probation
        # is on (an import is its own voice, as on the board).
        later = {k for k in by_key if k not in cohort_of and not k.startswith(IMPORTED)}
        return contributor_units(by_key, cohort_of, new | later if unknown_is_new else new)

    per_domain = _per_domain(conn, digest, rows)
    draft_costs = {c.draft_digest: _cost_units(probes.probes_for(
        conn, target_digests=[c.draft_digest], chip=asked.chip, engine=asked.engine),
        cohort_of, new, unknown_is_new) for c in {r.candidate for r in rows}
        if c.draft_digest is not None}
    # a draft never probed here: its size and the target's, from one result that ran it
    first: dict[str, str] = {}
    for r in rows:
        if r.candidate.draft_digest is not None and not draft_costs[r.candidate.draft_digest]:
            first.setdefault(r.candidate.draft_digest, r.submission_id)
    sizes = model_sizes(conn, sorted(set(first.values())))
    pairs = {(r.submission_id, r.config_name) for r in rows}
    plain_of = plain_counts(conn, digest, pairs)
    spread_of = speedup_spreads(conn, digest, pairs)
    runs = _measured_runs(rows, per_domain, plain_of, digest)
    costs = MachineCosts(conn, asked.engine)
    drafting_of = {run.source: factors for run, factors in drafting_factors(costs, runs)}
    residual_of = {run.source: misses for run, misses in model_residuals(
        costs, [r for r in runs if r.draft_digest is None])}
    candidates = sorted({r.candidate for r in rows}, key=lambda c: (
        c.spec_type or c.mechanism, c.draft or "", c.depth or 0, c.draft_digest or ""))
    Units = list[tuple[int | None, Sequence[int] | None]]
    out: list[Profile] = []
    for candidate in candidates:
        mine = [r for r in rows if r.candidate == candidate]
        counts: dict[str, dict[str, Units]] = defaultdict(lambda: defaultdict(list))
        speed: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        plain: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list))
        spread: PerDomainKey = defaultdict(lambda: defaultdict(list))
        drafting: PerDomainKey = defaultdict(lambda: defaultdict(list))
        residual: PerDomainKey = defaultdict(lambda: defaultdict(list))
        per_round: PerDomainKey = defaultdict(lambda: defaultdict(list))
        for r in mine:
            here = r.chip == asked.chip
            for domain, value in spread_of.get((r.submission_id, r.config_name), {}).items():
                spread[domain][r.key].append(value)
            for domain, value in drafting_of.get((r.submission_id, r.config_name),
                                                 {}).items():
                drafting[domain][r.key].append(value)
            for domain, value in residual_of.get((r.submission_id, r.config_name),
                                                 {}).items():
                residual[domain][r.key].append(value)
            for domain, steps in plain_of.get((r.submission_id, r.config_name), {}).items():
                plain[domain][r.key].append(steps)
            if r.rounds is not None and r.positions is not None:
                counts[ALL_DOMAINS][r.key].append((r.rounds, r.positions))
                if (drafted := _per_round(r.rounds, r.drafted)) is not None:
                    per_round[ALL_DOMAINS][r.key].append(drafted)
            if here and r.speedup is not None:
                speed[ALL_DOMAINS][r.key].append(r.speedup)
            for domain, (rounds, positions, speedup, tokens) in per_domain.get(
                    (r.submission_id, r.config_name), {}).items():
                if rounds is not None and positions is not None:
                    counts[domain][r.key].append((rounds, positions))
                    if (drafted := _per_round(rounds, tokens)) is not None:
                        per_round[domain][r.key].append(drafted)
                if here and speedup is not None:
                    speed[domain][r.key].append(speedup)
        draft_cost: tuple[CostUnit, ...] = ()
        if candidate.draft_digest is not None:
            draft_cost = draft_costs[candidate.draft_digest]
        domains = sorted(set(counts) | set(speed), key=lambda d: (d != ALL_DOMAINS, d))
        for domain in domains or [ALL_DOMAINS]:
            measured: tuple[Measured, ...] = ()
            if speed[domain]:
                voices, _ = folded({k: (_middle(v),) for k, v in speed[domain].items()})
                measured = (Measured(asked.chip, asked.memory_gb, candidate.depth,
                                     _middle([u[0] for u in voices]), len(voices)),)
            rated = {k: p for k, v in counts[domain].items() if (p := _rates(v)) is not None}
            units, new_keys = folded(rated)
            # the plain steps' shares of the same keys, counted as their acceptance is
            plain_units, _ = folded(shares({k: v for k, v in plain[domain].items()
                                            if k in rated}))
            out.append(Profile(candidate, domain, units, new_keys, measured, draft_cost,
                               tuple(u[0] for u in plain_units),
                               sizes.get(candidate.draft_digest or ""),
                               _folded_medians(folded, spread[domain]),
                               _folded_medians(folded, drafting[domain]),
                               _folded_medians(folded, residual[domain]),
                               _folded_medians(folded, per_round[domain])))
    chosen, cost_kind = probes.prefer_verification(probes.probes_for(
        conn, target_digests=[digest], chip=asked.chip, engine=asked.engine,
        memory_gb=asked.memory_gb))
    cost = _cost_units(chosen, cohort_of, new, unknown_is_new)
    return CrowdInputs(digest, name, asked.chip, asked.memory_gb, asked.engine,
                       min_contributors, tuple(out), cost, len(cost), cost_kind,
                       sizes.get(digest))
