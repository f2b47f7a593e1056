"""Server settings: one pydantic-settings object, read from ``SPECSERVER_*`` variables.

Nothing here runs at import time; ``get_settings()`` builds the object and tests build
their own ``ServerSettings(...)`` (or override ``get_settings``) with a temporary store.
Every field is documented in docs/server.md (a test checks that the table is complete).
"""

from __future__ import annotations

import os
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path

import platformdirs
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

APP_NAME = "specserver"
# Each submission allocates tens of thousands of short-lived objects; with the default
# 700-allocation threshold the cyclic collector ran constantly (~6 % of the event loop in
# py-spy). 50,000 measured +10-30 % accepted/s (BENCHMARKS.md). Server and check workers.
GC_THRESHOLDS = (50_000, 20, 100)


DATABASE_FILE = "specatlas.duckdb"
# The default file's name before the project was renamed specatlas: a store kept under it
# is still the default when no file of the new name exists (a rename must not look like
# an empty board).
LEGACY_DATABASE_FILE = "specbench.duckdb"


def _data_folder() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def default_database_path() -> Path:
    """The embedded DuckDB file in the platform data folder (the old name's, if only it
    exists)."""
    current, legacy = _data_folder() / DATABASE_FILE, _data_folder() / LEGACY_DATABASE_FILE
    return legacy if legacy.exists() and not current.exists() else current


def legacy_note(store: str) -> str | None:
    """One line when ``store`` (a URL as resolved or displayed) is the default store under
    its name from before the rename."""
    if store != database_url_for(str(_data_folder() / LEGACY_DATABASE_FILE)):
        return None
    return (f"note: the default store keeps its name from before the rename to specatlas "
            f"({LEGACY_DATABASE_FILE}); with the server stopped, rename it {DATABASE_FILE}")


def database_url_for(value: str) -> str:
    """Accept a SQLAlchemy URL or a plain file path (which means an embedded DuckDB file)."""
    if "://" in value:
        return value
    return f"duckdb:///{Path(value).expanduser().resolve()}"


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECSERVER_", extra="ignore", frozen=True)

    database_url: str = Field(
        default="",
        description="SQLAlchemy URL or DuckDB file path; empty = DuckDB in the data folder",
    )
    public_base_url: str = Field(
        default="http://127.0.0.1:8000",
        description="base of the public URLs: receipts and the page's verify snippet (never "
                    "the request's Host header, which a client chooses)",
    )
    max_body_bytes: int = Field(default=256 * 1024, ge=1024, description="request body limit")
    body_read_timeout_s: float = Field(
        default=10.0, gt=0, description="the whole body must arrive within this time"
    )
    body_min_rate_bytes_s: float = Field(
        default=2048.0, ge=0,
        description="after a 2 s grace, a body must keep arriving at this average rate "
                    "(bytes per second; 0 = only the total deadline)",
    )
    head_timeout_s: float = Field(
        default=10.0, gt=0,
        description="`specserver serve`: a request's head (request line and headers) must "
                    "be complete within this time from the connection's start (or the "
                    "request's first byte on a kept-alive connection), else 408 and closed",
    )
    max_connections: int = Field(
        default=10_000, ge=16,
        description="`specserver serve`: open connections at most (lowered to stay 256 below "
                    "the open-file limit, which is raised to the hard limit at start); "
                    "connections beyond it are closed at once",
    )
    max_connections_per_address: int = Field(
        default=256, ge=1,
        description="`specserver serve`: open connections from one client address (an IPv4 "
                    "address, an IPv6 /64) at most; one more is closed at once. Peers in "
                    "trusted_proxies are not counted: the proxy limits its own clients",
    )
    max_unfinished_heads_per_address: int = Field(
        default=32, ge=1,
        description="`specserver serve`: connections from one client address whose request "
                    "head is still unfinished 1 s after it began, at most; one more gets 503 "
                    "with Retry-After, and while the address holds that many its new "
                    "connections are closed at once",
    )
    max_head_bytes: int = Field(
        default=32 * 1024, ge=1024,
        description="`specserver serve`: a request's head (request line and headers) at "
                    "most this many bytes and 100 header fields, else 431 and closed",
    )
    max_submission_age_days: float = Field(
        default=30.0, gt=0, description="created_at older than this is refused"
    )
    max_future_skew_s: float = Field(
        default=300.0, ge=0, description="created_at further in the future is refused"
    )
    rate_key_per_minute: float = Field(
        default=30.0, ge=0, description="accepted POSTs per key id per minute (0 = off)"
    )
    rate_key_burst: int = Field(default=60, ge=1, description="bucket size per key id")
    rate_addr_per_minute: float = Field(
        default=120.0, ge=0, description="accepted POSTs per client address per minute (0 = off)"
    )
    rate_addr_burst: int = Field(default=240, ge=1, description="bucket size per client address")
    rate_check_ms_per_token: float = Field(
        default=2.0, ge=0,
        description="CPU milliseconds of checks one address token pays for: a POST whose checks "
                    "take longer takes more of its address's tokens (0 = one token a POST)",
    )
    rate_reject_per_minute: float = Field(
        default=12.0, ge=0,
        description="refused POSTs per client address per minute before it is refused unread "
                    "(0 = off)",
    )
    rate_reject_burst: int = Field(default=30, ge=1, description="refusals an address may burst")
    redis_url: str = Field(
        default="",
        description="redis:// URL: rate limits shared by replicas; empty = in-process limits",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="peer addresses/networks whose X-Forwarded-For is believed (JSON list)",
    )
    admin_token: str = Field(default="", description="bearer token of the admin API; empty = off")
    admin_query_url: str = Field(
        default="",
        description="PostgreSQL URL of a role that may only read, for the admin query; "
                    "empty = the store's URL (in a read-only transaction)",
    )
    admin_query_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="the admin query is stopped after this time"
    )
    store_enabled: bool = Field(
        default=True, description="false = verify and validate but store nothing (bench ceiling)"
    )
    group_commit_ms: float = Field(
        default=4.0, ge=0, le=1000, description="how long the writer gathers a batch"
    )
    group_commit_max: int = Field(default=512, ge=1, description="most submissions per commit")
    min_contributors: int = Field(
        default=3, ge=1, description="contributors a group needs for percentiles on the board"
    )
    page_groups: int = Field(
        default=25, ge=1, le=1000,
        description="groups each board of the page shows at most; more are paged (?page=N), "
                    "groups under min_contributors last",
    )
    page_menu_values: int = Field(
        default=100, ge=1, le=10_000,
        description="values each filter menu of the page offers at most (the most common)",
    )
    page_menu_reuse_s: float = Field(
        default=60.0, ge=0, le=3600,
        description="the page's filter menus are reused this long (new submissions' values "
                    "may be this late in them; a moderation action's never are); 0 = only "
                    "while the data is unchanged",
    )
    new_key_probation_days: float = Field(
        default=7.0, ge=0,
        description="a key is new this long after its first submission; new keys weigh as one "
                    "contributor per group (board/newkeys.py; 0 = off)",
    )
    cohort_window_hours: float = Field(
        default=24.0, ge=0,
        description="keys whose first submissions came from one address range within this "
                    "long of each other are one cohort, one contributor for good (0 = off)",
    )
    range_graduations_per_day: int = Field(
        default=2, ge=0,
        description="cohorts of one address range that may leave probation per day "
                    "(0 = no cap)",
    )
    cohort_settle_days: float = Field(
        default=28.0, ge=0,
        description="a cohort that left probation less than this long ago is recent: where "
                    "recent cohorts disagree with a group's established contributors the "
                    "group is disputed, not taken over (0 = off)",
    )
    address_hash_rotation_days: float = Field(
        default=30.0, gt=0,
        description="the secret of the address-range hashes is replaced this often",
    )
    address_secret_retention_days: float = Field(
        default=90.0, ge=0,
        description="an old hash secret is deleted this long after its epoch",
    )
    read_max_stale_s: float = Field(
        default=0.0, ge=0, le=300,
        description="public reads may reuse the store's data version this long, and a board "
                    "is recomputed at most this often (0 = as soon as the data changes)",
    )
    board_refresh_s: float = Field(
        default=1.0, ge=0, le=300,
        description="a board (leaderboard, aggregates, page) is recomputed at most this "
                    "often while writes arrive; a new result shows within about this long "
                    "plus one recomputation (0 = as soon as a read finds the data changed)",
    )
    read_wait_s: float = Field(
        default=0.0, ge=0, le=60,
        description="a board read that finds its board behind the store waits this long for "
                    "the recomputation (0 = never: the last computed board at once)",
    )
    check_workers: int = Field(
        default=0, ge=0, le=64,
        description="processes that verify and check submissions beside the server "
                    "(0 = in the server process; `specserver serve`: one per core, at most 8)",
    )
    duckdb_threads: int = Field(
        default=0, ge=0, le=1024,
        description="DuckDB worker threads (0 = the cores the check workers leave, at least 1)",
    )
    ban_cache_s: float = Field(
        default=5.0, ge=0, description="how long the banned key ids are cached (replicas)"
    )
    ban_wait_s: float = Field(
        default=1.0, gt=0, le=60,
        description="a POST waits this long for a reload of a stale ban list, then uses the "
                    "last loaded one (the reload runs off the event loop)",
    )
    predict_max_concurrent: int = Field(
        # An answer is a few hundred ms of CPU (the crowd's reads and the bootstrap) for
        # each query the data version has not seen; Python computes one at a time anyway.
        default=2, ge=1, le=64,
        description="GET /v1/predict answers computed at once (an answer kept for the same "
                    "query and data is sent without one); one more waits predict_wait_s",
    )
    predict_wait_s: float = Field(
        default=5.0, gt=0, le=300,
        description="a prediction that must be computed waits this long for its turn, "
                    "then 503 predictions_busy with Retry-After",
    )
    export_max_concurrent: int = Field(
        # A slot is a download: a file descriptor and 64 KiB of buffer, no database
        # connection and no CPU to speak of (a kept file is sent as it is). Writing a file,
        # the costly part, is one at a time (export_build_wait_s) and once per
        # export_reuse_s for the same filters, so slow downloaders hold only their own slot.
        default=16, ge=1, le=1000,
        description="exports in progress (waiting for their file, or being sent) at once; "
                    "one more is 503 with Retry-After",
    )
    export_build_wait_s: float = Field(
        default=10.0, gt=0, le=3600,
        description="an export whose file must be written waits this long for the one "
                    "writer (files are written one at a time), then 503 with Retry-After; a "
                    "kept file is sent without waiting for it",
    )
    export_max_per_client: int = Field(
        default=1, ge=1, le=1000,
        description="exports one client address range (an IPv4 address, an IPv6 /64) may "
                    "have in progress; behind a proxy, set trusted_proxies",
    )
    export_send_timeout_s: float = Field(
        default=30.0, gt=0, le=3600,
        description="an export client that takes no data for this long is disconnected",
    )
    export_reuse_s: float = Field(
        default=60.0, ge=0, le=3600,
        description="an export file is reused this long for the same filters and format "
                    "(new submissions may be this late in it; a moderation action never "
                    "is); 0 = only while the data is unchanged",
    )
    export_build_timeout_s: float = Field(
        default=120.0, gt=0, le=3600,
        description="writing an export file is stopped (503) after this time (DuckDB)",
    )
    log_origin: str = Field(
        default="",
        description="the transparency log's origin: its checkpoints' first line and its "
                    "key's name; empty = the public base URL without its scheme, plus /log",
    )
    log_key_file: str = Field(
        default="",
        description="the log's Ed25519 signing key (created 0600 when missing); empty = "
                    "log-key in the data folder",
    )
    log_checkpoint_s: float = Field(
        default=2.0, gt=0, le=60,
        description="while the log grows, a new checkpoint is signed at most this often",
    )
    log_checkpoint_timer_s: float = Field(
        default=5.0, ge=0, le=3600,
        description="while the log grows, a checkpoint is signed at least this often even "
                    "when nobody asks for one (0 = only on request)",
    )
    snapshot_dir: str = Field(
        default="",
        description="where the signed snapshots of the public data (Parquet and manifest) "
                    "are kept; empty = snapshots in the data folder",
    )
    snapshot_interval_s: float = Field(
        default=86400.0, ge=0,
        description="a signed snapshot is written this often while the server runs "
                    "(0 = only on demand: specserver snapshot)",
    )
    snapshot_keep: int = Field(
        default=7, ge=1, le=1000,
        description="how many snapshots are kept (the newest is served)",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            ip_network(entry, strict=False)  # raises ValueError with a clear message
        return value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return database_url_for(self.database_url)
        return database_url_for(str(default_database_path()))

    def effective_duckdb_threads(self) -> int:
        """DuckDB's threads compete with the check workers for cores; each commit of a
        small batch also spends CPU coordinating them (1 thread instead of 2: ~15 % more
        accepted/s with two check workers on two cores, BENCHMARKS.md)."""
        if self.duckdb_threads:
            return self.duckdb_threads
        return max(1, (os.cpu_count() or 1) - self.check_workers)

    def proxy_networks(self) -> list[IPv4Network | IPv6Network]:
        return [ip_network(entry, strict=False) for entry in self.trusted_proxies]

    @property
    def resolved_log_origin(self) -> str:
        if self.log_origin:
            return self.log_origin
        return self.public_base_url.partition("://")[2].rstrip("/") + "/log"

    @property
    def resolved_log_key_file(self) -> Path:
        if self.log_key_file:
            return Path(self.log_key_file).expanduser()
        return _data_folder() / "log-key"

    @property
    def resolved_snapshot_dir(self) -> Path:
        if self.snapshot_dir:
            return Path(self.snapshot_dir).expanduser()
        return _data_folder() / "snapshots"

    def public_url(self, submission_id: str) -> str:
        return f"{self.public_base_url.rstrip('/')}/submissions/{submission_id}"


def get_settings(**overrides: object) -> ServerSettings:
    """Settings from the environment, with explicit overrides (CLI flags, tests) on top."""
    return ServerSettings(**overrides)  # type: ignore[arg-type]
