"""Query parameters of the public reads, parsed by hand: unknown names, repeated values,
unknown group_by dimensions and filter values outside a filter's list (verdicts, protocols,
OS names, engines) are refused with 422 in the one error shape, listing the allowed values.
Which filters there are, and of what kind, is the dimension table's (store/dimensions.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import Request

from specserver.board import ReadService, aggregate
from specserver.errors import Invalid
from specserver.ingest import canonical_model_optional
from specserver.store import Filters, FilterValue, dimensions


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


# Filters whose value is compared in its stored spelling: model names are stored canonical
# (ingest.names), so "Qwen3:14B" finds "qwen3:14b".
_CANONICAL = {"target": canonical_model_optional}


def _filter_value(params: dict[str, list[str]], name: str, spec: dimensions.Filter
                  ) -> FilterValue | None:
    if spec.kind == "list":
        values = listed(params, name)
        allowed = list(spec.choices() if spec.choices else ())
        bad = [v for v in values if v not in allowed]
        if bad:
            raise QueryRejected(f"unknown_{name}", f"unknown {name}(s): {', '.join(bad)}",
                                {"unknown": bad, "allowed": allowed})
        return tuple(values) or None
    value = one(params, name)
    if spec.kind == "integer":
        return integer(value, name, 1, 2**20)
    if spec.kind == "choice":
        return choice(value, name, spec.choices() if spec.choices else ())
    canonical = _CANONICAL.get(name)
    return canonical(value) if canonical is not None else value


def parse_filters(params: dict[str, list[str]]) -> Filters:
    """The filters of the dimension table (store/dimensions.py), each parsed by its kind."""
    return Filters.of({name: _filter_value(params, name, spec)
                       for name, spec in dimensions.FILTERS.items()})


MAX_LISTED = 200


def check_known(reads: ReadService, version: str | None, filters: Filters) -> None:
    """Refuse (422) a free-text filter value no visible submission has, listing those there are.

    ``version``: the data version the values must be of; None (board reads, which serve
    the last computed board): the values last read do when they hold the asked ones.
    """
    asked = {name: value for name, value in filters.values if dimensions.FILTERS[name].known}
    if not asked:
        return
    known = reads.known_values(version, asked)
    for name, value in asked.items():
        if value not in known[name]:
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
    return filters.as_json()
