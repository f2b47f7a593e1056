"""Forged group keys: the board told groups apart by DuckDB's ``hash`` of their key columns
and took a group's label from one of its rows. That hash is invertible: a target
quantization that makes an "Apple M4 Max · 128 GB" result collide with an honest "Apple M2
· 24 GB" group was found in 0.6 s, and three keys posting first made six honest M2 results
show as "qwen3:14b · Apple M4 Max · 128 GB", 8 contributors, established, with no M2 row
left; the attacker's votes could land inside the honest group past its plausibility bound;
the board maintained by change, a full computation after a restart and ``?chip=`` each
showed something else.

Both attacks are replayed here through the API with signed envelopes from three addresses,
posted before the honest results, on DuckDB and PostgreSQL, with strings that really
collide (``collisions``, checked against DuckDB):

- **label hijack**, as the review did it: the attacker's key (Apple M4 Max, 128 GB, a
  forged target quantization) has the hash of the honest group's whole key under the hash
  the board grouped by (DuckDB's, of every key column);
- **merge**: the attacker's chip is a string whose own hash is Apple M2's, so that its key
  collides with the honest one under any hash built from DuckDB's column hashes (the
  board's keyed hashes too: only the check tells them apart); no plausibility bound holds
  for a chip the server does not know, so its fast baselines are stored.

Each time the honest group keeps its own key, label and counts, the same in the board
maintained by change, after a restart (a full computation) and through every filter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import and_, func, select

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.board import aggregate
from specserver.http.app import create_app
from specserver.store import field_column, tables
from tests.reliability import collisions
from tests.reliability.apps import STORES, app_on, make_settings
from tests.reliability.hostile import signing_key
from tests.reliability.storecount import app_engine
from tests.support.clock import SteppingClock
from tests.support.inprocess import InProcessClient
from tests.support.postgres import private_schema_url

URL = "/v1/submissions"
TARGET = "qwen3:14b"
M2 = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")
M4_MAX = {**M2, "chip": "Apple M4 Max", "memory_gb": 128}
HONEST = [1.05, 1.08, 1.10, 1.12, 1.15, 1.18]
ATTACK = 3.0
ATTACKERS = [("198.51.100.9", 40000), ("203.0.113.77", 40000), ("192.0.2.31", 40000)]
DIMENSIONS = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)
SETTINGS = {"new_key_probation_days": 0}  # every key one voice: the counts read plainly


def _honest_peer(i: int) -> tuple[str, int]:
    return (f"10.{i + 1}.0.7", 40000)


def _submission(seed: int, speedup: float, machine: dict[str, Any],
                quantization: str | None = None, baseline_tps: float = 9.0) -> Any:
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             machine=machine, target=TARGET, baseline_tps=baseline_tps,
                             draft_speedups={"spec_4": speedup, "spec_8": speedup},
                             counters_seen=True,
                             created_at=datetime.now(UTC) - timedelta(minutes=5))
    if quantization is not None:
        models = list(sub.models)
        models[0] = models[0].model_copy(update={"quantization": quantization})
        sub = sub.model_copy(update={"models": models})
    return sub


def _post(client: InProcessClient, sub: Any, key_seed: int, peer: tuple[str, int]) -> None:
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(key_seed)))
    response = client.post(URL, content=body, peer=peer)
    assert response.status_code == 201, response.text  # stored, never silently dropped


def _key_columns() -> tuple[Any, list[Any]]:
    draft = tables.summaries.alias("d")
    return draft, [field_column(f, draft) for d in DIMENSIONS for f in aggregate.DIMENSIONS[d]]


def _column_hashes(app: Any, chip: str) -> list[int]:
    """DuckDB's hash of each key column of the spec_4 row of the submission from ``chip``."""
    draft, columns = _key_columns()
    sub = tables.submissions
    with app_engine(app).connect() as conn:
        row = conn.execute(select(*(func.hash(c) for c in columns)).select_from(
            draft.join(sub, sub.c.submission_id == draft.c.submission_id)).where(
            and_(sub.c.chip == chip, draft.c.config_name == "spec_4"))).one()
    return [int(h) for h in row]


def _forged_quantization(tmp_path: Path) -> str:
    """The target quantization that gives an Apple M4 Max · 128 GB result the hash of the
    honest Apple M2 · 24 GB group's whole key, under the hash the board grouped by before
    (DuckDB's, of every key column in order), as the review found it: each column's hash
    read from a scratch store holding the two results as ingestion stores them."""
    with app_on("duckdb", tmp_path / "scratch", **SETTINGS) as app, \
            InProcessClient(app) as client:
        _post(client, _submission(100, HONEST[0], M2), 100, _honest_peer(0))
        _post(client, _submission(1000, ATTACK, M4_MAX, "Q4_K_M"), 1000, ATTACKERS[0])
        honest, attacker = _column_hashes(app, "Apple M2"), _column_hashes(app, "Apple M4 Max")
    whole = honest[0]
    for right in honest[1:]:
        whole = collisions.combine(whole, right)
    place = [f for d in DIMENSIONS for f in aggregate.DIMENSIONS[d]].index("target_quant")
    forged = collisions.string_with_hash(collisions.value_for(attacker, place, whole),
                                         collisions.QUANT)
    collisions.check_against_duckdb(forged)
    return forged


def _merging_chip() -> str:
    chip = collisions.string_with_hash(collisions.string_hash(b"Apple M2"))
    collisions.check_against_duckdb("Apple M2", chip)
    return chip


@contextlib.contextmanager
def _store_url(store: str, tmp_path: Path) -> Iterator[str]:
    """One store for both lives of the server (the restart)."""
    if store == "postgres":
        with private_schema_url() as url:
            yield url
    else:
        yield str(tmp_path / "store.duckdb")


@contextlib.contextmanager
def _server(url: str, tmp_path: Path) -> Iterator[InProcessClient]:
    settings = make_settings(tmp_path, database_url=url, **SETTINGS)
    with InProcessClient(create_app(settings, clock=SteppingClock())) as client:
        yield client


def _groups(client: InProcessClient, **filters: Any) -> list[dict[str, Any]]:
    response = client.get("/v1/leaderboard", params=filters)
    assert response.status_code == 200, response.text
    groups: list[dict[str, Any]] = response.json()["groups"]
    return groups


def _spec4(groups: list[dict[str, Any]], chip: str) -> list[dict[str, Any]]:
    return [g for g in groups if g["key"]["draft"]["config_name"] == "spec_4"
            and g["key"]["chip"]["chip"] == chip]


def _filters() -> list[dict[str, Any]]:
    """Every filter, with the honest group's value (its rows match each one)."""
    return [{"chip": "Apple M2"}, {"memory_gb": 24}, {"target": TARGET}, {"draft": "spec_4"},
            {"protocol": "ollama-draft"}, {"engine": "ollama"}, {"os": "macos"},
            {"engine_version": "0.30.1"}, {"ollama_version": "0.30.1"}, {"verdict": "confirmed"},
            {"chip": "Apple M2", "memory_gb": 24, "draft": "spec_4"}]


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("attack", ["label_hijack", "merge"])
def test_forged_keys_leave_the_honest_group_its_own_label_and_counts(
        store: str, attack: str, tmp_path: Path) -> None:
    if attack == "label_hijack":
        quantization: str | None = _forged_quantization(tmp_path)
        machine, attacker_chip, baseline = M4_MAX, "Apple M4 Max", 9.0
    else:
        quantization, attacker_chip = None, _merging_chip()
        # 60 tok/s for a 9.3 GB model: past an M2's bound, and no bound holds for a new chip
        machine, baseline = {**M2, "chip": attacker_chip}, 60.0
    with _store_url(store, tmp_path) as url:
        with _server(url, tmp_path) as client:
            for i, peer in enumerate(ATTACKERS):  # first: their rows are the oldest
                _post(client, _submission(1000 + i, ATTACK, machine, quantization, baseline),
                      1000 + i, peer)
            assert _spec4(_groups(client), attacker_chip)  # a first computation, then
            for i, speedup in enumerate(HONEST):  # the honest results, maintained by change
                _post(client, _submission(100 + i, speedup, M2), 100 + i, _honest_peer(i))
            if store == "duckdb":
                _assert_collides(client.app, attack, attacker_chip)
            maintained = _read(client)
        with _server(url, tmp_path) as client:  # a restart: computed in full
            restarted = _read(client)
    group = _honest(maintained[0], attacker_chip)
    forged = _spec4(maintained[0], attacker_chip)[0]
    print(f"\n[{store}, {attack}] honest Apple M2 spec_4: {group['median_speedup']:.2f}x, "
          f"{group['contributors']} contributors, {group['submissions']} submissions, "
          f"baseline {group['median_baseline_tps']:.1f} tok/s; {attacker_chip!r}: "
          f"{forged['median_speedup']:.2f}x, {forged['contributors']} contributors, "
          f"baseline {forged['median_baseline_tps']:.1f} tok/s")
    assert _honest(restarted[0], attacker_chip) == group
    assert restarted[0] == maintained[0]  # the full computation and the maintained board
    for life in (maintained, restarted):
        for chosen, groups in zip(_filters(), life[1:-1], strict=True):
            found = _spec4(groups, "Apple M2")
            assert len(found) == 1, chosen
            # The same group in every way; only its label may be shorter: a board showing
            # one variant of qwen3:14b does not tell it apart from the forged one by its
            # quantization (aggregate.distinct_labels).
            assert {**found[0], "label": None} == {**group, "label": None}, chosen
            assert found[0]["label"].endswith(HONEST_LABEL), chosen
        assert "Apple M2 · 24 GB" in life[-1]  # the page


HONEST_LABEL = "spec_4 · ollama · Apple M2 · 24 GB"


def _read(client: InProcessClient) -> list[Any]:
    """The board, the board through every filter, and the page."""
    return [_groups(client), *(_groups(client, **chosen) for chosen in _filters()),
            client.get("/").text]


def _honest(groups: list[dict[str, Any]], attacker_chip: str) -> dict[str, Any]:
    """The honest group, checked: its own key, label and counts; the attacker's apart."""
    honest = _spec4(groups, "Apple M2")
    assert len(honest) == 1, groups
    group = honest[0]
    assert group["key"]["chip"] == {"chip": "Apple M2"}
    assert group["key"]["memory_gb"] == {"memory_gb": 24}
    assert group["label"].endswith(HONEST_LABEL), group["label"]
    assert group["contributors"] == len(HONEST) and group["submissions"] == len(HONEST)
    assert min(HONEST) <= group["median_speedup"] <= max(HONEST)
    assert group["median_baseline_tps"] < 12  # no attacker's 60 tok/s in it
    attacker = _spec4(groups, attacker_chip)
    assert len(attacker) == 1 and attacker[0]["contributors"] == len(ATTACKERS)
    assert attacker[0]["median_speedup"] > 2.5
    return group


def _assert_collides(app: Any, attack: str, attacker_chip: str) -> None:
    """The attacker's key and the honest one really share DuckDB's hash of the whole key
    (the hash the board grouped by before), and for the merge, the chips' own hashes."""
    draft, columns = _key_columns()
    sub = tables.submissions
    with app_engine(app).connect() as conn:
        found = conn.execute(select(func.hash(*columns), sub.c.chip).distinct().select_from(
            draft.join(sub, sub.c.submission_id == draft.c.submission_id)).where(
            draft.c.config_name == "spec_4")).all()
        assert {chip for _, chip in found} == {"Apple M2", attacker_chip}
        assert len({hashed for hashed, _ in found}) == 1, found
        if attack == "merge":
            chips = conn.execute(select(func.hash(sub.c.chip)).distinct()).all()
            assert len(chips) == 1
