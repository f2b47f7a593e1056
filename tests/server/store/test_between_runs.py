"""A result's between-run spread (store/repeats.py): the same key's other confirmed runs of
the same measurement, on the submission's API view and page, beside the within-run
interval; never another key's, a hidden one's, another machine's or an unconfirmed one's."""

from __future__ import annotations

import html
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from specschema import Submission, summarize
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.payload import submission_bytes
from specschema.verdicts import between_runs_words
from specserver.store import tables
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import sign_dict

M2, M3 = EXAMPLE_MACHINES[0], EXAMPLE_MACHINES[1]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _run(seed: int, speedup: float, *, machine: dict[str, object] = M2,
         counters: bool = True) -> Submission:
    return example_submission("ollama-draft", seed=seed, schema_version=2, blocks=True,
                              engine_version="0.30.1", counters_seen=counters,
                              machine=machine, created_at=datetime.now().astimezone(),
                              draft_speedups={"spec_4": speedup, "spec_8": 1.2})


def _post(served: Served, sub: Submission, key_seed: int) -> str:
    response = served.post(sign_dict(json.loads(submission_bytes(sub)), key_seed))
    assert response.status_code == 201, response.text
    return str(sub.submission_id)


def _spec_4(sub: Submission) -> float:
    found = next(s for s in summarize(sub) if s.name == "spec_4")
    assert found.observed == "confirmed" and found.speedup_tps is not None
    return found.speedup_tps


def test_a_result_shows_its_contributors_other_runs_beside_its_interval(
        store_url: str, tmp_path: Path) -> None:
    mine = [_run(9500 + i, speedup) for i, speedup in enumerate((1.4, 1.6, 1.5))]
    others = {  # none of these is one of key 1's runs of the same measurement
        "another key": (_run(9510, 3.0), 2),
        "another chip": (_run(9511, 3.0, machine=M3), 1),
        "not confirmed": (_run(9512, 3.0, counters=False), 1),
        "hidden": (_run(9513, 3.0), 1),
    }
    with Served(settings_for(tmp_path, database_url=store_url)) as served:
        ids = [_post(served, sub, 1) for sub in mine]
        for sub, key_seed in others.values():
            _post(served, sub, key_seed)
        hidden = str(others["hidden"][0].submission_id)
        with served.store.engine.begin() as conn:
            conn.execute(update(tables.submissions).values(hidden=True)
                         .where(tables.submissions.c.submission_id == hidden))
        view = served.get(f"/v1/submissions/{ids[0]}").json()
        by_name = {s["config_name"]: s for s in view["summary"]}
        values = sorted(_spec_4(sub) for sub in mine)
        spread = by_name["spec_4"]["between_runs"]
        assert spread == {"runs": 3, "low": pytest.approx(values[0], abs=1e-4),
                          "median": pytest.approx(values[1], abs=1e-4),
                          "high": pytest.approx(values[2], abs=1e-4),
                          "spread": pytest.approx(values[2] / values[0], abs=1e-3)}
        assert by_name["spec_8"]["between_runs"]["runs"] == 3
        assert by_name["spec_off"]["between_runs"] is None  # the baseline has no ratio
        # another key's result knows only its own run: no spread to show
        alone = served.get(f"/v1/submissions/{others['another key'][0].submission_id}").json()
        assert all(s["between_runs"] is None for s in alone["summary"])
        page = served.get(f"/submissions/{ids[0]}")
        assert page.status_code == 200
        words = between_runs_words("spec_4", 3, spread["low"], spread["high"])
        assert html.escape(words) in page.text  # as the page escapes every value
        assert "between-run spread" not in served.get(
            f"/submissions/{others['another key'][0].submission_id}").text


def test_the_words_say_which_interval_covers_what() -> None:
    assert between_runs_words("spec_4", 3, 1.42, 1.66) == (
        "spec_4: 1.42–1.66x over this contributor's 3 confirmed runs of it (between-run "
        "spread 1.17x); the 95% within-run CI covers one run only")
