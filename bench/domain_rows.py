"""What store version 15's per-domain rows cost a check worker: ``domain_rows`` alone, and
the whole of ``submission_rows`` that calls it, per submission.

    .venv/bin/python bench/domain_rows.py [--repeat 200]

Submissions: the recorded real llamacpp-map result (tests/fixtures/map_results/: six
domains, two n-gram configs run, one refused), and example results of protocols without a
prompt set (hardnumbers-m2 v1, llamacpp-draft v2 with blocks), for which ``domain_rows``
only finds that there is none. Best of 5 rounds of ``time.process_time``, microseconds per
submission, in this process.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specschema.examples import example_submission
from specschema.models import Submission
from specschema.payload import parse_submission
from specschema.summary import summarize
from specserver.ingest.checks import Checked
from specserver.ingest.rows import submission_rows
from specserver.store import domain_rows, id_digest

FIXTURE = (Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "map_results"
           / "gemma-270m-llamacpp-map.json")


def per_call_us(run: Callable[[], Any], repeat: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(repeat):
            run()
        best = min(best, time.process_time() - started)
    return best / repeat * 1e6


def submissions() -> dict[str, Submission]:
    recorded = parse_submission(FIXTURE.read_bytes())
    llama = example_submission("llamacpp-draft", seed=3, engine_version="b1", schema_version=2,
                               runtime="ggml", counters_seen=True, blocks=True)
    return {"llamacpp-map (real, Gemma 3 270M)": recorded,
            "hardnumbers-m2 v1 (example)": example_submission("hardnumbers-m2", seed=3),
            "llamacpp-draft v2, blocks (example)": llama}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    now = datetime.now(UTC)
    for name, sub in submissions().items():
        sid = str(sub.submission_id)
        checked = Checked(submission=sub, submission_id=sid, key_id="k" * 64,
                          body=json.dumps({}).encode(), body_sha256="ab" * 32,
                          summaries=summarize(sub))
        alone = per_call_us(lambda s=sub, i=sid: domain_rows(s, i, id_digest(i)), args.repeat)
        whole = per_call_us(lambda c=checked: submission_rows(c, now), args.repeat)
        found = len(domain_rows(sub, sid, id_digest(sid)))
        print(f"{name:<38} domain_rows {alone:8.1f} us ({found} rows); "
              f"submission_rows {whole:8.1f} us")


if __name__ == "__main__":
    main()
