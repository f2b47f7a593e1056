"""What the contributor's client costs around a run: fingerprinting and submitting.

- fingerprint: ``collect_fingerprint()`` on this machine (every probe, live).
- sign: ``submission_bytes`` + Ed25519 DSSE envelope for one hardnumbers-m2 result.
- submit: sign, park in pending/, POST, record the receipt (``send_submission``) against
  the real specserver (uvicorn, DuckDB file in a temp folder, rate limits off) on
  loopback, one at a time.

    .venv/bin/python bench/submit_client.py [--rounds 20] [--submissions 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.client.submit_server import RealServer  # noqa: E402

from specschema.examples import example_submission  # noqa: E402
from specschema.stats import median, percentile  # noqa: E402
from specsubmit.fingerprint import collect_fingerprint  # noqa: E402
from specsubmit.local import keys
from specsubmit.send import submit  # noqa: E402
from specsubmit.send.delivery import RetryPolicy  # noqa: E402


def timed_ms(samples: list[float]) -> str:
    return (f"median {median(samples):.2f} ms, p90 {percentile(samples, 0.9):.2f} ms, "
            f"max {max(samples):.2f} ms (n={len(samples)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--submissions", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SPECSUBMIT_HOME"] = str(Path(tmp) / "home")
        samples = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            collect_fingerprint()
            samples.append((time.perf_counter() - start) * 1000)
        print(f"fingerprint (live probes): {timed_ms(samples)}")

        key = keys.load_or_create()
        submissions = [example_submission(seed=n) for n in range(args.submissions)]
        samples = []
        for sub in submissions:
            start = time.perf_counter()
            submit.sign(sub, key)
            samples.append((time.perf_counter() - start) * 1000)
        print(f"sign (payload bytes + DSSE Ed25519): {timed_ms(samples)}")

        server = RealServer(Path(tmp), rate_key_per_minute=0, rate_addr_per_minute=0).start()
        try:
            policy = RetryPolicy(attempts=1)
            samples = []
            for sub in submissions:
                start = time.perf_counter()
                receipt, _ = submit.send_submission(sub, server.url, policy)
                samples.append((time.perf_counter() - start) * 1000)
                assert receipt.status == 201
            print(f"submit to specserver on loopback (sign, park, POST, record): "
                  f"{timed_ms(samples)}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
