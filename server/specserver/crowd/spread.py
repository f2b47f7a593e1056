"""How much a measured speedup moves within its own run, per result and kind of work, from
the stored trials (``specschema.predict_measured.measured_spread``).

A result's speedup is the ratio of its draft config's decode rates to its baseline's; each
rate moves between trials as the machine's load moves (the trials of one prompt are
spread over the run's blocks). Per (submission, config) and per domain of the protocol's
prompt set (the trial's prompt: trial index modulo the set's size, as ``crowd.plain``):
the variance of the log rates within each prompt (its trials in every block), pooled over
the prompts, and the trials counted; the
speedup's log-sd from the draft config's and the baseline's. The store sums the logs and
their squares per trial slot, so a read returns a few rows per result whatever it ran.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import Connection, Double, cast, func, select

from specschema.crowd import ALL_DOMAINS
from specschema.predict_measured import measured_spread
from specschema.protocol_files import find_protocol
from specserver.crowd.plain import prompt_slots
from specserver.store import tables

__all__ = ["speedup_spreads"]

BASELINE = "baseline"


@dataclass
class _Sums:
    """Per prompt of a protocol's set (one prompt for a protocol without a set): the
    trials, the sum of their log rates and of its squares."""

    prompts: dict[int, list[float]] = field(default_factory=dict)

    def add(self, prompt: int, count: int, total: float, total_sq: float) -> None:
        held = self.prompts.setdefault(prompt, [0.0, 0.0, 0.0])
        held[0] += count
        held[1] += total
        held[2] += total_sq

    @property
    def trials(self) -> int:
        return int(sum(n for n, _, _ in self.prompts.values()))

    def variance(self) -> float | None:
        """The log rates' variance within a prompt, pooled over the prompts; None with no
        two trials of one prompt (no spread can be told)."""
        squares = sum(max(sq - t * t / n, 0.0) for n, t, sq in self.prompts.values())
        free = self.trials - len(self.prompts)
        return squares / free if free > 0 else None


def speedup_spreads(conn: Connection, digest: str, wanted: Collection[tuple[str, str]]
                    ) -> dict[tuple[str, str], dict[str, float]]:
    """Per wanted (submission, draft config) of results of the target ``digest``, per domain
    (``ALL_DOMAINS``: every trial), the log-sd of its measured speedup; a pair whose own or
    baseline trials cannot tell a spread is left out."""
    if not wanted:
        return {}
    t, c, sub = tables.trials, tables.configs, tables.submissions
    count_slots = prompt_slots()
    log_rate = func.ln(cast(t.c.eval_count, Double)) - func.ln(cast(t.c.eval_duration_ns,
                                                                      Double))
    slot = (t.c.trial_index % count_slots).label("slot")
    found = conn.execute(
        select(t.c.submission_id, t.c.config_name, c.c.role, sub.c.protocol_id,
               sub.c.protocol_version, sub.c.protocol_sha256, slot,
               func.count().label("n"), func.sum(log_rate).label("total"),
               func.sum(log_rate * log_rate).label("total_sq"))
        .join(c, (c.c.submission_id == t.c.submission_id)
              & (c.c.config_name == t.c.config_name))
        .join(sub, sub.c.submission_id == t.c.submission_id)
        .where(sub.c.target_digest == digest, t.c.eval_count > 0, t.c.eval_duration_ns > 0)
        .group_by(t.c.submission_id, t.c.config_name, c.c.role, sub.c.protocol_id,
                  sub.c.protocol_version, sub.c.protocol_sha256, slot)).all()
    submissions = {s for s, _ in wanted}
    # (submission, config or BASELINE) -> domain -> sums
    sums: dict[tuple[str, str], dict[str, _Sums]] = defaultdict(lambda: defaultdict(_Sums))
    for r in found:
        sid = str(r.submission_id)
        if sid not in submissions:
            continue
        is_base = r.role == BASELINE
        if not is_base and (sid, str(r.config_name)) not in wanted:
            continue
        protocol = find_protocol(r.protocol_id, r.protocol_version, r.protocol_sha256)
        domains = [p.domain for p in (protocol.prompts or [])] if protocol is not None else []
        key = (sid, BASELINE if is_base else str(r.config_name))
        count, total, total_sq = int(r.n), float(r.total or 0.0), float(r.total_sq or 0.0)
        prompt = int(r.slot) % len(domains) if domains else 0
        sums[key][ALL_DOMAINS].add(prompt, count, total, total_sq)
        if domains:
            sums[key][domains[prompt]].add(prompt, count, total, total_sq)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for sid, config in wanted:
        mine, base = sums.get((sid, config)), sums.get((sid, BASELINE))
        if mine is None or base is None:
            continue
        for domain, own in mine.items():
            other = base.get(domain)
            v_c, v_b = own.variance(), other.variance() if other is not None else None
            if other is None or v_c is None or v_b is None:
                continue
            out.setdefault((sid, config), {})[domain] = measured_spread(
                v_c, own.trials, v_b, other.trials)
    return out
