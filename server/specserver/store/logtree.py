"""The transparency log as C2SP tiles, read from the store's entries (``store/logentries.py``).

A level-0 tile holds the leaf hashes of 256 consecutive entries; hash i of a tile at level
L >= 1 is the root of full tile 256·N + i of level L - 1 (``specschema.tlog.tiles``). A
full tile never changes, so the root of every full tile computed once is remembered (32
bytes a tile: about 125 KB for a million entries), and the bytes of recent full tiles are
kept (LRU). A tile of level L then costs at most one read of the entries it spans, once;
a partial tile (the right edge) is recomputed from the remembered roots and at most 255
entries. Entries are immutable once committed: a tile is served only when the tree holds
all the entries it spans.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from sqlalchemy import Engine, select

from specschema.tlog import (
    TILE_WIDTH,
    TileNodeReader,
    TileRef,
    encode_entries,
    leaf_hash,
    range_hash,
    subtree_root,
    tile_width,
)
from specserver.store import tables
from specserver.store.logentries import next_index

KEPT_TILES = 256  # full tiles' bytes kept (8 KB each)


class LogGap(RuntimeError):
    """An entry the log's size promises is not in the table: the store was edited."""


class LogTree:
    def __init__(self, engine: Engine, kept_tiles: int = KEPT_TILES) -> None:
        self.engine = engine
        self.kept_tiles = kept_tiles
        self._roots: dict[tuple[int, int], bytes] = {}  # full tile -> its subtree's root
        self._tiles: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def size(self) -> int:
        with self.engine.connect() as conn:
            return next_index(conn)

    def entries(self, start: int, end: int) -> list[bytes]:
        log = tables.log_entries
        with self.engine.connect() as conn:
            rows = conn.execute(select(log.c.idx, log.c.entry)
                                .where(log.c.idx >= start, log.c.idx < end)
                                .order_by(log.c.idx)).all()
        if [int(r[0]) for r in rows] != list(range(start, end)):
            raise LogGap(f"the log's entries {start}..{end - 1} are not all stored")
        return [bytes(r[1]) for r in rows]

    def entry_bundle(self, index: int, width: int, size: int) -> bytes | None:
        """The entry bundle (``tile/entries/<index>``, ``width`` entries), or None when the
        tree of ``size`` does not hold it."""
        if width > tile_width(0, index, size):
            return None
        return encode_entries(self.entries(index * TILE_WIDTH, index * TILE_WIDTH + width))

    def tile(self, level: int, index: int, width: int, size: int) -> bytes | None:
        """Tile ``index`` of ``level`` cut to ``width`` hashes, or None when the tree of
        ``size`` does not hold that many."""
        if width > tile_width(level, index, size):
            return None
        with self._lock:
            if width == TILE_WIDTH:
                return self._full_tile(level, index)
            return b"".join(self._hashes(level, index, width))

    def root(self, size: int) -> bytes:
        """The tree's root at ``size`` (which the log must hold), from its tiles."""
        def fetch(ref: TileRef) -> bytes:
            assert ref.level is not None
            found = self.tile(ref.level, ref.index, ref.width, size)
            if found is None:
                raise LogGap(f"tile {ref.path} is not in a tree of {size}")
            return found

        return range_hash(0, size, TileNodeReader(size, fetch).node)

    # the caller holds the lock -------------------------------------------------------------

    def _full_tile(self, level: int, index: int) -> bytes:
        key = (level, index)
        found = self._tiles.get(key)
        if found is None:
            hashes = self._hashes(level, index, TILE_WIDTH)
            found = b"".join(hashes)
            self._roots.setdefault(key, subtree_root(hashes))
            self._tiles[key] = found
            while len(self._tiles) > self.kept_tiles:
                self._tiles.popitem(last=False)
        else:
            self._tiles.move_to_end(key)
        return found

    def _hashes(self, level: int, index: int, width: int) -> list[bytes]:
        first = index * TILE_WIDTH
        if level == 0:
            return [leaf_hash(e) for e in self.entries(first, first + width)]
        self._remember_roots(level - 1, first, width)
        return [self._roots[(level - 1, first + i)] for i in range(width)]

    def _remember_roots(self, level: int, first: int, count: int) -> None:
        """The roots of full tiles ``first``.. ``first + count - 1`` of ``level``, reading
        what is missing in one pass (at level 0 one query per 256 tiles' entries)."""
        missing = [n for n in range(first, first + count) if (level, n) not in self._roots]
        if not missing:
            return
        low, high = missing[0], missing[-1] + 1
        if level == 0:
            for chunk in range(low, high, TILE_WIDTH):
                end = min(high, chunk + TILE_WIDTH)
                entries = self.entries(chunk * TILE_WIDTH, end * TILE_WIDTH)
                for n in range(chunk, end):
                    part = entries[(n - chunk) * TILE_WIDTH:(n - chunk + 1) * TILE_WIDTH]
                    self._roots.setdefault((0, n), subtree_root([leaf_hash(e) for e in part]))
            return
        self._remember_roots(level - 1, low * TILE_WIDTH, (high - low) * TILE_WIDTH)
        for n in range(low, high):
            below = [self._roots[(level - 1, n * TILE_WIDTH + i)] for i in range(TILE_WIDTH)]
            self._roots.setdefault((level, n), subtree_root(below))
