"""A result's between-run spread: the same contributor's other runs of the same measurement.

A result's 95 % interval is within-run: it says how much the blocks of one run varied, not
how far another run on the same machine lands (the load changes between runs, and with it
the speedup). When the same key ran the same measurement again, the spread of those runs
says that, and the submission view publishes it beside the within-run interval
(``between_runs`` on each draft's summary row).

The same measurement: the same key, protocol identity (id, version, hash), target (name
and digest), chip, memory, engine and config, on visible results. Only ``confirmed`` runs
count: any other verdict's ratio is not a measured speedup. The ratio is the protocol's
headline (the wall-time speedup for a protocol whose headline it is), as the interval.
The key's other runs are public already (its results are listed by key); this only
counts them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, and_, select

from specschema.protocol_files import headline_of
from specschema.verdicts import VERDICTS
from specserver.store import tables

__all__ = ["add_between_runs", "between_runs"]

# Columns of the submission that make two runs the same measurement (besides the key).
_SAME = ("protocol_id", "protocol_version", "protocol_sha256", "target_model",
         "target_digest", "chip", "memory_gb", "engine_name")
# The verdicts whose ratio is a measured speedup (the verdict table's ``counts``).
_MEASURED = sorted(v.name for v in VERDICTS if v.counts)
# Reads at most this many of a key's runs per config: the spread needs no more, and a key
# that posted thousands must not make one view read them all.
MAX_RUNS = 200


def between_runs(conn: Connection, submission: Mapping[str, Any],
                 configs: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per config of ``configs`` that the same key ran confirmed at least twice (this
    run included when it is confirmed): ``runs``, ``low``, ``median``, ``high`` of the
    headline speedup and ``spread`` (high / low). Empty for a result without a key."""
    key_id = submission.get("key_id")
    names = list(configs)
    if key_id is None or not names:
        return {}
    sub, summ = tables.submissions, tables.summaries
    headline = headline_of(str(submission["protocol_id"]), int(submission["protocol_version"]),
                           str(submission["protocol_sha256"]))
    ratio = summ.c.speedup_wall if headline == "wall" else summ.c.speedup_tps
    same = [sub.c.key_id == key_id, sub.c.hidden.is_(False)]
    for column in _SAME:
        value = submission.get(column)
        same.append(sub.c[column].is_(None) if value is None else sub.c[column] == value)
    stmt = (select(summ.c.config_name, ratio)
            .select_from(sub.join(summ, summ.c.submission_id == sub.c.submission_id))
            .where(and_(*same), summ.c.config_name.in_(names),
                   summ.c.observed.in_(_MEASURED), ratio.is_not(None),
                   ratio > 0)
            .order_by(summ.c.config_name, sub.c.received_at.desc())
            .limit(MAX_RUNS * len(names)))
    found: dict[str, list[float]] = {}
    for name, value in conn.execute(stmt):
        found.setdefault(str(name), []).append(float(value))
    return {name: spread_of(values[:MAX_RUNS]) for name, values in found.items()
            if len(values) >= 2}


def add_between_runs(conn: Connection, submission: Mapping[str, Any],
                     summary: list[dict[str, Any]]) -> None:
    """Each summary row's ``between_runs``: ``between_runs``' entry, or None."""
    found = between_runs(conn, submission, [str(row["config_name"]) for row in summary])
    for row in summary:
        row["between_runs"] = found.get(str(row["config_name"]))


def spread_of(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    n = len(ordered)
    middle = (ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2)
    return {"runs": n, "low": round(ordered[0], 4), "median": round(middle, 4),
            "high": round(ordered[-1], 4), "spread": round(ordered[-1] / ordered[0], 4)}
