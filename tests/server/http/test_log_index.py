"""GET /log/index/<N>: what each entry names, from which an auditor recomputes every
moderation entry (the rule written again in ``specserver.audit.decision_entry``): a ban
names the banned key's earlier entries and no later one, a hide its submission's; an entry
the index cannot describe and a bundle the log does not hold are 404 (DuckDB and
PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specschema.tlog import decode_entries
from specserver.audit import decision_entry
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import valid_body

AUTH = {"Authorization": "Bearer t0ken"}


@pytest.fixture(params=STORES)
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    settings = settings_for(tmp_path, database_url=store_url_for(request.param, tmp_path,
                                                                 request),
                            admin_token="t0ken", log_key_file=str(tmp_path / "log-key"))
    with Served(settings) as s:
        yield s


def test_each_decision_recomputes_from_the_index(served: Served) -> None:
    posted = [served.post(valid_body(seed=10 + i, key_seed=k)).json()
              for i, k in enumerate((1, 2, 1))]
    key = posted[0]["key_id"]
    assert served.request("POST", "/admin/v1/ban", headers=AUTH,
                          json={"key_id": key, "reason": "fabricated"}).status_code == 200
    assert served.request("POST", "/admin/v1/hide", headers=AUTH, json={
        "submission_id": posted[1]["submission_id"], "reason": "dup"}).status_code == 200
    items = served.get("/log/index/000.p/5").json()["items"]
    entries = decode_entries(served.get("/log/tile/entries/000.p/5").content)
    assert [i["kind"] for i in items] == ["envelope"] * 3 + ["moderation"] * 2
    assert [i["submission_id"] for i in items[:3]] == [p["submission_id"] for p in posted]
    ban, hide = items[3], items[4]
    assert ban["decision"]["action"] == "ban" and ban["affects"] == [0, 2]
    assert hide["decision"]["action"] == "hide" and hide["affects"] == [1]
    for item in (ban, hide):
        assert decision_entry(item["decision"], item["affects"]) == entries[item["index"]]
    history = served.get(f"/v1/submissions/{posted[1]['submission_id']}").json()["moderation"]
    assert hide["decision"] in history


def test_bundles_the_log_does_not_hold_are_404(served: Served) -> None:
    served.post(valid_body(seed=30))
    assert served.get("/log/index/000.p/1").status_code == 200
    for path in ("000.p/2", "000", "001.p/1", "0000.p/1", "x000/000.p/1"):
        assert served.get(f"/log/index/{path}").status_code == 404, path
