"""The public exports (CSV, JSONL, Parquet): one row per submission and config, files reused
across inserts but never across moderation, a full disk a 503."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from specserver.http import public
from tests.server.http.public_store import COUNT, hide, insert_one


def _export_ids(client, **params: str) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    response = client.get("/v1/export", params={"format": "jsonl", **params})
    assert response.status_code == 200, response.text
    ids = sorted({json.loads(line)["submission_id"] for line in response.text.splitlines()})
    return response.headers["etag"], ids


def test_an_export_file_is_reused_across_inserts_but_never_across_moderation(client, store):
    engine, ids = store
    etag, before = _export_ids(client)
    assert len(before) == COUNT + 1
    insert_one(store)
    # Reused: the same rows under the same ETag (the version the file holds), and a client
    # that has it is told so. New submissions may be export_reuse_s late.
    assert _export_ids(client) == (etag, before)
    assert client.get("/v1/export?format=jsonl",
                      headers={"If-None-Match": etag}).status_code == 304
    # Other filters or another format are another file, written now: the insert is there.
    rows = csv.DictReader(io.StringIO(client.get("/v1/export", params={"format": "csv"}).text))
    assert len({row["submission_id"] for row in rows}) == COUNT + 2
    # A hide is a moderation action: the kept file is not reused, the row is gone at once.
    hide(engine, ids[0])
    fresh_etag, after = _export_ids(client)
    assert fresh_etag != etag
    assert ids[0] not in after and len(after) == COUNT + 1  # one hidden, one inserted
    stale = client.get("/v1/export?format=jsonl", headers={"If-None-Match": etag})
    assert stale.status_code == 200


def test_export_reuse_0_writes_a_new_file_after_any_insert(unreused_client, store):
    etag, before = _export_ids(unreused_client)
    assert _export_ids(unreused_client) == (etag, before)  # unchanged data: the same file
    insert_one(store)
    fresh_etag, after = _export_ids(unreused_client)
    assert fresh_etag != etag and len(after) == len(before) + 1


def test_kept_export_files_are_gone_when_cleared(client):
    for fmt in ("csv", "jsonl", "parquet"):
        assert client.get("/v1/export", params={"format": fmt}).status_code == 200
    kept = [Path(k.path) for k in client.app.state.export_files._kept.values()]
    assert len(kept) == 3 and all(path.is_file() for path in kept)
    client.app.state.export_files.clear()
    assert not any(path.exists() for path in kept)


def test_export_csv_one_row_per_submission_and_config(client):
    response = client.get("/v1/export", params={"format": "csv"})
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == (COUNT + 1) * 3
    assert {r["role"] for r in rows} == {"baseline", "draft"}
    draft = next(r for r in rows if r["verdict"] == "confirmed")
    assert float(draft["speedup_tps"]) > 1.0
    filtered = client.get("/v1/export", params={"format": "csv", "chip": "Apple M2"}).text
    assert len(list(csv.DictReader(io.StringIO(filtered)))) == (4 + 1) * 3


def test_export_jsonl_and_parquet_agree(client, tmp_path):
    lines = client.get("/v1/export", params={"format": "jsonl"}).text.splitlines()
    records = [json.loads(line) for line in lines]
    response = client.get("/v1/export", params={"format": "parquet"})
    path = tmp_path / "export.parquet"
    path.write_bytes(response.content)
    table = pq.read_table(path)
    assert table.num_rows == len(records) == (COUNT + 1) * 3
    assert sorted(table.column("submission_id").to_pylist()) == sorted(
        r["submission_id"] for r in records)
    speedups = {(r["submission_id"], r["config_name"]): r["speedup_tps"] for r in records}
    for row in table.to_pylist():
        assert row["speedup_tps"] == speedups[(row["submission_id"], row["config_name"])]
    unknown = client.get("/v1/export", params={"format": "xlsx"})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["details"]["allowed"] == ["csv", "jsonl", "parquet"]


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"),
                                     duckdb.IOException("could not write file")])
def test_parquet_export_on_a_full_disk_is_503_not_500(client, monkeypatch, failure):
    def full_disk(conn, filters, path, rows="configs"):
        with open(path, "wb") as handle:
            handle.write(b"PAR1")
        raise failure

    monkeypatch.setattr(public.exporting, "write_parquet", full_disk)
    before = set(_tmp_parquet_files())
    response = client.get("/v1/export", params={"format": "parquet"})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "30"
    assert response.json()["error"]["code"] == "store_unavailable"
    assert set(_tmp_parquet_files()) == before  # the half-written file is gone
    # CSV is made from the same Parquet file on DuckDB (exporting.materialize), so it is
    # 503 too while the disk is full, and whole again once it is not.
    assert client.get("/v1/export", params={"format": "csv"}).status_code == 503
    monkeypatch.undo()
    assert client.get("/v1/export", params={"format": "csv"}).status_code == 200


def _tmp_parquet_files():
    import glob
    import tempfile

    return glob.glob(f"{tempfile.gettempdir()}/*.parquet")
