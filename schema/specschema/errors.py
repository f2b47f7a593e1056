"""The one exception hierarchy of specschema.

    SpecSchemaError
    ├── EnvelopeError          the DSSE envelope is malformed (form, base64, payloadType)
    ├── SignatureInvalid       the signature does not verify over the exact payload bytes
    ├── PayloadParseError      the payload bytes are not strict JSON (duplicate keys, NaN, ...)
    ├── PayloadSchemaError     the JSON does not match the wire models; carries failing paths
    └── ProtocolError          a protocol definition is unknown or invalid

Each error has a stable ``code`` so that both the CLI and the API can report it.
"""

from __future__ import annotations

from typing import Any


class SpecSchemaError(Exception):
    code = "schema_error"

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class EnvelopeError(SpecSchemaError):
    code = "bad_envelope"


class SignatureInvalid(SpecSchemaError):
    code = "bad_signature"


class PayloadParseError(SpecSchemaError):
    code = "bad_json"


class PayloadSchemaError(SpecSchemaError):
    code = "schema_invalid"


class ProtocolError(SpecSchemaError):
    code = "protocol_error"
