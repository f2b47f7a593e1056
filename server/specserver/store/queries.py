"""Read queries of the public side: SQLAlchemy Core only, so they run on DuckDB and PostgreSQL.

Every function takes an open ``Connection`` and returns plain data; no HTTP here.
The leaderboard reads ``summaries`` joined to ``submissions`` and never touches trials.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    case,
    cast,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
    union_all,
)

from specschema.conclusion import verdict_help
from specschema.evidence import CORROBORATED
from specschema.ratio_text import stored_interval
from specserver.store import dimensions, tables, verdicts
from specserver.store.dimensions import (
    ENGINE_NAMES,
    FILTER_NAMES,
    OS_NAMES,
    VERDICTS,
    Filters,
    draft_clauses,
    engine_name,
    engine_version,
    ollama_version,
    submission_clauses,
)
from specserver.store.positions import positions_of
from specserver.store.repeats import add_between_runs

# Names other modules read here: the dimension table's (store/dimensions.py).
__all__ = ["ENGINE_NAMES", "FILTER_NAMES", "OS_NAMES", "VERDICTS", "Filters", "draft_clauses",
           "engine_name", "engine_version", "ollama_version", "submission_clauses"]

sub, summ = tables.submissions, tables.summaries


def _banned_key_ids() -> Select[Any]:
    return select(tables.bans.c.key_id)


def on_board_clause(draft: Any) -> ColumnElement[bool]:
    """``verdicts.on_board`` in SQL (``draft``: a summaries alias): a confirmed row needs
    corroborated counters."""
    return or_(draft.c.observed != "confirmed",
               func.coalesce(draft.c.evidence, "none").in_(sorted(CORROBORATED)))


def reaches_board_clause(draft: Any) -> ColumnElement[bool]:
    """``verdicts.reaches_a_board`` in SQL: a draft result on the speedup board or the
    noise floor."""
    return and_(draft.c.role == "draft",
                draft.c.observed.in_(sorted(verdicts.AGEING_VERDICTS)),
                on_board_clause(draft))


def visible_clause() -> ColumnElement[bool]:
    """Complete, not hidden, and not from a banned key."""
    return and_(
        sub.c.complete.is_(True),
        sub.c.hidden.is_(False),
        or_(sub.c.key_id.is_(None), sub.c.key_id.not_in(_banned_key_ids())),
    )


def data_version(conn: Connection) -> str:
    """A token that changes whenever anything a public read shows can have changed.

    Inserts move the submission count and latest receipt; hide/unhide/ban/unban each write
    an audit row (and bans change the ban count).
    """
    audit = tables.audit_log
    stmt = select(
        select(func.count()).select_from(sub).scalar_subquery(),
        select(func.max(sub.c.received_at)).scalar_subquery(),
        select(func.count()).select_from(audit).scalar_subquery(),
        select(func.max(audit.c.at)).scalar_subquery(),
        select(func.count()).select_from(tables.bans).scalar_subquery(),
    )
    row = conn.execute(stmt).one()
    return "|".join("" if v is None else str(v) for v in row)


def moderation_version(version: str) -> str:
    """The part of a ``data_version`` token that moves on moderation (audit rows, bans) and
    not on inserts: what a reused export must agree on (``http/exports.py``)."""
    return version.split("|", 2)[-1]


# --- the submission list ------------------------------------------------------------------


class BadCursor(ValueError):
    """The pagination cursor is not one this server issued."""


def encode_cursor(received_at: datetime, submission_id: str) -> str:
    raw = json.dumps([received_at.isoformat(), submission_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        stamp, submission_id = json.loads(raw)
        return datetime.fromisoformat(stamp), str(submission_id)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise BadCursor("cursor is not valid; use the next_cursor of a previous page") from None


SUBMISSION_COLUMNS = (
    sub.c.submission_id, sub.c.key_id, sub.c.source, sub.c.source_note, sub.c.created_at,
    sub.c.received_at, sub.c.protocol_id, sub.c.protocol_version, sub.c.protocol_sha256,
    sub.c.target_model, sub.c.target_digest, sub.c.chip, sub.c.memory_gb,
    ollama_version.label("ollama_version"), sub.c.os_name, sub.c.backend, sub.c.client_name,
    sub.c.client_version, sub.c.complete, sub.c.hidden, sub.c.note,
    engine_name.label("engine"), engine_version.label("engine_version"), sub.c.engine_runtime,
    sub.c.engine_build,
)


def _iso(value: Any) -> Any:
    return value.isoformat() + "Z" if isinstance(value, datetime) else value


def _submission_dict(row: Any) -> dict[str, Any]:
    data = {k: _iso(v) for k, v in row._mapping.items()}
    data["os"] = data.pop("os_name")
    return data


def list_submissions(
    conn: Connection, filters: Filters, *, cursor: str | None = None, limit: int = 50,
    since: datetime | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Visible submissions, newest first, with their draft verdicts and speedups.

    ``since``: a receipt time the page's rows are expected not to be older than. It only
    makes the read cheaper (``_listed_rows``): the page is the same whatever it is."""
    rows = _listed_rows(conn, filters, cursor, limit, since)
    more = len(rows) > limit
    rows = rows[:limit]
    items = _with_drafts(conn, rows)
    next_cursor = encode_cursor(rows[-1].received_at, rows[-1].submission_id) if more else None
    return items, next_cursor


def recent_submissions(conn: Connection, filters: Filters, limit: int,
                       since: datetime | None = None
                       ) -> tuple[list[dict[str, Any]], datetime | None]:
    """The items of ``list_submissions``' first page, and the ``since`` for the next read
    of the same list: the receipt of the row after the page's last, so that the next read
    finds this page's rows again (and anything newer) within the bound while they stay
    visible. None when no row follows the page (a bound could not prove anything)."""
    rows = _listed_rows(conn, filters, None, limit, since)
    bound = rows[limit].received_at if len(rows) > limit else None
    return _with_drafts(conn, rows[:limit]), bound


def _listed_rows(conn: Connection, filters: Filters, cursor: str | None, limit: int,
                 since: datetime | None) -> Sequence[Any]:
    """The first ``limit + 1`` visible rows newest first (after ``cursor``).

    With ``since``, the rows received at or after it are read first: DuckDB has no index
    for the order, but its zone maps skip every row group older than the bound, so that
    read costs a few row groups instead of the whole table (~3 instead of ~110 ms of CPU
    at 1M submissions). When it finds ``limit + 1`` rows they are the answer: every row
    left out was received before the bound, so before all of them, and ranks after them.
    With fewer (rows hidden or banned since, filters that match few, a bound from an older
    state), it proves nothing and the unbounded read runs."""
    draft = summ.alias("d")
    clauses = [visible_clause(), *submission_clauses(filters)]
    by_draft = draft_clauses(filters, draft)
    if by_draft:
        clauses.append(exists().where(draft.c.submission_id == sub.c.submission_id,
                                      draft.c.role == "draft", *by_draft))
    if cursor is not None:
        stamp, last_id = decode_cursor(cursor)
        clauses.append(tuple_(sub.c.received_at, sub.c.submission_id) < tuple_(
            literal(stamp), literal(last_id)))
    stmt = (select(*SUBMISSION_COLUMNS).where(*clauses)
            .order_by(sub.c.received_at.desc(), sub.c.submission_id.desc()).limit(limit + 1))
    if since is not None:
        rows = conn.execute(stmt.where(sub.c.received_at >= since)).all()
        if len(rows) > limit:
            return rows
    return conn.execute(stmt).all()


def _with_drafts(conn: Connection, rows: Sequence[Any]) -> list[dict[str, Any]]:
    items = [_submission_dict(r) for r in rows]
    drafts = _drafts_of(conn, [i["submission_id"] for i in items])
    for item in items:
        item["drafts"] = drafts.get(item["submission_id"], [])
    return items


def _drafts_of(conn: Connection, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    if not ids:
        return {}
    stmt = (select(summ.c.submission_id, summ.c.config_name, summ.c.draft_model,
                   summ.c.mechanism, summ.c.observed, summ.c.speedup_tps,
                   summ.c.speedup_tps_ci_low, summ.c.speedup_tps_ci_high, summ.c.speedup_wall,
                   summ.c.speedup_wall_ci_low, summ.c.speedup_wall_ci_high, summ.c.blocks,
                   summ.c.evidence, summ.c.evidence_reason)
            .where(summ.c.submission_id.in_(list(ids)), summ.c.role == "draft")
            .order_by(summ.c.submission_id, summ.c.config_name))
    found: dict[str, list[dict[str, Any]]] = {}
    for row in conn.execute(stmt):
        data = dict(row._mapping)
        found.setdefault(data.pop("submission_id"), []).append(data)
    return found


# --- one submission -----------------------------------------------------------------------


def _table_rows(conn: Connection, table: Any, submission_id: str, *order: Any
                ) -> list[dict[str, Any]]:
    """One submission's rows of a child table, as plain dicts, in ``order``."""
    stmt = select(table).where(table.c.submission_id == submission_id).order_by(*order)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value.isoformat() + "Z" if isinstance(value, datetime) else value
            for key, value in row.items()}


@dataclass(frozen=True)
class SubmissionView:
    """One stored submission as every public view of it reads it: ``GET
    /v1/submissions/{id}`` (``as_json``) and its page alike, redacted once by
    ``store.redaction.redact_view`` when hidden.

    ``submission`` is the stored row (timestamps as ISO strings, no origin hash) with what
    reads compute: ``engine`` and ``os`` (as the list and the export name them),
    ``engine_version``, ``ollama_version`` (Ollama rows only) and ``key_banned``.
    ``fingerprint`` is its row with ``json`` parsed; ``configs`` carry their request options
    and launches parsed and the verdict's ``verdict_help``; ``summary`` is in config order;
    ``moderation`` holds the actions on the submission and on its key, oldest first;
    ``envelope`` the stored bytes (base64) for re-verification.
    """

    submission: dict[str, Any]
    fingerprint: dict[str, Any] | None
    configs: list[dict[str, Any]]
    trials: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    moderation: list[dict[str, Any]]
    envelope: dict[str, Any]

    @property
    def hidden(self) -> bool:
        return bool(self.submission.get("hidden"))

    def as_json(self) -> dict[str, Any]:
        return {"submission": self.submission, "fingerprint": self.fingerprint,
                "configs": self.configs, "trials": self.trials, "summary": self.summary,
                "moderation": self.moderation, "envelope": self.envelope}


def submission_view(conn: Connection, submission_id: str) -> SubmissionView | None:
    """The submission's public view (hidden ones too: their page says they are hidden)."""
    row = conn.execute(select(sub).where(sub.c.submission_id == submission_id)).first()
    if row is None:
        return None
    submission = _jsonable(dict(row._mapping))
    # The keyed hash of the sender's address range is for the board's cohorts only
    # (store/origins.py): no public view carries it.
    submission.pop("origin_hash", None)
    # Read as the list and the export read it (store/dimensions.py).
    engine = submission.get("engine_name") or "ollama"
    submission["engine"] = engine
    submission["os"] = submission["os_name"]
    submission["ollama_version"] = submission["engine_version"] if engine == "ollama" else None
    key_id = submission["key_id"]
    submission["key_banned"] = bool(key_id is not None and conn.execute(
        select(tables.bans.c.key_id).where(tables.bans.c.key_id == key_id)).first())

    def rows(table: Any, *order: Any) -> list[dict[str, Any]]:
        return [_jsonable(r) for r in _table_rows(conn, table, submission_id, *order)]

    fingerprint = rows(tables.fingerprints)
    configs = rows(tables.configs, tables.configs.c.config_name)
    trials, summary = rows(tables.trials, tables.trials.c.position), rows(summ, summ.c.config_name)
    for config in configs:
        config["request_options"] = json.loads(config["request_options"])
        # wire v2: the engine starts as logged (a JSON list), and what the verdict means
        # and what the contributor can do about it (the words the CLI prints too)
        config["launches"] = json.loads(config["launches"]) if config.get("launches") else []
        meaning, todo = verdict_help(config["observed"], submission.get("engine_name"),
                                     stored_interval(submission, summary, config["config_name"]))
        config["verdict_help"] = {"meaning": meaning, "what_to_do": todo}
    audit = tables.audit_log
    targets = [submission_id] + ([key_id] if key_id else [])
    moderation = [_jsonable(dict(r._mapping)) for r in conn.execute(
        select(audit).where(or_(*(audit.c.target == t for t in targets)))
        .order_by(audit.c.at, audit.c.audit_id))]
    fp = fingerprint[0] if fingerprint else None
    if fp is not None:
        fp["json"] = json.loads(fp["json"])
    body = envelope_body(conn, submission_id)
    for counted in (*trials, *summary):  # stored as JSON text (store/positions.py)
        counted["accepted_per_position"] = positions_of(counted["accepted_per_position"])
    add_between_runs(conn, submission, summary)  # beside each draft's within-run interval
    return SubmissionView(
        submission=submission, fingerprint=fp, configs=configs, trials=trials,
        summary=summary, moderation=moderation,
        envelope={"encoding": "base64", "sha256": submission["envelope_sha256"],
                  "body": base64.b64encode(body).decode("ascii") if body is not None else None},
    )


def envelope_body(conn: Connection, submission_id: str) -> bytes | None:
    envelopes = tables.envelopes
    body = conn.execute(select(envelopes.c.body).where(
        envelopes.c.submission_id == submission_id)).scalar()
    return None if body is None else bytes(body)


# --- protocols and stats ------------------------------------------------------------------


def protocol_counts(conn: Connection) -> list[dict[str, Any]]:
    stmt = (select(sub.c.protocol_id, sub.c.protocol_version, sub.c.protocol_sha256,
                   func.count().label("submissions"))
            .where(visible_clause())
            .group_by(sub.c.protocol_id, sub.c.protocol_version, sub.c.protocol_sha256)
            .order_by(sub.c.protocol_id, sub.c.protocol_version, sub.c.protocol_sha256))
    return [dict(r._mapping) for r in conn.execute(stmt)]


def distinct_values(conn: Connection, name: str, filters: Filters | None = None) -> list[Any]:
    """Distinct visible values of filter ``name`` (one that compares a submissions column),
    in order."""
    (col,) = dimensions.filter_columns(name, None)
    where = (visible_clause(), col.is_not(None), *submission_clauses(filters or Filters()))
    stmt = select(col).distinct().where(*where).order_by(col)
    return [r[0] for r in conn.execute(stmt)]


def most_common_values(conn: Connection, names: Sequence[str], most_common: int
                       ) -> dict[str, list[Any]]:
    """For each filter of ``names`` (each compares a submissions column), its
    ``most_common`` most frequent visible values (ties by value), in order: the page's
    filter menus, which one key minting names must not make unbounded.

    One statement: the visible rows' columns are read once (a CTE; DuckDB and PostgreSQL
    materialise one that is read more than once) and each menu is cut from them, which at
    1M submissions costs a quarter of the CPU of one statement per menu (each of those
    paid for the visibility test over the whole table again). Each menu's rows carry its
    value in its own column, NULL in the others, so one ORDER BY sorts every menu by its
    own values with the database's ordering (its collation) as a statement per menu did."""
    columns = [dimensions.filter_columns(name, None)[0] for name in names]
    visible = select(*(col.label(f"m{i}") for i, col in enumerate(columns))
                     ).where(visible_clause()).cte("visible")
    menus = []
    for i in range(len(columns)):
        value = visible.c[f"m{i}"]
        top = (select(value.label("value")).where(value.is_not(None)).group_by(value)
               .order_by(func.count().desc(), value).limit(most_common).subquery())
        menus.append(select(literal(i).label("menu"), *(
            top.c.value.label(f"m{j}") if j == i else cast(null(), other.type).label(f"m{j}")
            for j, other in enumerate(columns))))
    together = union_all(*menus).subquery()
    stmt = select(together).order_by(together.c.menu, *(together.c[f"m{j}"]
                                                         for j in range(len(columns))))
    found: dict[str, list[Any]] = {name: [] for name in names}
    for row in conn.execute(stmt):
        found[names[row[0]]].append(row[row[0] + 1])
    return found


def known_filter_values(conn: Connection) -> dict[str, list[Any]]:
    """The values each free-text filter (``Filter.known``) can take: those of the visible
    submissions (a filter on the draft: of their draft configs, any column it compares)."""
    known: dict[str, list[Any]] = {}
    for name, spec in dimensions.FILTERS.items():
        if not spec.known:
            continue
        if not dimensions.on_draft(name):
            known[name] = distinct_values(conn, name)
            continue
        draft = summ.alias("d")
        names: set[Any] = set()  # as stored: an integer filter's values are integers
        for column in dimensions.filter_columns(name, draft):
            stmt = (select(column).distinct()
                    .select_from(draft.join(sub, sub.c.submission_id == draft.c.submission_id))
                    .where(draft.c.role == "draft", column.is_not(None), visible_clause()))
            names.update(r[0] for r in conn.execute(stmt).all())
        known[name] = sorted(names)
    return known


def stats(conn: Connection) -> dict[str, Any]:
    trials = tables.trials
    total = conn.execute(select(
        func.count(),
        func.count(sub.c.key_id.distinct()),
        func.sum(case((sub.c.hidden.is_(True), 1), else_=0)),
        func.sum(case((sub.c.source == "imported", 1), else_=0)),
        func.sum(case((sub.c.complete.is_(False), 1), else_=0)),
        func.min(sub.c.received_at),
        func.max(sub.c.received_at),
    )).one()
    visible = conn.execute(select(func.count()).select_from(sub).where(visible_clause())).scalar()
    verdicts: dict[str, int] = dict(conn.execute(
        select(summ.c.observed, func.count()).select_from(
            summ.join(sub, sub.c.submission_id == summ.c.submission_id))
        .where(summ.c.role == "draft", visible_clause()).group_by(summ.c.observed)).all())
    return {
        "submissions": int(total[0]),
        "visible_submissions": int(visible or 0),
        "contributors": int(total[1]),
        "hidden": int(total[2] or 0),
        "imported": int(total[3] or 0),
        "incomplete": int(total[4] or 0),
        "first_received_at": _iso(total[5]),
        "last_received_at": _iso(total[6]),
        "trials": int(conn.execute(select(func.count()).select_from(trials)).scalar() or 0),
        "banned_keys": int(conn.execute(
            select(func.count()).select_from(tables.bans)).scalar() or 0),
        "draft_verdicts": {v: int(verdicts.get(v, 0)) for v in VERDICTS},
        "protocols": protocol_counts(conn),
    }
