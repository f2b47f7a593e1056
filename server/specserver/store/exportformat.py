"""The export formats (``FORMATS``, one entry each) and the text ones, CSV and JSON Lines,
written from rows: what the export child process runs
(``python -m specserver.store.exportformat PARQUET FORMAT OUT``, see
``exporting.materialize``).

It imports the standard library and DuckDB only, never SQLAlchemy, the models or the rest of
the server: the child starts for every export file, and the server's imports were ~0.4 s of
its ~1.5 s of CPU per file (BENCHMARKS.md, "Stalled exports"), paid again each time a
stalled client's slot is re-filled. The column names and kinds come with the rows: from
``exporting.EXPORT_COLUMNS`` in the server (``exporting``), from the Parquet file's own types
here; both give the same bytes (tested).

CSV cells are safe for spreadsheets (OWASP "CSV injection"): every public text
field (chip, model names, client name, ...) is the contributor's, so a text cell that a
spreadsheet would read as a formula (first character ``= + - @``, tab or CR, or their
full-width forms, also after leading spaces) gets a leading ``'``, and CR/LF inside a value
become spaces, so each physical line is one record that starts with a submission id.
Numbers stay numbers (a negative speedup is not prefixed). JSON Lines carries the exact
values: it has no formulas, and JSON escapes control characters.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# What a spreadsheet takes as the start of a formula (OWASP), with the full-width forms
# some spreadsheets fold to them.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " ", "\u2028": " ", "\u2029": " ",
                              "\x0b": " ", "\x0c": " ", "\x85": " "})
# DuckDB types whose values are never text (the Parquet file's columns, as DuckDB reads them)
_NOT_TEXT = ("BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT",
             "DOUBLE", "DECIMAL")


@dataclass(frozen=True)
class Layout:
    """The export's columns: names in order, and the positions of the timestamp columns and
    of those that may hold text (all but numbers and booleans), the only cells converted."""

    names: tuple[str, ...]
    times: tuple[int, ...]
    texts: tuple[int, ...]


def cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat() + "Z"
    return value


def spreadsheet_text(text: str) -> str:
    """A text cell no spreadsheet evaluates and that stays on its record's line."""
    if not text.isprintable():  # a line break is not printable: the common case is cheap
        text = text.translate(_LINE_BREAKS)  # first: "\n=1" must not become " =1" unmarked
    first = text[:1]
    if first == " ":
        first = text.lstrip(" ")[:1]
    if first and first in FORMULA_STARTS:
        text = "'" + text
    return text


def csv_chunks(rows: Iterable[tuple[Any, ...]], layout: Layout,
               batch: int = 500) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")  # None is written as an empty cell
    writer.writerow(layout.names)
    times, texts = layout.times, layout.texts
    for count, row in enumerate(rows, 1):
        cells = list(row)
        for i in times:
            cells[i] = cell(cells[i])
        for i in texts:
            value = cells[i]
            if isinstance(value, str):
                cells[i] = spreadsheet_text(value)
        writer.writerow(cells)
        if count % batch == 0:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def jsonl_chunks(rows: Iterable[tuple[Any, ...]], layout: Layout,
                 batch: int = 500) -> Iterator[bytes]:
    lines: list[str] = []
    names = layout.names
    for row in rows:
        lines.append(json.dumps(dict(zip(names, map(cell, row), strict=True))))
        if len(lines) >= batch:
            yield ("\n".join(lines) + "\n").encode()
            lines = []
    if lines:
        yield ("\n".join(lines) + "\n").encode()


Chunks = Callable[[Iterable[tuple[Any, ...]], Layout, int], Iterator[bytes]]


@dataclass(frozen=True)
class ExportFormat:
    """One export format: what the API, its OpenAPI text, the maintainer CLI and the docs say
    of it, and the code that writes it."""

    name: str
    media_type: str  # the response's Content-Type
    extensions: tuple[str, ...]  # file names the maintainer CLI takes it from
    description: str
    # Rows -> bytes, for a format made here (in the export child on DuckDB stores); None: a
    # format DuckDB writes itself (``exporting.write_parquet``).
    chunks: Chunks | None


# The export formats, the default first. Adding one is an entry here plus its writer.
FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    ExportFormat("csv", "text/csv; charset=utf-8", (".csv",),
                 "comma-separated, text cells safe for spreadsheets", csv_chunks),
    ExportFormat("jsonl", "application/x-ndjson", (".jsonl", ".ndjson"),
                 "JSON Lines, one object per row, exact values", jsonl_chunks),
    ExportFormat("parquet", "application/vnd.apache.parquet", (".parquet",),
                 "Apache Parquet, typed columns", None),
)}
DEFAULT_FORMAT = next(iter(FORMATS))


def chunks_of(fmt: str, rows: Iterable[tuple[Any, ...]], layout: Layout,
              batch: int = 500) -> Iterator[bytes]:
    chunks = FORMATS[fmt].chunks
    if chunks is None:
        raise ValueError(f"export format {fmt} is not written from rows")
    return chunks(rows, layout, batch)


def parquet_layout(description: Sequence[Sequence[Any]]) -> Layout:
    """The layout of a DuckDB result (``cursor.description``: name, type, ...)."""
    types = [str(column[1]).upper() for column in description]
    return Layout(
        names=tuple(str(column[0]) for column in description),
        times=tuple(i for i, kind in enumerate(types) if kind.startswith("TIMESTAMP")),
        texts=tuple(i for i, kind in enumerate(types)
                    if not kind.startswith(("TIMESTAMP", *_NOT_TEXT))),
    )


def convert_parquet(parquet: str | Path, fmt: str, out: str | Path) -> int:
    """Write ``fmt`` (a format written from rows) from an export Parquet file; return the
    bytes written. Parquet keeps the rows' order and types (TIMESTAMP, DOUBLE, BIGINT,
    BOOLEAN, VARCHAR), so the result is the bytes ``exporting.write_export`` writes from
    the store (tested)."""
    import duckdb  # here, not at the top: the server imports this module for the formats

    written = 0
    with duckdb.connect() as duck, open(out, "wb") as handle:
        cursor = duck.execute("SELECT * FROM read_parquet(?)", [str(parquet)])
        layout = parquet_layout(cursor.description or [])

        def rows() -> Iterator[tuple[Any, ...]]:
            while batch := cursor.fetchmany(2000):
                yield from batch

        for chunk in chunks_of(fmt, rows(), layout, batch=100):
            written += handle.write(chunk)
    return written


if __name__ == "__main__":  # the child of ``exporting.materialize``: PARQUET FORMAT OUT
    convert_parquet(sys.argv[1], sys.argv[2], sys.argv[3])
