"""Test helper: put specschema submissions straight into the store's tables.

Used by the leaderboard and admin tests to build stores with exact contents; the rows are
what ingestion stores (summaries computed with specschema.summarize).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
from sqlalchemy import Connection, Engine, Table, create_engine, insert

from specschema.envelope import envelope_bytes, key_id_of, sign_envelope
from specschema.evidence import submission_evidence
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.models import Submission
from specschema.payload import submission_bytes
from specschema.speculation import depth_of, spec_type_of
from specschema.summary import summarize
from specserver.store import domain_rows, id_digest, tables, verdicts
from specserver.store.domainrows import DOMAIN_COLUMNS

BASE_TIME = datetime(2026, 11, 1, 12, 0, 0)


def new_engine(path: Path) -> Engine:
    engine = create_engine(f"duckdb:///{path}")
    # schema_version's integer key renders as SERIAL, which DuckDB lacks; not needed here.
    wanted = [t for t in tables.metadata.sorted_tables if t.name != "schema_version"]
    tables.metadata.create_all(engine, tables=wanted)
    return engine


def key(seed: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(hashlib.sha256(f"key-{seed}".encode()).digest())


def insert_submission(
    engine: Engine,
    submission: Submission,
    signing_key: nacl.signing.SigningKey | None,
    *,
    received_at: datetime | None = None,
    hidden: bool = False,
    source_note: str | None = None,
) -> str:
    payload = submission_bytes(submission)
    if signing_key is not None:
        body = envelope_bytes(sign_envelope(payload, signing_key))
        key_id: str | None = key_id_of(bytes(signing_key.verify_key))
    else:
        body, key_id = payload, None
    sid = str(submission.submission_id)
    fp = submission.fingerprint
    target = next(c.model for c in submission.configs if c.role == "baseline")
    reported = {m.name: m for m in submission.models}
    digest = reported[target].digest if target in reported else None
    quant = reported[target].quantization if target in reported else None
    summaries = summarize(submission)
    # The evidence level as ingestion stores it (ingest/rows.py).
    levels = dict(zip([c.name for c in submission.configs], submission_evidence(
        submission, {m.name: m.speedup_tps for m in summaries}), strict=True))
    with engine.begin() as conn:
        conn.execute(insert(tables.submissions).values(
            submission_id=sid, key_id=key_id, source="signed" if key_id else "imported",
            source_note=source_note, created_at=submission.created_at.replace(tzinfo=None),
            received_at=received_at or BASE_TIME, envelope_sha256=hashlib.sha256(body).hexdigest(),
            protocol_id=submission.protocol.id, protocol_version=submission.protocol.version,
            protocol_sha256=submission.protocol.sha256, target_model=target,
            target_digest=digest, chip=fp.chip, memory_gb=fp.memory_gb,
            engine_version=submission.engine.version, os_name=fp.os.name,
            backend=submission.engine.backend, client_name=submission.client.name,
            client_version=submission.client.version, complete=submission.complete,
            hidden=hidden, hidden_reason=None, note=submission.note,
            wire_version=submission.schema_version, engine_name=submission.engine.name,
            engine_runtime=submission.engine.runtime, engine_build=submission.engine.build,
            target_quant=quant.upper() if quant else None,
            reaches_board=any(verdicts.reaches_a_board(m.role, m.observed,
                                                       levels[m.name].level)
                              for m in summaries),
        ))
        conn.execute(insert(tables.envelopes).values(submission_id=sid, body=body))
        conn.execute(insert(tables.fingerprints).values(
            submission_id=sid, chip=fp.chip, cpu_name=fp.cpu.name, cpu_brand_raw=fp.cpu.brand_raw,
            cores_total=fp.cpu.cores_total, cores_performance=fp.cpu.cores_performance,
            cores_efficiency=fp.cpu.cores_efficiency, memory_bytes=fp.memory_bytes,
            memory_gb=fp.memory_gb, unified_memory=fp.unified_memory,
            gpu_names="; ".join(g.name for g in fp.gpus if g.name), gpu_count=len(fp.gpus),
            os_name=fp.os.name, os_version=fp.os.version, arch=fp.os.arch,
            virtualization=fp.virtualization, power_source=fp.power_source,
            json=fp.model_dump_json(),
        ))
        # Rows of one table go in one statement (executemany): one statement per trial was
        # most of a filled store's cost, and the test stores hold thousands of trials.
        _insert_rows(conn, tables.configs, [{
            "submission_id": sid, "config_name": c.name, "role": c.role, "model": c.model,
            "draft_model": c.draft_model, "mechanism": c.speculation.mechanism,
            "request_options": json.dumps(c.request_options), "requested": c.speculation.requested,
            "engine_can_honor": c.speculation.engine_can_honor, "observed": c.speculation.observed,
            "drafted_tokens": c.speculation.drafted_tokens,
            "accepted_tokens": c.speculation.accepted_tokens,
            "counters_source": c.speculation.counters_source,
            "outputs_match_baseline": c.speculation.outputs_match_baseline,
        } for c in submission.configs])
        _insert_rows(conn, tables.trials, [{
            "submission_id": sid, "config_name": c.name, "trial_index": t.index,
            "position": t.position, "wall_s": t.wall_s, "ttft_s": t.ttft_s,
            "total_duration_ns": t.total_duration_ns, "load_duration_ns": t.load_duration_ns,
            "prompt_eval_count": t.prompt_eval_count,
            "prompt_eval_duration_ns": t.prompt_eval_duration_ns, "eval_count": t.eval_count,
            "eval_duration_ns": t.eval_duration_ns, "done_reason": t.done_reason,
            "output_chars": t.output_chars, "output_sha256": t.output_sha256, "cold": t.cold,
            "block_number": t.block,
        } for c in submission.configs for t in c.trials])
        baseline_tps = next((m.median_tps for m in summaries if m.role == "baseline"), None)
        summary_rows = []
        for summary in summaries:
            values = summary.model_dump()
            values["baseline_tps"] = baseline_tps if summary.role == "draft" else None
            values["config_name"] = values.pop("name")
            values["evidence"] = levels[summary.name].level
            values["evidence_reason"] = levels[summary.name].reason
            draft = reported.get(summary.draft_model) if summary.draft_model else None
            values["draft_digest"] = draft.digest if draft else None
            values["draft_quant"] = (draft.quantization or "").upper() or None if draft else None
            # Store version 14's keys and 15's rows by ingestion's rules (ingest/rows.py).
            config = next(c for c in submission.configs if c.name == summary.name)
            kind = spec_type_of(summary.mechanism, config.request_options, config.draft_model)
            values["spec_type"], values["depth"] = kind, depth_of(kind, config.request_options)
            summary_rows.append({"submission_id": sid,  # a summary's stored fields
                                 **{k: v for k, v in values.items()
                                    if k in tables.summaries.c}})
        _insert_rows(conn, tables.summaries, summary_rows)
        _insert_rows(conn, tables.domain_results, [
            dict(zip(DOMAIN_COLUMNS, row, strict=True))
            for row in domain_rows(submission, sid, id_digest(sid))])
    return sid


def _insert_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(insert(table), rows)


def fill(engine: Engine, count: int, *, protocol: str = "ollama-draft",
         contributors: int = 4, counters_seen: bool = True) -> list[str]:
    """``count`` submissions over EXAMPLE_MACHINES from ``contributors`` keys."""
    ids = []
    for i in range(count):
        sub = example_submission(
            protocol, seed=i, engine_version="0.30.1",
            machine=EXAMPLE_MACHINES[i % len(EXAMPLE_MACHINES)],
            draft_speedups={"spec_4": 1.2 + 0.05 * (i % 5), "spec_8": 1.1,
                            "draft_qwen2.5_0.5b": 0.95, "draft_qwen2.5_1.5b": 0.9},
            counters_seen=counters_seen, created_at=datetime(2026, 11, 1, tzinfo=UTC),
        )
        ids.append(insert_submission(engine, sub, key(i % contributors),
                                     received_at=BASE_TIME + timedelta(seconds=i)))
    return ids
