"""No silent takeover: patient Sybils spread over address ranges no longer own a median
after probation. A review took the Apple M2 / spec_4 median from 1.10x to 2.97x against 6
honest contributors, each in its own /24, with 20 /24s holding one key each that posted
once and waited out the probation (28 contributors, the 8 honest ones "outliers"); 5 /24s
posting in two windows reached 2.85x.

Each attack is replayed here through the API with the shipped rules (7 days of probation,
24 h cohort windows, 2 graduations per range and day, 28 days before a graduate is
established), on DuckDB and PostgreSQL. Receipts come from a clock the test moves
(tests/support/clock.py), days at a time, never the wall clock: the store's clock is its
newest receipt, so an honest resubmission after each jump moves it. The maintainers'
side (``specserver disputes``: list, accept, hide, each audited) is replayed through the
admin API and the CLI.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from specschema import envelope_bytes, key_id_of, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.cli import disputes as disputes_cli
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import signing_key
from tests.support.clock import SteppingClock
from tests.support.inprocess import InProcessClient
from tests.support.liveserver import serve

URL = "/v1/submissions"
M2 = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")
HONEST = [1.05, 1.08, 1.10, 1.12, 1.15, 1.18]
ATTACK = 3.0
DAY = 86400.0
TOKEN = "disputes-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}", "X-Specserver-Actor": "carol"}


def _post(client: InProcessClient, seed: int, speedup: float, peer: tuple[str, int],
          key_seed: int | None = None) -> str:
    clock: SteppingClock = client.app.state.clock
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1", machine=M2,
                             draft_speedups={"spec_4": speedup, "spec_8": speedup},
                             counters_seen=True, created_at=clock() - timedelta(minutes=1))
    key = signing_key(seed if key_seed is None else key_seed)
    body = envelope_bytes(sign_envelope(submission_bytes(sub), key))
    response = client.post(URL, content=body, peer=peer)
    assert response.status_code == 201, response.text
    return str(response.json()["submission_id"])


def _later(client: InProcessClient, days: float, seed: int) -> None:
    """``days`` pass; an honest contributor's resubmission moves the store's clock."""
    client.app.state.clock.advance(days * DAY)
    _post(client, seed, HONEST[0], ("10.1.0.7", 40000), key_seed=100)


def _spec4(client: InProcessClient) -> dict[str, Any]:
    board = client.get("/v1/leaderboard", params={"chip": "Apple M2"}).json()
    [group] = [g for g in board["groups"] if g["key"]["draft"]["config_name"] == "spec_4"]
    return dict(group)


def _established_honest(client: InProcessClient) -> None:
    for i, speedup in enumerate(HONEST):
        _post(client, 100 + i, speedup, (f"10.{i + 1}.0.7", 40000))
    _later(client, 7 + 28 + 1, 900)  # past probation and the settle time: established


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Iterator[str]:
    yield str(request.param)


def _app(store: str, tmp_path: Path, **overrides: Any) -> Any:
    return app_on(store, tmp_path, clock=SteppingClock(), admin_token=TOKEN, **overrides)


def _twenty_ranges(client: InProcessClient) -> list[str]:
    keys = []
    for i in range(20):
        _post(client, 2000 + i, ATTACK, (f"172.16.{i}.9", 40000))
        keys.append(key_id_of(bytes(signing_key(2000 + i).verify_key)))
    return keys


def test_twenty_ranges_posting_once_dispute_the_group_instead_of_taking_it(
        store: str, tmp_path: Path) -> None:
    with _app(store, tmp_path) as app, InProcessClient(app) as client:
        _established_honest(client)
        attackers = _twenty_ranges(client)
        new = _spec4(client)
        _later(client, 8, 901)  # the 20 cohorts graduate: recent for 28 days
        aged = _spec4(client)
        listed = client.get("/admin/v1/disputes", headers=ADMIN).json()["items"]
        page = client.get("/", params={"chip": "Apple M2"}).text
    # The page marks the group and says whose median it shows; the recent side's median is
    # in the mark's words, never drawn as the group's result.
    marks = [part.split('"', 1)[0] for part in page.split('<span class="disputed" title="')[1:]]
    assert len(marks) == 2, page  # spec_4 and spec_8, both attacked
    for mark in marks:
        assert mark.startswith("20 recent contributors (median 3.0"), mark
        assert "disagree with 6 established ones (median 1.1" in mark
        assert mark.endswith("the median shown is the established contributors' until a "
                             "maintainer settles it")
    print(f"\n[{store}] 20 /24s once each: new {new['median_speedup']:.2f}x, after probation "
          f"{aged['median_speedup']:.2f}x, dispute {aged['dispute']}")
    for group in (new, aged):
        assert min(HONEST) <= group["median_speedup"] <= max(HONEST), group
    assert new["outlier_contributors"] == 1  # the block of new keys at 3x, no honest one
    assert aged["outlier_contributors"] == 0
    assert new["disputed"] is False and new["dispute"] is None
    assert aged["disputed"] is True
    assert aged["dispute"] == {"established_median": pytest.approx(1.11, rel=0.03),
                               "established_contributors": len(HONEST),
                               "recent_median": pytest.approx(ATTACK, rel=0.03),
                               "recent_contributors": 20}  # which keys share a range: private
    assert aged["contributors"] == len(HONEST)  # what the published median is taken over
    [item] = [i for i in listed if i["key"]["draft"]["config_name"] == "spec_4"]
    assert sorted(item["recent"]["cohorts"]) == sorted(attackers)
    assert item["established"]["contributors"] == len(HONEST)


def test_five_ranges_over_two_windows_dispute_the_group(store: str, tmp_path: Path) -> None:
    """5 /24s, a key each in two windows a day apart: 10 cohorts (2.85x before)."""
    with _app(store, tmp_path) as app, InProcessClient(app) as client:
        _established_honest(client)
        for window in range(2):
            for i in range(5):
                _post(client, 3000 + 10 * window + i, ATTACK, (f"172.17.{i}.9", 40000))
            client.app.state.clock.advance(1.1 * DAY)
        _later(client, 9, 902)  # every cohort graduated (two per range and day at most)
        group = _spec4(client)
    print(f"\n[{store}] 5 /24s, two windows: {group['median_speedup']:.2f}x, "
          f"dispute {group['dispute']}")
    assert min(HONEST) <= group["median_speedup"] <= max(HONEST), group
    assert group["disputed"] and group["dispute"]["recent_contributors"] == 10
    assert group["outlier_contributors"] == 0


def test_without_the_settle_time_the_same_attack_takes_the_median(store: str,
                                                                  tmp_path: Path) -> None:
    """The control: disputes off (settle time 0), the 20 graduated cohorts own the group."""
    with _app(store, tmp_path, cohort_settle_days=0) as app, InProcessClient(app) as client:
        _established_honest(client)
        _twenty_ranges(client)
        _later(client, 8, 901)
        group = _spec4(client)
    assert group["median_speedup"] > max(HONEST) * 2 and group["disputed"] is False
    assert group["outlier_contributors"] > 0  # the honest ones, as the review saw


def test_recent_cohorts_that_agree_count_at_once(store: str, tmp_path: Path) -> None:
    """Honest newcomers from 20 ranges near the established results: no dispute, every
    voice counted, nobody an outlier."""
    with _app(store, tmp_path) as app, InProcessClient(app) as client:
        _established_honest(client)
        for i in range(20):
            _post(client, 4000 + i, 1.10 + i / 1000, (f"172.18.{i}.9", 40000))
        _later(client, 8, 901)
        group = _spec4(client)
    assert group["disputed"] is False and group["contributors"] == len(HONEST) + 20
    assert group["outlier_contributors"] == 0


def test_maintainers_settle_a_dispute_by_hiding_or_accepting_cohorts(store: str,
                                                                     tmp_path: Path) -> None:
    """Hide one cohort (each submission audited), accept another (one audit row): the
    dispute shrinks by one cohort each; hiding every recent cohort ends it."""
    with _app(store, tmp_path) as app, InProcessClient(app) as client:
        _established_honest(client)
        attackers = _twenty_ranges(client)
        _later(client, 8, 901)
        hidden = client.post("/admin/v1/disputes/hide", headers=ADMIN,
                             json={"cohort": attackers[0], "reason": "one-shot 3x from a "
                                                                       "cloud range"})
        assert hidden.status_code == 200, hidden.text
        assert hidden.json()["keys"] == [attackers[0]] and len(hidden.json()["hidden"]) == 1
        [sid] = hidden.json()["hidden"]
        history = client.get(f"/v1/submissions/{sid}").json()["moderation"]
        assert [(h["action"], h["actor"]) for h in history] == [("hide", "carol")]
        accepted = client.post("/admin/v1/disputes/accept", headers=ADMIN,
                               json={"cohort": attackers[1], "reason": "checked"})
        assert accepted.json() == {"action": "accept_cohort", "target": attackers[1],
                                   "changed": True}
        again = client.post("/admin/v1/disputes/accept", headers=ADMIN,
                            json={"cohort": attackers[1], "reason": "checked"})
        assert again.json()["changed"] is False
        group = _spec4(client)
        assert group["dispute"]["recent_contributors"] == 18
        assert group["dispute"]["established_contributors"] == len(HONEST) + 1
        unknown = client.post("/admin/v1/disputes/hide", headers=ADMIN,
                              json={"cohort": "0" * 64, "reason": "x"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "no_such_cohort"
        no_token = client.get("/admin/v1/disputes")
        assert no_token.status_code == 401
        for key in attackers[2:]:
            assert client.post("/admin/v1/disputes/hide", headers=ADMIN,
                               json={"cohort": key, "reason": "flood"}).status_code == 200
        settled = _spec4(client)
        listed = client.get("/admin/v1/disputes", headers=ADMIN).json()["items"]
    assert settled["disputed"] is False and listed == []
    assert min(HONEST) <= settled["median_speedup"] <= max(HONEST)


def _cli(*args: str) -> Any:
    app = typer.Typer()
    disputes_cli.register(app)
    return CliRunner().invoke(app, list(args))


def test_specserver_disputes_lists_and_settles_through_the_server(tmp_path: Path) -> None:
    from specserver.http.app import create_app
    from tests.reliability.apps import make_settings

    clock = SteppingClock()
    settings = make_settings(tmp_path, admin_token=TOKEN)
    with InProcessClient(create_app(settings, clock=clock)) as client:
        _established_honest(client)
        attackers = _twenty_ranges(client)
        _later(client, 8, 901)
    with serve(create_app(settings, clock=clock)) as url:
        base = ["--server", url, "--token", TOKEN, "--actor", "dave"]
        table = _cli("disputes", *base)
        assert table.exit_code == 0, table.output
        assert "Apple M2" in table.output and re.search(r" 3\.0\dx \(20\)", table.output)
        assert attackers[0] in table.output
        as_json = json.loads(_cli("disputes", "--json", *base).output)
        assert {i["recent"]["contributors"] for i in as_json} == {20}
        done = _cli("disputes", "hide", attackers[0], "--reason", "flood", *base)
        assert done.exit_code == 0 and done.output.startswith(f"hide_cohort {attackers[0]}: done")
        wrong = _cli("disputes", "accept", "f" * 64, "--reason", "x", *base)
        assert wrong.exit_code == 1 and "no cohort starts with the key" in wrong.output
        bad = _cli("disputes", "accept", "not-a-key", "--reason", "x", *base)
        assert bad.exit_code == 1
    # No server now: the same command opens the store itself.
    direct = _cli("disputes", "--json", "--database", str(tmp_path / "store.duckdb"))
    assert direct.exit_code == 0, direct.output
    [item] = [i for i in json.loads(direct.output[direct.output.index("["):])
              if i["key"]["draft"]["config_name"] == "spec_4"]
    assert item["recent"]["contributors"] == 19  # one cohort hidden above
