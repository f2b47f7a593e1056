"""C2SP tlog-tiles: where a log's hashes and entries are served, and how a tree's nodes are
read back from its tiles.

A tile at level L holds up to 256 consecutive hashes of the tree's level 8·L: hash i of
tile N is MTH(D[(N·256 + i)·256**L : (N·256 + i + 1)·256**L]). A full tile holds 256
(8,192 bytes); the rightmost tile of a level in a tree of size s is partial, of width
floor(s / 256**L) mod 256, served at ``tile/<L>/<N>.p/<W>``. Indexes are written in
three-digit groups, all but the last prefixed with ``x`` (1234067: ``x001/x234/067``).
Entry bundles (``tile/entries/<N>[.p/<W>]``) hold the entries of the level-0 tile of the
same name, each prefixed by its length as a big-endian uint16.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from specschema.errors import TileInvalid
from specschema.tlog.merkle import HASH_SIZE, subtree_root

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
MAX_LEVEL = 63
MAX_ENTRY = 0xFFFF

_INDEX = re.compile(r"(?:x\d{3}/)*\d{3}")
_WIDTH = re.compile(r"[1-9]\d*")


@dataclass(frozen=True)
class TileRef:
    """A tile (``level`` 0-63) or, with ``level`` None, an entry bundle; ``width`` 256 when
    full."""

    level: int | None
    index: int
    width: int = TILE_WIDTH

    @property
    def path(self) -> str:
        level = "entries" if self.level is None else str(self.level)
        tail = "" if self.width == TILE_WIDTH else f".p/{self.width}"
        return f"tile/{level}/{encode_index(self.index)}{tail}"


def encode_index(index: int) -> str:
    if index < 0:
        raise TileInvalid(f"a tile index is never negative ({index})")
    groups = []
    while True:
        groups.append(f"{index % 1000:03d}")
        index //= 1000
        if index == 0:
            break
    groups.reverse()
    return "/".join([*(f"x{g}" for g in groups[:-1]), groups[-1]])


def parse_tile_path(path: str) -> TileRef:
    """``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]`` (with or without the leading
    ``tile/``), strictly as the spec writes them: no leading zeros, groups of three."""
    rest = path.removeprefix("tile/")
    level_text, _, rest = rest.partition("/")
    if level_text == "entries":
        level: int | None = None
    elif _WIDTH.fullmatch(level_text) or level_text == "0":
        level = int(level_text)
        if level > MAX_LEVEL:
            raise TileInvalid(f"tile level {level} is over {MAX_LEVEL}")
    else:
        raise TileInvalid(f"not a tile level: {level_text!r}")
    index_text, partial, width_text = rest.partition(".p/")
    if not _INDEX.fullmatch(index_text):
        raise TileInvalid(f"not a tile index: {index_text!r}")
    index = int(index_text.replace("x", "").replace("/", ""))
    if encode_index(index) != index_text:  # e.g. x000/123: not how 123 is written
        raise TileInvalid(f"not a tile index: {index_text!r}")
    width = TILE_WIDTH
    if partial:
        if not _WIDTH.fullmatch(width_text) or int(width_text) >= TILE_WIDTH:
            raise TileInvalid(f"not a partial tile width: {width_text!r}")
        width = int(width_text)
    return TileRef(level, index, width)


def tile_width(level: int, index: int, size: int) -> int:
    """How many hashes tile ``index`` at ``level`` holds in a tree of ``size`` leaves (0: it
    does not exist yet; the same for the entry bundle with ``level`` 0)."""
    count = size >> (TILE_HEIGHT * level)
    return max(0, min(TILE_WIDTH, count - index * TILE_WIDTH))


def encode_entries(entries: Iterable[bytes]) -> bytes:
    out = bytearray()
    for entry in entries:
        if len(entry) > MAX_ENTRY:
            raise TileInvalid(f"an entry of {len(entry)} bytes is over {MAX_ENTRY}")
        out += len(entry).to_bytes(2, "big") + entry
    return bytes(out)


def decode_entries(bundle: bytes) -> list[bytes]:
    entries, at = [], 0
    while at < len(bundle):
        if at + 2 > len(bundle):
            raise TileInvalid("an entry bundle ends inside a length")
        n = int.from_bytes(bundle[at:at + 2], "big")
        if at + 2 + n > len(bundle):
            raise TileInvalid("an entry bundle ends inside an entry")
        entries.append(bundle[at + 2:at + 2 + n])
        at += 2 + n
    return entries


def split_hashes(tile: bytes, width: int) -> list[bytes]:
    if len(tile) != width * HASH_SIZE:
        raise TileInvalid(f"a tile of width {width} is {width * HASH_SIZE} bytes, "
                          f"not {len(tile)}")
    return [tile[i:i + HASH_SIZE] for i in range(0, len(tile), HASH_SIZE)]


TileFetcher = Callable[[TileRef], bytes]


class TileNodeReader:
    """A ``merkle.NodeReader`` over the tiles of a tree of ``size`` leaves: each tile is
    fetched once (by ``fetch``, e.g. an HTTP GET of its path) and the levels between tile
    levels are recomputed from it."""

    def __init__(self, size: int, fetch: TileFetcher) -> None:
        self.size = size
        self.fetch = fetch
        self.fetched: dict[TileRef, list[bytes]] = {}

    def hashes(self, ref: TileRef) -> list[bytes]:
        if ref not in self.fetched:
            self.fetched[ref] = split_hashes(self.fetch(ref), ref.width)
        return self.fetched[ref]

    def node(self, level: int, index: int) -> bytes:
        tile_level, sub = divmod(level, TILE_HEIGHT)
        first = index << sub
        tile, offset = divmod(first, TILE_WIDTH)
        width = tile_width(tile_level, tile, self.size)
        if offset + (1 << sub) > width:
            raise TileInvalid(f"node ({level}, {index}) is not complete in a tree of "
                              f"{self.size}")
        hashes = self.hashes(TileRef(tile_level, tile, width))
        return subtree_root(hashes[offset:offset + (1 << sub)])
