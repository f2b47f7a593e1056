"""Store version 14 through the ingest path, on DuckDB and PostgreSQL: a llamacpp-map
result's trials keep their draft rounds and per-position counts, its configs their
speculative type, depth and summed counts; the submission's JSON and the exports carry
them; the acceptance per position of the stored rows is the signed trials'; and a store of
the version before gains the columns, type and depth filled from its request options."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import delete, insert, select, text

from specschema import Submission, TrialCounters, get_protocol, submission_bytes
from specschema.breakdown import acceptance_of
from specschema.examples import example_submission
from specserver.store import positions_of, positions_text, stored_profile, tables
from specserver.store.database import make_engine
from specserver.store.migrations import LATEST, MIGRATIONS, migrate
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import sign_dict

BEFORE = next(m.version for m in MIGRATIONS if m.apply.__name__ == "speculation_keys") - 1
RUN = get_protocol("llamacpp-map").for_run({})  # no draft model: n-gram, MTP, baseline
# Per trial (cycled): rounds and per-position counts of 64 drafted, 48 accepted, each
# within the client's rules (they sum to the accepted, never grow with the position, the
# first is at most the rounds, and the rounds hold the drafted tokens).
SHAPES = ((16, [16, 16, 10, 6]), (20, [20, 14, 10, 4]), (24, [20, 16, 12]))
TYPES = {"no_spec": (None, None), "ngram_simple_m8": ("ngram-simple", 8),
         "ngram_mod_16": ("ngram-mod", 16), "mtp_n3": ("draft-mtp", 3)}


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def map_result(seed: int, *, without_rounds: str | None = None) -> Submission:
    """A llamacpp-map result as llama-server's /metrics gives it; the config
    ``without_rounds`` has counters but no rounds (a client before them)."""
    sub = example_submission(RUN, seed=seed, engine_version="b6000", schema_version=2,
                             runtime="ggml", counters_seen=True, blocks=True,
                             created_at=datetime.now().astimezone(),
                             draft_speedups={"ngram_simple_m8": 1.4, "ngram_mod_16": 1.3,
                                             "mtp_n3": 1.2})
    configs = []
    for config in sub.configs:
        if config.role == "baseline":
            configs.append(config)
            continue
        trials = []
        for i, trial in enumerate(config.trials):
            rounds, positions = SHAPES[i % len(SHAPES)]
            if config.name == without_rounds:
                rounds, positions = None, None  # type: ignore[assignment]
            trials.append(trial.model_copy(update={"counters": TrialCounters(
                drafted=64, accepted=48, source="engine_api", rounds=rounds,
                accepted_per_position=positions)}))
        spec = config.speculation.model_copy(update={
            "drafted_tokens": 64 * len(trials), "accepted_tokens": 48 * len(trials),
            "counters_source": "engine_api"})
        configs.append(config.model_copy(update={"trials": trials, "speculation": spec}))
    return sub.model_copy(update={
        "configs": configs, "engine": sub.engine.model_copy(update={
            "name": "llama-server", "build": "0.5.0-dev (build 6000, commit 0c1e570)"})})


def _post(served: Served, sub: Submission, key_seed: int) -> None:
    response = served.post(sign_dict(json.loads(submission_bytes(sub)), key_seed))
    assert response.status_code == 201, response.text


def _stored(engine: Any, submission_id: str) -> tuple[list[Any], list[Any]]:
    trl, summ = tables.trials, tables.summaries
    with engine.connect() as conn:
        trials = conn.execute(select(
            trl.c.config_name, trl.c.trial_index, trl.c.drafted, trl.c.rounds,
            trl.c.accepted_per_position).where(trl.c.submission_id == submission_id)
            .order_by(trl.c.config_name, trl.c.trial_index)).all()
        summaries = conn.execute(select(
            summ.c.config_name, summ.c.spec_type, summ.c.depth, summ.c.rounds,
            summ.c.accepted_per_position).where(summ.c.submission_id == submission_id)
            .order_by(summ.c.config_name)).all()
    return [tuple(r) for r in trials], [tuple(r) for r in summaries]


def test_ingest_keeps_rounds_positions_type_and_depth(store_url: str, tmp_path: Path) -> None:
    sub, older = map_result(9100), map_result(9101, without_rounds="ngram_mod_16")
    sid = str(sub.submission_id)
    with Served(settings_for(tmp_path, database_url=store_url)) as served:
        _post(served, sub, 1)
        _post(served, older, 2)
        view = served.get(f"/v1/submissions/{sid}").json()
        export = served.get("/v1/export", params={"format": "jsonl"})
        table = served.get("/v1/export", params={"format": "csv"})
        engine = served.store.engine
        trials, summaries = _stored(engine, sid)
        _, older_summaries = _stored(engine, str(older.submission_id))
    configs = {c.name: c for c in sub.configs}
    # every trial as signed: its rounds and its per-position counts as compact JSON
    assert trials == sorted(
        (c.name, t.index, t.counters and t.counters.drafted,
         t.counters and t.counters.rounds,
         t.counters and json.dumps(t.counters.accepted_per_position, separators=(",", ":")))
        for c in sub.configs for t in c.trials)
    n = len(configs["ngram_simple_m8"].trials)  # 12: four of each shape
    summed = (n * 20, "[" + ",".join(str(n // 3 * (a + b + c)) for a, b, c in zip(
        [16, 16, 10, 6], [20, 14, 10, 4], [20, 16, 12, 0], strict=True)) + "]")
    assert summaries == sorted(
        (name, kind, depth, *((None, None) if name == "no_spec" else summed))
        for name, (kind, depth) in TYPES.items())
    # a config whose trials did not report rounds: its type and depth, no sums
    assert {r[0]: r[1:] for r in older_summaries}["ngram_mod_16"] == (
        "ngram-mod", 16, None, None)
    # the acceptance per position of the stored rows is the signed trials', from a
    # config's trial rows and from its summaries row alike
    for name in ("ngram_simple_m8", "mtp_n3"):
        signed = acceptance_of(configs[name].trials)
        assert signed is not None and signed.per_position is not None
        rows = [(r[3], r[4]) for r in trials if r[0] == name]
        assert stored_profile(rows) == signed.per_position
        summary = next(r for r in summaries if r[0] == name)
        assert stored_profile([(summary[3], summary[4])]) == signed.per_position
    # the public JSON: lists, not text
    by_config = {s["config_name"]: s for s in view["summary"]}
    assert by_config["ngram_mod_16"]["spec_type"] == "ngram-mod"
    assert by_config["ngram_mod_16"]["depth"] == 16
    assert by_config["ngram_mod_16"]["rounds"] == summed[0]
    assert by_config["ngram_mod_16"]["accepted_per_position"] == json.loads(summed[1])
    assert by_config["no_spec"]["accepted_per_position"] is None
    first = next(t for t in view["trials"] if t["config_name"] == "mtp_n3")
    assert (first["rounds"], first["accepted_per_position"]) in [
        (r, p) for r, p in SHAPES]
    # the exports: one row per config, with its type, depth and sums
    rows = [json.loads(line) for line in export.text.splitlines()]
    mine = {r["config_name"]: r for r in rows if r["submission_id"] == sid}
    assert {name: (r["spec_type"], r["depth"]) for name, r in mine.items()} == TYPES
    assert (mine["mtp_n3"]["rounds"], mine["mtp_n3"]["accepted_per_position"]) == summed
    cells = {r["config_name"]: r for r in csv.DictReader(io.StringIO(table.text))
             if r["submission_id"] == sid}
    assert (cells["ngram_simple_m8"]["depth"], cells["ngram_simple_m8"]["rounds"],
            cells["ngram_simple_m8"]["accepted_per_position"]) == ("8", str(summed[0]),
                                                                    summed[1])
    assert cells["no_spec"]["spec_type"] == cells["no_spec"]["rounds"] == ""


def test_a_store_from_before_gets_the_columns_with_type_and_depth_filled(
        store_url: str, tmp_path: Path) -> None:
    """The version before kept none of them: upgraded, its trials' and configs' counts
    stay null (not recorded), while type and depth are filled by ingestion's rule from
    the stored request options, for llama-server and Ollama rows alike."""
    ollama = example_submission("ollama-map", seed=9200, engine_version="0.30.1",
                                schema_version=2, blocks=True, target="qwen3.5:9b-mtp",
                                created_at=datetime.now().astimezone())
    settings = settings_for(tmp_path / "app", database_url=store_url)
    subs = (map_result(9201), ollama)
    with Served(settings) as served:
        for seed, sub in enumerate(subs):
            _post(served, sub, seed + 3)
    engine = make_engine(store_url)
    try:
        written = {str(s.submission_id): _stored(engine, str(s.submission_id)) for s in subs}
        assert {r[0]: r[1:3] for r in written[str(subs[1].submission_id)][1]} == {
            "spec_off": (None, None), "spec_4": (None, 4), "spec_8": (None, 8)}
        with engine.begin() as conn:  # what every store of the version before holds
            for table, column in (("trials", "rounds"), ("trials", "accepted_per_position"),
                                  ("summaries", "spec_type"), ("summaries", "depth"),
                                  ("summaries", "rounds"),
                                  ("summaries", "accepted_per_position")):
                conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(
                version=BEFORE, applied_at=datetime(2026, 12, 6)))
        assert migrate(engine) == LATEST
        for sid, (trials, summaries) in written.items():
            after_trials, after_summaries = _stored(engine, sid)
            assert after_trials == [(*r[:3], None, None) for r in trials]
            assert after_summaries == [(*r[:3], None, None) for r in summaries]
        assert migrate(engine) == LATEST  # again: nothing left to do
    finally:
        engine.dispose()
    with Served(settings) as served:
        body = served.get("/v1/export", params={"format": "jsonl"})
        assert body.status_code == 200
        exported = {(r["config_name"], r["spec_type"], r["depth"], r["rounds"])
                    for r in map(json.loads, body.text.splitlines())}
        assert ("ngram_mod_16", "ngram-mod", 16, None) in exported
        assert ("spec_8", None, 8, None) in exported


@given(st.lists(st.integers(0, 2**53 - 1), max_size=64), st.booleans())
def test_the_stored_text_is_compact_json(counts: list[int], as_tuple: bool) -> None:
    text_ = positions_text(tuple(counts) if as_tuple else counts)
    assert text_ == json.dumps(counts, separators=(",", ":"))
    assert positions_of(text_) == counts


@pytest.mark.parametrize("stored", ['{"a": 1}', "[1, true]", '[1, "2"]', "[1.5]"])
def test_stored_text_that_is_not_a_list_of_counts_is_refused(stored: str) -> None:
    with pytest.raises(ValueError, match="not a stored list of counts"):
        positions_of(stored)
