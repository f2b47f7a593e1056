"""What GET /v1/predict costs on a store of 100,000 submissions (bench/query.py's generator,
the board's background) holding 30 contributors' llamacpp-map results with per-position
counts for one target and one probe of it: the first answer (the keys' standing read, the
profiles, the forecast), the same query again (kept), another chip's (the standing kept),
and the first after a new submission (the answer computed again, the standing kept for
SPECSERVER_BOARD_REFRESH_S) and after the refresh time (read again). Process CPU and wall
time, in-process (the app and the client share the process). Then the forecast alone over
the first answer's inputs (no store read), the median of ``FORECAST_REPEATS`` calls: the
figure to compare two versions of the forecast by (the route's figures move with the
store's reads by more than a forecast change).

    .venv/bin/python bench/predict_cost.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine

from specschema.forecast import forecast
from specserver.crowd import Asked
from specserver.http.predict import predict_inputs
from specserver.store.migrations import migrate

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.crowd import (  # noqa: E402
    M2,
    M3_PRO,
    RADEON,
    RTX,
    cost_probe,
    map_result,
    signed_probe,
    signed_result,
    target_of,
)
from tests.support.served import Served, settings_for  # noqa: E402

import query  # noqa: E402  (bench/query.py: the store generator)

SUBMISSIONS = 100_000
CONTRIBUTORS = 30
FORECAST_REPEATS = 15


def timed(label: str, served: Served, params: dict[str, str]) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    response = served.get("/v1/predict", params=params)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert response.status_code == 200, response.text
    print(f"{label:<48} {cpu * 1000:8.0f} ms CPU {wall * 1000:8.0f} ms wall "
          f"{len(response.content):>8,} bytes")


def forecast_alone(served: Served, asked: Asked) -> None:
    inputs = predict_inputs(served.store, served.settings, asked)
    assert inputs.cost, "no cost units: the asked machine is not the probed one"
    spent = []
    for _ in range(FORECAST_REPEATS):
        cpu = time.process_time()
        forecast(inputs, inputs.cost, "crowd", None, inputs.cost_measured)
        spent.append(time.process_time() - cpu)
    spent.sort()
    print(f"{'the forecast alone, median of ' + str(FORECAST_REPEATS):<48} "
          f"{spent[len(spent) // 2] * 1000:8.0f} ms CPU (fastest {spent[0] * 1000:.0f}, "
          f"slowest {spent[-1] * 1000:.0f})")


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="specatlas-predict-"))
    path = folder / "store.duckdb"
    engine = create_engine(f"duckdb:///{path}")
    migrate(engine)
    engine.dispose()
    query.generate(path, 0, SUBMISSIONS)
    target = target_of(map_result(0, M2))
    machines = (RTX, M3_PRO, RADEON, M2)
    print(f"load average {os.getloadavg()[0]:.1f}; {SUBMISSIONS:,} generated submissions, "
          f"{CONTRIBUTORS} contributors' results for one target")
    # Probation off: on a fresh store every key is new, and 30 new keys are one voice (no
    # prediction, no draws); the bench measures a crowd that counts.
    settings = settings_for(folder, database_url=str(path), new_key_probation_days=0)
    with Served(settings) as served:
        for seed in range(CONTRIBUTORS):
            response = served.client.post(
                "/v1/submissions", content=signed_result(seed, machines[seed % 4], 1000 + seed),
                peer=(f"198.{51 + seed // 200}.{seed % 200}.7", 40000))
            assert response.status_code == 201, response.text
        served.client.post("/v1/probes", content=signed_probe(cost_probe(target, M2), 999))
        params = {"target": str(target.digest), "chip": "Apple M2"}
        timed("first answer (standing read, forecast)", served, params)
        timed("the same query again (kept)", served, params)
        timed("another chip (standing kept; no cost: no draws)", served,
              {**params, "chip": "NVIDIA GeForce RTX 4090"})
        posted = served.client.post("/v1/submissions", content=signed_result(100, M2, 5000),
                                    peer=("203.0.113.99", 40000))
        assert posted.status_code == 201, posted.text
        timed("after a submission (standing kept)", served, params)
        time.sleep(served.settings.board_refresh_s + 0.1)
        posted = served.client.post("/v1/submissions", content=signed_result(101, M2, 5001),
                                    peer=("203.0.113.98", 40000))
        assert posted.status_code == 201, posted.text
        timed("after a submission, past the refresh time", served, params)
        forecast_alone(served, Asked(str(target.digest), "Apple M2", "llama-server", None))


if __name__ == "__main__":
    main()
