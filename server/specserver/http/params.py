"""Query parameters of the public reads, parsed by hand: unknown names, repeated values,
unknown group_by dimensions, verdicts, protocols and OS names are refused with 422 in the one
error shape, listing the allowed values."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from fastapi import Request

from specschema.protocol import shipped_protocols
from specserver.board import aggregate
from specserver.board.leaderboard import ReadService
from specserver.errors import Invalid
from specserver.ingest.names import canonical_model_optional
from specserver.store import queries
from specserver.store.queries import Filters


class QueryRejected(Invalid):
    """A public query the API refuses (422), with the allowed values in ``details``."""

    def __init__(self, code: str, message: str, details: Any = None) -> None:
        super().__init__(message, details, code=code)


def query_params(request: Request, allowed: Iterable[str]) -> dict[str, list[str]]:
    allowed = tuple(allowed)
    # U+0000 cannot reach PostgreSQL (DataError -> 500); no stored value holds one anyway.
    for name, value in (*request.query_params.multi_items(), *request.path_params.items()):
        if "\x00" in name or "\x00" in str(value):
            raise QueryRejected("bad_parameter", "parameters must not contain U+0000",
                                {"name": name.replace("\x00", "")})
    names = list(dict.fromkeys(request.query_params.keys()))
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise QueryRejected(
            "unknown_parameter", f"unknown query parameter(s): {', '.join(unknown)}",
            {"unknown": unknown, "allowed": list(allowed)})
    return {n: request.query_params.getlist(n) for n in names}


def one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise QueryRejected("repeated_parameter", f"{name} given more than once", {"name": name})
    return values[0].strip() or None


def listed(params: dict[str, list[str]], name: str) -> list[str]:
    return [v.strip() for raw in params.get(name, []) for v in raw.split(",") if v.strip()]


def choice(value: str | None, name: str, allowed: Iterable[str]) -> str | None:
    allowed = list(allowed)
    if value is not None and value not in allowed:
        raise QueryRejected(f"unknown_{name}", f"unknown {name} {value!r}",
                            {"value": value, "allowed": allowed})
    return value


def integer(value: str | None, name: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        raise QueryRejected("bad_parameter", f"{name} must be an integer in [{low}, {high}]",
                            {"name": name, "value": value})
    return number


def parse_filters(params: dict[str, list[str]]) -> Filters:
    verdicts = listed(params, "verdict")
    bad = [v for v in verdicts if v not in queries.VERDICTS]
    if bad:
        raise QueryRejected("unknown_verdict", f"unknown verdict(s): {', '.join(bad)}",
                            {"unknown": bad, "allowed": list(queries.VERDICTS)})
    return Filters(
        protocol=choice(one(params, "protocol"), "protocol", sorted(shipped_protocols())),
        target=canonical_model_optional(one(params, "target")),  # as stored (ingest.names)
        draft=one(params, "draft"),
        chip=one(params, "chip"),
        memory_gb=integer(one(params, "memory_gb"), "memory_gb", 1, 2**20),
        ollama_version=one(params, "ollama_version"),
        os=choice(one(params, "os"), "os", queries.OS_NAMES),
        engine=choice(one(params, "engine"), "engine", queries.ENGINE_NAMES),
        engine_version=one(params, "engine_version"),
        verdicts=frozenset(verdicts),
    )


MAX_LISTED = 200


def check_known(reads: ReadService, version: str | None, filters: Filters) -> None:
    """Refuse (422) a free-text filter value no visible submission has, listing those there are.

    ``version``: the data version the values must be of; None (board reads, which serve
    the last computed board): the values last read do when they hold the asked ones.
    """
    asked = {"chip": filters.chip, "target": filters.target, "draft": filters.draft,
             "ollama_version": filters.ollama_version, "memory_gb": filters.memory_gb,
             "engine_version": filters.engine_version}
    given = {name: value for name, value in asked.items() if value is not None}
    if not given:
        return
    known = reads.known_values(version, given)
    for name, value in given.items():
        if value is not None and value not in known[name]:
            allowed = known[name]
            raise QueryRejected(
                f"unknown_{name}", f"no visible submission has {name} {value!r}",
                {"value": value, "allowed": allowed[:MAX_LISTED],
                 "more": max(0, len(allowed) - MAX_LISTED)})


def parse_group_by(params: dict[str, list[str]]) -> list[str]:
    group_by = listed(params, "group_by") or list(aggregate.DEFAULT_GROUP_BY)
    unknown = aggregate.check_dimensions(group_by)
    if unknown:
        raise QueryRejected("unknown_group_by", f"unknown group_by value(s): {', '.join(unknown)}",
                            {"unknown": unknown, "allowed": list(aggregate.DIMENSIONS)})
    return list(dict.fromkeys(group_by))


def filters_json(filters: Filters) -> dict[str, Any]:
    data = asdict(filters)
    data["verdicts"] = sorted(filters.verdicts)
    return data
