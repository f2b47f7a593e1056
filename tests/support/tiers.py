"""How many examples a property test tries in each test tier.

The full tier (``python3 scripts/dev.py test --full``, which CI runs) sets
``SPECATLAS_TEST_TIER=full``, and every property test tries its full count. Anywhere else
(the default tier, or pytest run by hand on a few files) a test written with
``max_examples=examples(N)`` tries a quarter of N (``examples(N, share)``: 1 in ``share``,
for the few whose every example costs seconds), and a test that names no count tries
the ``default-tier`` profile's 25 instead of Hypothesis's 100. The default tier keeps
every property and every assertion. It only tries fewer random inputs, so a rare
counterexample is more likely to turn up in the full tier first. Hypothesis keeps every
failing example in its database (.hypothesis/) and replays it first on the next run,
whatever the tier.

tests/conftest.py loads the profile before any test module is imported, because
``@settings`` reads the profile when the module is imported.
"""

from __future__ import annotations

import os

from hypothesis import settings

TIER_VARIABLE = "SPECATLAS_TEST_TIER"
TIERS = ("default", "full")
DEFAULT_SHARE = 4  # the default tier tries 1 in this many of a test's full count
MINIMUM = 2  # a property test with very few examples still tries more than one input
HYPOTHESIS_DEFAULT = 100  # Hypothesis's own max_examples: the full tier keeps it


def tier() -> str:
    """The tier this run belongs to: ``SPECATLAS_TEST_TIER``, or ``default`` if it is unset."""
    chosen = os.environ.get(TIER_VARIABLE) or "default"
    if chosen not in TIERS:
        raise ValueError(f"{TIER_VARIABLE}={chosen!r}: expected one of {', '.join(TIERS)}")
    return chosen


def examples(full_count: int, share: int = DEFAULT_SHARE) -> int:
    """A property test's ``max_examples``: ``full_count`` in the full tier, a quarter of it
    (at least MINIMUM) elsewhere. A test whose every example costs seconds (a store
    written and read whole) names a larger ``share``: 1 in ``share`` of its count."""
    if tier() == "full":
        return full_count
    return min(full_count, max(MINIMUM, full_count // share))


def load_profile() -> str:
    """Register both tiers' Hypothesis profiles and load this run's. Returns its name."""
    settings.register_profile("full-tier", max_examples=HYPOTHESIS_DEFAULT)
    settings.register_profile("default-tier", max_examples=examples(HYPOTHESIS_DEFAULT))
    name = f"{tier()}-tier"
    settings.load_profile(name)
    return name
