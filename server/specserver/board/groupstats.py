"""One group's statistics over sorted numpy columns, and the rule that keeps it from a
silent takeover.

The statistics (a median, a linear percentile, the robust spread and its outliers) use the
same IEEE operations in the same order as ``specschema.stats`` does on Python floats, so
``board.columns.group_aggregate`` equals the rules written row by row to the last bit
(``tests/support/reference_rules.py``).

**Disputes** (``aggregate`` rule 8, ``newkeys`` rule 6). A group's voices are split by the
keys' standing: *established* (graduated more than the settle time ago, accepted by a
maintainer, imported, or unknown to the rules), *recent* (cohorts that left probation
within the settle time) and the block of new keys. Trusted systems do not let a change in
who votes become a change in the answer unnoticed: a reputation is earned by standing, not
by arriving in numbers; young identities hold a capped share; and a shift is detected and
shown before it is believed. Here, when a group has both established and recent voices:

- the established side's *band* is its interquartile range, widened to at least
  ``TOLERANCE`` (10 %) either side of its median (the run-to-run noise of one machine);
- the group is **disputed** when the recent side's median lies outside that band, or when
  the median of all voices would (the takeover itself). A disputed group publishes its
  statistics without the recent side (so the recent side's share of the published vote is
  capped at nothing until the dispute is settled), and says both sides' medians and counts;
- its outliers are scored against the established side's centre and spread, whether it is
  disputed or not: a crowd of newcomers cannot make the established contributors outliers.

A recent side that agrees with the established one is counted at once, in full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specschema.stats import _MAD_NORMAL, _MEAN_AD_NORMAL, _ROUNDING_SPREAD, OUTLIER_SCORE

Floats = npt.NDArray[np.float64]

# How far (relatively) a side's median may stand from the established median and still
# agree with it, however tight the established side is.
TOLERANCE = 0.10


def median_sorted(ordered: Floats) -> float:
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return float((ordered[mid - 1] + ordered[mid]) / 2.0)


def percentile_sorted(ordered: Floats, q: float) -> float:
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (pos - low))


def median_present(values: Floats) -> float:
    """The median of the values that are not NaN (NaN when none is)."""
    present = np.sort(values[~np.isnan(values)])
    return median_sorted(present) if len(present) else math.nan


def segment_medians(values: Floats, starts: npt.NDArray[np.int64]) -> Floats:
    """Per segment of rows (``starts``: each one's first row, ascending; it ends where the
    next starts), the median of each column's values that are not NaN (NaN when none is):
    the middle value or the mean of the middle pair, as ``specschema.stats.median``.
    Segments of one size are done together, a block sorted along its rows."""
    sizes = np.diff(np.r_[starts, len(values)])
    medians = np.full((len(starts), values.shape[1]), np.nan)
    for size in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == size)
        first = starts[which]
        if size == 1:
            medians[which] = values[first]
            continue
        block = np.sort(values[first[:, None] + np.arange(size)], axis=1)  # NaN sorts last
        present = size - np.count_nonzero(np.isnan(block), axis=1)  # [segments, columns]
        low = np.take_along_axis(block, (np.maximum(present - 1, 0) // 2)[:, None], 1)[:, 0]
        high = np.take_along_axis(block, np.maximum(present // 2, 0)[:, None], 1)[:, 0]
        middle = np.where(present % 2 == 1, low, (low + high) / 2.0)
        medians[which] = np.where(present > 0, middle, np.nan)
    return medians


def present_sorted(values: Floats) -> Floats:
    """The values that are not NaN, ascending."""
    return np.sort(values[~np.isnan(values)])


def outliers(ordered: Floats, centre: float, reference: Floats | None = None
             ) -> tuple[float, int]:
    """``median_absolute_deviation`` of ``ordered`` (ascending, median ``centre``) and how
    many of its values ``robust_scores`` puts beyond ``OUTLIER_SCORE``; with ``reference``
    (ascending), the values are scored against the reference's median and spread instead."""
    deviations = ordered - centre
    mad = median_sorted(np.sort(np.abs(deviations)))
    if reference is None:
        return mad, _beyond(deviations, mad, deviations, centre)
    ref_centre = median_sorted(reference)
    spread_of = reference - ref_centre
    return mad, _beyond(ordered - ref_centre, median_sorted(np.sort(np.abs(spread_of))),
                        spread_of, ref_centre)


def _beyond(deviations: Floats, mad: float, spread_of: Floats, centre: float) -> int:
    """How many ``deviations`` score beyond ``OUTLIER_SCORE`` on the spread (``mad``, else
    the mean absolute deviation) of ``spread_of``, deviations from ``centre``."""
    rounding = _ROUNDING_SPREAD * abs(centre)
    if mad > rounding:
        scores = _MAD_NORMAL * deviations / mad
    else:
        mean_ad = math.fsum(abs(d) for d in spread_of.tolist()) / len(spread_of)
        if not mean_ad > rounding:
            return 0
        scores = _MEAN_AD_NORMAL * deviations / mean_ad
    return int(np.count_nonzero(np.abs(scores) > OUTLIER_SCORE))


def band(established: Floats) -> tuple[float, float]:
    """The established side's band (ascending, non-empty): its quartiles, at least
    ``TOLERANCE`` either side of its median."""
    centre = median_sorted(established)
    return (min(percentile_sorted(established, 0.25), centre * (1.0 - TOLERANCE)),
            max(percentile_sorted(established, 0.75), centre * (1.0 + TOLERANCE)))


@dataclass(frozen=True)
class Sides:
    """A group's established and recent voices' speedups (ascending, none NaN, neither
    empty) and the median of all its voices."""

    established: Floats
    recent: Floats
    pooled: float

    def disputed(self) -> bool:
        """The recent side's median, or the median of all, outside the established band."""
        low, high = band(self.established)
        recent = median_sorted(self.recent)
        return not (low <= recent <= high and low <= self.pooled <= high)
