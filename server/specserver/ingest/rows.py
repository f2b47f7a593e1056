"""From a checked submission to table rows (pure): what ingestion stores.

Rows are tuples in the column order of ``store/tables.py`` so that a batch of submissions
can be bulk-appended table by table. They are built directly as tuples (no dict per row:
this runs once per submission on the ingest path); tests/server/ingest/test_store_rows.py holds
them equal to a definition by column name, so a change to tables.py that this module does
not follow fails there.

A ``RowSet`` holds only plain values (str, int, float, bool, None, bytes, naive datetime)
in lists of tuples, so it pickles small and fast across a process boundary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from operator import itemgetter

from specschema.breakdown import position_totals
from specschema.evidence import submission_evidence
from specschema.models import ModelInfo
from specschema.speculation import depth_of, spec_type_of
from specserver.ingest.checks import Checked
from specserver.ingest.names import (
    canonical,
    canonical_chip,
    canonical_model,
    canonical_model_optional,
    canonical_optional,
)
from specserver.store import Row, RowSet, domain_rows, id_digest, positions_text, verdicts

# A trial's columns in tables.trials' order, read from the model's ``__dict__`` in one C
# call each (attribute reads on pydantic models cost ~10 us per submission here).
_trial_columns = itemgetter(
    "index", "position", "wall_s", "ttft_s", "total_duration_ns", "load_duration_ns",
    "prompt_eval_count", "prompt_eval_duration_ns", "eval_count", "eval_duration_ns",
    "done_reason", "output_chars", "output_sha256", "cold",
)
_counter_columns = itemgetter("drafted", "accepted", "mean_accepted_len", "source")
_position_columns = itemgetter("rounds", "accepted_per_position")
_NO_COUNTERS = (None, None, None, None)
# A config's type and depth by (mechanism, request options as stored, draft model named):
# the options are the protocol's (an ingest rule), so a few entries serve every
# submission, and a lookup costs a tenth of the two rules it replaces. Bounded all the same.
_SPECULATION: dict[tuple[str, str, bool], tuple[str | None, int | None]] = {}
_SPECULATION_MAX = 4096


def _speculation(mechanism: str, options_text: str, options: Mapping[str, object],
                 draft_model: str | None) -> tuple[str | None, int | None]:
    key = (mechanism, options_text, draft_model is not None)
    found = _SPECULATION.get(key)
    if found is None:
        kind = spec_type_of(mechanism, options, draft_model)
        found = (kind, depth_of(kind, options))
        if len(_SPECULATION) >= _SPECULATION_MAX:
            _SPECULATION.clear()
        _SPECULATION[key] = found
    return found
# ``json.dumps(value, sort_keys=True)``, without building an encoder per call (json.dumps
# does for any non-default argument: 3 of the 4 us it took per config).
_options_json = json.JSONEncoder(sort_keys=True).encode


def naive_utc(value: datetime) -> datetime:
    """Timestamps are stored timezone-naive in UTC (DuckDB and PostgreSQL agree on that)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def canonical_quant(value: str | None) -> str | None:
    """A quantization label as one spelling (``q4_k_m`` and ``Q4_K_M`` are one)."""
    found = canonical_optional(value)
    return None if found is None else found.upper()


def _variant(reported: dict[str, ModelInfo], name: str | None) -> tuple[str | None,
                                                                        str | None]:
    """A draft model's reported (digest, quantization); (None, None) when not in models[]."""
    info = reported.get(name) if name is not None else None
    if info is None:
        return (None, None)
    return (info.digest, canonical_quant(info.quantization))


def submission_rows(checked: Checked, received_at: datetime) -> RowSet:
    sub = checked.submission
    sid = checked.submission_id
    digest_of_id = id_digest(sid)
    fp = sub.fingerprint
    cpu = fp.cpu
    os_info = fp.os
    engine = sub.engine
    configs = sub.configs
    baseline = next((c for c in configs if c.role == "baseline"), configs[0])
    # models[] as reported, by the name the configs use: digest and quantization join the
    # target's and each draft's group (board/aggregate.py DIMENSIONS).
    reported = {m.name: m for m in sub.models}
    target_info = reported.get(baseline.model)
    digest = target_info.digest if target_info is not None else None
    target_quant = canonical_quant(target_info.quantization if target_info else None)
    # Names that form groups or are shown beside them are stored canonical (ingest.names:
    # NFKC, one space, the known chip's spelling); the envelope keeps what was signed.
    target = canonical_model(baseline.model)
    chip = canonical_chip(fp.chip)
    backend = canonical_optional(engine.backend)
    protocol = sub.protocol
    # The evidence level of each config's counters, against the server's own speedups.
    evidence = dict(zip((c.name for c in configs), submission_evidence(
        sub, {m.name: m.speedup_tps for m in checked.summaries}), strict=True))
    # Each draft's row carries its baseline's median tok/s (the board reads it from there).
    baseline_tps = next((m.median_tps for m in checked.summaries if m.role == "baseline"),
                        None)
    config_rows: list[Row] = []
    trial_rows: list[Row] = []
    # Per config, its summaries row's version-14 columns: type, depth, the trials' sums.
    keys: dict[str, tuple[str | None, int | None, int | None, str | None]] = {}
    for config in configs:
        s = config.speculation
        name = config.name
        options_text = _options_json(config.request_options)
        config_rows.append((
            sid, name, config.role, canonical_model(config.model),
            canonical_model_optional(config.draft_model), s.mechanism,
            options_text, s.requested, s.engine_can_honor,
            s.observed, s.drafted_tokens, s.accepted_tokens, s.counters_source,
            s.outputs_match_baseline, s.mean_accepted_len,
            json.dumps([launch.model_dump(mode="json") for launch in s.launches])
            if s.launches else None,
        ))
        head = (sid, name)
        counted: list[tuple[int | None, list[int] | None]] = []
        for trial in map(vars, config.trials):
            counters = trial["counters"]
            if counters is None:
                trial_rows.append(head + _trial_columns(trial) + _NO_COUNTERS
                                  + (trial["block"], None, None))
                continue
            values = vars(counters)
            rounds, positions = unit = _position_columns(values)
            counted.append(unit)
            trial_rows.append(head + _trial_columns(trial) + _counter_columns(values)
                              + (trial["block"], rounds, positions_text(positions)))
        kind, depth = _speculation(s.mechanism, options_text, config.request_options,
                                   config.draft_model)
        totals = position_totals(counted) if counted else None
        keys[name] = (kind, depth, None, None) if totals is None else (
            kind, depth, totals[0], positions_text(totals[1]))
    rows: dict[str, list[Row]] = {
        "submissions": [(
            sid, checked.key_id, "signed", None, naive_utc(sub.created_at),
            naive_utc(received_at), checked.body_sha256, protocol.id, protocol.version,
            protocol.sha256, target, digest, chip, fp.memory_gb, engine.version,
            os_info.name, backend, canonical(sub.client.name), sub.client.version, sub.complete,
            checked.quarantine is not None, checked.quarantine, sub.note, sub.schema_version,
            engine.name, engine.runtime,
            canonical_optional(engine.build), sub.engine_log,
            None,  # origin_hash: set by the server process, which knows the address
            target_quant, digest_of_id,
            any(verdicts.reaches_a_board(m.role, m.observed, evidence[m.name].level)
                for m in checked.summaries),
        )],
        "envelopes": [(sid, checked.body)],
        "fingerprints": [(
            sid, chip, canonical_chip(cpu.name), canonical_optional(cpu.brand_raw),
            cpu.cores_total, cpu.cores_performance, cpu.cores_efficiency, fp.memory_bytes,
            fp.memory_gb, fp.unified_memory,
            "; ".join([canonical_chip(g.name) or "" for g in fp.gpus if g.name]) or None,
            len(fp.gpus), os_info.name, canonical_optional(os_info.version), os_info.arch,
            canonical_optional(fp.virtualization), fp.power_source,
            fp.model_dump_json(),
        )],
        "configs": config_rows,
        "trials": trial_rows,
        "summaries": [
            (sid, m.name, m.role, canonical_model(m.model),
             canonical_model_optional(m.draft_model), m.mechanism, m.observed, m.trials,
             m.median_wall_s, m.median_eval_s, m.median_tps, m.min_tps, m.max_tps,
             m.stdev_tps, m.cv_tps, m.speedup_tps, m.speedup_tps_ci_low,
             m.speedup_tps_ci_high, m.speedup_wall, m.outputs_match_baseline,
             evidence[m.name].level, evidence[m.name].reason)
            + _variant(reported, m.draft_model)
            + (m.blocks, m.block_drift, m.speedup_wall_ci_low, m.speedup_wall_ci_high,
               baseline_tps if m.role == "draft" else None, digest_of_id)
            + keys[m.name]
            for m in checked.summaries
        ],
        # Store version 15: per domain of the protocol's prompt set ([] without one).
        "domain_results": domain_rows(sub, sid, digest_of_id),
    }
    return RowSet(rows)
