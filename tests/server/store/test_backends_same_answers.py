"""DuckDB and PostgreSQL give the same public answers for the same submissions.

The same signed submissions go through the real ingest path (POST /v1/submissions of an
app on each store), the same moderation goes through the admin API, then every public
read is compared: leaderboard (both views, several groupings), aggregates, stats,
protocols, the submission list and pages, and the CSV / JSON Lines / Parquet exports.
Only ``received_at`` (the ingest clock, different for each store) is left out.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.server.board.test_engine_dimension import llama_server_v2
from tests.support.backends import board_bodies, submission_id_of
from tests.support.served import Served, settings_for
from tests.support.signed import sign_dict, valid_body

TOKEN = "same-answers-token"
BOARD_QUERIES = [
    "/v1/leaderboard",
    "/v1/leaderboard?group_by=chip,memory_gb,ollama_version",
    "/v1/leaderboard?view=noise_floor",
    "/v1/leaderboard?group_by=os&sort=-contributors",
    "/v1/leaderboard?chip=Apple%20M2",
    "/v1/aggregates?group_by=chip,memory_gb,ollama_version",
    "/v1/aggregates?group_by=os,backend",
    "/v1/aggregates?group_by=chip&view=noise_floor",
    # The engine: a comparison dimension, a grouping and two filters.
    "/v1/aggregates?group_by=engine,engine_version,ollama_version",
    "/v1/leaderboard?engine=llama-server",
    "/v1/leaderboard?engine=ollama&view=noise_floor",
    "/v1/leaderboard?engine_version=b1&group_by=engine_version",
    "/v1/stats",
    "/v1/protocols",
]


def _without_received_at(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_received_at(v) for k, v in value.items()
                if not k.endswith("received_at") and k not in {"at", "audit_id"}}
    if isinstance(value, list):
        return [_without_received_at(v) for v in value]
    return value


def _answers(url: str, tmp: Path, bodies: list[bytes], hide: str, ban: str) -> dict[str, Any]:
    settings = settings_for(tmp, database_url=url, admin_token=TOKEN)
    answers: dict[str, Any] = {}
    with Served(settings) as served:
        for body in bodies:  # one at a time: the same ingest order on both stores
            response = served.post(body)
            assert response.status_code == 201, response.text
        auth = {"Authorization": f"Bearer {TOKEN}"}
        hidden = served.request("POST", "/admin/v1/hide", headers=auth,
                                json={"submission_id": hide, "reason": "duplicate machine"})
        banned = served.request("POST", "/admin/v1/ban", headers=auth,
                                json={"key_id": ban, "reason": "test"})
        assert hidden.status_code == 200 and banned.status_code == 200
        for query in BOARD_QUERIES:
            response = served.get(query)
            assert response.status_code == 200, (query, response.text)
            answers[query] = _without_received_at(response.json())
        listed, cursor = [], None
        while True:
            page = served.get("/v1/submissions?limit=7" + (f"&cursor={cursor}" if cursor else ""))
            assert page.status_code == 200, page.text
            data = page.json()
            listed.extend(_without_received_at(data["items"]))
            cursor = data.get("next_cursor")
            if not cursor:
                break
        answers["list"] = listed
        for body in bodies[:3] + [b for b in bodies if submission_id_of(b) == hide]:
            sid = submission_id_of(body)
            answers[f"page {sid}"] = _without_received_at(served.get(f"/v1/submissions/{sid}")
                                                          .json())
        csv_text = served.get("/v1/export?format=csv").text
        rows = list(csv.DictReader(io.StringIO(csv_text)))
        answers["csv"] = [_without_received_at(r) for r in rows]
        answers["jsonl"] = [_without_received_at(json.loads(line))
                            for line in served.get("/v1/export?format=jsonl").text.splitlines()]
        parquet = served.get("/v1/export?format=parquet")
        assert parquet.status_code == 200
        table = pq.read_table(io.BytesIO(parquet.content))
        answers["parquet"] = _without_received_at(table.drop(["received_at"]).to_pylist())
        answers["parquet types"] = {f.name: str(f.type) for f in table.schema}
    return answers


@pytest.mark.postgres
def test_duckdb_and_postgres_answer_the_same(tmp_path: Path, postgres_url: str) -> None:
    bodies = board_bodies(24, contributors=5, start=500)
    # Noise-floor submissions (hardnumbers-m2 drafts are `not_applied`) from other keys.
    bodies += [valid_body(seed=900 + i, key_seed=50 + i % 3) for i in range(6)]
    # llama-server results (wire v2, engine_api counters) from two more keys.
    bodies += [sign_dict(llama_server_v2(seed=950 + i), key_seed=60 + i) for i in range(3)]
    hide = submission_id_of(bodies[3])
    ban_body = json.loads(bodies[4])
    ban = ban_body["signatures"][0]["keyid"]
    (tmp_path / "duck").mkdir()
    (tmp_path / "pg").mkdir()
    duck = _answers(f"duckdb:///{tmp_path / 'duck' / 'store.duckdb'}", tmp_path / "duck",
                    bodies, hide, ban)
    pg = _answers(postgres_url, tmp_path / "pg", bodies, hide, ban)
    assert duck.keys() == pg.keys()
    # The comparison would be empty-for-empty if nothing were visible: make sure it is not.
    board = duck["/v1/leaderboard"]
    assert board["total_groups"] > 0 and board["groups"]
    assert duck["/v1/leaderboard?view=noise_floor"]["groups"]
    assert duck["/v1/leaderboard?engine=llama-server"]["groups"]
    assert {r["engine"] for r in duck["csv"]} == {"ollama", "llama-server"}
    assert len(duck["csv"]) > 0 and len(duck["parquet"]) == len(duck["csv"])
    assert hide not in {r["submission_id"] for r in duck["csv"]}
    for name in duck:
        assert duck[name] == pg[name], name
