"""What the evidence level (specschema.evidence) adds to ingesting one submission.

Prints microseconds per submission for ``submission_evidence`` (run by ingest/rows.py on
every stored submission) next to ``summarize`` (the summary the server computes anyway),
for a v1 (totals only) and a v2 (per-trial counters) ``ollama-draft`` example, best of 5.

    .venv/bin/python bench/evidence_cost.py
"""

from __future__ import annotations

import timeit
from functools import partial

from specschema.evidence import submission_evidence
from specschema.examples import example_submission
from specschema.summary import summarize


def main() -> None:
    for wire in (1, 2):
        sub = example_submission("ollama-draft", seed=3, engine_version="0.34.1",
                                 target="gemma4:mtp", counters_seen=True,
                                 schema_version=wire,  # type: ignore[arg-type]
                                 runtime="ggml" if wire == 2 else None)
        speedups = {m.name: m.speedup_tps for m in summarize(sub)}
        level = min(timeit.repeat(partial(submission_evidence, sub, speedups), number=2000,
                                  repeat=5)) / 2000
        summary = min(timeit.repeat(partial(summarize, sub), number=200, repeat=5)) / 200
        print(f"wire v{wire}: submission_evidence {level * 1e6:.1f} us, "  # noqa: T201
              f"summarize {summary * 1e6:.0f} us per submission")


if __name__ == "__main__":
    main()
