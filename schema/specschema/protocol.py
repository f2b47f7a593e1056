"""Trial protocols as versioned data.

A protocol's identity is the sha256 of its canonical JSON form (sorted keys, no
whitespace). Results are only compared within one identity; a test pins each shipped
protocol's hash so that an edit without a version bump is caught.

Protocols that name no default target (``target: null``) take it as a run parameter,
which the submission records in ``protocol.parameters["target"]``.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from specschema.errors import ProtocolError
from specschema.models import Mechanism, OptionValue, Role
from specschema.strictjson import dumps_canonical, loads_strict


class _ProtocolModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GenerationOptions(_ProtocolModel):
    """Every generation option that changes timing or output, sent explicitly."""

    num_predict: Annotated[int, Field(ge=1, le=32768)]
    temperature: Annotated[float, Field(ge=0.0, le=2.0)]
    seed: int
    top_k: Annotated[int, Field(ge=0)]
    top_p: Annotated[float, Field(ge=0.0, le=1.0)]
    repeat_penalty: Annotated[float, Field(ge=0.0)]
    num_ctx: Annotated[int, Field(ge=256)]


class ProtocolConfig(_ProtocolModel):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_.\-]{1,64}$")]
    role: Role
    model: str | None = Field(None, description="None: the protocol's target")
    draft_model: str | None = None
    mechanism: Mechanism
    extra_options: dict[str, OptionValue] = Field(
        default_factory=dict, description="added to the protocol's options, e.g. draft_num_predict"
    )
    request_fields: dict[str, OptionValue] = Field(
        default_factory=dict, description="extra top-level request fields, e.g. draft_model"
    )


class Requirements(_ProtocolModel):
    min_engine_version: dict[str, str] = Field(default_factory=dict)
    memory_bytes: int | None = None
    target_note: str | None = None


class Protocol(_ProtocolModel):
    id: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9\-]{0,63}$")]
    version: Annotated[int, Field(ge=1)]
    description: str
    target: str | None
    configs: Annotated[list[ProtocolConfig], Field(min_length=2)]
    prompt: str
    options: GenerationOptions
    stream: bool
    keep_alive: str
    warmups_per_config: Annotated[int, Field(ge=0, le=10)]
    trials_per_config: Annotated[int, Field(ge=1, le=100)]
    order: Literal["blocked", "interleaved"]
    requirements: Requirements

    @property
    def sha256(self) -> str:
        return hashlib.sha256(dumps_canonical(self.model_dump(mode="json"))).hexdigest()

    def baseline(self) -> ProtocolConfig:
        return next(c for c in self.configs if c.role == "baseline")

    def config(self, name: str) -> ProtocolConfig:
        for candidate in self.configs:
            if candidate.name == name:
                return candidate
        raise ProtocolError(f"protocol {self.id} has no config {name!r}")

    def model_for(self, config: ProtocolConfig, target: str | None) -> str:
        model = config.model or target or self.target
        if model is None:
            raise ProtocolError(f"protocol {self.id} needs a target model (--target)")
        return model

    def request_options(self, config: ProtocolConfig) -> dict[str, OptionValue]:
        """The exact `options` object a trial sends for this config."""
        options: dict[str, OptionValue] = dict(self.options.model_dump())
        options.update(config.extra_options)
        return options

    def schedule(self) -> list[tuple[str, int]]:
        """The run order as (config name, trial index) pairs."""
        names = [c.name for c in self.configs]
        trials = range(self.trials_per_config)
        if self.order == "blocked":
            return [(name, i) for name in names for i in trials]
        return [(name, i) for i in trials for name in names]


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
    return protocol


def load_protocol_bytes(data: bytes, origin: str = "<bytes>") -> Protocol:
    return _validate(loads_strict(data), origin)


@cache
def shipped_protocols() -> dict[str, Protocol]:
    """The protocols shipped inside specschema, keyed by id."""
    found: dict[str, Protocol] = {}
    folder = resources.files("specschema") / "protocols"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            protocol = load_protocol_bytes(entry.read_bytes(), entry.name)
            found[protocol.id] = protocol
    return found


def get_protocol(protocol_id: str) -> Protocol:
    protocols = shipped_protocols()
    if protocol_id not in protocols:
        known = ", ".join(sorted(protocols))
        raise ProtocolError(f"unknown protocol {protocol_id!r} (known: {known})")
    return protocols[protocol_id]


def find_protocol(protocol_id: str, version: int, sha256: str) -> Protocol | None:
    """The shipped protocol with this exact identity, or None."""
    protocol = shipped_protocols().get(protocol_id)
    if protocol is None or protocol.version != version or protocol.sha256 != sha256:
        return None
    return protocol


def canonical_json(protocol: Protocol) -> str:
    return json.dumps(protocol.model_dump(mode="json"), indent=2, sort_keys=True)
