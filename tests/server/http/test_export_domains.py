"""The export per kind of work (``/v1/export?rows=domains``), on DuckDB and PostgreSQL: one
row per visible submission x draft config x domain, in every export format, each with the
domain's own figures (specschema.breakdown's, from the signed trials) beside its config's
identity and verdict; the ``domain`` filter keeps that domain's rows; an unknown table of
rows is the API's one error shape."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from specschema import Submission
from specschema.breakdown import domain_results
from specschema.examples import example_submission
from specserver.store import FORMATS
from specserver.store.exporting import DOMAIN_NAMES, EXPORT_ROWS
from tests.server.store.test_acceptance_store import _post, map_result
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for


@pytest.fixture(params=STORES)
def served_maps(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Two map results and a seed protocol's result (no prompt set: no domain rows)."""
    url = store_url_for(request.param, tmp_path, request)
    maps = [map_result(9500), map_result(9501)]
    seed = example_submission("ollama-draft", seed=9502, schema_version=2)
    with Served(settings_for(tmp_path, database_url=url)) as served:
        for i, sub in enumerate([*maps, seed]):
            _post(served, sub, i + 1)
        yield served, maps


def _rows(served: Served, fmt: str, tmp_path: Path, **params: str) -> list[dict[str, Any]]:
    response = served.get("/v1/export", params={"format": fmt, "rows": "domains", **params})
    assert response.status_code == 200, response.text
    assert "specatlas-export-domains." in response.headers["content-disposition"]
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(response.text)))
    if fmt == "jsonl":
        return [json.loads(line) for line in response.text.splitlines()]
    path = tmp_path / "domains.parquet"
    path.write_bytes(response.content)
    with duckdb.connect() as duck:
        found = duck.execute("SELECT * FROM read_parquet(?)", [str(path)])
        names = [column[0] for column in found.description or []]
        return [dict(zip(names, row, strict=True)) for row in found.fetchall()]


def _expected(maps: list[Submission]) -> dict[tuple[str, str, str], Any]:
    return {(str(sub.submission_id), config.name, found.domain): found
            for sub in maps for config in sub.configs if config.role == "draft"
            for found in domain_results(sub, config)}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_has_a_row_per_config_and_kind_of_work(served_maps: Any, fmt: str,
                                                             tmp_path: Path) -> None:
    served, maps = served_maps
    rows = _rows(served, fmt, tmp_path)
    assert rows and list(rows[0]) == list(DOMAIN_NAMES)
    expected = _expected(maps)
    by_key = {(r["submission_id"], r["config_name"], r["domain"]): r for r in rows}
    assert len(by_key) == len(rows) == len(expected) == 2 * 3 * 6  # no seed-protocol row
    for key, found in expected.items():
        row = by_key[key]
        assert float(row["speedup_tps"]) == pytest.approx(found.speedup_tps, rel=1e-12)
        assert int(row["trials"]) == found.trials
        acceptance = found.acceptance
        assert acceptance is not None and acceptance.rounds is not None
        assert int(row["rounds"]) == acceptance.rounds
        assert int(row["accepted"]) == acceptance.accepted
        counts = json.loads(row["accepted_per_position"])
        assert len(counts) == len(acceptance.per_position or ())
        assert row["verdict"] == "confirmed"


def test_the_domain_filter_keeps_that_kind_of_work(served_maps: Any, tmp_path: Path) -> None:
    served, maps = served_maps
    rows = _rows(served, "jsonl", tmp_path, domain="translation")
    assert {r["domain"] for r in rows} == {"translation"}
    assert len(rows) == 2 * 3
    assert _rows(served, "csv", tmp_path, domain="unspecified") == []


def test_an_unknown_table_of_rows_is_refused(served_maps: Any) -> None:
    served, _ = served_maps
    refused = served.get("/v1/export", params={"rows": "trials"})
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "unknown_rows"
    assert error["details"]["allowed"] == list(EXPORT_ROWS)
    # the default is unchanged: one row per submission x config
    plain = served.get("/v1/export", params={"format": "jsonl"})
    assert plain.status_code == 200
    assert "specatlas-export.jsonl" in plain.headers["content-disposition"]
    assert "domain" not in json.loads(plain.text.splitlines()[0])


def test_the_docs_list_the_columns_per_kind_of_work_in_order() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "aggregation.md").read_text(encoding="utf-8")
    paragraph = docs[docs.index("**Per kind of work** (`rows=domains`"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    columns = re.split(r"The\s+`domain`\s+filter", paragraph[paragraph.index("in this\norder"):])[0]
    listed = re.findall(r"`([a-z_0-9]+)`", columns)
    assert [n for n in listed if n in DOMAIN_NAMES] == list(DOMAIN_NAMES)
