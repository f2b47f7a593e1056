"""specschema's public surface is deliberate: a change here is a wire-format decision."""

import specschema

PUBLIC = [
    "ClientInfo",
    "ConfigResult",
    "ConfigSummary",
    "Cpu",
    "Engine",
    "EnvelopeError",
    "Fingerprint",
    "Gpu",
    "Launch",
    "ModelInfo",
    "OsInfo",
    "PAYLOAD_TYPE",
    "PayloadParseError",
    "PayloadSchemaError",
    "Protocol",
    "ProtocolConfig",
    "ProtocolError",
    "ProtocolRef",
    "SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "SignatureInvalid",
    "SpecSchemaError",
    "SpeculationEvidence",
    "Submission",
    "Trial",
    "TrialCounters",
    "VerifiedEnvelope",
    "Warmup",
    "counter_problems",
    "dumps_canonical",
    "engine_can_honor",
    "envelope_bytes",
    "find_protocol",
    "get_protocol",
    "key_id_of",
    "loads_strict",
    "pae",
    "parse_submission",
    "parse_version",
    "shipped_protocols",
    "sign_envelope",
    "submission_bytes",
    "submission_verdicts",
    "summarize",
    "summarize_configs",
    "verdict",
    "verify_envelope",
]


def test_public_names_are_pinned() -> None:
    assert sorted(specschema.__all__) == PUBLIC


def test_every_public_name_resolves() -> None:
    for name in PUBLIC:
        assert getattr(specschema, name) is not None, name
