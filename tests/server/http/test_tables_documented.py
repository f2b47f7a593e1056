"""The dimension table and the export-format table reach every surface that lists them: the
OpenAPI text, docs/aggregation.md, docs/maintainers.md and the maintainer CLI; the OpenAPI
text names every shipped protocol, and docs/aggregation.md lists the export's columns in
order. A dimension, a filter, a format or an export column added to its table and missing
from one of them fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from specschema.protocol_files import shipped_protocols
from specserver.cli import admin as admin_cli
from specserver.http.app import create_app
from specserver.store.dimensions import DIMENSIONS, FILTERS, GROUP_FIELDS
from specserver.store.exportformat import FORMATS
from specserver.store.exporting import EXPORT_NAMES
from tests.support.served import settings_for

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    app = create_app(settings_for(tmp_path_factory.mktemp("openapi")))
    document: dict[str, Any] = app.openapi()
    return document


def _parameters(openapi: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in openapi["paths"][path]["get"]["parameters"]}


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end != -1 else len(text)]


@pytest.mark.parametrize("path", ["/v1/leaderboard", "/v1/aggregates", "/v1/submissions",
                                  "/v1/export"])
def test_every_filter_is_an_openapi_parameter_with_its_allowed_values(openapi, path) -> None:
    documented = _parameters(openapi, path)
    for dimension in DIMENSIONS:
        spec = dimension.filter
        if spec is None:
            continue
        entry = documented[dimension.name]
        assert entry["description"].startswith(dimension.description)
        if spec.kind == "choice":
            assert entry["schema"]["enum"] == list(spec.choices())  # type: ignore[misc]
        if spec.kind == "list":
            assert all(v in entry["description"] for v in spec.choices())  # type: ignore[misc]


def test_the_openapi_text_names_every_shipped_protocol_and_dimension(openapi) -> None:
    board = _parameters(openapi, "/v1/leaderboard")
    assert board["protocol"]["schema"]["enum"] == sorted(shipped_protocols())
    group_by = board["group_by"]["description"]
    assert all(re.search(rf"\b{name}\b", group_by) for name in GROUP_FIELDS)


def test_the_openapi_text_names_every_export_format_and_its_media_type(openapi) -> None:
    export = openapi["paths"]["/v1/export"]["get"]
    fmt = _parameters(openapi, "/v1/export")["format"]
    assert fmt["schema"]["enum"] == list(FORMATS)
    assert all(name in fmt["description"] for name in FORMATS)
    content = export["responses"]["200"]["content"]
    # FastAPI adds the route's own JSON default beside the formats' media types
    assert set(content) - {"application/json"} == {f.media_type.split(";")[0]
                                                    for f in FORMATS.values()}


def test_docs_aggregation_lists_every_group_by_dimension_and_no_other() -> None:
    groups = _section((DOCS / "aggregation.md").read_text(encoding="utf-8"), "## Groups")
    table = re.findall(r"^\| `([a-z_]+)` \|", groups, re.M)
    assert sorted(table) == sorted(GROUP_FIELDS)


def test_docs_aggregation_names_every_filter_and_export_format() -> None:
    reading = _section((DOCS / "aggregation.md").read_text(encoding="utf-8"), "## Reading it")
    board_row = next(line for line in reading.splitlines()
                     if line.startswith("| `/v1/leaderboard`"))
    missing = [name for name in FILTERS if f"`{name}`" not in board_row]
    assert not missing
    export_row = next(line for line in reading.splitlines() if "`/v1/export" in line)
    assert all(name in export_row for name in FORMATS)


def test_the_maintainer_docs_and_cli_take_every_export_format() -> None:
    maintainers = (DOCS / "maintainers.md").read_text(encoding="utf-8")
    export_row = next(line for line in maintainers.splitlines()
                      if line.startswith("| `specserver export"))
    assert all(name in export_row for name in FORMATS)
    for spec in FORMATS.values():
        for extension in spec.extensions:
            assert admin_cli.export_format(Path(f"out{extension}"), None) == spec.name
        assert admin_cli.export_format(Path("out.bin"), spec.name) == spec.name


def test_docs_aggregation_lists_the_export_columns_in_order() -> None:
    reading = _section((DOCS / "aggregation.md").read_text(encoding="utf-8"), "## Reading it")
    listed = reading[reading.index("### Export columns"):]
    cells = re.findall(r"^\| (`[a-z_0-9]+`(?:, `[a-z_0-9]+`)*) \|", listed, re.M)
    assert [name for cell in cells for name in re.findall(r"`([a-z_0-9]+)`", cell)] == list(
        EXPORT_NAMES)
