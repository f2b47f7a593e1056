"""specschema: the wire format shared by specsubmit and specserver.

Public surface (pinned by tests/schema/test_public_api.py).
"""

from specschema.capability import (
    counter_problems,
    engine_can_honor,
    parse_version,
    submission_verdicts,
    verdict,
)
from specschema.envelope import (
    PAYLOAD_TYPE,
    VerifiedEnvelope,
    envelope_bytes,
    key_id_of,
    pae,
    sign_envelope,
    verify_envelope,
)
from specschema.errors import (
    EnvelopeError,
    PayloadParseError,
    PayloadSchemaError,
    ProtocolError,
    SignatureInvalid,
    SpecSchemaError,
)
from specschema.models import (
    SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    ClientInfo,
    ConfigResult,
    Cpu,
    Engine,
    Fingerprint,
    Gpu,
    Launch,
    ModelInfo,
    OsInfo,
    ProtocolRef,
    SpeculationEvidence,
    Submission,
    Trial,
    TrialCounters,
    Warmup,
)
from specschema.payload import parse_submission, submission_bytes
from specschema.protocol import Protocol, ProtocolConfig
from specschema.protocol_files import find_protocol, get_protocol, shipped_protocols
from specschema.strictjson import dumps_canonical, loads_strict
from specschema.summary import ConfigSummary, summarize, summarize_configs

__all__ = [
    "PAYLOAD_TYPE",
    "SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
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
    "PayloadParseError",
    "PayloadSchemaError",
    "Protocol",
    "ProtocolConfig",
    "ProtocolError",
    "ProtocolRef",
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
