"""specschema.tlog.tiles and .note: the C2SP specs' own examples (tlog-tiles.md,
signed-note.md at C2SP/C2SP commit 5ba5ee8), and a tree read back from its tiles."""

from __future__ import annotations

import base64

import nacl.signing
import pytest

from specschema.errors import NoteInvalid, TileInvalid
from specschema.tlog import (
    TILE_WIDTH,
    Checkpoint,
    MemoryTree,
    Signer,
    TileNodeReader,
    TileRef,
    consistency_proof,
    decode_entries,
    encode_entries,
    encode_index,
    inclusion_proof,
    key_id,
    leaf_hash,
    open_checkpoint,
    open_note,
    parse_tile_path,
    parse_vkey,
    range_hash,
    sign_checkpoint,
    tile_width,
    verify_consistency,
    verify_inclusion,
)

# signed-note.md, "Example": this verifier key verifies this note.
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = ("This is an example message.\n\n\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv"
             "1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n").encode()


def test_the_spec_example_note_verifies_and_a_changed_one_does_not() -> None:
    verifier = parse_vkey(SPEC_VKEY)
    assert verifier.vkey == SPEC_VKEY
    assert key_id(verifier.name, verifier.public_key).hex() == "530d903a"
    assert open_note(SPEC_NOTE, verifier) == "This is an example message.\n"
    with pytest.raises(NoteInvalid, match="does not verify"):
        open_note(SPEC_NOTE.replace(b"example message", b"exemple message"), verifier)


def test_unknown_keys_are_ignored_but_one_known_signature_is_needed() -> None:
    verifier = parse_vkey(SPEC_VKEY)
    other = Signer("example.com/foo", nacl.signing.SigningKey(b"\x07" * 32))  # same name
    text = "This is an example message.\n"
    theirs = other.sign(text).encode()
    with pytest.raises(NoteInvalid, match="not signed by"):
        open_note(theirs, verifier)
    both = SPEC_NOTE + theirs.split(b"\n\n", 1)[1]
    assert open_note(both, verifier) == text
    with pytest.raises(NoteInvalid):
        parse_vkey(SPEC_VKEY.replace("+530d903a+", "+530d903b+"))


def test_a_checkpoint_signs_and_opens_for_its_origin_only() -> None:
    signer = Signer("log.example/atlas", nacl.signing.SigningKey(b"\x01" * 32))
    checkpoint = Checkpoint("log.example/atlas", 20852163, b"\xaa" * 32)
    note = sign_checkpoint(checkpoint, signer)
    assert note.startswith("log.example/atlas\n20852163\n" + base64.b64encode(b"\xaa" * 32)
                           .decode() + "\n\n\u2014 log.example/atlas ")
    verifier = parse_vkey(signer.verifier.vkey)
    assert open_checkpoint(note.encode(), verifier, "log.example/atlas") == checkpoint
    with pytest.raises(NoteInvalid, match="not 'log.example/other'"):
        open_checkpoint(note.encode(), verifier, "log.example/other")
    for bad in (note.replace("20852163", "020852163"), note.replace("20852163", "2085216a")):
        with pytest.raises(NoteInvalid):
            open_checkpoint(bad.encode(), verifier)


def test_tile_paths_as_the_spec_writes_them() -> None:
    assert encode_index(1234067) == "x001/x234/067"
    assert encode_index(5) == "005"
    assert TileRef(0, 1234067).path == "tile/0/x001/x234/067"
    assert TileRef(2, 3, 17).path == "tile/2/003.p/17"
    assert TileRef(None, 1000, 1).path == "tile/entries/x001/000.p/1"
    for ref in (TileRef(0, 1234067), TileRef(2, 3, 17), TileRef(None, 1000, 1)):
        assert parse_tile_path(ref.path) == ref
    for bad in ("tile/01/000", "tile/64/000", "tile/0/x000/123", "tile/0/1234", "tile/0/12",
                "tile/0/000.p/256", "tile/0/000.p/0", "tile/0/000.p/07", "tile/a/000"):
        with pytest.raises(TileInvalid):
            parse_tile_path(bad)


def test_tile_widths_of_the_specs_example_tree_of_70000() -> None:
    size = 70_000
    level0 = [tile_width(0, n, size) for n in range(275)]
    assert level0.count(TILE_WIDTH) == 273 and level0[273] == 112 and level0[274] == 0
    assert [tile_width(1, n, size) for n in range(3)] == [256, 17, 0]
    assert [tile_width(2, n, size) for n in range(2)] == [1, 0]
    assert tile_width(1, 0, 256) == 1  # a tree of 256: one full tile and a level-1 of 1


def test_entry_bundles_round_trip_and_truncations_are_refused() -> None:
    entries = [b"", b"\x01" * 33, b"x" * 300]
    bundle = encode_entries(entries)
    assert bundle[:2] == b"\x00\x00" and bundle[2:4] == b"\x00\x21"
    assert decode_entries(bundle) == entries
    for cut in (1, 3, len(bundle) - 1):
        with pytest.raises(TileInvalid):
            decode_entries(bundle[:cut])


def _tiles_of(tree: MemoryTree) -> dict[TileRef, bytes]:
    """Every tile of the tree, built from the tree's nodes as a server serves them."""
    tiles = {}
    level = 0
    while (TILE_WIDTH ** level) <= tree.size:
        n = 0
        while (width := tile_width(level, n, tree.size)) > 0:
            tiles[TileRef(level, n, width)] = b"".join(
                tree.node(8 * level, n * TILE_WIDTH + i) for i in range(width))
            n += 1
        level += 1
    return tiles


def test_proofs_from_tiles_equal_proofs_from_the_whole_tree() -> None:
    size = TILE_WIDTH * TILE_WIDTH + 3 * TILE_WIDTH + 7  # a full level-1 tile and partials
    tree = MemoryTree([leaf_hash(i.to_bytes(4, "big")) for i in range(size)])
    tiles = _tiles_of(tree)
    fetched: list[TileRef] = []

    def fetch(ref: TileRef) -> bytes:
        fetched.append(ref)
        return tiles[ref]

    reader = TileNodeReader(size, fetch)
    root = tree.root()
    assert range_hash(0, size, reader.node) == root
    for index in (0, 255, 256, 65_535, 65_536, size - 1):
        proof = inclusion_proof(index, size, reader.node)
        assert proof == inclusion_proof(index, size, tree.node)
        verify_inclusion(index, size, leaf_hash(index.to_bytes(4, "big")), proof, root)
    for old in (1, 300, 65_536, size - 1):
        proof = consistency_proof(old, size, reader.node)
        verify_consistency(old, size, tree.root(old), root, proof)
    assert len(fetched) == len(set(fetched))  # each tile fetched once
    with pytest.raises(TileInvalid):
        reader.node(0, size)  # beyond the tree


def test_a_verifier_key_whose_base64_holds_a_plus_round_trips() -> None:
    signers = (Signer("log.example/atlas", nacl.signing.SigningKey(bytes([i]) * 32))
               for i in range(256))
    signer = next(s for s in signers if "+" in s.verifier.vkey.split("+", 2)[2])
    assert parse_vkey(signer.verifier.vkey) == signer.verifier
