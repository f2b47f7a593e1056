"""From a checked submission to table rows (pure): what ingestion stores.

Rows are tuples in the column order of ``tables.py`` so that a batch of submissions can be
bulk-appended table by table. They are built directly as tuples in the order of
``BUILT_COLUMNS`` (no dict per row: this runs once per submission on the ingest path); when
``tables.py`` has the same columns in the same order, which a test holds, that is the
table's order. Otherwise each row is rearranged at the end: a column this module does not
know gets NULL (a new nullable column in tables.py does not break ingestion; a NOT NULL one
fails loudly) and a value for a column the table no longer has is dropped.

A ``RowSet`` holds only plain values (str, int, float, bool, None, bytes, naive datetime)
in lists of tuples, so it pickles small and fast across a process boundary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table

from specserver import tables
from specserver.ingest import Checked

# The tables one submission writes, in insertion order.
INGEST_TABLES: tuple[Table, ...] = (
    tables.submissions,
    tables.envelopes,
    tables.fingerprints,
    tables.configs,
    tables.trials,
    tables.summaries,
)

Row = tuple[Any, ...]

# The columns ``submission_rows`` fills, in the order it builds each table's tuples.
BUILT_COLUMNS: dict[str, tuple[str, ...]] = {
    "submissions": (
        "submission_id", "key_id", "source", "source_note", "created_at", "received_at",
        "envelope_sha256", "protocol_id", "protocol_version", "protocol_sha256",
        "target_model", "target_digest", "chip", "memory_gb", "ollama_version", "os_name",
        "backend", "client_name", "client_version", "complete", "hidden", "hidden_reason",
        "note",
    ),
    "envelopes": ("submission_id", "body"),
    "fingerprints": (
        "submission_id", "chip", "cpu_name", "cpu_brand_raw", "cores_total",
        "cores_performance", "cores_efficiency", "memory_bytes", "memory_gb",
        "unified_memory", "gpu_names", "gpu_count", "os_name", "os_version", "arch",
        "virtualization", "power_source", "json",
    ),
    "configs": (
        "submission_id", "config_name", "role", "model", "draft_model", "mechanism",
        "request_options", "requested", "engine_can_honor", "observed", "drafted_tokens",
        "accepted_tokens", "counters_source", "outputs_match_baseline",
    ),
    "trials": (
        "submission_id", "config_name", "trial_index", "position", "wall_s", "ttft_s",
        "total_duration_ns", "load_duration_ns", "prompt_eval_count",
        "prompt_eval_duration_ns", "eval_count", "eval_duration_ns", "done_reason",
        "output_chars", "output_sha256", "cold",
    ),
    "summaries": (
        "submission_id", "config_name", "role", "model", "draft_model", "mechanism",
        "observed", "trials", "median_wall_s", "median_eval_s", "median_tps", "min_tps",
        "max_tps", "stdev_tps", "cv_tps", "speedup_tps", "speedup_tps_ci_low",
        "speedup_tps_ci_high", "speedup_wall", "outputs_match_baseline",
    ),
}


def naive_utc(value: datetime) -> datetime:
    """Timestamps are stored timezone-naive in UTC (DuckDB and PostgreSQL agree on that)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _rearrange(table: Table, built: tuple[str, ...]) -> Callable[[Row], Row] | None:
    """None when the built order is the table's; else a row in the table's column order."""
    names = tuple(c.name for c in table.columns)
    if names == built:
        return None
    where = {name: i for i, name in enumerate(built)}
    index = [where.get(name) for name in names]

    def rearrange(row: Row) -> Row:
        return tuple(None if i is None else row[i] for i in index)

    return rearrange


# Empty while tables.py and BUILT_COLUMNS agree (tests/server/test_store_rows.py).
_REARRANGE: dict[str, Callable[[Row], Row]] = {
    t.name: fn for t in INGEST_TABLES if (fn := _rearrange(t, BUILT_COLUMNS[t.name])) is not None
}


def _sorted_json_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, sort_keys=True)`` for a config's ``request_options`` (a flat dict
    of str, int, float, bool): the same C encoder ``json.dumps`` builds on every call, built
    once (about half of the ~10 us per call), without the check for circular references
    (there are none in validated JSON). Pure-Python json: the encoder's own ``encode``."""
    encoder = json.JSONEncoder(sort_keys=True)
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    c_encode = make(None, encoder.default, json.encoder.encode_basestring_ascii, None,
                    encoder.key_separator, encoder.item_separator, True, False, True)

    def encode(value: Any) -> str:
        return "".join(c_encode(value, 0))

    return encode


sorted_json = _sorted_json_encoder()


@dataclass
class RowSet:
    """Rows per table name, in column order."""

    rows: dict[str, list[Row]] = field(
        default_factory=lambda: {t.name: [] for t in INGEST_TABLES}
    )

    def extend(self, other: RowSet) -> None:
        for name, rows in other.rows.items():
            self.rows[name].extend(rows)

    def count(self) -> int:
        return sum(len(r) for r in self.rows.values())


def submission_rows(checked: Checked, received_at: datetime) -> RowSet:
    sub = checked.submission
    sid = checked.submission_id
    fp = sub.fingerprint
    cpu = fp.cpu
    os_info = fp.os
    engine = sub.engine
    configs = sub.configs
    baseline = next((c for c in configs if c.role == "baseline"), configs[0])
    target = baseline.model
    digest = next((m.digest for m in sub.models if m.name == target), None)
    protocol = sub.protocol
    config_rows: list[Row] = []
    trial_rows: list[Row] = []
    for config in configs:
        s = config.speculation
        name = config.name
        config_rows.append((
            sid, name, config.role, config.model, config.draft_model, s.mechanism,
            sorted_json(config.request_options), s.requested, s.engine_can_honor,
            s.observed, s.drafted_tokens, s.accepted_tokens, s.counters_source,
            s.outputs_match_baseline,
        ))
        trial_rows.extend([
            (sid, name, t.index, t.position, t.wall_s, t.ttft_s, t.total_duration_ns,
             t.load_duration_ns, t.prompt_eval_count, t.prompt_eval_duration_ns,
             t.eval_count, t.eval_duration_ns, t.done_reason, t.output_chars,
             t.output_sha256, t.cold)
            for t in config.trials
        ])
    rows: dict[str, list[Row]] = {
        "submissions": [(
            sid, checked.key_id, "signed", None, naive_utc(sub.created_at),
            naive_utc(received_at), checked.body_sha256, protocol.id, protocol.version,
            protocol.sha256, target, digest, fp.chip, fp.memory_gb, engine.version,
            os_info.name, engine.backend, sub.client.name, sub.client.version, sub.complete,
            False, None, sub.note,
        )],
        "envelopes": [(sid, checked.body)],
        "fingerprints": [(
            sid, fp.chip, cpu.name, cpu.brand_raw, cpu.cores_total, cpu.cores_performance,
            cpu.cores_efficiency, fp.memory_bytes, fp.memory_gb, fp.unified_memory,
            "; ".join([g.name for g in fp.gpus if g.name]) or None, len(fp.gpus),
            os_info.name, os_info.version, os_info.arch, fp.virtualization, fp.power_source,
            fp.model_dump_json(),
        )],
        "configs": config_rows,
        "trials": trial_rows,
        "summaries": [
            (sid, m.name, m.role, m.model, m.draft_model, m.mechanism, m.observed, m.trials,
             m.median_wall_s, m.median_eval_s, m.median_tps, m.min_tps, m.max_tps,
             m.stdev_tps, m.cv_tps, m.speedup_tps, m.speedup_tps_ci_low,
             m.speedup_tps_ci_high, m.speedup_wall, m.outputs_match_baseline)
            for m in checked.summaries
        ],
    }
    if _REARRANGE:
        for table_name, rearrange in _REARRANGE.items():
            rows[table_name] = [rearrange(row) for row in rows[table_name]]
    return RowSet(rows)
