"""The shipped protocol files (``specschema/protocols/*.json``): the rules a protocol file
must meet beyond its model's fields, loading them, and finding one by id or by identity
(``specschema.protocol`` is the model itself)."""

from __future__ import annotations

from functools import cache
from importlib import resources

from pydantic import ValidationError

from specschema.domains import DOMAINS
from specschema.errors import ProtocolError
from specschema.protocol import LAUNCH_OPTION_NAMES, Protocol
from specschema.strictjson import loads_strict


def _validate(data: object, origin: str) -> Protocol:
    try:
        protocol = Protocol.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(f"invalid protocol {origin}: {exc.errors()[0]['msg']}") from None
    roles = [c.role for c in protocol.configs]
    if roles.count("baseline") != 1:
        raise ProtocolError(f"protocol {origin} must have exactly one baseline config")
    if len({c.name for c in protocol.configs}) != len(protocol.configs):
        raise ProtocolError(f"protocol {origin} has duplicate config names")
    if protocol.order == "abba" and (
        protocol.block_trials is None
        or protocol.trials_per_config % (2 * protocol.block_trials) != 0
    ):
        raise ProtocolError(f"protocol {origin}: order abba needs block_trials dividing half "
                            "of trials_per_config")
    if protocol.order == "bracketed" and (
        protocol.block_trials is None
        or protocol.trials_per_config % (2 * protocol.block_trials) != 0
        or not protocol.warmup_each_block
    ):
        raise ProtocolError(f"protocol {origin}: order bracketed needs block_trials dividing "
                            "half of trials_per_config, and warmup_each_block")
    if protocol.early_stop is not None and protocol.order != "bracketed":
        raise ProtocolError(f"protocol {origin}: early_stop needs order bracketed (it stops "
                            "a config after the first round)")
    if protocol.interval == "block_t" and protocol.order == "blocked":
        raise ProtocolError(f"protocol {origin}: interval block_t needs two blocks per config "
                            "or more (order blocked has one)")
    unknown = sorted(set(protocol.launch_options) - LAUNCH_OPTION_NAMES)
    if unknown:
        raise ProtocolError(f"protocol {origin}: unknown launch option {unknown[0]!r}")
    strange = sorted({p.domain for p in protocol.prompts or ()} - set(DOMAINS))
    if strange:
        raise ProtocolError(f"protocol {origin}: unknown domain {strange[0]!r} (known: "
                            f"{', '.join(DOMAINS)})")
    if protocol.prompts and protocol.block_trials is not None \
            and protocol.block_trials % len(protocol.prompts) != 0:
        raise ProtocolError(f"protocol {origin}: block_trials must be a multiple of the "
                            "prompt set's size (every block covers every prompt)")
    return protocol


def load_protocol_bytes(data: bytes, origin: str = "<bytes>") -> Protocol:
    return _validate(loads_strict(data), origin)


@cache
def all_protocols() -> tuple[Protocol, ...]:
    """Every protocol file shipped inside specschema, every version (older versions stay
    loadable: submissions made with them are still checked and shown)."""
    found: list[Protocol] = []
    folder = resources.files("specschema") / "protocols"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            found.append(load_protocol_bytes(entry.read_bytes(), entry.name))
    return tuple(sorted(found, key=lambda p: (p.id, p.version)))


@cache
def shipped_protocols() -> dict[str, Protocol]:
    """The newest shipped version of each protocol, keyed by id (what a run uses)."""
    return {p.id: p for p in all_protocols()}  # sorted by version: the last one wins


def get_protocol(protocol_id: str) -> Protocol:
    protocols = shipped_protocols()
    if protocol_id not in protocols:
        known = ", ".join(sorted(protocols))
        raise ProtocolError(f"unknown protocol {protocol_id!r} (known: {known})")
    return protocols[protocol_id]


@cache
def _by_identity() -> dict[tuple[str, int, str], Protocol]:
    return {(p.id, p.version, p.sha256): p for p in all_protocols()}


def find_protocol(protocol_id: str, version: int, sha256: str) -> Protocol | None:
    """The shipped protocol with this exact identity (any version), or None."""
    return _by_identity().get((protocol_id, version, sha256))


def interval_of(protocol_id: str, version: int, sha256: str) -> str:
    """The interval method (``Protocol.interval``) of the shipped protocol with this
    identity; "block_bootstrap" for one that is not shipped (what every result was
    computed with before "block_t" existed)."""
    protocol = find_protocol(protocol_id, version, sha256)
    return protocol.interval if protocol is not None else "block_bootstrap"


def headline_of(protocol_id: str, version: int, sha256: str) -> str:
    """The headline speedup ("decode" or "wall") of the shipped protocol with this identity;
    "decode" for one that is not shipped."""
    protocol = find_protocol(protocol_id, version, sha256)
    return protocol.headline if protocol is not None else "decode"
