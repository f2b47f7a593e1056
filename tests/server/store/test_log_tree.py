"""store.logtree and store.logentries: tiles read from the store equal the tiles of the same
leaves held in memory, across full level-1 tiles and partial edges; a gap in the stored
entries is refused, never served; the store version that adds the log names every signed
submission already stored, oldest first."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, delete, select

from specschema.tlog import TILE_WIDTH, MemoryTree, decode_entries, leaf_hash, tile_width
from specserver.ingest.checks import check_submission
from specserver.store import LogGap, LogTree, Store, tables
from specserver.store.appenders import duckdb_append
from specserver.store.logentries import create_log, envelope_entry
from specserver.store.migrations import migrate
from tests.support.signed import valid_body
from tests.support.stores import submit_checked

SIZE = TILE_WIDTH * TILE_WIDTH + 2 * TILE_WIDTH + 5


def entry(i: int) -> bytes:
    return envelope_entry(hashlib.sha256(i.to_bytes(4, "big")).hexdigest())


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[LogTree, MemoryTree]:
    url = f"duckdb:///{tmp_path_factory.mktemp('log') / 'log.duckdb'}"
    engine = create_engine(url)
    migrate(engine)
    at = datetime(2026, 1, 1)
    with engine.begin() as conn:
        duckdb_append(conn, tables.log_entries, [(i, entry(i), None, at) for i in range(SIZE)])
    return LogTree(engine, kept_tiles=4), MemoryTree([leaf_hash(entry(i)) for i in range(SIZE)])


def test_tiles_and_roots_from_the_store_equal_the_tree_in_memory(
        stored: tuple[LogTree, MemoryTree]) -> None:
    tree, memory = stored
    assert tree.size() == SIZE
    for level, index in ((0, 0), (0, 255), (0, 256), (0, 258), (1, 0), (1, 1), (2, 0)):
        width = tile_width(level, index, SIZE)
        assert width > 0
        expected = b"".join(memory.node(8 * level, index * TILE_WIDTH + i)
                            for i in range(width))
        assert tree.tile(level, index, width, SIZE) == expected, (level, index)
        assert tree.tile(level, index, width, SIZE) == expected  # from what it remembered
    for size in (1, 255, 256, 257, 65_536, SIZE):
        assert tree.root(size) == memory.root(size)
    bundle = tree.entry_bundle(258, 5, SIZE)
    assert bundle is not None
    assert decode_entries(bundle) == [entry(i) for i in range(258 * 256, 258 * 256 + 5)]
    assert tree.tile(0, 258, 6, SIZE) is None  # more than the log holds
    assert tree.entry_bundle(259, 1, SIZE) is None


def test_a_gap_in_the_entries_is_refused(tmp_path: Path) -> None:
    engine = create_engine(f"duckdb:///{tmp_path / 'gap.duckdb'}")
    migrate(engine)
    with engine.begin() as conn:
        duckdb_append(conn, tables.log_entries,
                      [(i, entry(i), None, datetime(2026, 1, 1)) for i in range(10) if i != 4])
    tree = LogTree(engine)
    assert tree.size() == 10
    with pytest.raises(LogGap):
        tree.tile(0, 0, 10, 10)
    with pytest.raises(LogGap):
        tree.root(10)


def test_the_log_names_every_signed_submission_stored_before_it(tmp_path: Path) -> None:
    store = Store(f"duckdb:///{tmp_path / 'old.duckdb'}")
    store.open()
    try:
        start = datetime.now(UTC)
        bodies = [valid_body(seed=60 + i) for i in range(3)]
        for i, body in enumerate(reversed(bodies)):  # stored newest first
            checked = check_submission(body, now=start, max_age=timedelta(days=30),
                                       max_future_skew=timedelta(minutes=5))
            submit_checked(store, checked, start - timedelta(minutes=i)).result(30)
        with store.engine.begin() as conn:
            conn.execute(delete(tables.log_entries))  # as a store from before the log
            create_log(conn)
            rows = conn.execute(select(tables.log_entries.c.idx, tables.log_entries.c.entry)
                                .order_by(tables.log_entries.c.idx)).all()
    finally:
        store.close()
    assert [r[0] for r in rows] == [0, 1, 2]
    assert [bytes(r[1]) for r in rows] == [b"\x01" + hashlib.sha256(b).digest()
                                           for b in bodies]  # oldest receipt first
