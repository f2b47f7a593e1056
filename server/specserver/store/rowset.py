"""What ingestion hands the store: plain rows per ingest table, without SQLAlchemy.

A check worker process builds a submission's rows (``specserver.ingest.rows``) and sends
them back pickled; importing this module (not ``store.tables``, which defines the tables
with SQLAlchemy) keeps that process from loading SQLAlchemy and DuckDB.
``tests/architecture/test_imports.py`` holds the worker's imports to that, and
``store.tables`` holds ``INGEST_TABLE_NAMES`` to its ``INGEST_TABLES``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

# The tables one submission writes, in insertion order (``store.tables.INGEST_TABLES``).
INGEST_TABLE_NAMES = ("submissions", "envelopes", "fingerprints", "configs", "trials",
                      "summaries", "domain_results")
# How a quarantined submission's ``hidden_reason`` begins (ingest.plausibility writes it,
# store.moderation lists and rejects by it).
QUARANTINE_PREFIX = "quarantined: "

Row = tuple[Any, ...]


def id_digest(submission_id: str) -> int:
    """A submission id's digest: the first 8 bytes of its SHA-256, a signed big-endian
    64-bit integer (store version 12; ``migrations`` computes the same in SQL). Stored
    beside the id in ``submissions`` and ``summaries``, it lets the board's joins compare
    an integer before the 36-character id (``board.sql``). A client chooses its
    submission's id: SHA-256 keeps it from choosing many ids of one digest, which would
    chain in a join's hash table. The joins compare the ids too, so two submissions that
    share a digest by chance are still two."""
    return int.from_bytes(hashlib.sha256(submission_id.encode()).digest()[:8], "big",
                          signed=True)


@dataclass
class RowSet:
    """One or more submissions' rows per ingest table name, each a tuple in the table's
    column order (built by ``specserver.ingest.rows``)."""

    rows: dict[str, list[Row]] = field(
        default_factory=lambda: {name: [] for name in INGEST_TABLE_NAMES}
    )

    def extend(self, other: RowSet) -> None:
        for name, rows in other.rows.items():
            self.rows[name].extend(rows)

    def count(self) -> int:
        return sum(len(r) for r in self.rows.values())
