"""The one verdict rule (specschema.capability): precedence, v1 compatibility, counters."""

from itertools import product

import pytest

from specschema import Launch, TrialCounters, counter_problems, submission_verdicts, verdict
from specschema.examples import example_submission

MTP = Launch(source="llama_server_log", spec_type="draft-mtp", draft_n_max=4)
PLAIN = Launch(source="llama_server_log")
SYNTH = Launch(source="llama_server_log", spec_type="draft-mtp",
               synthetic_flags=["--spec-synth-len"])


def test_v1_rule_is_unchanged_for_v1_evidence() -> None:
    # The rule before v2, written out: what every stored v1 verdict was derived with.
    def v1(requested: bool, can_honor: bool | None, seen: bool) -> str:
        if not requested or can_honor is False:
            return "not_applied"
        if seen:
            return "confirmed"
        return "unknown" if can_honor is None else "not_observed"

    for requested, can_honor, seen in product([True, False], [True, False, None], [True, False]):
        if seen and not requested:
            continue  # v1 refused counters on a baseline (speculation_coherent)
        assert verdict(requested=requested, can_honor=can_honor, counters_seen=seen) == v1(
            requested, can_honor, seen)


def test_precedence_for_a_draft() -> None:
    base = {"requested": True, "can_honor": True, "counters_seen": True}
    assert verdict(**base) == "confirmed"
    assert verdict(**base, runtime="mlx") == "cannot_compare"
    # On MLX the baseline's own counters are MLX's doing: the verdict names MLX (docs/run.md).
    assert verdict(**base, runtime="mlx", baseline_speculated=True) == "cannot_compare"
    assert verdict(**base, baseline_speculated=True) == "baseline_speculated"
    assert verdict(**base, runtime="mlx", baseline_speculated=True,
                   synthetic=True) == "synthetic"
    assert verdict(requested=True, can_honor=True, counters_seen=False,
                   launched_without_speculation=True) == "not_applied"
    # Counters win over a plain launch line: they are what the engine did.
    assert verdict(**base, launched_without_speculation=True) == "confirmed"


def test_baseline_verdicts() -> None:
    assert verdict(requested=False, can_honor=True, counters_seen=False) == "not_applied"
    assert verdict(requested=False, can_honor=True, counters_seen=True) == "baseline_speculated"
    assert verdict(requested=False, can_honor=True, counters_seen=False,
                   speculated=True) == "baseline_speculated"
    assert verdict(requested=False, can_honor=True, counters_seen=False,
                   runtime="mlx") == "cannot_compare"
    assert verdict(requested=False, can_honor=True, counters_seen=True,
                   runtime="mlx") == "cannot_compare"
    assert verdict(requested=False, can_honor=True, counters_seen=True,
                   synthetic=True) == "synthetic"


def _v2(**kwargs: object):  # type: ignore[no-untyped-def]
    return example_submission("ollama-draft", seed=4, engine_version="0.34.1",
                              target="gemma4:mtp", schema_version=2, **kwargs)


def _with_launches(submission, by_config: dict[str, list[Launch]]):  # type: ignore[no-untyped-def]
    return submission.model_copy(update={"configs": [
        c.model_copy(update={"speculation": c.speculation.model_copy(
            update={"launches": by_config.get(c.name, [])})})
        for c in submission.configs
    ]})


def test_a_ggml_mtp_run_confirms() -> None:
    submission = _with_launches(_v2(counters_seen=True, runtime="ggml"),
                                {"spec_off": [PLAIN], "spec_4": [MTP], "spec_8": [MTP]})
    assert submission_verdicts(submission) == ["not_applied", "confirmed", "confirmed"]


def test_a_baseline_launched_with_spec_type_invalidates_every_draft() -> None:
    submission = _with_launches(_v2(counters_seen=True, runtime="ggml"),
                                {"spec_off": [MTP], "spec_4": [MTP], "spec_8": [MTP]})
    assert set(submission_verdicts(submission)) == {"baseline_speculated"}


def test_baseline_counters_invalidate_every_draft() -> None:
    submission = _v2(counters_seen=True)
    base = submission.configs[0]
    counted = base.model_copy(update={
        "trials": [base.trials[0].model_copy(update={"counters": TrialCounters(
            drafted=10, accepted=7, source="llama_server_log")})] + list(base.trials[1:]),
    })
    submission = submission.model_copy(update={"configs": [counted, *submission.configs[1:]]})
    assert set(submission_verdicts(submission)) == {"baseline_speculated"}


def test_synthetic_anywhere_is_never_confirmed() -> None:
    for where in ("spec_off", "spec_4"):
        submission = _with_launches(_v2(counters_seen=True), {where: [SYNTH]})
        verdicts = dict(zip((c.name for c in submission.configs),
                            submission_verdicts(submission), strict=True))
        assert verdicts["spec_4"] == "synthetic"
        assert "confirmed" not in (verdicts["spec_4"],)


def test_mlx_never_confirms() -> None:
    verdicts = submission_verdicts(_v2(counters_seen=True, runtime="mlx"))
    assert verdicts == ["cannot_compare", "cannot_compare", "cannot_compare"]


def test_hardnumbers_drafts_stay_not_applied_in_v2() -> None:
    submission = example_submission("hardnumbers-m2", engine_version="0.40.2",
                                    schema_version=2, runtime="ggml")
    assert submission_verdicts(submission) == ["not_applied", "not_applied", "not_applied"]


def test_a_refused_draft_is_incompatible_whatever_else_holds() -> None:
    assert verdict(requested=True, can_honor=True, counters_seen=False,
                   refused=True) == "incompatible"
    assert verdict(requested=True, can_honor=True, counters_seen=False, refused=True,
                   baseline_speculated=True, synthetic=True) == "incompatible"
    # A baseline is never "incompatible": the server refuses a refusal on it.
    assert verdict(requested=False, can_honor=True, counters_seen=False,
                   refused=True) == "not_applied"


SERVER = Launch(source="engine_command", spec_type="draft-simple", draft_n_max=8,
                draft_model=True, draft_model_digest="a" * 64)


def _llama_server(drafts_counted: bool, refusal: str | None = None):  # type: ignore[no-untyped-def]
    """A llama-server result: the baseline plain, the drafts started with --spec-type, the
    trials with the engine's counters or (drafts_counted False) none at all."""
    sub = _v2(counters_seen=drafts_counted, runtime="ggml")
    engine = sub.engine.model_copy(update={"name": "llama-server"})
    configs = []
    for c in sub.configs:
        spec = c.speculation.model_copy(update={
            "launches": [SERVER] if c.role == "draft" else [Launch(source="engine_command")],
            "refusal": refusal if c.role == "draft" else None,
            "mechanism": "server_launch" if c.role == "draft" else "none"})
        trials = c.trials if drafts_counted or c.role == "baseline" else [
            t.model_copy(update={"counters": None}) for t in c.trials]
        if not drafts_counted:
            spec = spec.model_copy(update={"drafted_tokens": None, "accepted_tokens": None,
                                           "counters_source": None})
        configs.append(c.model_copy(update={"speculation": spec, "trials": trials}))
    return sub.model_copy(update={"engine": engine, "configs": configs})


def test_llama_server_started_with_a_draft_that_never_drafted_is_not_applied() -> None:
    # llama-server reports draft_n for every request that drafted: none in any trial means
    # it served without the draft. That is the noise floor, never "not observed".
    assert submission_verdicts(_llama_server(drafts_counted=False)) == [
        "not_applied", "not_applied", "not_applied"]
    assert submission_verdicts(_llama_server(drafts_counted=True)) == [
        "not_applied", "confirmed", "confirmed"]
    # The same evidence on Ollama (counters come from a log that may be missing) stays
    # not_observed.
    ollama = _llama_server(drafts_counted=False)
    ollama = ollama.model_copy(update={"engine": ollama.engine.model_copy(
        update={"name": "ollama"})})
    assert submission_verdicts(ollama)[1:] == ["not_observed", "not_observed"]


def test_a_refusal_on_the_wire_makes_the_draft_incompatible() -> None:
    sub = _llama_server(drafts_counted=False, refusal="llama.cpp refuses it")
    assert submission_verdicts(sub) == ["not_applied", "incompatible", "incompatible"]


def _counted(drafted: int, accepted: int, totals: tuple[int, int] | None):  # type: ignore[no-untyped-def]
    config = _v2(counters_seen=True).configs[1]
    trials = list(config.trials)
    trials[0] = trials[0].model_copy(update={"counters": TrialCounters(
        drafted=drafted, accepted=accepted, source="llama_server_log")})
    total_d = sum(t.counters.drafted for t in trials if t.counters)
    total_a = sum(t.counters.accepted for t in trials if t.counters)
    d, a = totals if totals is not None else (total_d, total_a)
    return config.model_copy(update={"trials": trials, "speculation": config.speculation.model_copy(
        update={"drafted_tokens": d, "accepted_tokens": a})})


def test_consistent_counters_have_no_problems() -> None:
    assert counter_problems(_counted(240, 180, None)) == []


@pytest.mark.parametrize(
    "drafted, accepted, totals, where, words",
    [
        (10, 11, None, "trials.0.counters.accepted", "accepted > 10 drafted"),
        (900, 800, None, "trials.0.counters.accepted", "generated (eval_count)"),
        (240, 180, (1, 1), "speculation.drafted_tokens", "not its trials' sums"),
    ],
)
def test_contradicting_counters_are_named(drafted: int, accepted: int,
                                          totals: tuple[int, int] | None,
                                          where: str, words: str) -> None:
    found = counter_problems(_counted(drafted, accepted, totals))
    assert any(path == where and words in message for path, message in found), found
