"""The leaderboard's dimensions and the public reads' filters: one table, ``DIMENSIONS``.

Each entry says once what every surface needs of one dimension:

- its ``fields``: the fields of a draft result that identify one value of it,
  each with its SQL column (``board.sql`` groups and reads rows by them; ``group_by``
  accepts the dimensions that have fields);
- its ``filter``: the query parameter's kind (free text, integer, one of a closed list, a
  comma-separated list), the fields it compares, and for free text whether the value must
  be one a visible submission has (422 otherwise, listing those there are). The SQL
  (``submission_clauses``, ``draft_clauses``), the parsing (``http/params.py``), the
  OpenAPI text (``http/public.py``), the page's menus and the values a free-text filter
  accepts (``store.queries.known_filter_values``) all read it;
- its words: the description the API documents it with, the page menu's label, and how a
  group's value reads (``label``).

Adding a dimension is one entry here plus the code for its value: the column (or computed
expression) its field reads and the draft result's field it fills. ``docs/aggregation.md``
is held to this table by a test.

The ``domain`` dimension's field is a column of the per-domain draft rows only
(``store.domainview``): ``draft_rows`` gives a read those rows when it groups or filters by
domain, and its filter's ``plain`` clause serves the reads that keep a plain ``summaries``
row per config (the submission list, the export).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from sqlalchemy import ColumnElement, String, and_, case, func, literal_column, or_

from specschema.domains import DOMAINS, domain_label
from specschema.engines import engine_names
from specschema.models import Observed, OsInfo
from specschema.protocol_files import shipped_protocols
from specschema.verdicts import ORDER as VERDICT_ORDER
from specserver.store import domainview, tables
from specserver.store.domainrows import UNSPECIFIED

sub = tables.submissions
KeyValue = str | int | None
FilterValue = str | int | tuple[str, ...]

# The wire format's verdicts (``SpeculationEvidence.observed``) in the order the API and the
# board list them (and a contributor's row holds their counts): the verdict table's.
VERDICTS: tuple[str, ...] = VERDICT_ORDER
if set(VERDICTS) != set(get_args(Observed)):  # a new wire verdict must be placed here
    raise ImportError(f"VERDICTS {VERDICTS} differ from the wire format's {get_args(Observed)}")
# The wire format's OS names (``OsInfo.name``): the one list that filters and imports take.
OS_NAMES: tuple[str, ...] = next(
    get_args(kind) for kind in get_args(OsInfo.model_fields["name"].annotation)
    if kind is not type(None)
)
# The wire format's engine names (``Engine.name``), the values of the ``engine`` filter.
ENGINE_NAMES: tuple[str, ...] = engine_names()
# The kinds of work (``specschema.domains``), and the domain of a result whose protocol
# labels none (``store.domainview``): the values of the ``domain`` filter.
DOMAIN_NAMES: tuple[str, ...] = (*DOMAINS, UNSPECIFIED)

# The engine as a dimension. A row stored before wire v2 has no engine_name: v1 knew only
# Ollama. The store's ``engine_version`` column holds ``engine.version`` for every row; what
# the API calls ``ollama_version`` is that version for Ollama rows only (null for
# llama-server rows, whose version is a llama.cpp build such as "b6123", not an Ollama
# release), so a v1 client's ``ollama_version`` reads as before. The constant is inlined
# SQL, not a bound parameter, so that an expression in a SELECT and its GROUP BY render
# identically (PostgreSQL requires that).
_OLLAMA = literal_column("'ollama'", String)
engine_name = func.coalesce(sub.c.engine_name, _OLLAMA)
engine_version = sub.c.engine_version
ollama_version = case((engine_name == _OLLAMA, sub.c.engine_version), else_=None)

# A field's column: a submissions column or expression, or a column of the draft config's
# summary row (``summary``: the alias the query joins).
Column = Callable[[Any], Any]


@dataclass(frozen=True)
class Field:
    """A draft result's field and where its value comes from."""

    name: str
    column: Column
    on_draft: bool = False  # a column of the draft's summary row, not of the submission


def _submission(column: Any) -> Column:
    return lambda summary: column


def _summary(name: str) -> Column:
    return lambda summary: summary.c[name]


@dataclass(frozen=True)
class Filter:
    """A dimension as a query parameter of the public reads and the page."""

    kind: Literal["text", "integer", "choice", "list"]
    compares: tuple[str, ...]  # fields (of this dimension) compared; several: any may match
    choices: Callable[[], Sequence[str]] | None = None  # "choice" and "list": the allowed
    known: bool = False  # free text: only a value a visible submission has (else 422)
    menu: str | None = None  # the page's menu label; None: no menu (the URL still works)
    on_page: bool = True  # the page takes it from its URL
    key: str | None = None  # its name in the API's ``filters`` object (default: the name)
    # The clause on a plain ``summaries`` row, for a field only the per-domain rows have
    # (``store.domainview``): the submission list and the export keep a row per config.
    plain: Callable[[Any, FilterValue], ColumnElement[bool]] | None = None


@dataclass(frozen=True)
class Dimension:
    name: str
    description: str  # the API's words for it (OpenAPI text, docs/aggregation.md)
    fields: tuple[Field, ...] = ()  # () : a filter only, not a group_by dimension
    filter: Filter | None = None
    label: Callable[[Mapping[str, KeyValue]], str] | None = None  # None: its one value

    def shown(self, value: Mapping[str, KeyValue]) -> str:
        """How one value of this dimension reads on the board."""
        if self.label is not None:
            return self.label(value)
        single = value[self.fields[0].name]
        return "unknown" if single is None else str(single)


def _memory(value: Mapping[str, KeyValue]) -> str:
    return "? GB" if value["memory_gb"] is None else f"{value['memory_gb']} GB"


def _protocol(value: Mapping[str, KeyValue]) -> str:
    return f"{value['protocol_id']} v{value['protocol_version']}"


def _draft(value: Mapping[str, KeyValue]) -> str:
    model = value["draft_model"]
    return str(value["config_name"]) + (f" ({model})" if model else "")


def _depth(value: Mapping[str, KeyValue]) -> str:
    return "engine default" if value["depth"] is None else f"depth {value['depth']}"


def _spec_type(value: Mapping[str, KeyValue]) -> str:
    return "not named" if value["spec_type"] is None else str(value["spec_type"])


def _domain(value: Mapping[str, KeyValue]) -> str:
    return domain_label(str(value["domain"]))


def _engine_version(value: Mapping[str, KeyValue]) -> str:
    version = value["engine_version"]
    return f"{value['engine']} {'unknown' if version is None else version}"


ENGINE = Field("engine", _submission(engine_name))

DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("protocol", "protocol id (a group holds one id, version and hash)",
              (Field("protocol_id", _submission(sub.c.protocol_id)),
               Field("protocol_version", _submission(sub.c.protocol_version)),
               Field("protocol_sha256", _submission(sub.c.protocol_sha256))),
              Filter("choice", ("protocol_id",), lambda: sorted(shipped_protocols()),
                     menu="Protocol"),
              label=_protocol),
    # A model is its name, digest and quantization as reported: two digests under one name
    # are two groups, and their labels say how they differ (``aggregate.distinct_labels``).
    Dimension("target", "target model name (a group holds one name, digest and quantization)",
              (Field("target_model", _submission(sub.c.target_model)),
               Field("target_digest", _submission(sub.c.target_digest)),
               Field("target_quant", _submission(sub.c.target_quant))),
              Filter("text", ("target_model",), known=True, menu="Target model"),
              label=lambda value: str(value["target_model"])),
    Dimension("draft", "draft config name or draft model name (a group holds one config "
                       "name, draft model, digest, quantization and mechanism)",
              (Field("config_name", _summary("config_name"), on_draft=True),
               Field("draft_model", _summary("draft_model"), on_draft=True),
               Field("draft_digest", _summary("draft_digest"), on_draft=True),
               Field("draft_quant", _summary("draft_quant"), on_draft=True),
               Field("mechanism", _summary("mechanism"), on_draft=True)),
              Filter("text", ("config_name", "draft_model"), known=True),
              label=_draft),
    Dimension("chip", "chip, as in the fingerprint (SoC on Apple, main GPU elsewhere, "
                      "else CPU)",
              (Field("chip", _submission(sub.c.chip)),),
              Filter("text", ("chip",), known=True, menu="Chip")),
    Dimension("memory_gb", "marketed memory size in GB",
              (Field("memory_gb", _submission(sub.c.memory_gb)),),
              Filter("integer", ("memory_gb",), known=True, menu="Memory (GB)"),
              label=_memory),
    Dimension("ollama_version", "Ollama version (Ollama results only: null on other "
                                "engines' results)",
              (Field("ollama_version", _submission(ollama_version)),),
              Filter("text", ("ollama_version",), known=True, menu="Ollama")),
    Dimension("os", "operating system",
              (Field("os", _submission(sub.c.os_name)),),
              Filter("choice", ("os",), lambda: OS_NAMES, menu="OS")),
    Dimension("backend", "Ollama's processor split (\"100% GPU\", ...)",
              (Field("backend", _submission(sub.c.backend)),)),
    Dimension("engine", "inference engine; v1 submissions are ollama",
              (ENGINE,),
              Filter("choice", ("engine",), lambda: ENGINE_NAMES, menu="Engine")),
    # A version means nothing without its engine: the group holds both.
    Dimension("engine_version", "engine version as the result records it, in the engine's "
                                "own terms (an Ollama release, a llama.cpp build number, ...)",
              (ENGINE, Field("engine_version", _submission(engine_version))),
              Filter("text", ("engine_version",), known=True, menu="Engine version"),
              label=_engine_version),
    # The mechanism and its depth as the config's request sets them (specschema.speculation):
    # across drafts, what kind of speculation and how deep pays on a machine.
    Dimension("spec_type", "speculative type as the config requests it (llama-server's "
                           "--spec-type: draft-simple, ngram-simple, ngram-mod, draft-mtp, "
                           "...); null where the request names none (Ollama, LM Studio)",
              (Field("spec_type", _summary("spec_type"), on_draft=True),),
              Filter("text", ("spec_type",), known=True),
              label=_spec_type),
    Dimension("depth", "the most tokens one round may draft, as the config's options set it; "
                       "null where they leave it to the engine",
              (Field("depth", _summary("depth"), on_draft=True),),
              Filter("integer", ("depth",), known=True),
              label=_depth),
    # A group of one kind of work holds each config's result on that domain's trials
    # (store.domainview); a result without a prompt set is "unspecified".
    Dimension("domain", "kind of work of the protocol's prompt set (code, code_edit, chat, "
                        "summary, math, translation; unspecified: a protocol without one); "
                        "a group's speedups are those on that domain's trials",
              (Field("domain", _summary("domain"), on_draft=True),),
              Filter("choice", ("domain",), lambda: DOMAIN_NAMES,
                     plain=domainview.plain_clause),
              label=_domain),
    Dimension("verdict", "the speculation verdict (filter: comma-separated verdicts)",
              (Field("verdict", _summary("observed"), on_draft=True),),
              Filter("list", ("verdict",), lambda: VERDICTS, on_page=False, key="verdicts")),
)

BY_NAME: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}
# group_by dimension -> the draft result's fields that identify a value of it.
GROUP_FIELDS: dict[str, tuple[str, ...]] = {
    d.name: tuple(f.name for f in d.fields) for d in DIMENSIONS if d.fields}
FILTERS: dict[str, Filter] = {d.name: d.filter for d in DIMENSIONS if d.filter is not None}
FILTER_NAMES: tuple[str, ...] = tuple(FILTERS)
PAGE_FILTERS: tuple[str, ...] = tuple(n for n, f in FILTERS.items() if f.on_page)
_FIELDS: dict[str, Field] = {f.name: f for d in DIMENSIONS for f in d.fields}


def field_column(name: str, summary: Any) -> Any:
    """The SQL column of a dimension's field (``summary``: the draft's summary alias)."""
    return _FIELDS[name].column(summary)


def filter_columns(name: str, summary: Any) -> list[Any]:
    """The columns filter ``name`` compares."""
    return [field_column(f, summary) for f in FILTERS[name].compares]


def on_draft(name: str) -> bool:
    """Whether filter ``name`` compares the draft's summary rather than the submission."""
    return any(_FIELDS[f].on_draft for f in FILTERS[name].compares)


@dataclass(frozen=True)
class Filters:
    """Equality filters shared by the leaderboard, the submission list and the export:
    (filter name, value) pairs in ``FILTER_NAMES`` order (a list filter's value is a sorted
    tuple). Hashable: boards are cached by it."""

    values: tuple[tuple[str, FilterValue], ...] = ()
    # Not a public filter: the speedup board's chips split (``board.chips``). When set,
    # only rows whose chip is one of these, or none, match; with ``apart``, only the others.
    chips_on_board: tuple[str, ...] | None = None
    apart: bool = False

    @classmethod
    def of(cls, values: Mapping[str, FilterValue | None]) -> Filters:
        unknown = set(values) - set(FILTERS)
        if unknown:
            raise ValueError(f"unknown filters: {', '.join(sorted(unknown))}")
        return cls(tuple((name, _settled(values[name])) for name in FILTER_NAMES
                         if values.get(name) not in (None, ())))

    def get(self, name: str) -> FilterValue | None:
        return next((value for key, value in self.values if key == name), None)

    @property
    def verdicts(self) -> frozenset[str]:
        found = self.get("verdict")
        return frozenset(found) if isinstance(found, tuple) else frozenset()

    def is_empty(self) -> bool:
        return not self.values

    def split(self, chips_on_board: Sequence[str], apart: bool) -> Filters:
        """These filters on one side of the chips split (``chips_on_board``)."""
        return replace(self, chips_on_board=tuple(sorted(set(chips_on_board))), apart=apart)

    def whole(self) -> Filters:
        """These filters without the chips split."""
        return replace(self, chips_on_board=None, apart=False)

    def as_json(self) -> dict[str, Any]:
        """The API's ``filters`` object: every filter, null (or []) when not given."""
        out: dict[str, Any] = {}
        for name, spec in FILTERS.items():
            value = self.get(name)
            out[spec.key or name] = (list(value) if isinstance(value, tuple) else value) if (
                value is not None) else ([] if spec.kind == "list" else None)
        return out


def _settled(value: FilterValue | None) -> FilterValue:
    assert value is not None
    return tuple(sorted(set(value))) if isinstance(value, tuple) else value


def _clause(name: str, value: FilterValue, summary: Any) -> ColumnElement[bool]:
    plain = FILTERS[name].plain
    if plain is not None and summary is not None and not by_domain(summary):
        return plain(summary, value)
    columns = filter_columns(name, summary)
    if isinstance(value, tuple):
        return or_(*(column.in_(list(value)) for column in columns))
    return or_(*(column == value for column in columns))


def submission_clauses(filters: Filters) -> list[ColumnElement[bool]]:
    """The filters on the submission's own columns."""
    found = [_clause(name, value, None) for name, value in filters.values if not on_draft(name)]
    if filters.chips_on_board is not None:
        chip = tables.submissions.c.chip
        listed = chip.in_(list(filters.chips_on_board))
        found.append(and_(chip.is_not(None), ~listed) if filters.apart
                     else or_(chip.is_(None), listed))
    return found


def draft_clauses(filters: Filters, summary: Any) -> list[ColumnElement[bool]]:
    """The filters on a draft config's summary row (``summary``: the alias joined)."""
    return [_clause(name, value, summary) for name, value in filters.values if on_draft(name)]


def uses_domain(filters: Filters, dimensions: Sequence[str] = ()) -> bool:
    """Whether a read of these filters and dimensions reads draft results per domain."""
    return "domain" in dimensions or filters.get("domain") is not None


def by_domain(summary: Any) -> bool:
    """Whether ``summary`` is the per-domain rows (``domainview.draft_rows(True)``)."""
    return "domain" in summary.c


def draft_rows(filters: Filters, dimensions: Sequence[str] = ()) -> Any:
    """The draft results a read of these filters and dimensions reads, as alias "d"."""
    return domainview.draft_rows(uses_domain(filters, dimensions))


def group_label(name: str, value: Mapping[str, KeyValue]) -> str:
    return BY_NAME[name].shown(value)
