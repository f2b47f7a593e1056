"""Cost probes as the store keeps them: one ``probes`` row per signed probe, with the exact
bytes that were POSTed, and the reads a prediction needs (the probes of one target on one
kind of machine).

A probe is its own kind, apart from submissions: it touches no board and no board change
log, so storing one never recomputes a leaderboard. Idempotent by probe id like a
submission: the same bytes again are the same probe; other bytes under the same id are a
conflict.

Each row says what its samples are (``measured``, store version 18): one speculative round
checking k tokens ("verification", probe version 2) or the prefill of k tokens ("prefill",
version 1, which reads 30-50 % below a round's cost), so that a reader never mixes the two
kinds in one curve (``prefer_verification``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, and_, func, insert, or_, select, text, update

from specschema.envelope import parse_envelope
from specschema.errors import SpecSchemaError
from specschema.probe import PREFILL, PROBE_PAYLOAD_TYPE, VERIFICATION, parse_probe
from specserver.store import tables
from specserver.store.migrationsteps import columns_of

__all__ = ["ProbeRow", "StoredProbe", "add_probe_kind",
           "add_probes", "insert_probe", "prefer_verification", "probe_count", "probes_for",
           "samples_of", "samples_text"]


def add_probes(conn: Connection) -> None:
    """The migration: the ``probes`` table (nothing else reads or changes)."""
    tables.probes.create(conn, checkfirst=True)


def _measured_of(envelope: bytes) -> str | None:
    try:
        _, payload, _, _ = parse_envelope(json.loads(envelope), PROBE_PAYLOAD_TYPE)
        return parse_probe(payload).measured
    except (SpecSchemaError, ValueError):
        return None


def add_probe_kind(conn: Connection) -> None:
    """The migration to version 18: ``probes.measured``, filled from each stored probe's
    own signed bytes (a probe without ``measured`` in them is version 1: "prefill")."""
    p = tables.probes
    if "measured" not in columns_of(conn, p.name):
        conn.execute(text("ALTER TABLE probes ADD COLUMN measured VARCHAR(16)"))
    for probe_id, envelope in conn.execute(select(p.c.probe_id, p.c.envelope)
                                           .where(p.c.measured.is_(None))).all():
        measured = _measured_of(bytes(envelope))
        if measured is not None:
            conn.execute(update(p).where(p.c.probe_id == probe_id).values(measured=measured))


@dataclass(frozen=True)
class ProbeRow:
    """What ingestion stores of one probe (its columns, ``tables.probes``)."""

    values: Mapping[str, Any]

    @property
    def probe_id(self) -> str:
        return str(self.values["probe_id"])

    @property
    def envelope_sha256(self) -> str:
        return str(self.values["envelope_sha256"])


def samples_text(samples: Mapping[int, Sequence[float]]) -> str:
    """A probe's samples per k as stored: ``{"1":[...],"2":[...]}``, k in order."""
    return json.dumps({str(k): list(v) for k, v in sorted(samples.items())},
                      separators=(",", ":"))


def samples_of(text: str) -> dict[int, tuple[float, ...]]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"not stored samples: {text[:80]!r}")
    return {int(k): tuple(float(x) for x in v) for k, v in value.items()}


def insert_probe(conn: Connection, row: ProbeRow) -> Literal["stored", "same", "conflict"]:
    """Store one probe unless its id is taken: ``same`` when by these very bytes."""
    found = conn.execute(select(tables.probes.c.envelope_sha256).where(
        tables.probes.c.probe_id == row.probe_id)).scalar()
    if found is not None:
        return "same" if found == row.envelope_sha256 else "conflict"
    conn.execute(insert(tables.probes).values(**row.values))
    return "stored"


@dataclass(frozen=True)
class StoredProbe:
    key_id: str
    target_digest: str | None
    memory_gb: int | None
    samples: dict[int, tuple[float, ...]]
    measured: str = VERIFICATION  # what the samples are (the module docstring)


def prefer_verification(found: Sequence[StoredProbe]) -> tuple[list[StoredProbe], str | None]:
    """The probes to build one cost curve from, and what they measured: the verification
    probes when there is any (a prefill probe reads a round 30-50 % low, so the two are
    never mixed), else the prefill ones; (``[]``, None) when there is none."""
    rounds = [f for f in found if f.measured == VERIFICATION]
    if rounds:
        return rounds, VERIFICATION
    return list(found), (PREFILL if found else None)


def probes_for(conn: Connection, *, target_digests: Iterable[str], chip: str, engine: str,
               memory_gb: int | None = None) -> list[StoredProbe]:
    """The visible probes of these targets on this chip and engine family (and memory,
    when given), from keys that are not banned; oldest first."""
    p = tables.probes
    digests = sorted(set(target_digests))
    if not digests:
        return []
    which = and_(p.c.target_digest.in_(digests), p.c.chip == chip,
                 p.c.engine_name == engine, p.c.hidden.is_(False),
                 or_(p.c.key_id.is_(None), p.c.key_id.not_in(select(tables.bans.c.key_id))))
    if memory_gb is not None:
        which = and_(which, p.c.memory_gb == memory_gb)
    rows = conn.execute(select(p.c.key_id, p.c.target_digest, p.c.memory_gb, p.c.samples,
                               p.c.measured)
                        .where(which).order_by(p.c.received_at, p.c.probe_id)).all()
    # null: an envelope that no longer parsed when version 18 filled the column; the
    # older kind, as a probe that does not say is
    return [StoredProbe(str(r.key_id), r.target_digest, r.memory_gb, samples_of(r.samples),
                        r.measured or PREFILL) for r in rows]


def probe_count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(tables.probes)).scalar() or 0)
