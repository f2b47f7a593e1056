"""Property tests' example counts per tier (tests/support/tiers.py): the full count in the
full tier, fewer in the default tier, and the tier named by the variable scripts/dev.py
sets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import tiers

ROOT = Path(__file__).resolve().parents[1]


def test_the_full_tier_keeps_every_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tiers.TIER_VARIABLE, "full")
    assert [tiers.examples(n) for n in (1, 12, 300)] == [1, 12, 300]


@pytest.mark.parametrize("value", ["default", ""])
def test_the_default_tier_tries_a_quarter_and_never_fewer_than_two(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(tiers.TIER_VARIABLE, value)
    assert [tiers.examples(n) for n in (1, 2, 7, 12, 300)] == [1, 2, 2, 3, 75]


def test_a_test_may_name_a_smaller_share_and_the_full_tier_ignores_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tiers.TIER_VARIABLE, "default")
    assert [tiers.examples(n, share=8) for n in (1, 12, 40)] == [1, 2, 5]
    monkeypatch.setenv(tiers.TIER_VARIABLE, "full")
    assert tiers.examples(40, share=8) == 40


def test_an_unset_variable_is_the_default_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tiers.TIER_VARIABLE, raising=False)
    assert tiers.tier() == "default"


def test_an_unknown_tier_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tiers.TIER_VARIABLE, "fast")
    with pytest.raises(ValueError, match="SPECATLAS_TEST_TIER='fast'"):
        tiers.examples(12)


@pytest.mark.parametrize(("value", "count"), [("full", 100), ("default", 25)])
def test_the_profile_gives_tests_without_a_count_their_tiers_examples(
        monkeypatch: pytest.MonkeyPatch, value: str, count: int) -> None:
    running = settings.get_current_profile_name()
    monkeypatch.setenv(tiers.TIER_VARIABLE, value)
    try:
        assert tiers.load_profile() == f"{value}-tier"
        assert settings().max_examples == count  # a settings object inherits the profile
    finally:
        settings.load_profile(running)


def test_the_variable_is_the_one_scripts_dev_sets() -> None:
    spec = importlib.util.spec_from_file_location("specatlas_dev", ROOT / "scripts" / "dev.py")
    assert spec is not None and spec.loader is not None
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    assert dev.TIER_VARIABLE == tiers.TIER_VARIABLE
