"""schemathesis against the app's own OpenAPI, in-process (ASGI): every operation.

Each operation gets 100 generated examples that fit its schema and 100 that violate it
(schemathesis's positive and negative modes), unless Hypothesis runs out of distinct
inputs first (an operation without parameters has exactly one). Every response is
checked: no 5xx, a status the operation documents, a documented content type, and a body
that conforms to the documented schema. The admin operations get the configured bearer
token, so their handlers are reached rather than stopped at 401.
``pytest -s`` prints, per operation, the examples sent and the statuses seen.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from specserver.http.app import create_app
from tests.reliability.apps import make_settings

EXAMPLES = 100
TOKEN = "reliability-admin-token"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


def _operations(tmp: Path) -> tuple[Any, list[Any]]:
    app = create_app(make_settings(tmp, admin_token=TOKEN))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    return schema, operations


def _summary(exc: BaseException) -> str:
    """The failing check, what was received and what is documented, on one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    keep = [line for line in lines if line.startswith(("- ", "Received:", "Documented:",
                                                       "curl "))]
    return " | ".join(keep)[:500] or lines[0][:500]


def _runner(operation: Any, mode: GenerationMode, seen: Counter[int]) -> Any:
    """A Hypothesis test of one operation in one mode; counts statuses into ``seen``."""

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        response = case.call(headers=headers)
        seen[response.status_code] += 1
        case.validate_response(response, checks=CHECKS, headers=headers)

    return run


@pytest.mark.slow  # ~30-60 s on the shared 2-core machine
def test_every_operation_survives_generated_inputs(tmp_path: Path) -> None:
    _schema, operations = _operations(tmp_path)
    assert len(operations) >= 10
    figures: dict[str, Counter[int]] = {}
    failures: list[str] = []
    for operation in operations:
        seen: Counter[int] = Counter()
        inputs = (len(operation.path_parameters) + len(operation.query)
                  + len(operation.headers) + len(operation.body))
        modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if inputs else [])
        for mode in modes:
            try:
                _runner(operation, mode, seen)()
            except Unsatisfiable:
                continue  # nothing can violate the schema (a free-form string path parameter)
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - reported below
                failures.append(f"{operation.label} ({mode}): {_summary(exc)}")
        figures[operation.label] = seen
    for label, seen in sorted(figures.items()):
        statuses = dict(sorted(seen.items()))
        print(f"{label:50s} {sum(seen.values()):4d} examples, statuses {statuses}")
    total = sum(sum(seen.values()) for seen in figures.values())
    print(f"schemathesis: {len(figures)} operations, {total} requests, {len(failures)} failing")
    assert failures == [], "\n\n".join(failures)
    assert not any(code >= 500 for seen in figures.values() for code in seen)
    # Operations with inputs really got the examples asked for (both modes together).
    with_inputs = [label for label, seen in figures.items() if sum(seen.values()) > 2]
    assert with_inputs and all(sum(figures[label].values()) >= EXAMPLES for label in with_inputs)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema is loaded from the app itself, never from a URL."""
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
