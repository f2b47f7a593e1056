"""What each kind of signed POST costs the server to check, and what the sender pays for it.

For each kind the server accepts (submissions of several protocols and wire versions, the
real speculation-map result, a cost probe), times the checks a POST runs before anything
is stored (``ingest.prepare_submission`` or ``ingest.check_probe``: envelope, signature,
strict JSON, schema, protocol, consistency rules, plausibility, summaries and rows: what a
check worker runs) on fresh bodies in this process, by CPU time. Prints per kind: body
size, median and p90 CPU ms per POST, the address tokens the server charges one POST
(``http.submissions.check_tokens``) and what 50 addresses sending that kind as fast as
their address buckets refill cost in cores, beside what they would at one token a POST.

    .venv/bin/python bench/check_cost.py [--bodies 40] [--senders 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, bench
from bench.ingest import blocked_template, hardnumbers_template  # noqa: E402
from tests.support.crowd import M2, cost_probe, map_result, signed_probe, target_of  # noqa: E402
from tests.support.signed import sign_dict  # noqa: E402

from specschema.examples import example_submission  # noqa: E402
from specschema.payload import submission_bytes  # noqa: E402
from specschema.protocol_files import all_protocols
from specserver.http.submissions import check_tokens  # noqa: E402
from specserver.ingest import CheckLimits, prepare_submission  # noqa: E402
from specserver.ingest.probes import check_probe  # noqa: E402
from specserver.settings import ServerSettings  # noqa: E402

MAP_RESULT = (Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "map_results"
              / "gemma-270m-llamacpp-map.json")
LIMITS = CheckLimits(max_age=timedelta(days=30), max_future_skew=timedelta(minutes=5))


def _fresh(data: dict[str, Any], seed: int) -> bytes:
    data = {**data, "submission_id": str(uuid.uuid4()),
            "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
    return sign_dict(data, seed)


def _example(protocol: str, **kwargs: Any) -> Callable[[int], bytes]:
    def make(seed: int) -> bytes:
        return _fresh(json.loads(submission_bytes(example_submission(
            protocol, seed=seed, **kwargs))), seed)
    return make


def _map_result(seed: int) -> bytes:
    return _fresh(json.loads(MAP_RESULT.read_text(encoding="utf-8")), seed)


def _shipped(protocol_id: str, version: int, wire: int) -> Callable[[int], bytes]:
    """An example of one shipped protocol version, as a client of wire ``wire`` sends it
    (blocks and per-trial counters in v2)."""
    proto = next(p for p in all_protocols() if (p.id, p.version) == (protocol_id, version))

    def make(seed: int) -> bytes:
        return _fresh(json.loads(submission_bytes(example_submission(
            proto, seed=seed, engine_version="0.30.1", counters_seen=True,
            schema_version=2 if wire == 2 else 1, runtime="ggml" if wire == 2 else None,
            blocks=wire == 2 and bool(proto.blocks())))), seed)
    return make


KINDS: dict[str, tuple[Callable[[int], bytes], bool]] = {  # name: (body of seed, probe?)
    "hardnumbers-m2 v1": (lambda seed: _fresh(hardnumbers_template(seed), seed), False),
    "ollama-draft (newest), wire v2": (_example("ollama-draft", engine_version="0.30.1",
                                                schema_version=2, runtime="ggml",
                                                counters_seen=True), False),
    "llamacpp-draft (newest), blocks": (lambda seed: _fresh(blocked_template(seed), seed),
                                        False),
    "llamacpp-draft (newest), rounds": (lambda seed: _fresh(blocked_template(seed, True),
                                                           seed), False),
    "llamacpp-map (real result)": (_map_result, False),
    "llamacpp-draft v2, wire v2, blocks": (_shipped("llamacpp-draft", 2, 2), False),
    "ollama-draft v2, wire v2": (_shipped("ollama-draft", 2, 2), False),
    "ollama-map v1, wire v1": (_shipped("ollama-map", 1, 1), False),
    "lmstudio-map v1, wire v1": (_shipped("lmstudio-map", 1, 1), False),
    "cost probe": (lambda seed: signed_probe(cost_probe(target_of(map_result(0, M2)), M2),
                                             seed), True),
}


def check(body: bytes, probe: bool) -> None:
    now = datetime.now(UTC)
    if probe:
        check_probe(body, received_at=now, max_age=LIMITS.max_age,
                    max_future_skew=LIMITS.max_future_skew)
    else:
        prepare_submission(body, now, LIMITS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bodies", type=int, default=40, help="fresh bodies per kind")
    parser.add_argument("--senders", type=int, default=50, help="addresses sending")
    args = parser.parse_args()
    settings = ServerSettings()
    per_second = settings.rate_addr_per_minute / 60.0
    ms_per_token = settings.rate_check_ms_per_token
    print(f"address bucket: {settings.rate_addr_per_minute:g} tokens a minute, burst "  # noqa: T201
          f"{settings.rate_addr_burst}; a token pays for {ms_per_token:g} ms of checks")
    for name, (make, probe) in KINDS.items():
        bodies = [make(1000 + i) for i in range(args.bodies)]
        check(bodies[0], probe)  # warm caches (protocols, tables)
        times = []
        for body in bodies[1:]:
            start = time.process_time()
            check(body, probe)
            times.append((time.process_time() - start) * 1e3)
        size = statistics.median(len(b) for b in bodies)
        ms = statistics.median(times)
        tokens = check_tokens(ms / 1e3, ms_per_token)
        cores = args.senders * per_second * ms / 1e3
        print(f"{name:36s} {size / 1024:5.1f} KiB  CPU {ms:6.2f} ms median "  # noqa: T201
              f"{statistics.quantiles(times, n=10)[-1]:6.2f} p90; charged {tokens:4.1f} "
              f"token(s): {args.senders} addresses at their refill rate cost "
              f"{cores / tokens:.2f} cores ({cores:.2f} at one token a POST)")


if __name__ == "__main__":
    main()
