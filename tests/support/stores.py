"""Store helpers for tests: what the ingest path does in one call."""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime

from specserver.ingest.checks import Checked
from specserver.ingest.rows import submission_rows
from specserver.store.database import Store
from specserver.store.writes import WriteOutcome


def submit_checked(store: Store, checked: Checked, received_at: datetime) -> Future[WriteOutcome]:
    """Build a checked submission's rows and hand them to the store's writer."""
    return store.enqueue(checked.submission_id, checked.body_sha256, received_at,
                         submission_rows(checked, received_at))
