"""How long the store's upgrade to version 4 (evidence levels) takes on a filled store.

Builds a DuckDB store of N v2 ``ollama-draft`` submissions with per-trial counters on both
draft configs (rows from ingestion's ``submission_rows``, appended in bulk), turns it back
into store version 3 (drops summaries.evidence/evidence_reason, stamps 3), and times the
real ``migrate``. Prints submissions, configs with counters and seconds.

    .venv/bin/python bench/migrate_evidence.py 20000
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import delete, insert, text

from specschema.examples import example_submission
from specschema.summary import summarize
from specserver.ingest.checks import Checked
from specserver.ingest.rows import submission_rows
from specserver.store import tables
from specserver.store.database import make_engine
from specserver.store.migrations import LATEST, migrate
from specserver.store.tables import RowSet
from specserver.store.writer import duckdb_append


def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"duckdb:///{Path(folder) / 'store.duckdb'}")
        migrate(engine)
        rows = RowSet()
        now = datetime.now(UTC)
        for seed in range(count):
            sub = example_submission("ollama-draft", seed=seed, engine_version="0.34.1",
                                     target="gemma4:mtp", counters_seen=True,
                                     schema_version=2, runtime="ggml", created_at=now)
            checked = Checked(sub, str(sub.submission_id), "k" * 64, b"{}", "ab" * 32,
                              summarize(sub))
            rows.extend(submission_rows(checked, now))
        with engine.begin() as conn:
            for table in tables.INGEST_TABLES:
                duckdb_append(conn, table, rows.rows[table.name])
        with engine.begin() as conn:
            for column in ("evidence", "evidence_reason"):
                conn.execute(text(f"ALTER TABLE summaries DROP COLUMN {column}"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(version=3, applied_at=now))
        started = time.perf_counter()
        assert migrate(engine) == LATEST
        took = time.perf_counter() - started
        with engine.connect() as conn:
            claimed = conn.execute(text(
                "SELECT count(*) FROM summaries WHERE evidence <> 'none'")).scalar()
        engine.dispose()
        print(f"{count} submissions, {claimed} configs with counters: "  # noqa: T201
              f"upgrade to version {LATEST} in {took:.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
