"""Twin rows: groups were keyed on the target's name and digest but labelled with
the name only, so another digest (or none) made a second row whose label was identical to
the honest one (3 contributors, 3.15x, no "few results" tag). Model tags were not canonical
(``qwen3:14B``, ``Qwen3:14b``, ``qwen3:latest`` were other models).

Now a model is its canonical name, digest and quantization, for the target and the draft;
where one name has several variants on a board every row of that name says which it is,
with a digest prefix long enough that two digests sharing a prefix still read apart. The
attacks run through the API on DuckDB and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.board import aggregate
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import signing_key
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
M2 = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")
TARGET = "qwen3:14b"
HONEST_DIGEST = hashlib.sha256(TARGET.encode()).hexdigest()  # the example's digest
HONEST = [1.05, 1.08, 1.10, 1.12, 1.15, 1.18]


@pytest.fixture(params=STORES)
def client(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessClient]:
    with app_on(request.param, tmp_path, new_key_probation_days=0) as app, \
            InProcessClient(app) as c:
        yield c


def _post(client: InProcessClient, seed: int, speedup: float, *, target: str = TARGET,
          digest: str | None = HONEST_DIGEST, keep_model: bool = True,
          draft_quant: str | None = None, protocol: str = "ollama-draft") -> None:
    sub = example_submission(protocol, seed=seed, engine_version="0.30.1", machine=M2,
                             target=target, draft_speedups={"spec_4": speedup},
                             counters_seen=True,
                             created_at=datetime.now(UTC) - timedelta(minutes=1))
    models = []
    for model in sub.models:
        if model.name == target:
            if not keep_model:  # another model in its place (models[] may not be empty)
                model = model.model_copy(update={"name": "qwen2.5:0.5b"})
            model = model.model_copy(update={"digest": digest})
        elif draft_quant is not None:
            model = model.model_copy(update={"quantization": draft_quant})
        models.append(model)
    sub = sub.model_copy(update={"models": models})
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(seed)))
    response = client.post(URL, content=body, peer=(f"10.{seed % 250}.{seed // 250}.1", 1))
    assert response.status_code == 201, response.text


def _spec4_rows(client: InProcessClient) -> list[dict[str, Any]]:
    board = client.get("/v1/leaderboard", params={"chip": "Apple M2"}).json()
    return [g for g in board["groups"] if g["key"]["draft"]["config_name"] == "spec_4"]


def test_a_second_digest_or_none_never_looks_like_the_honest_row(
        client: InProcessClient) -> None:
    for i, speedup in enumerate(HONEST):
        _post(client, 100 + i, speedup)
    twin = HONEST_DIGEST[:40] + "f" * 24  # shares the honest digest's first 40 characters
    if twin == HONEST_DIGEST:
        twin = HONEST_DIGEST[:40] + "e" * 24
    for i in range(3):
        _post(client, 200 + i, 3.15, digest=twin)
        _post(client, 300 + i, 3.15, digest=None)
        _post(client, 400 + i, 3.15, keep_model=False)  # the target left out of models[]
    rows = _spec4_rows(client)
    labels = [r["label"] for r in rows]
    page = client.get("/", params={"chip": "Apple M2"}).text
    print("\n" + "\n".join(f"{r['label']}: {r['median_speedup']:.2f}x, "
                           f"{r['contributors']} contributors" for r in rows))
    # honest, twin digest, no digest (Q4_K_M reported), no model entry at all
    assert len(labels) == len(set(labels)) == 4
    honest = next(r for r in rows if r["key"]["target"]["target_digest"] == HONEST_DIGEST)
    assert min(HONEST) <= honest["median_speedup"] <= max(HONEST)
    assert f"digest {HONEST_DIGEST[:44]}" in honest["label"]
    assert f"digest {twin[:44]}" in next(r["label"] for r in rows
                                          if r["key"]["target"]["target_digest"] == twin)
    assert sum("no digest" in label for label in labels) == 2
    for row in rows:
        target_cell = row["label"].split(" · ")[1]
        assert target_cell.startswith(f"{TARGET} (") and target_cell in page


def test_model_tags_are_one_model_whatever_their_case_or_default_tag(
        client: InProcessClient) -> None:
    _post(client, 1, 1.1, target="qwen3:14b")
    _post(client, 2, 1.1, target="Qwen3:14B", digest=HONEST_DIGEST)
    _post(client, 3, 1.1, target="qwen3", digest=None)
    _post(client, 4, 1.1, target="QWEN3:latest", digest=None)
    board = client.get("/v1/leaderboard", params={"chip": "Apple M2"}).json()
    targets = {(g["key"]["target"]["target_model"], g["contributors"]) for g in board["groups"]
               if g["key"]["draft"]["config_name"] == "spec_4"}
    assert targets == {("qwen3:14b", 2), ("qwen3", 2)}
    assert client.get("/v1/leaderboard", params={"target": "Qwen3:14B"}).json()["groups"]


def test_the_draft_models_digest_and_quantization_are_part_of_its_row(
        client: InProcessClient) -> None:
    _post(client, 1, 1.1, protocol="hardnumbers-m2")
    _post(client, 2, 1.1, draft_quant="Q8_0", protocol="hardnumbers-m2")
    board = client.get("/v1/leaderboard", params={"view": "noise_floor"}).json()
    rows = [g for g in board["groups"]
            if g["key"]["draft"]["config_name"] == "draft_qwen2.5_0.5b"]
    assert len(rows) == 2
    assert {r["key"]["draft"]["draft_quant"] for r in rows} == {"Q4_K_M", "Q8_0"}
    assert len({r["label"] for r in rows}) == 2


def test_labels_stay_plain_where_a_name_has_one_variant() -> None:
    group = aggregate.GroupAggregate(
        key={"target": {"target_model": "m", "target_digest": "a" * 64,
                        "target_quant": "Q4_K_M"}},
        submissions=1, contributors=1, median_speedup=1.0, p25_speedup=None,
        p75_speedup=None, min_speedup=1.0, max_speedup=1.0, median_speedup_wall=None,
        median_baseline_tps=None, few_results=True)
    assert aggregate.distinct_labels([group])[0].label(["target"]) == "m"
    other = dataclasses.replace(group, key={"target": {
        "target_model": "m", "target_digest": "a" * 63 + "b", "target_quant": "Q4_K_M"}})
    labels = [g.label(["target"]) for g in aggregate.distinct_labels([group, other])]
    assert labels == [f"m (Q4_K_M, digest {'a' * 64})", f"m (Q4_K_M, digest {'a' * 63}b)"]


def test_splitting_one_persons_keys_over_a_twin_row_keeps_it_few_results(
        tmp_path: Path) -> None:
    """The twin row of the issue had 3 keys, so 3 contributors and no "few results" tag:
    3 keys from one address are one cohort now, with the shipped probation and without."""
    for probation in (7.0, 0.0):
        with app_on("duckdb", tmp_path / str(probation),
                    new_key_probation_days=probation) as app, InProcessClient(app) as client:
            for i, speedup in enumerate(HONEST):
                _post(client, 100 + i, speedup)
            for i in range(3):
                sub = example_submission("ollama-draft", seed=500 + i, engine_version="0.30.1",
                                         machine=M2, target=TARGET, counters_seen=True,
                                         draft_speedups={"spec_4": 3.15},
                                         created_at=datetime.now(UTC) - timedelta(minutes=1))
                sub = sub.model_copy(update={"models": [
                    m.model_copy(update={"digest": "ab" * 32}) for m in sub.models]})
                body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(500 + i)))
                assert client.post(URL, content=body, peer=("198.51.100.9", 1)).status_code == 201
            twin = next(r for r in _spec4_rows(client)
                        if r["key"]["target"]["target_digest"] == "ab" * 32)
        assert twin["contributors"] == 1 and twin["few_results"], twin
