"""RFC 6962 / RFC 9162 Merkle trees: hashing, proofs made from a tree's nodes, and their
verification.

A leaf's hash is SHA-256(0x00 || entry), an interior node's SHA-256(0x01 || left || right);
a tree over n leaves splits at the largest power of two below n (RFC 9162 §2.1.1). Proofs
are made (``inclusion_proof``, ``consistency_proof``) by the RFC's recursive definitions
(§2.1.3.1 PATH, §2.1.4.1 SUBPROOF) over a ``NodeReader``: the hash of any complete subtree,
named by its level (0: a leaf) and its index at that level. A server reads those from its
leaves, a client from tiles (``tlog.tiles``), a test from a list (``MemoryTree``). They are
verified (``verify_inclusion``, ``verify_consistency``) by the RFC's iterative algorithms
(§2.1.3.2, §2.1.4.2), which need only the proof.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from specschema.errors import ProofInvalid

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

NodeReader = Callable[[int, int], bytes]
"""(level, index) -> the hash of the complete subtree over leaves
[index * 2**level, (index + 1) * 2**level)."""


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def subtree_root(hashes: Sequence[bytes]) -> bytes:
    """MTH over ``hashes`` taken as the leaves' hashes (or as complete subtrees' roots of
    one level, as a tile's are): the tree over them, by the RFC's split."""
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]
    k = _split(n)
    return node_hash(subtree_root(hashes[:k]), subtree_root(hashes[k:]))


def range_hash(start: int, end: int, read: NodeReader) -> bytes:
    """MTH(D[start:end]) for a range the RFC's recursion produces (``start`` a multiple of
    the largest power of two not above ``end - start``): complete subtrees from ``read``,
    the incomplete right edge hashed together."""
    n = end - start
    if n <= 0:
        return EMPTY_ROOT
    if n & (n - 1) == 0:
        level = n.bit_length() - 1
        return read(level, start >> level)
    k = _split(n)
    return node_hash(range_hash(start, start + k, read), range_hash(start + k, end, read))


def inclusion_proof(index: int, size: int, read: NodeReader) -> list[bytes]:
    """PATH(index, D[0:size]): the audit path, nearest the leaf first."""
    if not 0 <= index < size:
        raise ProofInvalid(f"leaf {index} is not in a tree of {size}")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(range_hash(start + k, end, read))
            end = start + k
        else:
            path.append(range_hash(start, start + k, read))
            start += k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, read: NodeReader) -> list[bytes]:
    """PROOF(old_size, D[0:new_size]) for 0 < old_size <= new_size (empty when equal)."""
    if not 0 < old_size <= new_size:
        raise ProofInvalid(f"no consistency proof from {old_size} to {new_size}")
    proof: list[bytes] = []
    start, end, complete = 0, new_size, True
    while old_size != end:
        k = _split(end - start)
        if old_size - start <= k:
            proof.append(range_hash(start + k, end, read))
            end = start + k
        else:
            proof.append(range_hash(start, start + k, read))
            start += k
            complete = False
    if not complete:
        proof.append(range_hash(start, end, read))
    proof.reverse()
    return proof


def _check_hashes(*hashes: bytes) -> None:
    if any(len(h) != HASH_SIZE for h in hashes):
        raise ProofInvalid(f"a hash is not {HASH_SIZE} bytes")


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2: the root a valid ``proof`` of leaf hash ``leaf`` leads to."""
    if not 0 <= index < size:
        raise ProofInvalid(f"leaf {index} is not in a tree of {size}")
    _check_hashes(leaf, *proof)
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofInvalid("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofInvalid("the inclusion proof is too short")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes],
                     root: bytes) -> None:
    """Raise ``ProofInvalid`` unless ``proof`` shows leaf hash ``leaf`` at ``index`` in the
    tree of ``size`` leaves whose root is ``root``."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofInvalid(f"leaf {index} is not in the tree of {size} with this root")


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> None:
    """RFC 9162 §2.1.4.2: raise ``ProofInvalid`` unless the tree of ``old_size`` with
    ``old_root`` is a prefix of the tree of ``new_size`` with ``new_root``. Equal sizes
    need an empty proof and equal roots; an empty old tree proves nothing and is refused."""
    if old_size <= 0 or new_size < old_size:
        raise ProofInvalid(f"no consistency proof from {old_size} to {new_size}")
    if old_size == new_size:
        if proof or old_root != new_root:
            raise ProofInvalid(f"two different trees of size {old_size}")
        return
    if not proof:
        raise ProofInvalid("the consistency proof is empty")
    _check_hashes(old_root, *proof)
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofInvalid("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ProofInvalid(f"the tree of {old_size} is not a prefix of the tree of "
                           f"{new_size} with these roots")


class MemoryTree:
    """A tree held as its leaves' hashes, every level kept: a ``NodeReader`` for tests,
    auditors and small logs."""

    def __init__(self, leaf_hashes: Sequence[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [[]]
        for h in leaf_hashes:
            self.append(h)

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def append(self, leaf: bytes) -> None:
        self.levels[0].append(leaf)
        level = 0
        while len(self.levels[level]) % 2 == 0:
            row = self.levels[level]
            if level + 1 == len(self.levels):
                self.levels.append([])
            self.levels[level + 1].append(node_hash(row[-2], row[-1]))
            level += 1

    def node(self, level: int, index: int) -> bytes:
        return self.levels[level][index]

    def root(self, size: int | None = None) -> bytes:
        return range_hash(0, self.size if size is None else size, self.node)
