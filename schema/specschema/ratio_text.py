"""A measured ratio in words (pure): the speedup to the baseline with its 95 % within-run
interval, and what a ratio that is not a measured speedup is, in a table's speedup column.
``specschema.conclusion`` writes its sentences with these and names them too; the CLI's
tables and the submission page's show them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specschema.protocol_files import headline_of
from specschema.summary import ConfigSummary
from specschema.verdicts import Outcome, outcome_of, verdict_of


def outcome(summary: ConfigSummary) -> Outcome | None:
    """A draft config's outcome from its decode-rate ratio's interval (None: baseline, no
    trials or too few for an interval). Whether it is an effect of speculation is the
    verdict's business: a not-applied outcome is noise."""
    if summary.role == "baseline":
        return None
    return outcome_of(summary.speedup_tps_ci_low, summary.speedup_tps_ci_high)


def headline_ratio(summary: ConfigSummary, headline: str = "decode"
                   ) -> tuple[float | None, float | None, float | None]:
    """The protocol's headline speedup and its 95 % within-run interval: the wall-time one
    (prompt included) for "wall", else the decode rate's."""
    if headline == "wall":
        return summary.speedup_wall, summary.speedup_wall_ci_low, summary.speedup_wall_ci_high
    return summary.speedup_tps, summary.speedup_tps_ci_low, summary.speedup_tps_ci_high


def stored_interval(submission: Mapping[str, Any], summaries: Iterable[Mapping[str, Any]],
                    name: str) -> tuple[float | None, float | None]:
    """Config ``name``'s headline 95 % within-run interval from a stored submission row
    (its protocol's identity) and its summary rows (``ConfigSummary``'s fields, named by
    ``config_name``); (None, None) without one."""
    headline = headline_of(str(submission["protocol_id"]), int(submission["protocol_version"]),
                           str(submission["protocol_sha256"]))
    prefix = "speedup_wall" if headline == "wall" else "speedup_tps"
    row = next((s for s in summaries if s.get("config_name") == name), None)
    if row is None:
        return None, None
    return row.get(f"{prefix}_ci_low"), row.get(f"{prefix}_ci_high")


def vs_baseline(summary: ConfigSummary) -> str:
    """``0.95x [0.79–1.01]``: the decode-rate ratio and its 95 % interval."""
    return _with_interval(summary, "decode")


def vs_baseline_wall(summary: ConfigSummary) -> str:
    """``1.12x [0.98–1.25]``: the wall-time speedup (prompt included) and its interval."""
    return _with_interval(summary, "wall")


def _with_interval(summary: ConfigSummary, which: str) -> str:
    if summary.role == "baseline":
        return "1.00x"
    ratio, low, high = headline_ratio(summary, which)
    if ratio is None:
        return "—"
    if low is None or high is None:
        return f"{ratio:.2f}x"
    return f"{ratio:.2f}x [{low:.2f}–{high:.2f}]"


def speedup_cell(summary: ConfigSummary, wall: bool = False) -> str:
    """A table's speedup column: the ratio with its interval for a confirmed config only;
    any other verdict's ratio without an interval and with what it is ("0.98x, noise"),
    never read as a speedup; "—" when there is none."""
    if summary.role == "baseline" or summary.observed == "confirmed":
        return vs_baseline_wall(summary) if wall else vs_baseline(summary)
    ratio = summary.speedup_wall if wall else summary.speedup_tps
    if ratio is None:
        return "—"
    return ratio_words(summary.observed, ratio)


def ratio_words(observed: str, ratio: float) -> str:
    """A ratio whose verdict is not a measured speedup, with what it is ("0.98x, noise")."""
    return f"{ratio:.2f}x, {verdict_of(observed).ratio_is}"
