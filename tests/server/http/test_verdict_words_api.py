"""The API says what each verdict is from the one verdict table (specschema.verdicts): the
board's ``verdict_words`` and the ``view`` parameter's description, and the views hold the
verdicts the table puts on them."""

from __future__ import annotations

from specschema.verdicts import ORDER, VERDICTS, listed_on
from specserver.store import dimensions, verdicts


def test_the_board_says_what_each_verdict_is(client):
    body = client.get("/v1/leaderboard").json()
    words = body["verdict_words"]
    assert list(words) == list(ORDER) == list(body["verdict_counts"])
    for verdict in VERDICTS:
        said = words[verdict.name]
        assert said["label"] == verdict.words and said["meaning"] == verdict.meaning
        assert said["view"] == verdict.board
    assert [name for name, said in words.items() if said["counts_as_speedup"]] == ["confirmed"]
    assert {name for name, said in words.items() if said["drawn_as_bar"]} == {
        "confirmed", "not_applied"}
    unverified = client.get("/v1/leaderboard", params={"view": "unverified"}).json()
    assert unverified["verdict_words"] == words


def test_the_view_parameter_names_the_verdicts_of_each_view(client):
    spec = client.get("/openapi.json").json()
    params = spec["paths"]["/v1/leaderboard"]["get"]["parameters"]
    view = next(p for p in params if p["name"] == "view")
    for board in ("speedup", "unverified", "noise_floor"):
        words = ", ".join(v.words for v in listed_on(board))
        assert f"{board}{' (default)' if board == 'speedup' else ''}: {words}" in (
            view["description"])
    assert "unstable (baseline blocks disagree)" in view["description"]


def test_the_store_reads_its_views_and_order_from_the_table():
    from tests.support.reference_board import ContributorResult

    assert dimensions.VERDICTS == ORDER
    # The one place a new verdict must still be named by hand: the tests' reference row of a
    # contributor (tests/support/reference_board.py), whose count fields must follow the
    # table's order as board.columns' do.
    fields = ContributorResult._fields
    start = fields.index(ORDER[0])
    assert fields[start:start + len(ORDER)] == ORDER
    assert verdicts.VIEW_VERDICTS == {
        board: frozenset(v.name for v in listed_on(board))
        for board in ("speedup", "unverified", "noise_floor")}


def test_a_confirmed_config_whose_interval_includes_one_says_so_in_its_help(store):
    """GET /v1/submissions/{id}'s verdict_help (the store's view, which the API serves)."""
    from specschema import summarize
    from specschema.examples import example_submission
    from specserver.store import queries
    from tests.support.boardfill import insert_submission, key

    engine, _ = store
    # Counters reported, no speedup asked: the interval includes 1.00x.
    even = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                              counters_seen=True, seed=900)
    fast = example_submission("ollama-draft", engine_version="0.33.1", target="m:9b",
                              counters_seen=True, seed=901, draft_speedups={"spec_4": 1.6})
    helps = {}
    for name, sub in (("even", even), ("fast", fast)):
        draft = summarize(sub)[1]
        assert draft.name == "spec_4" and draft.observed == "confirmed"
        sid = insert_submission(engine, sub, key(90 + len(helps)))
        with engine.connect() as conn:
            view = queries.submission_view(conn, sid)
        assert view is not None
        config = next(c for c in view.as_json()["configs"] if c["config_name"] == "spec_4")
        helps[name] = (draft, config["verdict_help"])
    draft, said = helps["even"]
    assert draft.speedup_tps_ci_low < 1.0 < draft.speedup_tps_ci_high
    assert said["meaning"].endswith(
        f"; it speculated; speedup not resolved (95% within-run CI "
        f"{draft.speedup_tps_ci_low:.2f}–{draft.speedup_tps_ci_high:.2f}x includes 1.00x)")
    assert said["what_to_do"].startswith("to resolve the speedup")
    draft, said = helps["fast"]
    assert draft.speedup_tps_ci_low > 1.0
    assert "not resolved" not in said["meaning"]
    assert said["what_to_do"] == "nothing: this ratio is a measured effect of speculation"
