"""A config's result per kind of work, and its acceptance per draft position (pure).

Both sides compute these from the trials, like the summaries (``specschema.summary``):
- per domain of a protocol's prompt set, the speedup over that domain's trials (the
  protocol's block estimator, each block holding one answer per prompt of the domain),
  the drafted and accepted tokens and the share accepted;
- per draft position i, the acceptance a_i: of the rounds whose first i drafted tokens
  were accepted, the share that accepted token i + 1 too (llama-server's per-position
  counts, ``TrialCounters.accepted_per_position``). With a_i, the expected tokens a round
  yields at depth k is 1 + sum over j <= k of the products a_1 ... a_j: what a prediction
  of another machine's speedup needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from specschema.block_t import blocked_ratio_t
from specschema.blocks import decode_rates, has_blocks, timed, trial_blocks
from specschema.models import ConfigResult, Submission, Trial
from specschema.summary import by_domain, prompt_domains

__all__ = ["Acceptance", "DomainResult", "acceptance_of", "domain_results",
           "position_rates", "position_totals"]


@dataclass(frozen=True)
class Acceptance:
    """What a set of trials' counters say about their drafts."""

    drafted: int
    accepted: int
    rounds: int | None  # None: some trial did not say
    per_position: tuple[float, ...] | None  # a_i (conditional), None: not reported
    # Drafted tokens the answer's end cut before they could be accepted (None: no trial
    # said); the rate leaves them out, as a draft that could not finish says nothing of
    # the draft.
    past_end: int | None = None

    @property
    def could_finish(self) -> int:
        """The drafted tokens the answer's end did not cut."""
        return self.drafted - (self.past_end or 0)

    @property
    def rate(self) -> float | None:
        return self.accepted / self.could_finish if self.could_finish > 0 else None

    @property
    def mean_accepted_len(self) -> float | None:
        """Tokens per round, the target's own included (llama-server's "mean len")."""
        return 1.0 + self.accepted / self.rounds if self.rounds else None


def position_totals(units: Iterable[tuple[int | None, Sequence[int] | None]]
                    ) -> tuple[int, tuple[int, ...]] | None:
    """The rounds and per-position counts of ``units`` (each a trial's counters, or sums of
    them: (rounds, accepted_per_position)), summed; a shorter list counts 0 past its end.
    None when a unit lacks either: its rounds could not be told apart from the others'.
    Sums of sums are the sums of their units, so a config's totals (``summaries``) add up
    to a group's."""
    rounds = 0
    lists: list[Sequence[int]] = []
    for unit_rounds, positions in units:
        if unit_rounds is None or positions is None:
            return None
        rounds += unit_rounds
        lists.append(positions)
    # column sums in C (ingestion sums every config's trials: half the cost of a loop)
    return rounds, tuple(map(sum, zip_longest(*lists, fillvalue=0)))


def position_rates(rounds: int, totals: Sequence[int]) -> tuple[float, ...] | None:
    """a_i from summed counts (module docstring): of the rounds that reached position i
    (all of them for i = 0, those whose first i tokens were accepted after), the share
    that accepted token i + 1 too; 0 where none reached it. None without rounds."""
    if not rounds:
        return None
    reached = (rounds, *totals)[:len(totals)]
    return tuple(t / r if r else 0.0 for t, r in zip(totals, reached, strict=True))


def acceptance_of(trials: Sequence[Trial]) -> Acceptance | None:
    """The trials' counters summed (None: no trial has counters)."""
    counted = [t.counters for t in trials if t.counters is not None]
    if not counted:
        return None
    rounds = None if any(c.rounds is None for c in counted) else sum(
        c.rounds or 0 for c in counted)
    totals = position_totals((c.rounds, c.accepted_per_position) for c in counted)
    cut = [c.drafted_past_end for c in counted if c.drafted_past_end is not None]
    return Acceptance(sum(c.drafted for c in counted), sum(c.accepted for c in counted),
                      rounds, None if totals is None else position_rates(*totals),
                      sum(cut) if cut else None)


NO_POSITIONS = "the engine reported no per-position counts"


def acceptance_words(found: Acceptance) -> str:
    """``966 of 1096 drafted tokens accepted (88%), 7.53 tokens per round``: what every
    surface says of a config's counters (0 % accepted is said as such). When the answers'
    ends cut some drafts, the share is of the others, and says so: ``(90% of the 1076
    drafts the answer's end did not cut)``."""
    rate = "—" if found.rate is None else f"{found.rate:.0%}"
    if found.past_end:
        rate += f" of the {found.could_finish} drafts the answer's end did not cut"
    text = f"{found.accepted} of {found.drafted} drafted tokens accepted ({rate})"
    if found.mean_accepted_len is not None:
        text += f", {found.mean_accepted_len:.2f} tokens per round"
    return text


@dataclass(frozen=True)
class DomainResult:
    domain: str
    trials: int
    speedup_tps: float | None
    ci_low: float | None
    ci_high: float | None
    acceptance: Acceptance | None


def domain_results(submission: Submission, config: ConfigResult) -> list[DomainResult]:
    """``config``'s result per domain of its protocol's prompt set ([] without one)."""
    domains = prompt_domains(submission)
    if not domains:
        return []
    baseline = next((c for c in submission.configs if c.role == "baseline"), None)
    theirs = by_domain(baseline.trials, domains) if baseline is not None else {}
    by_time = timed(submission.configs)
    found: list[DomainResult] = []
    for domain, trials in by_domain(config.trials, domains).items():
        speedup = low = high = None
        base = theirs.get(domain, [])
        if (config is not baseline and trials and base and has_blocks(trials)
                and has_blocks(base)):
            own = trial_blocks(trials, decode_rates(trials), by_time)
            ref = trial_blocks(base, decode_rates(base), by_time)
            if any(b.values for b in own) and any(b.values for b in ref):
                estimate = blocked_ratio_t(own, ref)
                speedup, low, high = estimate.ratio, estimate.ci_low, estimate.ci_high
        found.append(DomainResult(domain, len(trials), speedup, low, high,
                                  acceptance_of(trials)))
    return found
