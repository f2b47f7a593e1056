"""The cost of the names rule on the ingest fast path, per submission.

    .venv/bin/python bench/names_check.py

Prints the whole consistency check (``rules.violations``, one pass over every rule) and
the part that decides ``names_printable`` for an honest submission (every name printable
ASCII): the joined fast check (``name_values``) and, for comparison, walking
``name_fields`` as the rule's reports do.
"""

from __future__ import annotations

import timeit
from datetime import UTC, datetime, timedelta

from specschema.examples import example_submission
from specschema.protocol_files import get_protocol
from specserver.ingest import namefields, names, rules

NUMBER = 20_000


def per_call_us(fn: object) -> float:
    return min(timeit.repeat(fn, number=NUMBER, repeat=5)) / NUMBER * 1e6  # type: ignore[arg-type]


def main() -> None:
    now = datetime.now(UTC)
    sub = example_submission("ollama-draft", seed=1, engine_version="0.30.1",
                             counters_seen=True, created_at=now - timedelta(hours=1))
    ctx = rules.RuleContext(get_protocol("ollama-draft"), now, timedelta(days=30),
                             timedelta(minutes=5))
    assert rules.violations(sub, ctx) == []

    def joined() -> bool:
        text = "".join(namefields.name_values(sub))
        return text.isascii() and text.isprintable()

    def walked() -> bool:
        return all(names.name_problem(v, note=k == "note", chip=k == "chip") is None
                   for _p, v, k in namefields.name_fields(sub))

    print(f"violations (all rules): {per_call_us(lambda: rules.violations(sub, ctx)):.1f} us")
    print(f"names, joined fast check: {per_call_us(joined):.1f} us")
    print(f"names, walking name_fields: {per_call_us(walked):.1f} us")


if __name__ == "__main__":
    main()
