"""The hostile request catalogue: every malformed, oversized, tampered or inconsistent body a
client can send, each with the status and error the server must answer."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from specschema import (
    PAYLOAD_TYPE,
    envelope_bytes,
    get_protocol,
    sign_envelope,
    submission_bytes,
)
from specschema.examples import example_submission
from tests.reliability.hostile import (
    BODY_LIMIT,
    dict_bytes,
    payload_dict,
    signed,
    signing_key,
    valid_payload,
)


def _flip(data: bytes, index: int) -> bytes:
    mutable = bytearray(data)
    mutable[index] ^= 0x01
    return bytes(mutable)


def _chunks(total: int, chunk: int = 16 * 1024) -> Iterator[bytes]:
    """A streamed JSON-looking body of ``total`` bytes (no Content-Length)."""
    yield b'{"payloadType":"' + PAYLOAD_TYPE.encode() + b'","payload":"'
    sent = 0
    while sent < total:
        yield b"A" * chunk
        sent += chunk
    yield b'","signatures":[]}'


@dataclass(frozen=True)
class HostileCase:
    name: str
    expected: int
    stage: str  # size | envelope | signature | json | schema | protocol | consistency
    body: bytes = b""
    stream: Callable[[], Iterator[bytes]] | None = None  # body without Content-Length
    kind: str = "plain"  # plain | banned | conflict
    why: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    # A body relative to the clock is made when it is sent: cases are built at collection,
    # and a suite that runs for ten minutes would otherwise age "ten minutes ahead" to now.
    at_send: Callable[[datetime], bytes] | None = None

    def content(self) -> bytes:
        return self.at_send(datetime.now(UTC)) if self.at_send is not None else self.body


def _mutated(seed: int, change: Callable[[dict[str, Any]], None], **kwargs: Any) -> bytes:
    data = payload_dict(seed, **kwargs)
    change(data)
    return signed(dict_bytes(data), signing_key(seed))


def _text_mutated(seed: int, old: bytes, new: bytes) -> bytes:
    payload = valid_payload(seed)
    assert old in payload, old
    return signed(payload.replace(old, new, 1), signing_key(seed))


def _first_trial(data: dict[str, Any], config: int = 0, trial: int = 0) -> dict[str, Any]:
    return data["configs"][config]["trials"][trial]  # type: ignore[no-any-return]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node: Any = data
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        node: Any = data
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[parts[-1]]

    return change


def _eval_above_num_predict(data: dict[str, Any]) -> None:
    trial = _first_trial(data)
    trial["eval_count"] = get_protocol("hardnumbers-m2").options.num_predict + 50


def _wall_shorter_than_total(data: dict[str, Any]) -> None:
    trial = _first_trial(data)
    trial["wall_s"] = round(trial["total_duration_ns"] / 1e9 / 2, 6)


def _eval_longer_than_total(data: dict[str, Any]) -> None:
    trial = _first_trial(data)
    trial["eval_duration_ns"] = trial["total_duration_ns"] + 1_000_000_000
    trial["wall_s"] = round(trial["eval_duration_ns"] / 1e9 + 1.0, 6)


def _impossible_tps(data: dict[str, Any]) -> None:
    # 200 tokens in 2 microseconds: 100 million tokens per second.
    for trial in data["configs"][0]["trials"]:
        trial["eval_duration_ns"] = 2_000


def _drop_trial(data: dict[str, Any]) -> None:
    data["configs"][0]["trials"].pop()


def _duplicate_trial(data: dict[str, Any]) -> None:
    trials = data["configs"][0]["trials"]
    trials[-1] = dict(trials[0])


def _unknown_config(data: dict[str, Any]) -> None:
    data["configs"][1]["name"] = "draft_made_up"


def _drop_config(data: dict[str, Any]) -> None:
    data["configs"].pop()


def _other_options(data: dict[str, Any]) -> None:
    data["configs"][0]["request_options"]["temperature"] = 0.7


def hostile_cases() -> list[HostileCase]:
    """Every stateless hostile case; seeds are distinct so no two share an id."""
    key = signing_key(1)
    other = signing_key(2)
    payload = valid_payload(1)
    good = sign_envelope(payload, key)
    good_sig = base64.b64decode(good["signatures"][0]["sig"])
    other_sig = sign_envelope(payload, other)["signatures"][0]["sig"]
    p = PAYLOAD_TYPE

    def env(**overrides: Any) -> bytes:
        data = json.loads(json.dumps(good))
        for name, value in overrides.items():
            if name.startswith("sig_"):
                data["signatures"][0][name[4:]] = value
            else:
                data[name] = value
        return envelope_bytes(data)

    big_note = example_submission("hardnumbers-m2", seed=3)
    ten_mb = big_note.model_copy(update={"note": "x" * (10 * 1024 * 1024)})
    deep_payload = b"[" * 100_000 + b"]" * 20_000  # base64 of it stays under the limit
    cases = [
        # 1. size
        HostileCase(
            "over_limit_with_content_length",
            413,
            "size",
            body=b'{"payload":"' + b"A" * (BODY_LIMIT + 1024) + b'"}',
        ),
        HostileCase(
            "over_limit_streamed_no_content_length",
            413,
            "size",
            stream=lambda: _chunks(BODY_LIMIT + 64 * 1024),
        ),
        HostileCase(
            "over_limit_streamed_4mb", 413, "size", stream=lambda: _chunks(4 * 1024 * 1024)
        ),
        HostileCase(
            "ten_mb_string_in_payload",
            413,
            "size",
            body=signed(submission_bytes(ten_mb), signing_key(3)),
        ),
        # 2. envelope form
        HostileCase("empty_body", 400, "envelope", body=b""),
        HostileCase("not_json", 400, "envelope", body=b"this is not json"),
        HostileCase("json_array_not_object", 400, "envelope", body=b"[1,2,3]"),
        HostileCase("not_utf8", 400, "envelope", body=b'{"payload":"\xff\xfe"}'),
        HostileCase(
            "envelope_nested_100000", 400, "envelope", body=b"[" * 100_000 + b"]" * 100_000
        ),
        HostileCase(
            "envelope_duplicate_keys",
            400,
            "envelope",
            body=env().replace(b'{"payloadType"', b'{"payload":"e30=","payloadType"', 1),
            why="two payload keys: parsers disagree on which one was signed",
        ),
        HostileCase("envelope_nan", 400, "envelope", body=env().replace(b"}]}", b',"x":NaN}]}')),
        HostileCase(
            "invalid_base64_payload", 400, "envelope", body=env(payload="***not base64***")
        ),
        HostileCase("invalid_base64_sig", 400, "envelope", body=env(sig_sig="%%%")),
        HostileCase("payload_not_a_string", 400, "envelope", body=env(payload=12345)),
        HostileCase(
            "wrong_payload_type", 400, "envelope", body=env(payloadType="application/json")
        ),
        HostileCase(
            "missing_signatures",
            400,
            "envelope",
            body=envelope_bytes({"payloadType": p, "payload": good["payload"]}),
        ),
        HostileCase(
            "two_signatures",
            400,
            "envelope",
            body=envelope_bytes({**good, "signatures": good["signatures"] * 2}),
        ),
        HostileCase("keyid_not_of_public_key", 400, "envelope", body=env(sig_keyid="0" * 64)),
        HostileCase(
            "short_public_key",
            400,
            "envelope",
            body=env(sig_publicKey=base64.b64encode(b"k" * 16).decode()),
        ),
        HostileCase("unknown_envelope_field", 400, "envelope", body=env(extra="field")),
        # 2b. signature
        HostileCase(
            "valid_sig_of_other_key_same_payload",
            401,
            "signature",
            body=env(sig_sig=other_sig),
            why="key B's genuine signature presented under key A's public key",
        ),
        HostileCase(
            "flipped_byte_in_payload",
            401,
            "signature",
            body=env(payload=base64.b64encode(_flip(payload, 200)).decode()),
        ),
        HostileCase(
            "flipped_byte_in_signature",
            401,
            "signature",
            body=env(sig_sig=base64.b64encode(_flip(good_sig, 7)).decode()),
        ),
        HostileCase(
            "signature_over_other_payload_type",
            401,
            "signature",
            body=env(sig_sig=sign_envelope(payload, key, "application/x")["signatures"][0]["sig"]),
        ),
        # 3. strict JSON in the signed payload
        HostileCase(
            "payload_duplicate_keys",
            400,
            "json",
            body=_text_mutated(
                4, b'{"schema_version":1,', b'{"schema_version":1,"schema_version":1,'
            ),
        ),
        HostileCase(
            "payload_nan",
            400,
            "json",
            body=_text_mutated(5, b'"complete":true', b'"complete":true,"x":NaN'),
        ),
        HostileCase(
            "payload_infinity",
            400,
            "json",
            body=_text_mutated(6, b'"wall_s":', b'"wall_s":Infinity,"y":'),
        ),
        HostileCase(
            "payload_float_overflow",
            400,
            "json",
            body=_text_mutated(7, b'"wall_s":', b'"wall_s":1e999,"y":'),
        ),
        HostileCase(
            "payload_int_beyond_2_53",
            400,
            "json",
            body=_text_mutated(8, b'"output_chars":812', b'"output_chars":9007199254740993'),
        ),
        HostileCase(
            "payload_nested_100000", 400, "json", body=signed(deep_payload, signing_key(9))
        ),
        HostileCase(
            "payload_not_utf8", 400, "json", body=signed(b'{"note":"\xff"}', signing_key(10))
        ),
        HostileCase(
            "payload_trailing_garbage",
            400,
            "json",
            body=signed(valid_payload(11) + b"garbage", signing_key(11)),
        ),
        HostileCase(
            "payload_bom",
            400,
            "json",
            body=signed(b"\xef\xbb\xbf" + valid_payload(12), signing_key(12)),
        ),
        # 3b. schema
        HostileCase(
            "unknown_field", 422, "schema", body=_mutated(13, _set("hostname", "my-laptop"))
        ),
        HostileCase(
            "unknown_nested_field",
            422,
            "schema",
            body=_mutated(14, _set("fingerprint.serial", "C02X")),
        ),
        HostileCase(
            "wrong_type_string_for_int",
            422,
            "schema",
            body=_mutated(15, _set("configs.0.trials.0.eval_count", "200")),
        ),
        HostileCase(
            "wrong_type_float_for_int",
            422,
            "schema",
            body=_mutated(16, _set("configs.0.trials.0.total_duration_ns", 1.5e9)),
        ),
        HostileCase(
            "missing_required_field", 422, "schema", body=_mutated(17, _delete("submission_id"))
        ),
        HostileCase(
            "negative_duration",
            422,
            "schema",
            body=_mutated(18, _set("configs.0.trials.0.eval_duration_ns", -5)),
        ),
        HostileCase(
            "negative_wall",
            422,
            "schema",
            body=_mutated(19, _set("configs.0.trials.0.wall_s", -1.0)),
        ),
        HostileCase(
            "naive_created_at",
            422,
            "schema",
            body=_mutated(20, _set("created_at", "2026-01-01T00:00:00")),
        ),
        HostileCase(
            # wire v2 exists: an unknown version is 3
            "schema_version_3", 422, "schema", body=_mutated(21, _set("schema_version", 3))
        ),
        # 4. protocol
        HostileCase(
            "unknown_protocol", 422, "protocol", body=_mutated(22, _set("protocol.id", "made-up"))
        ),
        HostileCase(
            "wrong_protocol_hash",
            422,
            "protocol",
            body=_mutated(23, _set("protocol.sha256", "0" * 64)),
        ),
        HostileCase(
            "wrong_protocol_version",
            422,
            "protocol",
            body=_mutated(24, _set("protocol.version", 7)),
        ),
        # 5. consistency
        HostileCase(
            "eval_count_above_num_predict",
            422,
            "consistency",
            body=_mutated(25, _eval_above_num_predict),
        ),
        HostileCase(
            "wall_shorter_than_total",
            422,
            "consistency",
            body=_mutated(26, _wall_shorter_than_total),
        ),
        HostileCase(
            "eval_longer_than_total", 422, "consistency", body=_mutated(27, _eval_longer_than_total)
        ),
        HostileCase(
            "impossible_tokens_per_second", 422, "consistency", body=_mutated(28, _impossible_tps)
        ),
        HostileCase(
            "created_at_far_future",
            422,
            "consistency",
            at_send=lambda now: signed(
                valid_payload(29, created_at=now + timedelta(days=2)), signing_key(29)
            ),
        ),
        HostileCase(
            "created_at_ten_minutes_ahead",
            422,
            "consistency",
            at_send=lambda now: signed(
                valid_payload(30, created_at=now + timedelta(minutes=10)), signing_key(30)
            ),
        ),
        HostileCase(
            "created_at_too_old",
            422,
            "consistency",
            at_send=lambda now: signed(
                valid_payload(31, created_at=now - timedelta(days=3650)), signing_key(31)
            ),
        ),
        HostileCase("trial_missing", 422, "consistency", body=_mutated(32, _drop_trial)),
        HostileCase(
            "trial_index_duplicated", 422, "consistency", body=_mutated(33, _duplicate_trial)
        ),
        HostileCase(
            "config_not_in_protocol", 422, "consistency", body=_mutated(34, _unknown_config)
        ),
        HostileCase("config_missing", 422, "consistency", body=_mutated(35, _drop_config)),
        HostileCase(
            "nul_character_in_string",
            422,
            "consistency",
            body=_mutated(37, _set("note", "a\u0000b")),
            why="PostgreSQL cannot store U+0000; every store must refuse it alike",
        ),
        HostileCase(
            "nul_character_in_option_key",
            422,
            "consistency",
            body=_mutated(38, _set("configs.0.request_options.x\u0000", 1)),
        ),
        HostileCase(
            "options_differ_from_protocol", 422, "consistency", body=_mutated(36, _other_options)
        ),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases
