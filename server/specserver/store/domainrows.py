"""A submission's per-domain rows (``tables.domain_results``), pure: no SQLAlchemy (the
check workers build them with the rest of a submission's rows).

For a protocol with a prompt set (``Protocol.prompts``), each draft config gets one row per
domain of the set, in the set's order: its speedup over that domain's trials with the
protocol's interval (``specschema.breakdown.domain_results``, the rule the submission page
shows), the baseline's median decode tok/s on the domain, the trials' drafted and accepted
tokens, and their rounds and per-position counts summed (``store.positions``; null when a
trial did not record both). Every domain gets its row, one without trials too (a config the
engine refused), so that a map result is never read as "unspecified". Speedups per domain
are those of the decode rate only: the wall-time speedup is the config's, over every domain.

A result whose protocol has no prompt set has no rows: the board reads its domain as
``UNSPECIFIED`` (``store.dimensions``).
"""

from __future__ import annotations

from specschema.blocks import decode_rates
from specschema.breakdown import domain_results, position_totals
from specschema.models import Submission
from specschema.stats import median
from specschema.summary import by_domain, prompt_domains
from specserver.store.positions import positions_text
from specserver.store.rowset import Row

__all__ = ["DOMAIN_COLUMNS", "UNSPECIFIED", "domain_rows"]

# How the board reads the domain of a result whose protocol labels no prompt with one.
UNSPECIFIED = "unspecified"
# tables.domain_results' columns, in order (a test holds the two equal).
DOMAIN_COLUMNS = ("submission_id", "config_name", "domain", "trials", "speedup_tps",
                  "speedup_tps_ci_low", "speedup_tps_ci_high", "baseline_tps", "drafted",
                  "accepted", "rounds", "accepted_per_position", "id_digest")


def _median_rate(rates: list[float | None]) -> float | None:
    present = [r for r in rates if r is not None]
    return median(present) if present else None


def domain_rows(submission: Submission, submission_id: str, digest: int) -> list[Row]:
    """The rows of ``submission`` (stored as ``submission_id``, whose ``id_digest`` is
    ``digest``); [] when its protocol has no prompt set."""
    domains = prompt_domains(submission)
    if not domains:
        return []
    baseline = next((c for c in submission.configs if c.role == "baseline"), None)
    base_trials = by_domain(baseline.trials, domains) if baseline is not None else {}
    base_tps = {d: _median_rate(decode_rates(t)) for d, t in base_trials.items()}
    rows: list[Row] = []
    for config in submission.configs:
        if config.role != "draft":
            continue
        trials = by_domain(config.trials, domains)
        for result in domain_results(submission, config):
            counted = [t.counters for t in trials[result.domain] if t.counters is not None]
            totals = position_totals((c.rounds, c.accepted_per_position) for c in counted
                                     ) if counted else None
            found = result.acceptance
            rows.append((
                submission_id, config.name, result.domain, result.trials, result.speedup_tps,
                result.ci_low, result.ci_high, base_tps.get(result.domain),
                None if found is None else found.drafted,
                None if found is None else found.accepted,
                None if totals is None else totals[0],
                None if totals is None else positions_text(totals[1]), digest))
    return rows
