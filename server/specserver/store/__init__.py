"""store."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specserver.store.backend import DUCKDB, POSTGRESQL, Backend, backend_of
    from specserver.store.database import Store, display_url
    from specserver.store.dimensions import (
        DIMENSIONS,
        FILTER_NAMES,
        VERDICTS,
        Dimension,
        Filter,
        Filters,
        FilterValue,
        by_domain,
        draft_clauses,
        draft_rows,
        field_column,
        submission_clauses,
        uses_domain,
    )
    from specserver.store.domainrows import UNSPECIFIED, domain_rows
    from specserver.store.exportformat import DEFAULT_FORMAT, FORMATS
    from specserver.store.logentries import LogReceipt, next_index
    from specserver.store.logindex import index_of
    from specserver.store.logtree import LogGap, LogTree
    from specserver.store.migrations import current_version
    from specserver.store.outage import STORE_DOWN_RETRY_AFTER_S, is_store_down, store_down_errors
    from specserver.store.positions import (
        positions_of,
        positions_text,
        stored_profile,
        stored_totals,
    )
    from specserver.store.queries import OS_NAMES, moderation_version, visible_clause
    from specserver.store.redaction import redact_view
    from specserver.store.rowset import QUARANTINE_PREFIX, Row, RowSet, id_digest
    from specserver.store.storedsubmission import stored_submission

_LAZY: dict[str, str] = {
    "Backend": "specserver.store.backend",
    "DUCKDB": "specserver.store.backend",
    "POSTGRESQL": "specserver.store.backend",
    "backend_of": "specserver.store.backend",
    "DEFAULT_FORMAT": "specserver.store.exportformat",
    "DIMENSIONS": "specserver.store.dimensions",
    "Dimension": "specserver.store.dimensions",
    "FILTER_NAMES": "specserver.store.dimensions",
    "FORMATS": "specserver.store.exportformat",
    "Filter": "specserver.store.dimensions",
    "FilterValue": "specserver.store.dimensions",
    "Filters": "specserver.store.dimensions",
    "OS_NAMES": "specserver.store.queries",
    "QUARANTINE_PREFIX": "specserver.store.rowset",
    "Row": "specserver.store.rowset",
    "LogGap": "specserver.store.logtree",
    "LogReceipt": "specserver.store.logentries",
    "LogTree": "specserver.store.logtree",
    "RowSet": "specserver.store.rowset",
    "STORE_DOWN_RETRY_AFTER_S": "specserver.store.outage",
    "Store": "specserver.store.database",
    "UNSPECIFIED": "specserver.store.domainrows",
    "VERDICTS": "specserver.store.dimensions",
    "current_version": "specserver.store.migrations",
    "by_domain": "specserver.store.dimensions",
    "display_url": "specserver.store.database",
    "domain_rows": "specserver.store.domainrows",
    "draft_clauses": "specserver.store.dimensions",
    "draft_rows": "specserver.store.dimensions",
    "field_column": "specserver.store.dimensions",
    "id_digest": "specserver.store.rowset",
    "index_of": "specserver.store.logindex",
    "is_store_down": "specserver.store.outage",
    "moderation_version": "specserver.store.queries",
    "next_index": "specserver.store.logentries",
    "positions_of": "specserver.store.positions",
    "positions_text": "specserver.store.positions",
    "redact_view": "specserver.store.redaction",
    "store_down_errors": "specserver.store.outage",
    "stored_profile": "specserver.store.positions",
    "stored_submission": "specserver.store.storedsubmission",
    "stored_totals": "specserver.store.positions",
    "submission_clauses": "specserver.store.dimensions",
    "uses_domain": "specserver.store.dimensions",
    "visible_clause": "specserver.store.queries",
}

__all__ = [
    "Backend",
    "DEFAULT_FORMAT",
    "DUCKDB",
    "POSTGRESQL",
    "backend_of",
    "DIMENSIONS",
    "Dimension",
    "FILTER_NAMES",
    "FORMATS",
    "Filter",
    "FilterValue",
    "Filters",
    "OS_NAMES",
    "QUARANTINE_PREFIX",
    "LogGap",
    "LogReceipt",
    "LogTree",
    "Row",
    "RowSet",
    "STORE_DOWN_RETRY_AFTER_S",
    "Store",
    "UNSPECIFIED",
    "VERDICTS",
    "adhoc",
    "by_domain",
    "changes",
    "current_version",
    "dimensions",
    "display_url",
    "domain_rows",
    "domainview",
    "draft_clauses",
    "draft_rows",
    "exporting",
    "field_column",
    "id_digest",
    "index_of",
    "is_store_down",
    "moderation",
    "moderation_version",
    "next_index",
    "origins",
    "positions_of",
    "positions_text",
    "probes",
    "queries",
    "redact_view",
    "redaction",
    "store_down_errors",
    "stored_profile",
    "stored_submission",
    "stored_totals",
    "submission_clauses",
    "tables",
    "uses_domain",
    "verdicts",
    "visible_clause",
]

__getattr__ = lazy_names(__name__, _LAZY)
