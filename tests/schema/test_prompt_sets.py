"""A protocol's prompt set, its run parameters, and results per kind of work."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from specschema import ProtocolError, get_protocol
from specschema.block_ratios import Block
from specschema.block_t import blocked_ratio_t, blocked_ratio_t_over
from specschema.breakdown import acceptance_of, domain_results
from specschema.capability import counter_problems
from specschema.domains import DOMAINS
from specschema.examples import example_submission
from specschema.models import ConfigResult, Submission, Trial, TrialCounters
from specschema.protocol_files import load_protocol_bytes
from specschema.summary import summarize, summarize_configs

MAP = get_protocol("llamacpp-map")


def test_every_block_answers_every_prompt_once() -> None:
    assert set(MAP.domains) == set(DOMAINS) and len(MAP.domains) >= 6
    schedule, blocks = MAP.schedule(), MAP.blocks()
    seen: dict[int, list[str | None]] = {}
    for (_, index), block in zip(schedule, blocks, strict=True):
        seen.setdefault(block, []).append(MAP.domain_of(index))
    for domains in seen.values():
        assert sorted(d or "" for d in domains) == sorted(MAP.domains)
    assert MAP.prompt_for(1) != MAP.prompt_for(0) and MAP.prompt_for(6) == MAP.prompt_for(0)


def test_a_run_without_a_draft_leaves_the_draft_configs_out_and_keeps_its_identity() -> None:
    bare = MAP.for_run({})
    assert bare.sha256 == MAP.sha256
    assert [c.name for c in bare.configs] == ["no_spec", "ngram_simple_m8", "ngram_mod_16",
                                              "mtp_n3"]
    with_draft = MAP.for_run({"draft": "sha256-0123.gguf"})
    drafts = {c.name: c.draft_model for c in with_draft.configs if c.draft_model}
    assert drafts == {"draft_n3": "sha256-0123.gguf", "draft_n8": "sha256-0123.gguf"}
    assert len(with_draft.schedule()) > len(bare.schedule())
    chosen = MAP.for_run({"configs": "ngram_simple_m8"})
    assert [c.name for c in chosen.configs] == ["no_spec", "ngram_simple_m8"]
    assert len(chosen.schedule()) == 3 * 6 + 2 * 6  # 3 baseline blocks, 2 of the one config
    with pytest.raises(ProtocolError, match="no config 'nope'"):
        MAP.for_run({"configs": "nope"})


def _protocol_data(**changes: Any) -> bytes:
    data = json.loads(MAP.model_dump_json())
    data.update(changes)
    return json.dumps(data).encode()


def test_a_prompt_set_is_checked_when_loaded() -> None:
    with pytest.raises(ProtocolError, match="unknown domain 'poetry'"):
        load_protocol_bytes(_protocol_data(prompts=[{"domain": "poetry", "text": "x"}] * 6))
    with pytest.raises(ProtocolError, match="multiple of the prompt set"):
        load_protocol_bytes(_protocol_data(block_trials=4, trials_per_config=8))


def test_the_parts_estimate_is_the_geometric_mean_of_the_parts_per_block() -> None:
    base = [Block(0.5, (10.0,)), Block(6.5, (10.0,)), Block(12.5, (10.0,))]
    fast = [Block(2.5, (20.0,)), Block(9.5, (22.0,))]
    slow = [Block(2.5, (5.0,)), Block(9.5, (5.0,))]
    both = blocked_ratio_t_over([fast, slow], [base, base])
    assert both.block_ratios == pytest.approx((math.sqrt(2.0 * 0.5), math.sqrt(2.2 * 0.5)))
    assert both.ratio == pytest.approx(math.sqrt(1.0 * math.sqrt(1.1)))
    assert blocked_ratio_t_over([fast], [base]) == blocked_ratio_t(fast, base)
    with pytest.raises(ValueError):
        blocked_ratio_t_over([fast, fast[:1]], [base, base])


def _counters(drafted: int, accepted: int, rounds: int | None,
              per_position: list[int] | None) -> TrialCounters:
    return TrialCounters(drafted=drafted, accepted=accepted, source="engine_api",
                         rounds=rounds, accepted_per_position=per_position)


def test_per_position_acceptance_is_conditional_on_reaching_the_position() -> None:
    example = example_submission("llamacpp-draft", seed=1, schema_version=2, blocks=True)
    trial = example.configs[1].trials[0]
    trials = [trial.model_copy(update={"counters": _counters(24, 14, 8, [7, 5, 2])}),
              trial.model_copy(update={"counters": _counters(24, 10, 8, [6, 3, 1])})]
    found = acceptance_of(trials)
    assert found is not None
    assert found.rounds == 16 and found.accepted == 24
    assert found.per_position == pytest.approx((13 / 16, 8 / 13, 3 / 8))
    assert found.mean_accepted_len == pytest.approx(1 + 24 / 16)
    without = [trials[0], trial.model_copy(update={"counters": _counters(5, 1, None, None)})]
    found = acceptance_of(without)
    assert found is not None and found.rounds is None and found.per_position is None


@pytest.mark.parametrize(("counters", "words"), [
    (_counters(24, 14, 8, [7, 5, 3]), "sum to 15"),
    (_counters(24, 14, 8, [5, 7, 2]), "later position"),
    (_counters(24, 14, 4, [7, 5, 2]), "7 times in 4 rounds"),
    (_counters(40, 14, 8, [7, 5, 2]), "40 drafted in 8 rounds of at most 3"),
    (_counters(4, 0, 0, []), "4 drafted in no round"),
])
def test_impossible_rounds_are_named(counters: TrialCounters, words: str) -> None:
    config = example_submission("llamacpp-draft", seed=1, schema_version=2, blocks=True).configs[1]
    trials = [config.trials[0].model_copy(update={"counters": counters})]
    spec = config.speculation.model_copy(update={"drafted_tokens": counters.drafted,
                                                 "accepted_tokens": counters.accepted})
    problems = counter_problems(config.model_copy(update={"trials": trials,
                                                          "speculation": spec}))
    assert any(words in message for _, message in problems), problems


def _domain_submission(speedups: dict[str, float]) -> Submission:
    """A llamacpp-map result whose ngram config is ``speedups[domain]`` times the baseline
    on each domain's prompt, in every block."""
    run = MAP.for_run({"configs": "ngram_simple_m8"})
    base_rate = 20.0
    trials: dict[str, list[Trial]] = {"no_spec": [], "ngram_simple_m8": []}
    template = example_submission("llamacpp-draft", seed=2, schema_version=2,
                                  blocks=True).configs[0].trials[0]
    for position, ((name, index), block) in enumerate(zip(run.schedule(), run.blocks(),
                                                          strict=True)):
        domain = run.domain_of(index) or ""
        rate = base_rate * (speedups[domain] if name != "no_spec" else 1.0)
        eval_ns = round(96 / rate * 1e9)
        trials[name].append(template.model_copy(update={
            "index": index, "position": position, "block": block, "eval_count": 96,
            "eval_duration_ns": eval_ns, "wall_s": eval_ns / 1e9 + 0.1}))
    example = example_submission("llamacpp-draft", seed=2, schema_version=2, blocks=True)
    configs = []
    for name in ("no_spec", "ngram_simple_m8"):
        spec = run.config(name)
        like = example.configs[0 if spec.role == "baseline" else 1]
        configs.append(like.model_copy(update={
            "name": name, "role": spec.role, "draft_model": None, "trials": trials[name],
            "request_options": run.request_options(spec)}))
    protocol = example.protocol.model_copy(update={
        "id": MAP.id, "version": MAP.version, "sha256": MAP.sha256,
        "parameters": {"target": "sha256-0123.gguf", "configs": "ngram_simple_m8"}})
    return example.model_copy(update={"configs": configs, "protocol": protocol})


def test_a_prompt_sets_headline_is_the_geometric_mean_over_its_domains() -> None:
    speedups = {"code": 1.2, "code_edit": 2.5, "chat": 0.9, "summary": 1.4, "math": 1.0,
                "translation": 0.8}
    submission = _domain_submission(speedups)
    ngram = summarize(submission)[1]
    geometric = math.exp(sum(math.log(v) for v in speedups.values()) / len(speedups))
    assert ngram.speedup_tps == pytest.approx(geometric, rel=1e-9)
    # the one-prompt estimator over the same blocks says something else: the medians of
    # mixed blocks, which a fast domain can pull
    plain = summarize_configs(submission.configs, interval="block_t")[1]
    assert plain.speedup_tps != pytest.approx(geometric, rel=1e-3)
    found = {r.domain: r for r in domain_results(submission, submission.configs[1])}
    assert list(found) == list(MAP.domains)
    for domain, value in speedups.items():
        assert found[domain].speedup_tps == pytest.approx(value, rel=1e-6)
        assert found[domain].trials == 2


def test_configs_of_one_domain_split_by_trial_index() -> None:
    submission = _domain_submission(dict.fromkeys(MAP.domains, 1.0))
    config: ConfigResult = submission.configs[1]
    assert sorted(t.index % 6 for t in config.trials) == sorted(list(range(6)) * 2)
