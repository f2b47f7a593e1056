"""From a checked submission to table rows (pure): what ingestion stores.

Rows are tuples in the column order of ``tables.py`` so that a batch of submissions can be
bulk-appended table by table. A column this module does not know gets NULL (a new
nullable column in tables.py does not break ingestion; a NOT NULL one fails loudly).
"""

from __future__ import annotations

import json
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


def naive_utc(value: datetime) -> datetime:
    """Timestamps are stored timezone-naive in UTC (DuckDB and PostgreSQL agree on that)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


_COLUMNS: dict[str, tuple[str, ...]] = {
    t.name: tuple(c.name for c in t.columns) for t in INGEST_TABLES
}


def _row(table: Table, values: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(map(values.get, _COLUMNS[table.name]))


@dataclass
class RowSet:
    """Rows per table name, in column order."""

    rows: dict[str, list[tuple[Any, ...]]] = field(
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
    baseline = next((c for c in sub.configs if c.role == "baseline"), sub.configs[0])
    target = baseline.model
    digest = next((m.digest for m in sub.models if m.name == target), None)
    out = RowSet()
    out.rows["submissions"].append(_row(tables.submissions, {
        "submission_id": sid, "key_id": checked.key_id, "source": "signed",
        "source_note": None, "created_at": naive_utc(sub.created_at),
        "received_at": naive_utc(received_at), "envelope_sha256": checked.body_sha256,
        "protocol_id": sub.protocol.id, "protocol_version": sub.protocol.version,
        "protocol_sha256": sub.protocol.sha256, "target_model": target,
        "target_digest": digest, "chip": fp.chip, "memory_gb": fp.memory_gb,
        "ollama_version": sub.engine.version, "os_name": fp.os.name,
        "backend": sub.engine.backend, "client_name": sub.client.name,
        "client_version": sub.client.version, "complete": sub.complete,
        "hidden": False, "hidden_reason": None, "note": sub.note,
    }))
    out.rows["envelopes"].append(_row(tables.envelopes, {"submission_id": sid,
                                                         "body": checked.body}))
    out.rows["fingerprints"].append(_row(tables.fingerprints, {
        "submission_id": sid, "chip": fp.chip, "cpu_name": fp.cpu.name,
        "cpu_brand_raw": fp.cpu.brand_raw, "cores_total": fp.cpu.cores_total,
        "cores_performance": fp.cpu.cores_performance,
        "cores_efficiency": fp.cpu.cores_efficiency, "memory_bytes": fp.memory_bytes,
        "memory_gb": fp.memory_gb, "unified_memory": fp.unified_memory,
        "gpu_names": "; ".join(g.name for g in fp.gpus if g.name) or None,
        "gpu_count": len(fp.gpus), "os_name": fp.os.name, "os_version": fp.os.version,
        "arch": fp.os.arch, "virtualization": fp.virtualization,
        "power_source": fp.power_source, "json": fp.model_dump_json(),
    }))
    configs, trials = out.rows["configs"], out.rows["trials"]
    for config in sub.configs:
        s = config.speculation
        configs.append(_row(tables.configs, {
            "submission_id": sid, "config_name": config.name, "role": config.role,
            "model": config.model, "draft_model": config.draft_model, "mechanism": s.mechanism,
            "request_options": json.dumps(config.request_options, sort_keys=True),
            "requested": s.requested, "engine_can_honor": s.engine_can_honor,
            "observed": s.observed, "drafted_tokens": s.drafted_tokens,
            "accepted_tokens": s.accepted_tokens, "counters_source": s.counters_source,
            "outputs_match_baseline": s.outputs_match_baseline,
        }))
        for t in config.trials:
            trials.append(_row(tables.trials, {
                "submission_id": sid, "config_name": config.name, "trial_index": t.index,
                "position": t.position, "wall_s": t.wall_s, "ttft_s": t.ttft_s,
                "total_duration_ns": t.total_duration_ns,
                "load_duration_ns": t.load_duration_ns,
                "prompt_eval_count": t.prompt_eval_count,
                "prompt_eval_duration_ns": t.prompt_eval_duration_ns,
                "eval_count": t.eval_count, "eval_duration_ns": t.eval_duration_ns,
                "done_reason": t.done_reason, "output_chars": t.output_chars,
                "output_sha256": t.output_sha256, "cold": t.cold,
            }))
    for summary in checked.summaries:
        values = summary.model_dump()
        values["config_name"] = values.pop("name")
        values["submission_id"] = sid
        out.rows["summaries"].append(_row(tables.summaries, values))
    return out
