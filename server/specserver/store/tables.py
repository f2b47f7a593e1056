"""SQLAlchemy Core tables: the single source of the store's schema, DuckDB and PostgreSQL.

Rows are denormalized where the leaderboard needs them (``submissions`` carries the group
keys; ``summaries`` one row per submission and config) so that reads never touch trials.
Timestamps are stored as timezone-naive UTC (DuckDB and PostgreSQL agree on that).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.engine.default import DefaultExecutionContext
from sqlalchemy.types import UserDefinedType

from specserver.store.rowset import INGEST_TABLE_NAMES, id_digest
from specserver.store.rowset import Row as Row  # re-exported: the store's modules use it
from specserver.store.rowset import RowSet as RowSet

metadata = MetaData()

# Child tables (one row per submission x config / trial) are only written in the same
# transaction as their ``submissions`` row, whose primary key is the idempotency guard.
# On PostgreSQL their keys are also the indexes reads use; on DuckDB (column store, scans)
# an enforced key costs ~1/3 of the group commit and memory for its ART index, so those
# keys are declared for PostgreSQL only. SQLAlchemy still knows them on every dialect.
CHILD_KEY_DIALECT = "postgresql"

schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("applied_at", DateTime, nullable=False),
)

# Store version 12's columns are declared nullable: on PostgreSQL, replicas of the version
# before write none while a rolling upgrade replaces them (docs/deploying.md), and reads
# there do not rely on them (``board.sql``, ``board.newkeys``). DuckDB has one server
# process: its stores require them (``migrations.require_board_keys``, fresh stores too).
_NULL_WHILE_UPGRADING = True


def _digest_of_row(context: DefaultExecutionContext) -> int:
    """An insert that leaves ``id_digest`` out gets its submission id's (ingestion writes
    it in its rows; this serves inserts by column name: imports of tests and tools)."""
    parameters = context.get_current_parameters()  # type: ignore[no-untyped-call]
    return id_digest(parameters["submission_id"])


submissions = Table(
    "submissions",
    metadata,
    Column("submission_id", String(36), primary_key=True),
    Column("key_id", String(64), nullable=True),  # null for imported reference results
    Column("source", String(16), nullable=False),  # 'signed' | 'imported'
    Column("source_note", Text, nullable=True),
    Column("created_at", DateTime, nullable=False),
    Column("received_at", DateTime, nullable=False),
    Column("envelope_sha256", String(64), nullable=False),
    Column("protocol_id", String(64), nullable=False),
    Column("protocol_version", Integer, nullable=False),
    Column("protocol_sha256", String(64), nullable=False),
    Column("target_model", String(120), nullable=False),
    Column("target_digest", String(64), nullable=True),
    Column("chip", String(200), nullable=True),
    Column("memory_gb", Integer, nullable=True),
    Column("engine_version", String(40), nullable=False),  # engine.version (store version 10)
    Column("os_name", String(16), nullable=True),
    Column("backend", String(200), nullable=True),
    Column("client_name", String(120), nullable=False),
    Column("client_version", String(40), nullable=False),
    Column("complete", Boolean, nullable=False),
    Column("hidden", Boolean, nullable=False),
    Column("hidden_reason", Text, nullable=True),
    Column("note", Text, nullable=True),
    # Wire v2 (schema version 3 of the store; null on rows stored before it): the engine as
    # a dimension and whether the client read its log. Reads show ``ollama_version`` as
    # engine_version for Ollama rows only (store/dimensions.py).
    Column("wire_version", Integer, nullable=True),  # the submission's schema_version
    Column("engine_name", String(32), nullable=True),  # null: 'ollama' (v1 knows no other)
    Column("engine_runtime", String(16), nullable=True),  # 'ggml' | 'mlx'
    Column("engine_build", String(200), nullable=True),
    Column("engine_log", String(16), nullable=True),  # 'read' | 'not_given' | 'unreadable'
    # Store version 5: the sender's address range (IPv4 /24, IPv6 /48) as a keyed hash
    # (store/origins.py; never the address), for the board's cohorts (board/newkeys.py).
    # Null on rows stored before it, on imports, and where no address was known.
    Column("origin_hash", String(64), nullable=True),
    # Store version 6: the target's quantization as reported (models[]), beside its digest:
    # both are part of the target's group and its label (board/aggregate.py).
    Column("target_quant", String(200), nullable=True),
    # Store version 12: ``rowset.id_digest(submission_id)``, which the board's joins with
    # ``summaries`` compare before the id on DuckDB (an integer, not 36 characters).
    Column("id_digest", BigInteger, nullable=_NULL_WHILE_UPGRADING, default=_digest_of_row),
    # Store version 12: whether one of its draft results is on the speedup board or the
    # noise floor (``store.verdicts.reaches_a_board``), which starts its key's ageing
    # (``board.newkeys``). Fixed at ingest: a result's verdict and evidence never change.
    Column("reaches_board", Boolean, nullable=_NULL_WHILE_UPGRADING),
)

# PostgreSQL only (DuckDB's min/max zone maps already answer these): the newest receipt of
# the data version every public GET reads, and the submission list's newest-first pages.
# Schema version 2 (migrations.py); measured: the data version at 100k submissions on
# PostgreSQL went from ~44 ms to ~15 ms (docs/deploying.md).
Index(
    "ix_submissions_received_at", submissions.c.received_at, submissions.c.submission_id
).ddl_if(dialect="postgresql")

class _DuckDBUncompressedBlob(UserDefinedType[bytes]):
    """DuckDB's BLOB without compression. Compressing ~12 KB envelopes at each checkpoint
    cost ~1 ms of CPU per submission and stalled the writer's commit for seconds (~40 %
    smaller envelopes on disk); uncompressed the checkpoint is ~20x cheaper."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "BLOB USING COMPRESSION uncompressed"


# The exact bytes that were POSTed, so anyone can re-verify the signature later.
envelopes = Table(
    "envelopes",
    metadata,
    Column("submission_id", String(36), nullable=False),
    Column("body", LargeBinary().with_variant(_DuckDBUncompressedBlob(), "duckdb"),
           nullable=False),
    PrimaryKeyConstraint("submission_id").ddl_if(dialect=CHILD_KEY_DIALECT),
)

fingerprints = Table(
    "fingerprints",
    metadata,
    Column("submission_id", String(36), nullable=False),
    Column("chip", String(200), nullable=True),
    Column("cpu_name", String(200), nullable=True),
    Column("cpu_brand_raw", String(200), nullable=True),
    Column("cores_total", Integer, nullable=True),
    Column("cores_performance", Integer, nullable=True),
    Column("cores_efficiency", Integer, nullable=True),
    Column("memory_bytes", BigInteger, nullable=True),
    Column("memory_gb", Integer, nullable=True),
    Column("unified_memory", Boolean, nullable=True),
    Column("gpu_names", Text, nullable=True),  # '; '-joined canonical names
    Column("gpu_count", Integer, nullable=False),
    Column("os_name", String(16), nullable=True),
    Column("os_version", String(200), nullable=True),
    Column("arch", String(32), nullable=True),
    Column("virtualization", String(200), nullable=True),
    Column("power_source", String(16), nullable=True),
    Column("json", Text, nullable=False),  # the whole fingerprint as sent
    PrimaryKeyConstraint("submission_id").ddl_if(dialect=CHILD_KEY_DIALECT),
)

configs = Table(
    "configs",
    metadata,
    Column("submission_id", String(36), nullable=False),
    Column("config_name", String(120), nullable=False),
    Column("role", String(16), nullable=False),
    Column("model", String(120), nullable=False),
    Column("draft_model", String(120), nullable=True),
    Column("mechanism", String(32), nullable=False),
    Column("request_options", Text, nullable=False),  # JSON
    Column("requested", Boolean, nullable=False),
    Column("engine_can_honor", Boolean, nullable=True),
    Column("observed", String(32), nullable=False),  # 32 from store version 3 (was 16)
    Column("drafted_tokens", BigInteger, nullable=True),
    Column("accepted_tokens", BigInteger, nullable=True),
    Column("counters_source", String(32), nullable=True),
    Column("outputs_match_baseline", Boolean, nullable=True),
    # Wire v2: the mean accepted length, and the engine starts as seen (JSON list of Launch)
    Column("mean_accepted_len", Double, nullable=True),
    Column("launches", Text, nullable=True),
    PrimaryKeyConstraint("submission_id", "config_name").ddl_if(dialect=CHILD_KEY_DIALECT),
)

trials = Table(
    "trials",
    metadata,
    Column("submission_id", String(36), nullable=False),
    Column("config_name", String(120), nullable=False),
    Column("trial_index", Integer, nullable=False),
    Column("position", Integer, nullable=False),
    Column("wall_s", Double, nullable=False),
    Column("ttft_s", Double, nullable=True),
    Column("total_duration_ns", BigInteger, nullable=False),
    Column("load_duration_ns", BigInteger, nullable=False),
    Column("prompt_eval_count", BigInteger, nullable=True),
    Column("prompt_eval_duration_ns", BigInteger, nullable=True),
    Column("eval_count", BigInteger, nullable=False),
    Column("eval_duration_ns", BigInteger, nullable=False),
    Column("done_reason", String(32), nullable=True),
    Column("output_chars", BigInteger, nullable=False),
    Column("output_sha256", String(64), nullable=False),
    Column("cold", Boolean, nullable=False),
    # Wire v2: this trial's counters (null: none seen, or stored before store version 3)
    Column("drafted", BigInteger, nullable=True),
    Column("accepted", BigInteger, nullable=True),
    Column("mean_accepted_len", Double, nullable=True),
    Column("counters_source", String(32), nullable=True),
    # Store version 8: the trial's block (null: the client recorded none, or stored before)
    Column("block_number", Integer, nullable=True),
    # Store version 14: its counters' draft rounds and, per draft position i from 0, the
    # rounds whose first i + 1 drafted tokens were all accepted, as compact JSON text
    # (``store.positions``; llama-server's /metrics). Null means not recorded: the engine
    # did not say, or the trial was stored before version 14.
    Column("rounds", BigInteger, nullable=True),
    Column("accepted_per_position", Text, nullable=True),
    PrimaryKeyConstraint(
        "submission_id", "config_name", "trial_index"
    ).ddl_if(dialect=CHILD_KEY_DIALECT),
)

# One row per submission and config, computed at ingest with specschema.summarize.
summaries = Table(
    "summaries",
    metadata,
    Column("submission_id", String(36), nullable=False),
    Column("config_name", String(120), nullable=False),
    Column("role", String(16), nullable=False),
    Column("model", String(120), nullable=False),
    Column("draft_model", String(120), nullable=True),
    Column("mechanism", String(32), nullable=False),
    Column("observed", String(32), nullable=False),  # 32 from store version 3 (was 16)
    Column("trials", Integer, nullable=False),
    Column("median_wall_s", Double, nullable=True),
    Column("median_eval_s", Double, nullable=True),
    Column("median_tps", Double, nullable=True),
    Column("min_tps", Double, nullable=True),
    Column("max_tps", Double, nullable=True),
    Column("stdev_tps", Double, nullable=True),
    Column("cv_tps", Double, nullable=True),
    Column("speedup_tps", Double, nullable=True),
    Column("speedup_tps_ci_low", Double, nullable=True),
    Column("speedup_tps_ci_high", Double, nullable=True),
    Column("speedup_wall", Double, nullable=True),
    Column("outputs_match_baseline", Boolean, nullable=True),
    # Store version 4: how far the server can vouch for the config's counters
    # (specschema.evidence: engine_api | log | reported | implausible | none) and why.
    Column("evidence", String(16), nullable=True),
    Column("evidence_reason", Text, nullable=True),
    # Store version 6: the draft model's digest and quantization as reported (models[]):
    # part of the draft's group, as the target's are.
    Column("draft_digest", String(64), nullable=True),
    Column("draft_quant", String(200), nullable=True),
    # Store version 8: from blocks (specschema.summary; null without them): the config's
    # blocks, how far their medians disagree, and the wall-time speedup's interval.
    Column("blocks", Integer, nullable=True),
    Column("block_drift", Double, nullable=True),
    Column("speedup_wall_ci_low", Double, nullable=True),
    Column("speedup_wall_ci_high", Double, nullable=True),
    # Store version 11: on a draft config's row, its baseline's median_tps (the board reads
    # it with the draft's row: a self-join per read cost a third of a cold board's SQL).
    Column("baseline_tps", Double, nullable=True),
    Column("id_digest", BigInteger, nullable=_NULL_WHILE_UPGRADING,  # version 12
           default=_digest_of_row),
    # Store version 14, the board's keys beside mechanism: the config's speculative type
    # and depth as its request options set them (``specschema.speculation``; filled for
    # rows stored before from ``configs.request_options`` by the same rule). Null: the
    # config names none (a baseline, Ollama's type, an engine default), or the row was
    # written by a replica of the version before during a rolling upgrade.
    Column("spec_type", Text, nullable=True),
    Column("depth", Integer, nullable=True),
    # Store version 14: its trials' rounds and per-position counts summed
    # (``specschema.breakdown.position_totals``, JSON text as on ``trials``), from which
    # a group's acceptance per position is the sums' (``store.positions``). Null means not
    # recorded: no trial had counters, one of them lacked either, or stored before.
    Column("rounds", BigInteger, nullable=True),
    Column("accepted_per_position", Text, nullable=True),
    PrimaryKeyConstraint("submission_id", "config_name").ddl_if(dialect=CHILD_KEY_DIALECT),
)

# Store version 15: a draft config's result per kind of work (``specschema.domains``), one
# row per submission, draft config and domain of its protocol's prompt set, computed at
# ingest from the signed trials (``store.domainrows``). The board's ``domain`` dimension
# reads these in place of the config's overall figures; a result whose protocol has no
# prompt set has no rows here (its domain reads "unspecified").
domain_results = Table(
    "domain_results",
    metadata,
    Column("submission_id", String(36), nullable=False),
    Column("config_name", String(120), nullable=False),
    Column("domain", String(32), nullable=False),
    Column("trials", Integer, nullable=False),
    Column("speedup_tps", Double, nullable=True),
    Column("speedup_tps_ci_low", Double, nullable=True),
    Column("speedup_tps_ci_high", Double, nullable=True),
    Column("baseline_tps", Double, nullable=True),  # the baseline's median on the domain
    Column("drafted", BigInteger, nullable=True),
    Column("accepted", BigInteger, nullable=True),
    Column("rounds", BigInteger, nullable=True),
    Column("accepted_per_position", Text, nullable=True),
    Column("id_digest", BigInteger, nullable=False, default=_digest_of_row),
    PrimaryKeyConstraint("submission_id", "config_name", "domain"
                         ).ddl_if(dialect=CHILD_KEY_DIALECT),
)

# Store version 5: the secrets of the origin hashes, one per rotation epoch, shared by
# replicas through the store; an epoch's secret is deleted once past its retention, after
# which nobody can tell which address range a stored hash came from (docs/server.md).
address_secrets = Table(
    "address_secrets",
    metadata,
    Column("epoch", Integer, primary_key=True, autoincrement=False),
    Column("secret", String(64), nullable=False),  # 32 random bytes, hex
    Column("created_at", DateTime, nullable=False),
)

bans = Table(
    "bans",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("banned_at", DateTime, nullable=False),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("audit_id", String(36), primary_key=True),
    Column("at", DateTime, nullable=False, quote=True),  # AT is reserved in DuckDB
    Column("action", String(32), nullable=False),  # hide | unhide | ban | unban | import | query
    Column("target", String(64), nullable=False),  # submission id, key id, or sha256 of a query
    Column("reason", Text, nullable=True),
    Column("actor", String(120), nullable=False),
)

# Store version 9: what each write changed, for the board maintained by change
# (``store/changes.py``, ``board/incremental.py``). ``board_clock`` is one row whose ``seq``
# every writing transaction bumps as its last step: the row lock orders the transactions'
# sequence numbers as their commits (PostgreSQL replicas included), so a reader that sees
# ``seq`` = n has every change numbered up to n.
board_clock = Table(
    "board_clock",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),  # always 1
    Column("seq", BigInteger, nullable=False),
)

# One row per contributor (key id, or ``imported:<submission id>``) a transaction touched,
# with how many submissions it stored for them and how many audit rows it wrote; a row with
# no contributor counts audit rows that touched none (an ad-hoc query's).
board_changes = Table(
    "board_changes",
    metadata,
    Column("seq", BigInteger, nullable=False),
    Column("contributor", String(80), nullable=True),
    Column("submissions", Integer, nullable=False),
    Column("audits", Integer, nullable=False),
)
Index("ix_board_changes_seq", board_changes.c.seq).ddl_if(dialect="postgresql")

# Store version "probes": one signed cost probe per row (``store/probes.py``): what one
# machine's engine takes to check k tokens at once with the target alone. Its own kind, apart
# from submissions: no board reads it; ``GET /v1/predict`` does (``specserver.crowd``).
probes = Table(
    "probes",
    metadata,
    Column("probe_id", String(36), primary_key=True),
    Column("key_id", String(64), nullable=False),
    Column("received_at", DateTime, nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("envelope_sha256", String(64), nullable=False),
    Column("envelope", LargeBinary, nullable=False),  # the exact bytes, to verify again
    Column("origin_hash", String(64), nullable=True),
    Column("chip", String(200), nullable=True),
    Column("memory_gb", Integer, nullable=True),
    Column("os_name", String(16), nullable=True),
    Column("engine_name", String(32), nullable=False),
    Column("engine_version", String(40), nullable=False),
    Column("engine_build", String(200), nullable=True),
    Column("backend", String(200), nullable=True),
    Column("target_model", String(120), nullable=False),
    Column("target_digest", String(64), nullable=True),
    Column("target_quant", String(200), nullable=True),
    Column("target_size_bytes", BigInteger, nullable=True),
    Column("threads", Integer, nullable=True),
    Column("context_tokens", Integer, nullable=False),
    Column("samples", Text, nullable=False),  # seconds per sample per k, JSON (probes.py)
    Column("hidden", Boolean, nullable=False),
    # Store version 18: what the samples are, the probe's ``measured`` ("verification":
    # rounds, version 2; "prefill": version 1, which reads low); null only where a stored
    # envelope no longer parsed when the column was filled, read as "prefill".
    Column("measured", String(16), nullable=True),
)
Index("ix_probes_target_chip", probes.c.target_digest, probes.c.chip
      ).ddl_if(dialect="postgresql")

# The transparency log (``store/logentries.py``): one row per leaf, numbered from 0 without
# gaps in the transaction that stores what the entry names; ``entry`` is the leaf's bytes (a
# type byte and a SHA-256), ``submission_id`` the stored submission it names.
log_entries = Table(
    "log_entries",
    metadata,
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("entry", LargeBinary, nullable=False),
    Column("submission_id", String(36), nullable=True),
    Column("logged_at", DateTime, nullable=False),
)
Index("ix_log_entries_submission", log_entries.c.submission_id).ddl_if(dialect="postgresql")

# The tables one submission writes, in insertion order (their names are ``rowset``'s,
# which the check workers import without SQLAlchemy).
INGEST_TABLES: tuple[Table, ...] = tuple(metadata.tables[name] for name in INGEST_TABLE_NAMES)
