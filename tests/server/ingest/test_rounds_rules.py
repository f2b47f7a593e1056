"""The server plans a run of fewer bracketed rounds from its ``rounds`` parameter
(``Protocol.for_run``): such a run is accepted, and trials that do not fit the parameter
are refused by the same rules as any other schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from specschema import (
    Protocol,
    Submission,
    envelope_bytes,
    get_protocol,
    sign_envelope,
    submission_bytes,
)
from specschema.examples import example_submission
from specserver.ingest import rules
from specserver.ingest.prepare import CheckLimits, prepare_submission
from tests.reliability.hostile import signing_key

SHIPPED = get_protocol("llamacpp-draft")  # two rounds


def _run(rounds: str | None, parameters: dict[str, str] | None = None) -> Submission:
    """A complete run of ``SHIPPED`` in ``rounds`` rounds, recorded with ``parameters``
    (default: the rounds it made)."""
    made = SHIPPED.for_run({} if rounds is None else {"rounds": rounds})
    sub = example_submission(made, seed=4, schema_version=2, blocks=True,
                             engine_version="b6000", counters_seen=True)
    if parameters is None:
        parameters = {} if rounds is None else {"rounds": rounds}
    return sub.model_copy(update={"protocol": sub.protocol.model_copy(
        update={"parameters": parameters})})


def _broken(sub: Submission, protocol: Protocol = SHIPPED) -> dict[str, list[str]]:
    ctx = rules.RuleContext(protocol, datetime.now(UTC), timedelta(days=30),
                            timedelta(minutes=5))
    found: dict[str, list[str]] = {}
    for violation in rules.violations(sub, ctx):
        found.setdefault(violation.rule, []).append(violation.message)
    return found


def test_a_run_of_fewer_rounds_is_accepted() -> None:
    whole, short = _run(None), _run("1")
    assert _broken(whole) == {} and _broken(short) == {}
    assert len(short.configs[1].trials) == 4 and len(whole.configs[1].trials) == 8
    assert short.protocol.sha256 == whole.protocol.sha256 == SHIPPED.sha256
    body = envelope_bytes(sign_envelope(submission_bytes(short), signing_key(5)))
    prepared = prepare_submission(body, datetime.now(UTC),
                                  CheckLimits(timedelta(days=30), timedelta(minutes=5)))
    assert prepared.submission_id == str(short.submission_id)


def test_trials_that_do_not_fit_the_rounds_are_refused() -> None:
    # one round's trials sent as the whole protocol: too few for a complete run
    assert "has 4 trials; the protocol runs 8" in " ".join(
        _broken(_run("1", parameters={}))["trials_fit_schedule"])
    # the whole protocol's trials sent as one round: more than the run makes
    assert "has 8 trials; the protocol runs 4" in " ".join(
        _broken(_run(None, parameters={"rounds": "1"}))["trials_fit_schedule"])
    # rounds the protocol cannot make: nothing to compare the configs with
    assert _broken(_run(None, parameters={"rounds": "3"}))["configs_match_protocol"] == [
        "protocol llamacpp-draft runs 1 to 2 rounds, not '3'"]


def test_a_protocol_without_rounds_refuses_the_parameter() -> None:
    protocol = get_protocol("hardnumbers-m2")
    sub = example_submission(protocol, seed=2)
    sub = sub.model_copy(update={"protocol": sub.protocol.model_copy(
        update={"parameters": {"rounds": "1"}})})
    assert _broken(sub, protocol)["configs_match_protocol"] == [
        "protocol hardnumbers-m2 does not run in bracketed rounds: it takes no rounds"]
