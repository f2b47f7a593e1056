"""A public submission's rows against its signed envelope: the measurement facts the export
shows for each of its configs must be what its payload gives.

The server derives a config's row from the payload (``specschema.summary.summarize``, the
function ingest runs). The auditor runs it again on the envelope whose signature it has
just verified and compares the facts that are functions of the measurements alone: the
trial count, the median, lowest and highest decode rates, the median wall and decode
times, and the decode-rate speedup. A row edited in the database then disagrees with the
bytes its contributor signed, snapshot or not. Verdicts and evidence are not compared:
their rules move with the server's versions, and a row keeps the verdict of the rules it
was stored under.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from specschema.errors import SpecSchemaError
from specschema.payload import parse_submission
from specschema.summary import summarize
from specserver.audit.findings import AuditReport

FACTS = ("trials", "median_tps", "min_tps", "max_tps", "median_wall_s", "median_eval_s",
         "speedup_tps")
Facts = dict[str, dict[str, tuple[Any, ...]]]  # submission id -> config name -> FACTS


def export_facts(parquet: Path) -> Facts:
    """The FACTS of every row of an export Parquet file, by submission and config."""
    found: Facts = {}
    columns = ", ".join(FACTS)
    with duckdb.connect() as duck:
        rows = duck.execute(f"SELECT submission_id, config_name, {columns} "
                            "FROM read_parquet(?)", [str(parquet)]).fetchall()
    for submission_id, config_name, *values in rows:
        found.setdefault(str(submission_id), {})[str(config_name)] = tuple(values)
    return found


def payload_facts(payload: bytes) -> dict[str, tuple[Any, ...]]:
    """The FACTS of each config, as the payload gives them (``SpecSchemaError`` when it
    does not parse: then the server could not have stored it either)."""
    return {s.name: tuple(getattr(s, fact) for fact in FACTS)
            for s in summarize(parse_submission(payload))}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return bool(a == b)


def check_rows(submission_id: str, payload: bytes, exported: Facts, report: AuditReport,
               proof: Callable[[], tuple[str, ...]]) -> None:
    """Compare the export's rows of ``submission_id`` (absent: stored after the export was
    read, nothing to compare) with what its verified ``payload`` gives; ``proof()`` is
    printed with a finding."""
    shown = exported.get(submission_id)
    if shown is None:
        return
    try:
        derived = payload_facts(payload)
    except (SpecSchemaError, ValueError) as exc:
        report.fail("payload_invalid", f"submission {submission_id}", f"its signed payload "
                    f"does not give its rows: {exc}", proof())
        return
    for config, values in sorted(shown.items()):
        want = derived.get(config)
        wrong = [f"{fact} {got!r} (signed: {signed!r})" for fact, got, signed
                 in zip(FACTS, values, want or (None,) * len(FACTS), strict=True)
                 if want is None or not _same(got, signed)]
        if wrong:
            report.fail("row_edited", f"submission {submission_id}", f"config {config}: the "
                        f"export shows {', '.join(wrong)}", proof())
            return
    report.passed("rows recomputed from their signed envelopes")
