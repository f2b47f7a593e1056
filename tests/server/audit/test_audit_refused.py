"""The auditor knows refused entries (0x03: an envelope refused after its signature
verified) and stored cost probes (0x04): a log holding them checks out, each counted; a
refused entry rewritten in the database into an envelope entry that names a submission is
caught (DuckDB and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import update

from specserver.store import tables
from tests.server.audit.test_audit_cli import Deployment, edited_beside, publish, run_cli
from tests.server.audit.test_audit_cli import deployment as deployment  # noqa: F401 - fixture
from tests.server.http.test_log_refused import broken_rule
from tests.support.crowd import M2, cost_probe, map_result, signed_probe, target_of


def test_refused_entries_check_out_and_one_rewritten_as_stored_is_caught(
        deployment: Deployment, capsys: Any) -> None:
    with deployment.running() as url:
        publish(url)
        refused = httpx.post(f"{url}/v1/submissions", content=broken_rule(70))
        assert refused.status_code == 422 and refused.headers["log-entry"].startswith("index=4,")
        probe = httpx.post(f"{url}/v1/probes", content=signed_probe(
            cost_probe(target_of(map_result(0, M2)), M2), 71))
        assert probe.status_code == 201 and probe.json()["log"]["index"] == 5
        code, out, err = run_cli(["audit", "--from", url], capsys)
        assert code == 0, out + err
        assert "6 entries" in out
        assert "1 refused envelopes described (their hashes only)" in out
        assert "1 cost probes described (their hashes only: not served)" in out
    # the refused entry's row rewritten to claim a stored submission the server never had
    stored_id = "00000000-0000-4000-8000-000000000000"
    with edited_beside(deployment, update(tables.log_entries).where(
            tables.log_entries.c.idx == 4).values(entry=b"\x01" + b"\x00" * 32,
                                                  submission_id=stored_id)) as url:
        code, out, _ = run_cli(["audit", "--from", url], capsys)
        assert code == 3, out
        assert (f"FAIL submission {stored_id}: logged as entry 4, the server no longer has "
                "it [submission_missing]") in out
