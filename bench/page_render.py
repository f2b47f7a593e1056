"""The leaderboard page's rendering cost: CPU to turn computed page data into its body.

    .venv/bin/python bench/page_render.py [--groups 40] [--rounds 30]

Builds a store of ``--groups`` submissions, each on a chip of its own (a hostile-looking
name: ``Chip 0007 <b>&``), so that the speedup board has two groups per chip (its first
page holds ``page_groups`` = 50 of them); serves it in process, reads ``GET /`` once, and
then calls the page's body builder (what the refresher renders ahead for each new
snapshot) ``--rounds`` times on that one snapshot: no store work, rendering only. Prints
the median and 90th percentile of the process's CPU per render.

Run it with another tree's code first on PYTHONPATH for a before/after comparison.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

from tests.support.boardfill import BASE_TIME, insert_submission, key, new_engine  # noqa: E402
from tests.support.inprocess import InProcessClient  # noqa: E402

from specschema.examples import EXAMPLE_MACHINES, example_submission  # noqa: E402
from specserver.http import create_app  # noqa: E402
from specserver.http.page import routes  # noqa: E402
from specserver.settings import ServerSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    path = Path(tempfile.mkdtemp()) / "page.duckdb"
    engine = new_engine(path)
    for i in range(args.groups):
        sub = example_submission(
            "ollama-draft", seed=i, engine_version="0.30.1",
            machine={**EXAMPLE_MACHINES[0], "chip": f"Chip {i:04d} <b>&"},
            draft_speedups={"spec_4": 1.3, "spec_8": 1.1}, counters_seen=True,
            created_at=datetime(2026, 11, 1, tzinfo=UTC))
        insert_submission(engine, sub, key(i), received_at=BASE_TIME + timedelta(seconds=i))
    engine.dispose()
    captured: dict[str, Any] = {}
    original = routes.board_conditional

    def grab(request: Any, key: Any, snapshot: Any, build: Any, version_of: Any = None
             ) -> Any:
        captured["build"] = (build, snapshot)
        return original(request, key, snapshot, build, version_of)

    routes.board_conditional = grab  # type: ignore[assignment]
    settings = ServerSettings(database_url=str(path), page_groups=50)
    with InProcessClient(create_app(settings)) as client:
        first = client.get("/")
        assert first.status_code == 200, first.text
        build, snapshot = captured["build"]
        for _ in range(3):  # warm: templates compiled, caches filled
            build(snapshot)
        times = []
        for _ in range(args.rounds):
            start = time.process_time()
            body = build(snapshot).body
            times.append(time.process_time() - start)
    times.sort()
    rows = first.text.count('class="group"')
    print(f"{rows} board rows, {len(body):,} bytes: CPU per render median "
          f"{statistics.median(times) * 1e3:.1f} ms, p90 "
          f"{times[int(len(times) * 0.9)] * 1e3:.1f} ms ({args.rounds} renders)")


if __name__ == "__main__":
    main()
