"""Where a check worker's CPU goes: ``prepare_submission``'s phases, each timed alone.

    .venv/bin/python bench/ingest_phases.py [--count 300] [--blocked [--rounds]]

Generates bench/ingest.py's signed submissions (hardnumbers-m2 v1, or with ``--blocked``
llama-server llamacpp-draft v2 with blocks), then times, in this process, the whole
``prepare_submission`` and each of its phases over the same bodies (best of 5 rounds,
``time.process_time``, microseconds per submission). A phase timed alone runs warmer than
inside the whole, so the phases add up to a little less than the whole. The server
process's share (HTTP, the writer) is not here: bench/ingest.py measures the whole path,
and this machine's py-spy profiles of it are in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ingest import generate
from specschema.capability import submission_verdicts
from specschema.envelope import PAYLOAD_TYPE, verify_envelope
from specschema.evidence import submission_evidence
from specschema.models import Submission
from specschema.payload import parse_submission
from specschema.strictjson import loads_strict
from specschema.summary import summarize
from specserver.ingest import checks, plausibility, rows, rules, workers
from specserver.ingest.prepare import CheckLimits, prepare_submission


def per_call_us(run: Callable[[], Any], count: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--blocked", action="store_true",
                        help="llama-server llamacpp-draft v2 submissions with blocks")
    parser.add_argument("--rounds", action="store_true",
                        help="with --blocked: counters with rounds and per-position counts")
    args = parser.parse_args()
    bodies = generate(args.count, templates=min(args.count, 100), blocked=args.blocked,
                      rounds=args.rounds)
    limits = CheckLimits(max_age=timedelta(days=30), max_future_skew=timedelta(minutes=5))
    now = datetime.now(UTC)
    envelopes = [checks.parse_envelope_json(b) for b in bodies]
    verified = [verify_envelope(e, PAYLOAD_TYPE) for e in envelopes]
    subs = [parse_submission(v.payload) for v in verified]
    contexts = [rules.RuleContext(checks.check_protocol(s), now, limits.max_age,
                                  limits.max_future_skew) for s in subs]
    done = [checks.check_submission(b, now=now, max_age=limits.max_age,
                                    max_future_skew=limits.max_future_skew) for b in bodies]
    frames = [workers.encode_request(b, now) for b in bodies]
    n = len(bodies)
    phases: list[tuple[str, Callable[[], Any]]] = [
        ("prepare_submission, whole", lambda: [prepare_submission(b, now, limits)
                                               for b in bodies]),
        ("envelope JSON", lambda: [checks.parse_envelope_json(b) for b in bodies]),
        ("signature (verify_envelope)", lambda: [verify_envelope(e, PAYLOAD_TYPE)
                                                 for e in envelopes]),
        ("payload: strict JSON", lambda: [loads_strict(v.payload) for v in verified]),
        ("payload: pydantic", lambda: [Submission.model_validate_json(v.payload)
                                       for v in verified]),
        ("consistency rules", lambda: [rules.violations(s, c)
                                       for s, c in zip(subs, contexts, strict=True)]),
        ("  of which the verdicts", lambda: [submission_verdicts(s) for s in subs]),
        ("summary (summarize)", lambda: [summarize(s) for s in subs]),
        ("plausibility", lambda: [plausibility.implausible_reason(s) for s in subs]),
        ("sha256 of the body", lambda: [hashlib.sha256(b).hexdigest() for b in bodies]),
        ("rows (submission_rows)", lambda: [rows.submission_rows(c, now) for c in done]),
        ("  of which the evidence", lambda: [submission_evidence(
            c.submission, {m.name: m.speedup_tps for m in c.summaries}) for c in done]),
        ("the worker's answer (answer_for)", lambda: [workers.answer_for(f, limits)
                                                     for f in frames]),
    ]
    kind = "llamacpp-draft v2, blocks" if args.blocked else "hardnumbers-m2 v1"
    print(f"{n} {kind} submissions, us per submission (best of 5):")
    answer = pickle.loads(workers.answer_for(frames[0], limits))
    for label, run in phases:
        print(f"{per_call_us(run, n):10.1f}  {label}")
    print(f"answer size: {len(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)):,} bytes")


if __name__ == "__main__":
    main()
