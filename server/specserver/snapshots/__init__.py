"""snapshots: signed Parquet snapshots of the public data and their manifests."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use.

if TYPE_CHECKING:
    from specserver.snapshots.manifest import (
        Manifest,
        ManifestInvalid,
        open_manifest,
        parse_manifest,
        sign_manifest,
    )
    from specserver.snapshots.writing import (
        Snapshot,
        SnapshotTimer,
        due_in,
        file_sha256,
        newest,
        write_snapshot,
    )

_LAZY: dict[str, str] = {
    "Manifest": "specserver.snapshots.manifest",
    "ManifestInvalid": "specserver.snapshots.manifest",
    "Snapshot": "specserver.snapshots.writing",
    "SnapshotTimer": "specserver.snapshots.writing",
    "due_in": "specserver.snapshots.writing",
    "file_sha256": "specserver.snapshots.writing",
    "newest": "specserver.snapshots.writing",
    "open_manifest": "specserver.snapshots.manifest",
    "parse_manifest": "specserver.snapshots.manifest",
    "sign_manifest": "specserver.snapshots.manifest",
    "write_snapshot": "specserver.snapshots.writing",
}

__all__ = [
    "Manifest",
    "ManifestInvalid",
    "Snapshot",
    "SnapshotTimer",
    "due_in",
    "file_sha256",
    "newest",
    "open_manifest",
    "parse_manifest",
    "sign_manifest",
    "write_snapshot",
]

__getattr__ = lazy_names(__name__, _LAZY)
