"""Wire format v2 at the server: the rules, the 422s, the rows, the upgrade.

v1 submissions keep being accepted (the rest of tests/server posts v1 bodies); here v2
ones are accepted with their new fields stored, counters that contradict the trials are
refused naming ``counters_consistent``, verdicts that the one rule does not derive are
refused naming ``speculation_coherent``, and a store of the previous version gains the
new columns without losing a row.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, text

from specschema.capability import submission_verdicts
from specschema.payload import parse_submission
from specserver.store import tables
from specserver.store.database import make_engine
from specserver.store.migrations import LATEST, migrate
from tests.server.ingest.test_ingest_rules import NOW, rules_broken
from tests.support.backends import board_bodies, stored_envelope_sha
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, error_of, settings_for
from tests.support.signed import payload_dict, sign_dict

MTP = {"source": "llama_server_log", "spec_type": "draft-mtp", "draft_n_max": 4,
       "draft_model": False, "draft_model_digest": None, "synthetic_flags": []}


def v2(seed: int = 1, *, created_at: datetime = NOW, **kwargs: Any) -> dict[str, Any]:
    data = payload_dict(seed, "ollama-draft", engine_version="0.34.1", target="gemma4:mtp",
                        counters_seen=True, schema_version=2, runtime="ggml",
                        created_at=created_at, **kwargs)
    return data


def honest(data: dict[str, Any]) -> dict[str, Any]:
    submission = parse_submission(json.dumps(data).encode())
    for config, verdict in zip(data["configs"], submission_verdicts(submission), strict=True):
        config["speculation"]["observed"] = verdict
    return data


def test_a_ggml_v2_run_with_per_trial_counters_passes_every_rule() -> None:
    data = v2()
    assert [c["speculation"]["observed"] for c in data["configs"]] == [
        "not_applied", "confirmed", "confirmed"]
    assert all(t["counters"] for t in data["configs"][1]["trials"])
    assert rules_broken(data) == set()


@pytest.mark.parametrize("change, where", [
    (lambda t: t["counters"].update(accepted=241), "trials.0.counters.accepted"),
    (lambda t: t["counters"].update(drafted=2000, accepted=1990),
     "trials.0.counters.accepted"),  # more accepted than the 200 tokens generated
    (lambda t: t["counters"].update(drafted=241), "speculation.drafted_tokens"),  # sums
])
def test_counters_that_contradict_the_trials_are_refused(change: Any, where: str) -> None:
    data = v2()
    change(data["configs"][1]["trials"][0])
    found = rules_broken(data)
    assert "counters_consistent" in found


def test_only_an_engine_with_api_counters_reports_them() -> None:
    # A llama-server run (its counters are its API's); the same claimed by Ollama, whose
    # descriptor has no API counters, is refused. (A llama-server result of ollama-draft
    # would be refused anyway: llama-server has no draft_num_predict to honour.)
    data = payload_dict(1, "llamacpp-draft", engine_version="b6123", counters_seen=True,
                        schema_version=2, runtime="ggml", created_at=NOW)
    data["engine"]["name"] = "llama-server"
    for config in data["configs"]:
        for t in config["trials"]:
            if t.get("counters"):
                t["counters"]["source"] = "engine_api"
        if config["speculation"].get("counters_source"):
            config["speculation"]["counters_source"] = "engine_api"
    assert rules_broken(honest(data)) == set()
    data["engine"]["name"] = "ollama"
    assert rules_broken(data) == {"counters_consistent"}


@pytest.mark.parametrize("break_it, verdicts", [
    (lambda d: d["engine"].update(runtime="mlx"),
     ["cannot_compare", "cannot_compare", "cannot_compare"]),
    (lambda d: d["configs"][0]["speculation"].update(launches=[MTP]),
     ["baseline_speculated"] * 3),
    (lambda d: d["configs"][2]["speculation"].update(
        launches=[dict(MTP, synthetic_flags=["--spec-synth-len"])]),
     ["not_applied", "confirmed", "synthetic"]),
])
def test_a_confirmed_claim_the_evidence_does_not_support_is_refused(
        break_it: Any, verdicts: list[str]) -> None:
    data = v2()
    break_it(data)
    assert rules_broken(data) == {"speculation_coherent"}
    honest(data)
    assert [c["speculation"]["observed"] for c in data["configs"]] == verdicts
    assert rules_broken(data) == set()


def _now_v2(seed: int) -> dict[str, Any]:
    return v2(seed, created_at=datetime.now().astimezone())


def test_v2_is_stored_with_its_new_fields(tmp_path: Path) -> None:
    data = honest(_now_v2(31))
    data["configs"][0]["speculation"]["launches"] = [dict(MTP, spec_type="none")]
    data["engine"]["build"] = "b10488"
    honest(data)
    with Served(settings_for(tmp_path)) as served:
        response = served.post(sign_dict(data))
        assert response.status_code == 201, response.text
        with served.store.engine.connect() as conn:
            sub = conn.execute(select(tables.submissions)).one()
            assert (sub.wire_version, sub.engine_name, sub.engine_runtime, sub.engine_build,
                    sub.engine_log) == (2, "ollama", "ggml", "b10488", "read")
            trials = conn.execute(select(tables.trials).where(
                tables.trials.c.config_name == "spec_4")).all()
            assert {(t.drafted, t.accepted, t.counters_source) for t in trials} == {
                (240, 180, "llama_server_log")}
            base = conn.execute(select(tables.configs).where(
                tables.configs.c.config_name == "spec_off")).one()
            assert json.loads(base.launches)[0]["spec_type"] == "none"


def test_counters_over_eval_count_are_422_naming_the_rule(tmp_path: Path) -> None:
    data = _now_v2(32)
    config = data["configs"][1]
    for t in config["trials"]:
        t["counters"].update(drafted=900, accepted=899)
    config["speculation"].update(drafted_tokens=900 * 5, accepted_tokens=899 * 5)
    with Served(settings_for(tmp_path)) as served:
        response = served.post(sign_dict(data))
        assert response.status_code == 422
        error = error_of(response)
        assert error["message"].startswith("counters_consistent:")
        assert "eval_count" in error["message"]
        counts = served.counts()
        assert counts.pop("log_entries") == 1  # the refusal, logged: test_log_refused.py
        assert all(count == 0 for count in counts.values())


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def test_a_version_2_store_gains_the_wire_v2_columns(store_url: str, tmp_path: Path) -> None:
    bodies = board_bodies(4, start=6000)
    (tmp_path / "app").mkdir()
    with Served(settings_for(tmp_path / "app", database_url=store_url)) as served:
        assert all(served.post(b).status_code == 201 for b in bodies)
    engine = make_engine(store_url)
    try:
        with engine.begin() as conn:  # what store version 2 had: none of the v2 columns
            for table, column in (("submissions", "wire_version"),
                                  ("submissions", "engine_name"),
                                  ("submissions", "engine_runtime"),
                                  ("submissions", "engine_build"),
                                  ("submissions", "engine_log"),
                                  ("configs", "mean_accepted_len"), ("configs", "launches"),
                                  ("trials", "drafted"), ("trials", "accepted"),
                                  ("trials", "mean_accepted_len"),
                                  ("trials", "counters_source")):
                conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
            if conn.dialect.name == "postgresql":
                conn.execute(text("ALTER TABLE configs ALTER COLUMN observed TYPE VARCHAR(16)"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(
                version=2, applied_at=datetime(2026, 11, 1)))
        before = stored_envelope_sha(engine)
        assert migrate(engine) == LATEST
        assert stored_envelope_sha(engine) == before
        with engine.connect() as conn:
            rows = conn.execute(select(tables.trials.c.drafted, tables.submissions.c.engine_name)
                                .select_from(tables.trials.join(
                                    tables.submissions, tables.submissions.c.submission_id
                                    == tables.trials.c.submission_id))).all()
            assert rows and set(map(tuple, rows)) == {(None, None)}  # old rows: not known
    finally:
        engine.dispose()
    with Served(settings_for(tmp_path / "app", database_url=store_url)) as served:
        data = honest(_now_v2(33))
        data["engine"]["runtime"] = "mlx"
        honest(data)
        assert data["configs"][0]["speculation"]["observed"] == "cannot_compare"
        data["configs"][0]["speculation"]["launches"] = [MTP]  # baseline_speculated: 19 chars
        honest(data)
        response = served.post(sign_dict(data))
        assert response.status_code == 201, response.text


def test_new_verdicts_are_explained_and_kept_off_the_boards(tmp_path: Path) -> None:
    data = _now_v2(34)
    data["engine"]["runtime"] = "mlx"
    honest(data)
    data["engine_log"] = "not_given"
    with Served(settings_for(tmp_path)) as served:
        response = served.post(sign_dict(data))
        assert response.status_code == 201, response.text
        sid = response.json()["submission_id"]
        view = served.get(f"/v1/submissions/{sid}").json()
        helps = {c["config_name"]: c["verdict_help"] for c in view["configs"]}
        assert "MLX" in helps["spec_4"]["meaning"] and helps["spec_4"]["what_to_do"]
        page = served.get(f"/submissions/{sid}").text
        assert "cannot be switched off per request" in page
        for view_name in ("speedup", "noise_floor"):
            board = served.get(f"/v1/leaderboard?view={view_name}").json()
            assert board["groups"] == [] and board["results"] == 0  # on no board
        assert board["verdict_counts"]["cannot_compare"] == 2  # counted, shown apart
        # the same run on GGML, confirmed, does reach the speedup board
        assert served.post(sign_dict(honest(_now_v2(35)))).status_code == 201
        assert served.get("/v1/leaderboard?view=speedup").json()["results"] == 2
