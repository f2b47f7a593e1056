"""GET /v1/predict when many answers are asked at once: at most ``predict_max_concurrent``
are computed together, one more waits ``predict_wait_s`` for its turn and is then 503
``predictions_busy`` in the one error shape with Retry-After; a kept answer is sent at
once, and a query computed while another asking it waited is sent to both from one
computation. A computation is held open here by a gate in front of the real one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from specserver.http import predict as route
from tests.support.crowd import (
    M2,
    M3_PRO,
    RADEON,
    RTX,
    cost_probe,
    map_result,
    post_results,
    signed_probe,
    target_of,
)
from tests.support.served import Served, error_of, settings_for

TARGET = target_of(map_result(0, M2))


class Gate:
    """Holds every computation of an answer until opened; counts them by kind of work."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.computed: list[str | None] = []
        real = route.predict_answer

        def gated(*args: Any, **kwargs: Any) -> Any:
            self.computed.append(args[3])  # the kind of work asked for
            self.entered.set()
            assert self.open.wait(30), "the gate was never opened"
            return real(*args, **kwargs)

        monkeypatch.setattr(route, "predict_answer", gated)


def _served(tmp_path: Path, wait_s: float) -> Served:
    return Served(settings_for(tmp_path, new_key_probation_days=0, cohort_window_hours=0,
                               predict_max_concurrent=1, predict_wait_s=wait_s))


def _fill(served: Served) -> None:
    post_results(served, [RTX, M3_PRO, RADEON, M2])
    response = served.client.post("/v1/probes", content=signed_probe(cost_probe(TARGET, M2), 9))
    assert response.status_code == 201, response.text


def _predict(served: Served, **query: str) -> httpx.Response:
    return served.get("/v1/predict", params={"target": TARGET.digest, "chip": "Apple M2",
                                             **query})


@pytest.fixture()
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


def test_one_more_than_the_server_computes_waits_then_is_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor) -> None:
    with _served(tmp_path, wait_s=0.3) as served:
        _fill(served)
        kept = _predict(served)
        assert kept.status_code == 200, kept.text
        gate = Gate(monkeypatch)
        first = pool.submit(_predict, served, domain="code")
        assert gate.entered.wait(30)
        started = time.monotonic()
        busy = _predict(served, domain="chat")
        waited = time.monotonic() - started
        # the answer kept for the data version is sent while the one turn is taken
        again = _predict(served)
        gate.open.set()
        assert first.result(30).status_code == 200
    assert busy.status_code == 503, busy.text
    error = error_of(busy)
    assert error["code"] == "predictions_busy"
    assert error["details"] == {"max_concurrent_predictions": 1}
    assert int(busy.headers["Retry-After"]) >= 1
    assert waited >= 0.3  # it waited its turn before it was refused
    assert again.status_code == 200 and again.content == kept.content
    assert gate.computed == ["code"]  # the refused query was never computed


def test_a_query_computed_while_it_waited_is_sent_from_that_computation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor) -> None:
    with _served(tmp_path, wait_s=30) as served:
        _fill(served)
        gate = Gate(monkeypatch)
        first = pool.submit(_predict, served, domain="code")
        assert gate.entered.wait(30)
        second = pool.submit(_predict, served, domain="code")
        turns = served.app.state.predict_turns
        deadline = time.monotonic() + 30
        # the second request is waiting for the turn (anyio's semaphore counts it)
        while turns._semaphore.statistics().tasks_waiting < 1:
            assert time.monotonic() < deadline, "the second request never waited"
            time.sleep(0.01)
        gate.open.set()
        answers = [first.result(30), second.result(30)]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].content == answers[1].content
    assert gate.computed == ["code"]


def test_a_refused_computation_gives_its_turn_back(tmp_path: Path) -> None:
    # a name no result gives is refused from inside the computation (404): were the turn
    # kept, the second such query would wait and be refused as busy
    with _served(tmp_path, wait_s=0.3) as served:
        codes = [_predict(served, target=f"no-such-model-{i}").status_code for i in range(3)]
    assert codes == [404, 404, 404]
