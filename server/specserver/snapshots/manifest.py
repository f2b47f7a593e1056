"""A snapshot's manifest: what one Parquet file of the public data holds, signed with the
transparency log's key as a C2SP signed note, so that anyone holding the log's verifier
key can check the file and tie it to the log.

The note's text is one ``name value`` line each::

    specatlas snapshot v1
    origin <the log's origin>
    checkpoint <tree size> <base64 root>
    parquet <sha256 hex> <bytes>
    rows <row count>
    schema_version <store version>
    licence CC-BY-4.0 https://creativecommons.org/licenses/by/4.0/
    created <ISO 8601 UTC>
    query <the SQL that selected the rows, on one line>

``checkpoint`` is the log at the moment the rows were read (one database snapshot): every
signed submission in the file has its entry below that size, and the root lets an auditor
check that the log it reads today extends the one the snapshot saw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specschema.errors import NoteInvalid
from specschema.tlog import Checkpoint, Signer, Verifier, open_note, parse_checkpoint
from specserver.errors import SpecServerError
from specserver.licence import LICENCE_ID, LICENCE_URL

HEADER = "specatlas snapshot v1"
FIELDS = ("origin", "checkpoint", "parquet", "rows", "schema_version", "licence", "created",
          "query")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_COUNT = re.compile(r"0|[1-9]\d{0,18}")


class ManifestInvalid(SpecServerError):
    code = "manifest_invalid"


@dataclass(frozen=True)
class Manifest:
    origin: str
    checkpoint: Checkpoint  # the log when the rows were read (origin: the log's)
    parquet_sha256: str
    parquet_bytes: int
    rows: int
    schema_version: int
    created: str
    query: str
    licence: str = f"{LICENCE_ID} {LICENCE_URL}"

    def text(self) -> str:
        root = self.checkpoint.text().split("\n")[2]  # base64, as the checkpoint writes it
        query = " ".join(self.query.split())
        lines = [HEADER, f"origin {self.origin}",
                 f"checkpoint {self.checkpoint.size} {root}",
                 f"parquet {self.parquet_sha256} {self.parquet_bytes}", f"rows {self.rows}",
                 f"schema_version {self.schema_version}", f"licence {self.licence}",
                 f"created {self.created}", f"query {query}"]
        return "\n".join(lines) + "\n"


def sign_manifest(manifest: Manifest, signer: Signer) -> bytes:
    if manifest.origin != signer.name:
        raise ManifestInvalid(f"the log key is {signer.name!r}, the manifest's origin "
                              f"{manifest.origin!r}")
    return signer.sign(manifest.text()).encode("utf-8")


def _count(value: str, name: str) -> int:
    if not _COUNT.fullmatch(value):
        raise ManifestInvalid(f"the manifest's {name} is not a count: {value[:40]!r}")
    return int(value)


def parse_manifest(text: str) -> Manifest:
    lines = text.split("\n")
    if not lines or lines[0] != HEADER or lines[-1] != "":
        raise ManifestInvalid(f"a snapshot manifest begins {HEADER!r} and ends in a newline")
    values: dict[str, str] = {}
    for line in lines[1:-1]:
        name, _, value = line.partition(" ")
        if name not in FIELDS or name in values or not value:
            raise ManifestInvalid(f"not a manifest line: {line[:80]!r}")
        values[name] = value
    missing = [name for name in FIELDS if name not in values]
    if missing:
        raise ManifestInvalid(f"the manifest has no {', '.join(missing)}")
    size, _, root = values["checkpoint"].partition(" ")
    try:
        checkpoint = parse_checkpoint(f"{values['origin']}\n{size}\n{root}\n")
    except NoteInvalid as exc:
        raise ManifestInvalid(f"the manifest's checkpoint line: {exc}") from None
    digest, _, length = values["parquet"].partition(" ")
    if not _HEX64.fullmatch(digest):
        raise ManifestInvalid("the manifest's parquet sha256 is not 64 lowercase hex digits")
    return Manifest(origin=values["origin"], checkpoint=checkpoint, parquet_sha256=digest,
                    parquet_bytes=_count(length, "parquet size"),
                    rows=_count(values["rows"], "rows"),
                    schema_version=_count(values["schema_version"], "schema_version"),
                    created=values["created"], query=values["query"],
                    licence=values["licence"])


def open_manifest(note: bytes, verifier: Verifier) -> Manifest:
    """The manifest a signed note holds, once the log key's signature on it verifies and
    its origin is the key's (``ManifestInvalid`` or specschema's ``NoteInvalid``)."""
    manifest = parse_manifest(open_note(note, verifier))
    if manifest.origin != verifier.name:
        raise ManifestInvalid(f"the manifest is of {manifest.origin!r}, the key of "
                              f"{verifier.name!r}")
    return manifest
