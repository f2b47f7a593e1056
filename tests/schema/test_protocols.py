"""Shipped protocols load, validate, and keep their pinned identities."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from specschema import ProtocolError, find_protocol, get_protocol, shipped_protocols
from specschema.protocol import Protocol
from specschema.protocol_files import all_protocols, load_protocol_bytes
from specschema.strictjson import dumps_canonical

# Changing a shipped protocol changes its hash. Bump its version (a new file) instead,
# and pin the new hash here: results are only ever compared within one identity.
PINNED = {
    ("hardnumbers-m2", 1): "8cde3201e243314e7d04b2f4fe655fcb83f6ffd5f720dee94ccd4d96bf047bab",
    ("ollama-draft", 1): "722ee9e1c54c00d296d7ab1c130438e1b432952326e8b15e4a1e89c463c27924",
    ("ollama-draft", 2): "2892c8cfafd83ab1f382e807ac22b494368fb1bff71cba2943d5a532200ebc7e",
    ("llamacpp-draft", 1): "750d72f1808172ecbede311a70b80d10438bd35cc8b11aff7406d66d4204199b",
    ("llamacpp-draft-long", 1):
        "3b1907388ad5690ef64329a31bdbdc6da2fc9386a1f83ef9a642648a6482cd50",
    ("ollama-draft", 3): "5537a6b3c0c88b30f52fae6597f0a052aabc98d20a69f89f3b1d5f6471ccae4d",
    ("llamacpp-draft", 2): "2c6bb383abd3faaf705b9c1200ffdb5e63c6136023f1342992af92a05c6f2243",
    ("llamacpp-draft-long", 2):
        "a2075dfd782bddc85466e0fdbfbe33495fb38d2229b3d43e57baf5e2386ec55a",
    ("lmstudio-draft", 1): "a22dbb74dbd1b09c41fa0bbad08ce361063efd054437ae613b1615670bd9c382",
    ("llamacpp-draft", 3): "718381e01732d83cce99d6da76b65b703ff273516cb8f2b93036d4dad7200e5b",
    ("llamacpp-draft-long", 3):
        "23fb3ee0c96f0988ec1f658faa0a47c6efc134819e697d58f1b3fc9001269e9a",
    ("lmstudio-draft", 2): "9f83912eea5f2aaead8c1e80ca125cd5f8d9fb45a4dcf28066d997f802c7d9d4",
    ("ollama-draft", 4): "e0ba30ba9d4df35b4dc170b65bd10e4a88424d6a7f215cfe3bb330d1cfac394c",
    ("llamacpp-map", 1): "6ea17ecde7f75caebea5e9965fd36cb59d262f5959d11e1997e3865d79ddf583",
    ("ollama-map", 1): "fd0ccfef876ca6a6296d3779c8eaf67d84b7a129c62c64e452cbb63e0d6c0a1a",
    ("lmstudio-map", 1): "4208d0a16b844232ae1d005a1557596f27d3f98ee82a76d6923b9936846e6e99",
    ("llamacpp-draft", 4): "0ffd2b41e614af9451054b372c80cab42d8254c869ccbee72a244513794fab5a",
    ("llamacpp-draft", 5): "21b1fe8d4030f62d0db9bb9bf24274d16b98462e3cd14a2f171ad4b98115ddb7",
    ("llamacpp-draft-long", 4):
        "604666eea76ec448e26b57671da1cb1825b87ececebdc230d561098d68c798db",
}


def test_both_protocols_ship_with_pinned_hashes() -> None:
    found = {(p.id, p.version): p.sha256 for p in all_protocols()}
    assert found == PINNED
    assert {p.id: p.version for p in shipped_protocols().values()} == {
        "hardnumbers-m2": 1, "ollama-draft": 4, "llamacpp-draft": 5, "llamacpp-draft-long": 4,
        "lmstudio-draft": 2, "llamacpp-map": 1, "ollama-map": 1, "lmstudio-map": 1}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_bracketed_order_puts_every_draft_block_between_baseline_blocks(
        version: int) -> None:
    protocol = find_protocol("llamacpp-draft", version, PINNED[("llamacpp-draft", version)])
    assert protocol is not None
    names = [name for name, _ in protocol.schedule()]
    runs = [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]
    drafts = [c.name for c in protocol.configs if c.role == "draft"]
    rounds = {2: 1, 3: 2, 4: 2}[version]  # v3, v4: two rounds, 4 blocks per draft
    assert runs == ["no_draft", *drafts, "no_draft", *drafts[::-1]] * rounds + ["no_draft"]
    size = {2: 3, 3: 2, 4: 2}[version]
    trials = len(names)
    assert protocol.blocks() == [i // size for i in range(trials)]  # 13 blocks of 3, 25 of 2
    per_draft = 4 * rounds // 2 * size
    assert [protocol.trials_for(c.name) for c in protocol.configs] == [
        per_draft + size] + [per_draft] * 5
    # every config's mean run position is the same: a linear drift cancels
    centre = {c.name: sum(p for p, (n, _) in enumerate(protocol.schedule()) if n == c.name)
              / protocol.trials_for(c.name) for c in protocol.configs}
    assert len(set(centre.values())) == 1
    # and trial indices within a config count up through its blocks
    assert [i for n, i in protocol.schedule() if n == "no_draft"] == list(
        range(per_draft + size))
    assert protocol.warmups_for("no_draft") == 2 * rounds + 1
    assert protocol.warmups_for(drafts[0]) == 2 * rounds


def test_the_llama_server_protocols_pin_their_speculative_settings() -> None:
    for name in ("llamacpp-draft", "llamacpp-draft-long"):
        protocol = get_protocol(name)
        assert protocol.launch_options == {"spec_draft_p_min": 0.0, "spec_draft_n_min": 0,
                                           "spec_draft_p_split": 0.1, "n_gpu_layers": 999,
                                           "flash_attn": "off"}
        for config in protocol.configs:  # on the wire with every config's options
            assert protocol.request_options(config)["spec_draft_p_min"] == 0.0
        # the seed's qwen2.5 drafts stay: llama.cpp refuses them, and the run says so per config
        assert [c.name for c in protocol.configs] == [c.name for c in find_protocol(
            name, 1, PINNED[(name, 1)]).configs]  # type: ignore[union-attr]
        assert "issue" not in protocol.description
    assert get_protocol("llamacpp-draft").headline == "decode"
    assert get_protocol("llamacpp-draft-long").headline == "wall"


def test_llamacpp_draft_v4_is_v3_with_warm_ups_of_16_tokens() -> None:
    v3 = find_protocol("llamacpp-draft", 3, PINNED[("llamacpp-draft", 3)])
    v4 = find_protocol("llamacpp-draft", 4, PINNED[("llamacpp-draft", 4)])
    assert v3 is not None and v4 is not None and v4.warmup_tokens == 16
    assert v3.warmup_tokens is None  # a file without the field keeps its identity
    same = {"version", "description", "warmup_tokens"}
    assert v4.model_dump(exclude=same) == v3.model_dump(exclude=same)
    for config in v4.configs:  # a warm-up stops at 16 tokens, a trial at the protocol's 200
        assert v4.request_options(config, warmup=True) == {
            **v4.request_options(config), "num_predict": 16}
        assert v3.request_options(config, warmup=True) == v3.request_options(config)
    assert "warm-up of 16 tokens" in v4.description


def test_llamacpp_draft_v5_is_v4_with_the_early_stop_rule() -> None:
    v4 = find_protocol("llamacpp-draft", 4, PINNED[("llamacpp-draft", 4)])
    v5 = get_protocol("llamacpp-draft")
    assert v4 is not None and v5.version == 5 and v4.early_stop is None
    assert v5.early_stop is not None and v5.early_stop.rule == "none_accepted"
    assert v5.early_stop.min_drafted == 256
    same = {"version", "description", "early_stop"}
    assert v5.model_dump(exclude=same) == v4.model_dump(exclude=same)
    assert v5.schedule() == v4.schedule()  # nothing stopped: the same run
    assert "accepted none runs no block after that round" in v5.description


def test_llamacpp_draft_long_v4_is_v3_with_short_warm_ups_and_the_early_stop_rule() -> None:
    v3 = find_protocol("llamacpp-draft-long", 3, PINNED[("llamacpp-draft-long", 3)])
    v4 = get_protocol("llamacpp-draft-long")
    assert v3 is not None and v4.version == 4 and v3.warmup_tokens is None
    assert v4.warmup_tokens == 16 and v4.early_stop == get_protocol("llamacpp-draft").early_stop
    same = {"version", "description", "early_stop", "warmup_tokens"}
    assert v4.model_dump(exclude=same) == v3.model_dump(exclude=same)
    for config in v4.configs:  # the warm-up prefills the whole long prompt, then 16 tokens
        assert v4.request_options(config, warmup=True)["num_predict"] == 16
    assert v4.prompt_for(0) == v3.prompt_for(0)
    assert "warm-up of 16 tokens after the whole prompt" in v4.description


def test_unknown_launch_options_and_a_bad_bracketed_shape_are_refused() -> None:
    data = json.loads(get_protocol("llamacpp-draft").model_dump_json())
    with pytest.raises(ProtocolError, match="unknown launch option 'threads'"):
        load_protocol_bytes(json.dumps({**data, "launch_options": {"threads": 1}}).encode())
    with pytest.raises(ProtocolError, match="bracketed needs"):
        load_protocol_bytes(json.dumps({**data, "trials_per_config": 5}).encode())


def test_hardnumbers_replicates_the_article() -> None:
    protocol = get_protocol("hardnumbers-m2")
    assert protocol.target == "qwen3:14b"
    assert len(protocol.prompt) == 263
    assert protocol.options.num_predict == 200
    assert protocol.options.temperature == 0.0
    assert protocol.options.seed == 42
    assert (protocol.warmups_per_config, protocol.trials_per_config) == (1, 5)
    assert protocol.order == "blocked"
    drafts = [c for c in protocol.configs if c.role == "draft"]
    assert [c.request_fields for c in drafts] == [
        {"draft_model": "qwen2.5:0.5b"},
        {"draft_model": "qwen2.5:1.5b"},
    ]
    assert all(c.mechanism == "draft_model_field" for c in drafts)


def test_ollama_draft_uses_draft_num_predict_interleaved() -> None:
    # v1 stays loadable by its identity (submissions made with it are still checked)
    protocol = find_protocol("ollama-draft", 1, PINNED[("ollama-draft", 1)])
    assert protocol is not None
    assert protocol.target is None
    values = [protocol.request_options(c)["draft_num_predict"] for c in protocol.configs]
    assert values == [0, 4, 8]
    assert protocol.requirements.min_engine_version == {"draft_num_predict": "0.30.0"}
    schedule = protocol.schedule()
    assert schedule[:4] == [("spec_off", 0), ("spec_4", 0), ("spec_8", 0), ("spec_off", 1)]
    assert len(schedule) == 15


def test_blocked_schedule() -> None:
    schedule = get_protocol("hardnumbers-m2").schedule()
    assert schedule[:6] == [("no_draft", i) for i in range(5)] + [("draft_qwen2.5_0.5b", 0)]


def test_request_options_set_every_option_explicitly() -> None:
    protocol = get_protocol("hardnumbers-m2")
    options = protocol.request_options(protocol.baseline())
    assert set(options) >= {
        "num_predict", "temperature", "seed", "top_k", "top_p", "repeat_penalty", "num_ctx"
    }


def test_target_parameter_is_required_when_missing() -> None:
    protocol = get_protocol("ollama-draft")
    with pytest.raises(ProtocolError, match="needs a target"):
        protocol.model_for(protocol.baseline(), None)
    assert protocol.model_for(protocol.baseline(), "gemma4:mtp") == "gemma4:mtp"


def test_find_protocol_requires_exact_identity() -> None:
    protocol = get_protocol("hardnumbers-m2")
    assert find_protocol(protocol.id, 1, protocol.sha256) is protocol
    assert find_protocol(protocol.id, 1, "0" * 64) is None
    assert find_protocol(protocol.id, 2, protocol.sha256) is None
    assert find_protocol("nope", 1, protocol.sha256) is None
    with pytest.raises(ProtocolError, match="unknown protocol"):
        get_protocol("nope")


def test_any_edit_changes_the_hash() -> None:
    protocol = get_protocol("hardnumbers-m2")
    data = protocol.model_dump(mode="json")
    data["options"]["num_predict"] = 201
    edited = load_protocol_bytes(json.dumps(data).encode())
    assert edited.sha256 != protocol.sha256


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["configs"][1].update(role="baseline"), "exactly one baseline"),
        (lambda d: d["configs"][1].update(name="no_draft"), "duplicate config"),
        (lambda d: d.update(order="random"), "invalid protocol"),
        (lambda d: d.update(surprise=1), "invalid protocol"),
    ],
)
def test_invalid_definitions_are_refused(mutate: object, message: str) -> None:
    data = get_protocol("hardnumbers-m2").model_dump(mode="json")
    mutate(data)  # type: ignore[operator]
    with pytest.raises(ProtocolError, match=message):
        load_protocol_bytes(json.dumps(data).encode())


@pytest.mark.parametrize("protocol_id", ["llamacpp-draft", "llamacpp-draft-long"])
def test_llamacpp_draft_asks_the_seeds_question_on_llama_server(protocol_id: str) -> None:
    protocol = find_protocol(protocol_id, 1, PINNED[(protocol_id, 1)])
    assert protocol is not None
    seed = get_protocol("hardnumbers-m2")
    assert protocol.target == seed.target == "qwen3:14b"
    # The seed's options but repeat_penalty 1.0: llama.cpp's draft ignores the target's
    # penalty, so 1.1 would reject even an identical draft's tokens (see the description).
    assert protocol.options.repeat_penalty == 1.0
    same = {"num_ctx", "repeat_penalty"}
    assert protocol.options.model_dump(exclude=same) == seed.options.model_dump(exclude=same)
    assert seed.prompt.split("`merge_dicts")[1] in protocol.prompt
    assert protocol.baseline().mechanism == "none" and protocol.baseline().draft_model is None
    drafts = [c for c in protocol.configs if c.role == "draft"]
    assert [c.draft_model for c in drafts] == [
        "qwen3:0.6b", "qwen3:0.6b", "qwen3:1.7b", "qwen2.5:0.5b", "qwen2.5:1.5b"]
    assert all(c.mechanism == "server_launch" and c.request_fields == {} for c in drafts)
    assert [protocol.request_options(c)["spec_draft_n_max"] for c in drafts] == [3, 8, 8, 8, 8]
    assert {protocol.request_options(c)["spec_type"] for c in drafts} == {"draft-simple"}
    assert protocol.order == "blocked" and protocol.warmups_per_config == 1


def test_llamacpp_draft_long_has_a_long_prompt_that_fits_its_context() -> None:
    protocol = get_protocol("llamacpp-draft-long")
    # >= 4,000 tokens for any tokenizer at <= 5 characters per token; the context holds it
    # at >= 2.6 characters per token (code tokenizes at about 3.5-4 with Qwen's BPE).
    assert len(protocol.prompt) >= 20_000
    assert protocol.options.num_ctx == 8192
    assert len(protocol.prompt) / 2.6 + protocol.options.num_predict <= protocol.options.num_ctx


def test_ollama_draft_v2_blocks_with_a_warmup_after_every_switch() -> None:
    protocol = find_protocol("ollama-draft", 2, PINNED[("ollama-draft", 2)])
    assert protocol is not None
    assert (protocol.version, protocol.order, protocol.block_trials) == (2, "abba", 3)
    schedule = protocol.schedule()
    names = [name for name, _ in schedule]
    # blocks A B C C B A: five switches of draft_num_predict instead of one per trial
    switches = sum(1 for a, b in zip(names, names[1:], strict=False) if a != b)
    assert switches == 4 and len(schedule) == 18
    for config in protocol.configs:
        mine = [pos for pos, (name, _) in enumerate(schedule) if name == config.name]
        assert len(mine) == 6 and sum(mine) / 6 == 8.5  # the same mean position: drift cancels
        assert [i for name, i in schedule if name == config.name] == list(range(6))
    assert {c.name: protocol.warmups_for(c.name) for c in protocol.configs} == {
        "spec_off": 2, "spec_4": 2, "spec_8": 1}
    # the same configs and options as v1: only the order and the warm-ups changed
    v1 = find_protocol("ollama-draft", 1, PINNED[("ollama-draft", 1)])
    assert v1 is not None and v1.configs == protocol.configs and v1.options == protocol.options


@pytest.mark.parametrize("version, size, blocks", [(3, 3, (3, 2, 2)), (4, 2, (5, 4, 4))])
def test_ollama_draft_v3_on_measures_every_config_in_two_blocks_or_more(
        version: int, size: int, blocks: tuple[int, ...]) -> None:
    protocol = find_protocol("ollama-draft", version, PINNED[("ollama-draft", version)])
    assert protocol is not None
    assert (protocol.order, protocol.block_trials) == ("bracketed", size)
    numbers = protocol.blocks()
    names = [name for name, _ in protocol.schedule()]
    per_config = {c.name: {b for b, n in zip(numbers, names, strict=True) if n == c.name}
                  for c in protocol.configs}
    assert tuple(len(found) for found in per_config.values()) == blocks
    v2 = find_protocol("ollama-draft", 2, PINNED[("ollama-draft", 2)])
    assert v2 is not None and v2.configs == protocol.configs and v2.options == protocol.options


def test_lmstudio_draft_v2_is_bracketed_and_keeps_v1s_configs() -> None:
    protocol = get_protocol("lmstudio-draft")
    v1 = find_protocol("lmstudio-draft", 1, PINNED[("lmstudio-draft", 1)])
    assert v1 is not None and v1.order == "blocked"
    assert (protocol.version, protocol.order, protocol.block_trials) == (2, "bracketed", 2)
    assert protocol.configs == v1.configs and protocol.options == v1.options
    names = [name for name, _ in protocol.schedule()]
    runs = [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]
    drafts = [c.name for c in protocol.configs if c.role == "draft"]
    assert runs == ["no_draft", *drafts, "no_draft", *drafts[::-1]] * 2 + ["no_draft"]
    assert protocol.warmups_for(drafts[0]) == 4  # a warm-up after every draft switch


def test_new_protocol_descriptions_cite_no_issue_numbers() -> None:
    for protocol in shipped_protocols().values():
        assert "issue" not in protocol.description.lower()


def test_abba_needs_whole_blocks() -> None:
    data = get_protocol("ollama-draft").model_dump(mode="json")
    data["block_trials"] = 3  # 8 trials per config are not whole blocks of 3
    with pytest.raises(ProtocolError, match="block_trials"):
        load_protocol_bytes(json.dumps(data).encode())


def test_fields_added_later_leave_old_identities_alone() -> None:
    data = get_protocol("hardnumbers-m2").model_dump(mode="json")
    assert "block_trials" in data  # the model has it, the identity leaves it out
    assert load_protocol_bytes(json.dumps(data).encode()).sha256 == PINNED[("hardnumbers-m2", 1)]


# The two files whose words were mended after they were published (``published_sha256``):
# everything but the words, hashed as the identity is, as it was when they were published.
MENDED_REST = {
    ("llamacpp-draft", 1): "f547d8833f7aa35912d91aed929bbfcf1a00c210693438e6b73a04b079d28371",
    ("llamacpp-draft-long", 1):
        "3a54eda0e91396d0e9089261c54ad3fbefeea4430bdab080d24f943bb421b667",
}


def _rest_sha256(protocol: Protocol) -> str:
    data = protocol.identity_data()
    del data["description"]
    data.pop("published_sha256", None)
    return hashlib.sha256(dumps_canonical(data)).hexdigest()


def test_a_mended_protocol_keeps_its_identity_and_only_its_words_moved() -> None:
    mended = {(p.id, p.version): p for p in all_protocols() if p.published_sha256}
    assert set(mended) == set(MENDED_REST)
    for key, protocol in mended.items():
        assert protocol.sha256 == protocol.published_sha256 == PINNED[key]
        assert _rest_sha256(protocol) == MENDED_REST[key]
        # found by the identity its stored results name, and a run of it keeps it
        assert find_protocol(*key, PINNED[key]) is protocol
        assert protocol.for_run({}).sha256 == PINNED[key]


def test_no_shipped_description_cites_an_issue_number() -> None:
    issue = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)
    for protocol in all_protocols():
        assert not issue.search(protocol.description), (protocol.id, protocol.version)


def test_a_published_identity_must_be_a_sha256() -> None:
    data = json.loads((Path(__file__).resolve().parents[2] / "schema" / "specschema"
                       / "protocols" / "llamacpp-draft.v1.json").read_text())
    data["published_sha256"] = "not-a-hash"
    with pytest.raises(ProtocolError):
        load_protocol_bytes(json.dumps(data).encode(), "mended.json")

