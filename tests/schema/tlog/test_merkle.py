"""specschema.tlog.merkle against the published transparency-dev/merkle vectors and against
an independent reference written here from the text of RFC 6962 §2.1 (recursive MTH, PATH
and PROOF, and verifiers that rebuild the roots by the same recursion), not from the
project's code, which verifies with RFC 9162's iterative algorithms."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from specschema.errors import ProofInvalid
from specschema.tlog import (
    EMPTY_ROOT,
    MemoryTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).parents[2] / "fixtures" / "tlog" / "transparency-dev-merkle"

# RFC 6962's example leaves and the roots of the trees over the first n of them, from
# transparency-dev/merkle testonly/constants.go (LeafInputs, RootHashes), commit 417fb0c.
LEAVES = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657",
    "606162636465666768696a6b6c6d6e6f")]
ROOTS = [bytes.fromhex(h) for h in (
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")]


def _probes(kind: str) -> list[tuple[str, dict[str, object]]]:
    files = sorted((VECTORS / kind).rglob("*.json"))
    assert len(files) > 90  # the copy is whole
    return [(str(f.relative_to(VECTORS)), json.loads(f.read_text())) for f in files]


def _b64(value: object) -> bytes:
    return base64.b64decode(str(value)) if value is not None else b""


def _hashes(value: object) -> list[bytes]:
    return [_b64(v) for v in (value or [])]  # type: ignore[attr-defined]


# --- the reference, from RFC 6962 §2.1 ---------------------------------------------------


def ref_split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = ref_split(len(d))
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = ref_split(len(d))
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = ref_split(n)
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_root_from_path(m: int, n: int, leaf: bytes, path: list[bytes]) -> bytes:
    """Undo PATH's recursion: the last element is the sibling at the top."""
    if n == 1:
        assert not path, "path too long"
        return leaf
    assert path, "path too short"
    k = ref_split(n)
    if m < k:
        return node_hash(ref_root_from_path(m, k, leaf, path[:-1]), path[-1])
    return node_hash(path[-1], ref_root_from_path(m - k, n - k, leaf, path[:-1]))


def ref_roots_from_proof(m: int, n: int, b: bool, old_root: bytes,
                         proof: list[bytes]) -> tuple[bytes, bytes]:
    """Undo SUBPROOF's recursion: (the old tree's root, the new tree's root)."""
    if m == n:
        if b:
            assert not proof, "proof too long"
            return old_root, old_root
        assert len(proof) == 1, "proof length"
        return proof[0], proof[0]
    assert proof, "proof too short"
    k = ref_split(n)
    if m <= k:
        old, new = ref_roots_from_proof(m, k, b, old_root, proof[:-1])
        return old, node_hash(new, proof[-1])
    old, new = ref_roots_from_proof(m - k, n - k, False, old_root, proof[:-1])
    return node_hash(proof[-1], old), node_hash(proof[-1], new)


def ref_accepts_consistency(m: int, n: int, old: bytes, new: bytes, proof: list[bytes]) -> bool:
    try:
        got_old, got_new = ref_roots_from_proof(m, n, True, old, proof)
    except AssertionError:
        return False
    return (got_old, got_new) == (old, new)


# --- the published vectors ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "probe"), _probes("inclusion"), ids=lambda v: str(v)[:60])
def test_inclusion_vectors(name: str, probe: dict[str, object]) -> None:
    args = (int(probe["leafIdx"]), int(probe["treeSize"]),  # type: ignore[call-overload]
            _b64(probe["leafHash"]), _hashes(probe["proof"]), _b64(probe["root"]))
    if probe["wantErr"]:
        with pytest.raises(ProofInvalid):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)
        index, size = args[0], args[1]
        tree = MemoryTree([leaf_hash(x) for x in LEAVES[:size]])
        assert inclusion_proof(index, size, tree.node) == args[3]


@pytest.mark.parametrize(("name", "probe"), _probes("consistency"), ids=lambda v: str(v)[:60])
def test_consistency_vectors(name: str, probe: dict[str, object]) -> None:
    old, new = int(probe["size1"]), int(probe["size2"])  # type: ignore[call-overload]
    args = (old, new, _b64(probe["root1"]), _b64(probe["root2"]), _hashes(probe["proof"]))
    if probe["wantErr"]:
        with pytest.raises(ProofInvalid):
            verify_consistency(*args)
    else:
        verify_consistency(*args)
        if new <= len(LEAVES) and args[2] == ROOTS[old]:
            tree = MemoryTree([leaf_hash(x) for x in LEAVES[:new]])
            assert consistency_proof(old, new, tree.node) == args[4]


def test_roots_of_the_rfc_example_tree() -> None:
    tree = MemoryTree()
    assert tree.root() == EMPTY_ROOT == ROOTS[0]
    for n, entry in enumerate(LEAVES, start=1):
        tree.append(leaf_hash(entry))
        assert tree.root() == ROOTS[n] == ref_mth(LEAVES[:n])
        assert [tree.root(m) for m in range(n + 1)] == ROOTS[:n + 1]


# --- against the reference, every small tree ------------------------------------------------

ENTRIES = [f"entry {i}".encode() for i in range(70)]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 9, 16, 17, 31, 33, 64, 70])
def test_proofs_equal_the_rfc_definitions_and_both_verifiers_agree(size: int) -> None:
    d = ENTRIES[:size]
    tree = MemoryTree([leaf_hash(x) for x in d])
    root = tree.root()
    assert root == ref_mth(d)
    for m in range(size):
        path = inclusion_proof(m, size, tree.node)
        assert path == ref_path(m, d)
        verify_inclusion(m, size, leaf_hash(d[m]), path, root)
        assert ref_root_from_path(m, size, leaf_hash(d[m]), path) == root
    for m in range(1, size + 1):
        proof = consistency_proof(m, size, tree.node)
        assert proof == ref_subproof(m, d, True)
        verify_consistency(m, size, tree.root(m), root, proof)
        assert ref_accepts_consistency(m, size, tree.root(m), root, proof)


@pytest.mark.parametrize("size", [3, 6, 13, 32])
def test_every_altered_proof_is_refused_by_both(size: int) -> None:
    d = ENTRIES[:size]
    tree = MemoryTree([leaf_hash(x) for x in d])
    root = tree.root()
    for m in range(size):
        path = inclusion_proof(m, size, tree.node)
        for i in range(len(path)):
            bad = [*path[:i], bytes([path[i][0] ^ 1]) + path[i][1:], *path[i + 1:]]
            with pytest.raises(ProofInvalid):
                verify_inclusion(m, size, leaf_hash(d[m]), bad, root)
            assert ref_root_from_path(m, size, leaf_hash(d[m]), bad) != root
        for wrong_index in {m - 1, m + 1} & set(range(size)):
            with pytest.raises(ProofInvalid):
                verify_inclusion(wrong_index, size, leaf_hash(d[m]), path, root)
    for m in range(1, size):
        proof = consistency_proof(m, size, tree.node)
        for i in range(len(proof)):
            bad = [*proof[:i], bytes([proof[i][0] ^ 1]) + proof[i][1:], *proof[i + 1:]]
            with pytest.raises(ProofInvalid):
                verify_consistency(m, size, tree.root(m), root, bad)
            assert not ref_accepts_consistency(m, size, tree.root(m), root, bad)
        with pytest.raises(ProofInvalid):  # a rewritten history: an old leaf changed
            forged = MemoryTree([leaf_hash(b"forged"), *(leaf_hash(x) for x in d[1:])])
            verify_consistency(m, size, tree.root(m), forged.root(), proof)


def test_known_hashes_of_rfc_6962() -> None:
    """transparency-dev/merkle rfc6962/rfc6962_test.go's values."""
    assert leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
    assert leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56")
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb")
