"""The consistency pass's fast paths against its reference: honest submissions take them,
every broken case leaves them, the names are read the same fast way, and a protocol
not shipped is checked the same."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specschema.payload import parse_submission
from specserver.ingest import namefields, rules
from tests.server.ingest import consistency_reference as reference
from tests.server.ingest.test_ingest_fast import NOW, PROTOCOLS, _agree
from tests.server.ingest.test_ingest_rules import CASES, ctx_for, fresh


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("protocol", "version", "counters"), PROTOCOLS)
def test_honest_submissions_take_the_fast_path(seed: int, protocol: str, version: str,
                                               counters: bool) -> None:
    data = fresh(seed, protocol, engine_version=version, counters_seen=counters)
    assert _agree(data) is True


@pytest.mark.parametrize(("name", "rule", "breaker"), CASES, ids=[c[0] for c in CASES])
def test_every_broken_case_leaves_the_fast_path(name: str, rule: str, breaker: Any) -> None:
    data = fresh(3)
    breaker(data)
    assert _agree(data) is False, name


@pytest.mark.parametrize("seed", range(4))
def test_the_fast_name_values_are_the_rules_names(seed: int) -> None:
    """``name_values`` (the pass's first test) reads the same names as ``name_fields`` (the
    walk that gives the paths), on submissions with every optional name present."""
    data = fresh(seed, "ollama-draft", engine_version="0.30.1", counters_seen=True,
                 schema_version=2)
    data["note"] = "a note"
    data["fingerprint"]["gpus"] = [{"name_raw": "raw", "name": "NVIDIA GeForce RTX 4090",
                                    "driver": "550", "metal_family": "none"}] * 2
    data["fingerprint"].update(machine_model="Mac14,2", virtualization="none")
    data["engine"]["build"] = "b1234"
    data["protocol"]["parameters"] = {"target": data["configs"][0]["model"]}
    submission = parse_submission(json.dumps(data).encode())
    fields = [value for _path, value, _kind in namefields.name_fields(submission)]
    assert sorted(namefields.name_values(submission)) == sorted(fields)
    assert len(fields) > 25
    # the lookalike pass on ASCII names reads exactly the chip and model entries
    assert list(namefields.lookalike_fields(submission)) == [
        f for f in namefields.name_fields(submission) if f[2] in ("chip", "model")]


@pytest.mark.parametrize("broken", [False, True])
def test_a_protocol_not_shipped_is_checked_the_same(broken: bool) -> None:
    """A protocol object that is not one of the shipped ones (not cached by identity)."""
    data = fresh(0)
    if broken:
        data["configs"][1]["trials"][0]["position"] += 1
        data["configs"][0]["warmups"] = [{"wall_s": 1.0}] * 3
    submission = parse_submission(json.dumps(data).encode())
    shipped = ctx_for(data)
    ctx = rules.RuleContext(shipped.protocol.model_copy(), NOW, shipped.max_age,
                             shipped.max_future_skew)
    found = rules.violations(submission, ctx)
    assert found == reference.rule_violations(submission, ctx)
    assert (found != []) == broken
