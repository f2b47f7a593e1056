"""The first screen's predicted column: ``GET /v1/predict``'s answer for the chosen machine
(``specschema.forecast`` over ``specserver.crowd``'s inputs), read on the page's own
connection, matched to the page's candidates.

A page candidate is a board group (a protocol's config by name); a forecast candidate is a
way to speculate (engine, mechanism, speculative type, depth, draft model). The config's
type and depth come from its protocol's options by the rules ingestion stores them with
(``specschema.speculation``), and the prediction shown is the one at the config's own
depth, over every kind of work. A candidate the forecast does not name, or whose protocol
this server does not ship, shows "no prediction yet"; one the forecast refuses shows why.

The page is recomputed when the store's data version changes: a cost probe that arrives
alone shows in the column from the next change (``/v1/predict`` has it at once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from specschema.crowd import ALL_DOMAINS
from specschema.errors import SpecSchemaError
from specschema.forecast import forecast
from specschema.protocol_files import find_protocol
from specschema.speculation import depth_of, spec_type_of
from specserver.board import newkeys
from specserver.crowd import Asked, crowd_inputs
from specserver.errors import SpecServerError
from specserver.http.page.machine import (
    NO_PREDICTION,
    NOT_PREDICTED,
    Candidate,
    Predicted,
    Predictor,
)
from specserver.settings import ServerSettings

# An engine's forecast, or why there is none for any of its candidates.
Answer = dict[str, Any] | str


def answers(conn: Connection, settings: ServerSettings, min_contributors: int,
            target: str, chip: str, memory_gb: int | None, engines: Sequence[str]
            ) -> dict[str, Answer]:
    """The forecast for the target on this machine, per engine family of the candidates."""
    rules = newkeys.CohortRules.of(settings.new_key_probation_days,
                                   settings.cohort_window_hours,
                                   settings.range_graduations_per_day)
    out: dict[str, Answer] = {}
    for engine in sorted(set(engines)):
        try:
            inputs = crowd_inputs(conn, Asked(target, chip, engine, memory_gb), rules,
                                  min_contributors)
        except SpecServerError as error:  # a name two model files share, say
            out[engine] = str(error)
            continue
        out[engine] = forecast(inputs, inputs.cost, "crowd", measured=inputs.cost_measured)
    return out


def _speculation(key: Mapping[str, Mapping[str, Any]]) -> tuple[str | None, int | None] | None:
    """The config's (speculative type, depth) from its protocol, as ingestion stores them;
    None for a protocol or config this server does not ship."""
    protocol = key.get("protocol", {})
    draft = key.get("draft", {})
    try:
        shipped = find_protocol(str(protocol.get("protocol_id")),
                                int(protocol.get("protocol_version") or 0),
                                str(protocol.get("protocol_sha256")))
        if shipped is None:
            return None
        options = shipped.request_options(shipped.config(str(draft.get("config_name"))))
    except SpecSchemaError:
        return None
    mechanism = str(draft.get("mechanism"))
    kind = spec_type_of(mechanism, options, draft.get("draft_model"))
    return kind, depth_of(kind, options)


def prediction(key: Mapping[str, Mapping[str, Any]], answer: Answer | None) -> Predicted:
    """The forecast's prediction for the page candidate whose board key is ``key``."""
    if answer is None:
        return Predicted()
    if isinstance(answer, str):
        return Predicted(why=NOT_PREDICTED, reason=answer)
    found = _speculation(key)
    if found is None:
        return Predicted()
    kind, depth = found
    draft = key.get("draft", {})
    mine = (str(key.get("engine", {}).get("engine")), draft.get("mechanism"), kind, depth,
            draft.get("draft_digest") or draft.get("draft_model"))
    for entry in answer.get("candidates", ()):
        named = entry["candidate"]
        theirs = (named["engine"], named["mechanism"], named["spec_type"], named["depth"],
                  named["draft_digest"] or named["draft"])
        if entry["domain"] != ALL_DOMAINS or theirs != mine:
            continue
        if entry["why_not_predicted"]:
            return Predicted(why=NOT_PREDICTED, reason=str(entry["why_not_predicted"]))
        row = next((r for r in entry["predictions"] if r["depth"] == depth), None)
        if row is not None:
            return Predicted(row["predicted"], row["low"], row["high"], "")
    return Predicted(why=NO_PREDICTION)


def predictor(found: Mapping[str, Answer]) -> Predictor:
    def predict(candidate: Candidate) -> Predicted:
        engine = str(candidate.key.get("engine", {}).get("engine"))
        return prediction(candidate.key, found.get(engine))

    return predict
