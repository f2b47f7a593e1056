"""``submission_rows`` builds the very rows of the definition it replaced (kept here).

The rows used to be built as one dict per row, then read in ``tables.py``'s column order;
they are now built directly as tuples, which must be in the tables' order. The
stored values are compared in the store tests; here the rows themselves are held equal to
the reference, value by value and type by type, over example submissions with optional
fields switched off, other machines, protocols and notes (Hypothesis).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import statistics
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Table

from specschema.breakdown import domain_results
from specschema.evidence import config_evidence
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.models import (
    ConfigResult,
    Cpu,
    Fingerprint,
    Gpu,
    Launch,
    OsInfo,
    Runtime,
    Submission,
    TrialCounters,
)
from specschema.protocol_files import find_protocol, get_protocol
from specschema.summary import summarize
from specserver.ingest.checks import Checked
from specserver.ingest.names import (
    canonical,
    canonical_chip,
    canonical_model,
    canonical_optional,
)
from specserver.ingest.rows import naive_utc, submission_rows
from specserver.store import tables
from specserver.store.tables import INGEST_TABLES, RowSet

# --- the reference: the dict-per-row definition ------------------------------------------

_COLUMNS = {t.name: tuple(c.name for c in t.columns) for t in INGEST_TABLES}


def _row(table: Table, values: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(map(values.get, _COLUMNS[table.name]))


def reference_rows(checked: Checked, received_at: datetime) -> dict[str, list[tuple[Any, ...]]]:
    sub = checked.submission
    sid = checked.submission_id
    fp = sub.fingerprint
    baseline = next((c for c in sub.configs if c.role == "baseline"), sub.configs[0])
    reported = {m.name: m for m in sub.models}
    digest = reported[baseline.model].digest if baseline.model in reported else None
    quant = reported[baseline.model].quantization if baseline.model in reported else None
    target = canonical_model(baseline.model)  # names are stored canonical (ingest.names)
    # The first 8 bytes of the id's SHA-256, signed big-endian (store version 12).
    digest_of_id = int.from_bytes(hashlib.sha256(sid.encode()).digest()[:8], "big", signed=True)
    out: dict[str, list[tuple[Any, ...]]] = {t.name: [] for t in INGEST_TABLES}
    out["submissions"].append(_row(tables.submissions, {
        "submission_id": sid, "key_id": checked.key_id, "source": "signed",
        "source_note": None, "created_at": naive_utc(sub.created_at),
        "received_at": naive_utc(received_at), "envelope_sha256": checked.body_sha256,
        "protocol_id": sub.protocol.id, "protocol_version": sub.protocol.version,
        "protocol_sha256": sub.protocol.sha256, "target_model": target,
        "target_digest": digest, "chip": canonical_chip(fp.chip), "memory_gb": fp.memory_gb,
        "engine_version": sub.engine.version, "os_name": fp.os.name,
        "backend": canonical_optional(sub.engine.backend),
        "client_name": canonical(sub.client.name),
        "client_version": sub.client.version, "complete": sub.complete,
        "hidden": checked.quarantine is not None, "hidden_reason": checked.quarantine,
        "note": sub.note,
        "wire_version": sub.schema_version, "engine_name": sub.engine.name,
        "engine_runtime": sub.engine.runtime,
        "engine_build": canonical_optional(sub.engine.build), "engine_log": sub.engine_log,
        "origin_hash": None,
        "target_quant": canonical_optional(quant).upper() if canonical_optional(quant) else None,
        "id_digest": digest_of_id,
        # A draft result on the speedup board (confirmed, counters corroborated) or on the
        # noise floor (not applied): what ages a key.
        "reaches_board": any(
            m.role == "draft" and (m.observed == "not_applied" or (
                m.observed == "confirmed" and config_evidence(
                    sub, {c.name: c for c in sub.configs}[m.name],
                    {x.name: x.speedup_tps for x in checked.summaries}[m.name]
                ).level in ("engine_api", "log")))
            for m in checked.summaries),
    }))
    out["envelopes"].append(_row(tables.envelopes, {"submission_id": sid,
                                                    "body": checked.body}))
    out["fingerprints"].append(_row(tables.fingerprints, {
        "submission_id": sid, "chip": canonical_chip(fp.chip),
        "cpu_name": canonical_chip(fp.cpu.name),
        "cpu_brand_raw": canonical_optional(fp.cpu.brand_raw), "cores_total": fp.cpu.cores_total,
        "cores_performance": fp.cpu.cores_performance,
        "cores_efficiency": fp.cpu.cores_efficiency, "memory_bytes": fp.memory_bytes,
        "memory_gb": fp.memory_gb, "unified_memory": fp.unified_memory,
        "gpu_names": "; ".join(canonical_chip(g.name) or "" for g in fp.gpus if g.name) or None,
        "gpu_count": len(fp.gpus), "os_name": fp.os.name,
        "os_version": canonical_optional(fp.os.version),
        "arch": fp.os.arch, "virtualization": canonical_optional(fp.virtualization),
        "power_source": fp.power_source, "json": fp.model_dump_json(),
    }))
    for config in sub.configs:
        s = config.speculation
        out["configs"].append(_row(tables.configs, {
            "submission_id": sid, "config_name": config.name, "role": config.role,
            "model": canonical_model(config.model),
            "draft_model": canonical_model(config.draft_model) if config.draft_model else None,
            "mechanism": s.mechanism,
            "request_options": json.dumps(config.request_options, sort_keys=True),
            "requested": s.requested, "engine_can_honor": s.engine_can_honor,
            "observed": s.observed, "drafted_tokens": s.drafted_tokens,
            "accepted_tokens": s.accepted_tokens, "counters_source": s.counters_source,
            "outputs_match_baseline": s.outputs_match_baseline,
            "mean_accepted_len": s.mean_accepted_len,
            "launches": json.dumps([x.model_dump(mode="json") for x in s.launches])
            if s.launches else None,
        }))
        for t in config.trials:
            out["trials"].append(_row(tables.trials, {
                "submission_id": sid, "config_name": config.name, "trial_index": t.index,
                "position": t.position, "wall_s": t.wall_s, "ttft_s": t.ttft_s,
                "total_duration_ns": t.total_duration_ns,
                "load_duration_ns": t.load_duration_ns,
                "prompt_eval_count": t.prompt_eval_count,
                "prompt_eval_duration_ns": t.prompt_eval_duration_ns,
                "eval_count": t.eval_count, "eval_duration_ns": t.eval_duration_ns,
                "done_reason": t.done_reason, "output_chars": t.output_chars,
                "output_sha256": t.output_sha256, "cold": t.cold,
                "block_number": t.block,
                **({} if t.counters is None else {
                    "drafted": t.counters.drafted, "accepted": t.counters.accepted,
                    "mean_accepted_len": t.counters.mean_accepted_len,
                    "counters_source": t.counters.source,
                    # store version 14: as JSON writes them, without spaces
                    "rounds": t.counters.rounds,
                    "accepted_per_position": None if t.counters.accepted_per_position is None
                    else json.dumps(t.counters.accepted_per_position, separators=(",", ":"))}),
            }))
    speedups = {m.name: m.speedup_tps for m in checked.summaries}
    configs = {c.name: c for c in checked.submission.configs}
    baseline_tps = next((m.median_tps for m in checked.summaries if m.role == "baseline"),
                        None)
    for summary in checked.summaries:
        values = summary.model_dump()
        values["config_name"] = values.pop("name")
        values["submission_id"] = sid
        values["baseline_tps"] = baseline_tps if summary.role == "draft" else None
        values["id_digest"] = digest_of_id
        found = config_evidence(checked.submission, configs[summary.name],
                                speedups[summary.name])
        values["evidence"], values["evidence_reason"] = found.level, found.reason
        values["model"] = canonical_model(summary.model)
        draft = reported.get(summary.draft_model) if summary.draft_model else None
        if summary.draft_model:
            values["draft_model"] = canonical_model(summary.draft_model)
        values["draft_digest"] = draft.digest if draft else None
        values["draft_quant"] = (draft.quantization.upper()
                                 if draft and draft.quantization else None)
        values.update(_speculation_keys(configs[summary.name]))
        out["summaries"].append(_row(tables.summaries, values))
    out["domain_results"] = _domain_rows(checked.submission, sid, digest_of_id)
    return out


def _domain_rows(sub: Submission, sid: str, digest_of_id: int) -> list[tuple[Any, ...]]:
    """Store version 15: per draft config and domain of the prompt set (none without one),
    by column name: the page's per-domain result, the baseline's median decode tok/s on
    the domain, the counters' totals and the per-position counts summed."""
    protocol = find_protocol(sub.protocol.id, sub.protocol.version, sub.protocol.sha256)
    if protocol is None or not protocol.prompts:
        return []
    domains = [p.domain for p in protocol.prompts]
    baseline = next(c for c in sub.configs if c.role == "baseline")
    rows = []
    for config in (c for c in sub.configs if c.role == "draft"):
        for result in domain_results(sub, config):
            def mine(c: ConfigResult, domain: str = result.domain) -> list[Any]:
                return [t for t in c.trials if domains[t.index % len(domains)] == domain]
            rates = sorted(t.eval_count / t.eval_duration_ns * 1e9 for t in mine(baseline)
                           if t.eval_duration_ns > 0)
            counted = [t.counters for t in mine(config) if t.counters is not None]
            summed = _speculation_keys(config.model_copy(update={"trials": mine(config)}))
            rows.append(_row(tables.domain_results, {
                "submission_id": sid, "config_name": config.name, "domain": result.domain,
                "trials": len(mine(config)), "speedup_tps": result.speedup_tps,
                "speedup_tps_ci_low": result.ci_low, "speedup_tps_ci_high": result.ci_high,
                "baseline_tps": statistics.median(rates) if rates else None,
                "drafted": sum(c.drafted for c in counted) if counted else None,
                "accepted": sum(c.accepted for c in counted) if counted else None,
                "rounds": summed["rounds"],
                "accepted_per_position": summed["accepted_per_position"],
                "id_digest": digest_of_id}))
    return rows


def _speculation_keys(config: ConfigResult) -> dict[str, Any]:
    """Store version 14's columns of a config's summaries row, written out by name: its
    type and depth, and its counted trials' rounds and per-position counts summed (None
    when no trial has counters or one of those lacks either)."""
    options = config.request_options
    kind = options.get("spec_type") if config.speculation.mechanism == "server_launch" else None
    if config.speculation.mechanism == "server_launch" and kind in (None, "", "none"):
        kind = "draft-simple" if config.draft_model is not None else None
    knob = {"ngram-simple": "spec_ngram_simple_size_m", "ngram-mod": "spec_ngram_mod_n_max",
            None: "draft_num_predict"}.get(kind, "spec_draft_n_max")
    depth = options.get(knob)
    counted = [t.counters for t in config.trials if t.counters is not None]
    summed: dict[str, Any] = {"rounds": None, "accepted_per_position": None}
    if counted and all(c.rounds is not None and c.accepted_per_position is not None
                       for c in counted):
        lists = [c.accepted_per_position or [] for c in counted]
        width = max(len(p) for p in lists)
        summed = {"rounds": sum(c.rounds or 0 for c in counted),
                  "accepted_per_position": json.dumps(
                      [sum(p[i] for p in lists if i < len(p)) for i in range(width)],
                      separators=(",", ":"))}
    return {"spec_type": kind,
            "depth": depth if type(depth) is int and depth > 0 else None, **summed}


def typed(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[list[tuple[type, str]]]]:
    """Every value with its type and repr: 1 == 1.0 == True and 0.0 == -0.0 must not pass."""
    return {name: [[(type(v), repr(v)) for v in row] for row in table_rows]
            for name, table_rows in rows.items()}


def as_checked(sub: Submission, key_id: str = "k" * 64, body: bytes = b"{}") -> Checked:
    return Checked(submission=sub, submission_id=str(sub.submission_id), key_id=key_id,
                   body=body, body_sha256="ab" * 32, summaries=summarize(sub))


def assert_same(checked: Checked, received_at: datetime) -> None:
    got = submission_rows(checked, received_at)
    assert isinstance(got, RowSet)
    assert typed(got.rows) == typed(reference_rows(checked, received_at))


@pytest.mark.parametrize("protocol", ["hardnumbers-m2", "ollama-draft"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 7])
@pytest.mark.parametrize("wire", [1, 2])
def test_example_submissions(protocol: str, seed: int, wire: Literal[1, 2]) -> None:
    sub = example_submission(protocol, seed=seed, counters_seen=bool(seed % 2),
                             complete=seed != 2, schema_version=wire)
    assert_same(as_checked(sub), datetime.now(UTC))


def _blank_fingerprint(fp: Fingerprint, blanks: set[str]) -> Fingerprint:
    update: dict[str, Any] = {}
    if "cpu" in blanks:
        update["cpu"] = Cpu()
    if "os" in blanks:
        update["os"] = OsInfo()
    if "gpus" in blanks:
        update["gpus"] = []
    if "gpu_names" in blanks:
        update["gpus"] = [Gpu(name=None), Gpu(name="GPU A"), Gpu(name="GPU B")]
    for name in ("chip", "memory_bytes", "memory_gb", "unified_memory", "virtualization",
                 "power_source"):
        if name in blanks:
            update[name] = None
    return fp.model_copy(update=update)


FP_BLANKS = ["cpu", "os", "gpus", "gpu_names", "chip", "memory_bytes", "memory_gb",
             "unified_memory", "virtualization", "power_source"]


@settings(max_examples=60, deadline=None)
@given(
    protocol=st.sampled_from(["hardnumbers-m2", "ollama-draft"]),
    seed=st.integers(0, 10_000),
    machine=st.sampled_from(EXAMPLE_MACHINES),
    blanks=st.sets(st.sampled_from(FP_BLANKS)),
    note=st.none() | st.text(max_size=40),
    no_digest=st.booleans(),
    no_baseline=st.booleans(),
    backend=st.none() | st.text(min_size=1, max_size=20),
    offset_minutes=st.integers(-600, 600),
    naive=st.booleans(),
    wire=st.sampled_from([1, 2]),
    runtime=st.sampled_from([None, "ggml", "mlx"]),
    launches=st.booleans(),
)
def test_varied_submissions(protocol: str, seed: int, machine: dict[str, object],
                            blanks: set[str], note: str | None, no_digest: bool,
                            no_baseline: bool, backend: str | None, offset_minutes: int,
                            naive: bool, wire: Literal[1, 2], runtime: Runtime | None,
                            launches: bool) -> None:
    sub = example_submission(protocol, seed=seed, machine=machine,
                             counters_seen=seed % 3 == 0, complete=seed % 5 != 0,
                             schema_version=wire, runtime=runtime)
    if wire == 2 and launches:  # v2: launches as logged, and a build string
        launch = Launch(source="llama_server_log", spec_type="draft-mtp", draft_n_max=4)
        sub = sub.model_copy(update={
            "configs": [c.model_copy(update={"speculation": c.speculation.model_copy(
                update={"launches": [launch], "mean_accepted_len": 2.5})})
                for c in sub.configs],
            "engine": sub.engine.model_copy(update={"build": "b10488"}),
        })
    configs = sub.configs
    if no_baseline:  # no config has the baseline role: the first config is the target
        configs = [c.model_copy(update={"role": "draft"}) for c in configs]
    models = sub.models
    if no_digest:
        models = [m.model_copy(update={"digest": None}) for m in models]
    sub = sub.model_copy(update={
        "fingerprint": _blank_fingerprint(sub.fingerprint, blanks),
        "note": note, "configs": configs, "models": models,
        "engine": sub.engine.model_copy(update={"backend": backend}),
    })
    zone = timezone(timedelta(minutes=offset_minutes))
    received_at = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=zone)
    if naive:
        received_at = received_at.replace(tzinfo=None)
    checked = as_checked(sub, body=b"body %d" % seed)
    assert_same(checked, received_at)
    assert_same(replace(checked, summaries=[]), received_at)


def test_a_checked_body_from_the_real_checks() -> None:
    from specserver.ingest.checks import check_submission
    from tests.support.signed import valid_body

    now = datetime.now(UTC)
    checked = check_submission(valid_body(seed=11), now=now, max_age=timedelta(days=30),
                               max_future_skew=timedelta(minutes=5))
    assert_same(checked, now)


def test_rowset_pickles_to_equal_plain_rows() -> None:
    checked = as_checked(example_submission(seed=5), body=b"x" * 100)
    got = submission_rows(checked, datetime.now(UTC))
    back = pickle.loads(pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == got
    assert typed(back.rows) == typed(got.rows)


# llamacpp-map as a run without a draft makes it: n-gram types, MTP, a baseline.
MAP_RUN = get_protocol("llamacpp-map").for_run({})
_COUNTED = st.none() | st.tuples(st.none() | st.integers(0, 2**40),
                                 st.none() | st.lists(st.integers(0, 2**40), max_size=9))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), data=st.data())
def test_rounds_positions_type_and_depth(seed: int, data: st.DataObject) -> None:
    """Store version 14's columns of a llamacpp-map submission: each trial's rounds and
    per-position counts (some trials without counters, without either, with lists of
    every length), each config's type, depth and sums."""
    sub = example_submission(MAP_RUN, seed=seed, schema_version=2, counters_seen=True,
                             engine_version="b6000", blocks=True)
    configs = []
    for config in sub.configs:
        trials = []
        for trial in config.trials:
            drawn = data.draw(_COUNTED) if trial.counters is not None else None
            trials.append(trial.model_copy(update={"counters": None if drawn is None else
                                                   TrialCounters(
                drafted=240, accepted=180, source="engine_api", rounds=drawn[0],
                accepted_per_position=drawn[1])}))
        configs.append(config.model_copy(update={"trials": trials}))
    sub = sub.model_copy(update={"configs": configs})
    assert_same(as_checked(sub), datetime.now(UTC))


def test_the_map_protocols_types_and_depths() -> None:
    """What the reference's rule gives for the shipped map protocols, written out."""
    found = {}
    for name in ("llamacpp-map", "ollama-map", "lmstudio-map"):
        protocol = get_protocol(name)
        sub = example_submission(protocol.for_run({"draft": "qwen3:0.6b"})
                                 if protocol.draft_parameters else protocol, seed=1,
                                 schema_version=2)
        rows = submission_rows(as_checked(sub), datetime.now(UTC)).rows["summaries"]
        names = _COLUMNS["summaries"]
        found[name] = {row[names.index("config_name")]: (
            row[names.index("spec_type")], row[names.index("depth")]) for row in rows}
    assert found == {
        "llamacpp-map": {"no_spec": (None, None), "ngram_simple_m8": ("ngram-simple", 8),
                         "ngram_mod_16": ("ngram-mod", 16), "mtp_n3": ("draft-mtp", 3),
                         "draft_n3": ("draft-simple", 3), "draft_n8": ("draft-simple", 8)},
        "ollama-map": {"spec_off": (None, None), "spec_4": (None, 4), "spec_8": (None, 8)},
        "lmstudio-map": {"no_draft": (None, None), "draft_qwen2.5_0.5b": (None, None),
                         "draft_qwen2.5_1.5b": (None, None)},
    }
