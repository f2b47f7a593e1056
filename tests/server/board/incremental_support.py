"""The maintained-board tests' store and writes: random operations (inserts from a few keys
and address ranges, moderation, bans, accepted cohorts, the clock moving), a ``Store`` that
applies them, and ``check``: the maintained boards equal the full computation after each."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from sqlalchemy import Engine, delete, insert

from specserver.board import aggregate, groupkeys, incremental, newkeys
from specserver.store import changes, moderation, queries, tables, verdicts
from specserver.store.database import make_engine
from specserver.store.migrations import migrate
from tests.reliability import collisions

KEYS = [hashlib.sha256(f"key-{i}".encode()).hexdigest() for i in range(6)]
ORIGINS = ["range-a", "range-b", None]
CHIPS = ["Apple M2", "Apple M4"]
# A chip name whose DuckDB hash is Apple M2's (tests/reliability/collisions.py): the key of
# its rows collides with Apple M2's under every hash built from DuckDB's column hashes.
MERGING_CHIP = collisions.string_with_hash(collisions.string_hash(CHIPS[0].encode()))
# The known-chip table the boards are given: MERGING_CHIP and INVENTED_CHIP are not in it,
# so their groups stay apart until results come from MIN_CONTRIBUTORS ranges (board.chips).
LISTED_CHIPS = frozenset(CHIPS)
INVENTED_CHIP = "Invented X1"
VERDICTS = ["confirmed", "confirmed", "not_observed", "unstable", "not_applied", "unknown"]
LEVELS = ["log", "engine_api", "reported", "implausible", None]
START = datetime(2026, 11, 1, 12, 0, 0)
RULES = newkeys.CohortRules.of(7.0, 24.0, 1, 14.0)
MIN_CONTRIBUTORS = 2
SPECS: list[incremental.Spec] = [
    *[(queries.Filters(), tuple(aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY,
                                                                 view)), view)
      for view in aggregate.VIEWS],
    (queries.Filters.of({"chip": "Apple M2"}), ("draft",), "speedup"),
    (queries.Filters(), ("chip",), "noise_floor"),
    # the per-domain rows (store.domainview): every result here reads "unspecified"
    (queries.Filters.of({"domain": "unspecified"}), ("domain", "spec_type", "depth"),
     "speedup"),
]

draft_row = st.tuples(st.sampled_from(["spec_4", "spec_8"]), st.sampled_from(VERDICTS),
                      st.sampled_from(LEVELS),
                      st.one_of(st.none(), st.sampled_from([0.9, 1.0, 1.25, 1.5, 2.0, 3.5])))
insert_op = st.tuples(
    st.just("insert"),
    st.one_of(st.none(), st.integers(0, len(KEYS) - 1)),  # None: an imported result
    st.sampled_from(ORIGINS),
    st.sampled_from([0, 1, 6, 30, 100, 200]),  # hours after the previous receipt
    st.sampled_from([*CHIPS, MERGING_CHIP, INVENTED_CHIP]),
    st.sampled_from(["complete", "complete", "complete", "incomplete", "quarantined"]),
    st.lists(draft_row, min_size=0, max_size=2, unique_by=lambda d: d[0]),
)
moderation_op = st.tuples(st.sampled_from(["hide", "unhide"]), st.integers(0, 30))
key_op = st.tuples(st.sampled_from(["ban", "unban", "accept"]), st.integers(0, len(KEYS) - 1))
clock_op = st.tuples(st.just("later"), st.sampled_from([24, 100, 170, 400]))
operations = st.lists(st.one_of(insert_op, insert_op, moderation_op, key_op, clock_op),
                      min_size=1, max_size=14)


def store_submission(engine: Engine, sid: str, key_id: str | None, origin: str | None,
                     at: datetime, chip: str, kind: str,
                     drafts: list[tuple[str, str, str | None, float | None]],
                     baseline_tps: float) -> None:
    """A submission's rows the board reads (submissions, summaries), logged as the writer
    logs them, in one transaction."""
    with engine.begin() as conn:
        conn.execute(insert(tables.submissions).values(
            submission_id=sid, key_id=key_id, source="signed" if key_id else "imported",
            created_at=at, received_at=at, envelope_sha256="0" * 64,
            protocol_id="ollama-draft", protocol_version=1, protocol_sha256="a" * 64,
            target_model="qwen3:14b", chip=chip, memory_gb=24, engine_version="0.30.1",
            os_name="macos", backend="100% GPU", client_name="t", client_version="1",
            complete=kind != "incomplete", hidden=kind == "quarantined",
            hidden_reason=(moderation.QUARANTINE_PREFIX + "test"
                           if kind == "quarantined" else None),
            engine_name="ollama", origin_hash=origin,
            reaches_board=any(verdicts.reaches_a_board("draft", verdict, level)
                              for _, verdict, level, _ in drafts)))
        rows = [{"config_name": "baseline", "role": "baseline", "observed": "none",
                 "evidence": None, "speedup_tps": None, "median_tps": baseline_tps}]
        rows += [{"config_name": name, "role": "draft", "observed": verdict,
                  "evidence": level, "speedup_tps": speedup, "median_tps": None}
                 for name, verdict, level, speedup in drafts]
        for row in rows:
            conn.execute(insert(tables.summaries).values(
                submission_id=sid, model="qwen3:14b", mechanism="draft_num_predict",
                trials=3, speedup_wall=row["speedup_tps"],
                baseline_tps=baseline_tps if row["role"] == "draft" else None, **row))
        changes.mark(conn, changes.stored_contributors([(sid, key_id)]))


class Store:
    """The store under test, emptied for each example, with its writes logged as the
    server's writer and moderation log them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.ids: list[str] = []
        self.clock = START

    def reset(self) -> None:
        with self.engine.begin() as conn:
            for table in (tables.submissions, tables.summaries, tables.bans,
                          tables.audit_log, tables.board_changes, tables.board_clock):
                conn.execute(delete(table))
        self.ids, self.clock = [], START

    def insert(self, key: int | None, origin: str | None, hours: int, chip: str, kind: str,
               drafts: list[tuple[str, str, str | None, float | None]]) -> None:
        self.clock += timedelta(hours=hours)
        sid = f"00000000-0000-4000-8000-{len(self.ids):012d}"
        key_id = KEYS[key] if key is not None else None
        store_submission(self.engine, sid, key_id, origin if key_id else None, self.clock,
                         chip, kind, drafts, 20.0 + len(self.ids))
        self.ids.append(sid)

    def apply(self, op: tuple[Any, ...]) -> None:
        name = op[0]
        if name == "insert":
            self.insert(*op[1:])
        elif name == "later":  # the clock moves: an incomplete import, on no board
            self.insert(None, None, op[1], CHIPS[0], "incomplete", [])
        elif name in ("hide", "unhide") and self.ids:
            sid = self.ids[op[1] % len(self.ids)]
            with self.engine.begin() as conn:
                if name == "hide":
                    moderation.hide(conn, sid, "test", "tester")
                else:
                    moderation.unhide(conn, sid, "test", "tester")
        elif name in ("ban", "unban", "accept"):
            action = {"ban": moderation.ban, "unban": moderation.unban,
                      "accept": moderation.accept_cohort}[name]
            with self.engine.begin() as conn:
                action(conn, KEYS[op[1]], "test", "tester")


REAL_SIDE_HASH = groupkeys.side_hash


def _blind_hash(secret: int, columns: list[Any]) -> Any:
    """The keyed hash of a key's part without its chip and its draft config's name: keys
    that differ only there share it, as forged keys share a real one (DuckDB's ``hash`` is
    inverted in microseconds)."""
    return REAL_SIDE_HASH(secret, [c for c in columns
                                   if getattr(c, "name", None) not in ("chip", "config_name")])


@contextmanager
def _side_hash(chosen: Any) -> Iterator[None]:
    groupkeys.side_hash = chosen
    try:
        yield
    finally:
        groupkeys.side_hash = REAL_SIDE_HASH


def _check(store: Store, ops: list[tuple[Any, ...]], hashed: Any = REAL_SIDE_HASH) -> None:
    """``hashed``: the hash the boards tell groups apart by (checked: keys that share one
    are told apart by value), held to the boards of the real one as well."""
    store.reset()
    maintainer = incremental.Maintainer(RULES, MIN_CONTRIBUTORS, listed_chips=LISTED_CHIPS)
    for op in [("later", 0), *ops]:
        store.apply(op)
        with incremental.snapshot(store.engine) as conn:
            for filters, dimensions, view in SPECS:
                with _side_hash(hashed):
                    maintained = maintainer.board(conn, filters, dimensions, view)
                    full = incremental.compute(conn, filters, dimensions, view, RULES,
                                               MIN_CONTRIBUTORS, LISTED_CHIPS)
                assert maintained == full, (op, view, dimensions)
                if hashed is not REAL_SIDE_HASH:
                    assert full == incremental.compute(conn, filters, dimensions, view,
                                                       RULES, MIN_CONTRIBUTORS, LISTED_CHIPS)
    assert maintainer.rebuilds == 1  # every write after the first read came from the log
    stored = sum(1 for op in ops if op[0] in ("insert", "later"))
    assert maintainer.refreshes >= stored  # a write that changes nothing logs nothing


def _store(url: str) -> Iterator[Store]:
    engine = make_engine(url)
    migrate(engine)
    try:
        yield Store(engine)
    finally:
        engine.dispose()
