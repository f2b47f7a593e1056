"""The one exception hierarchy of specschema.

    SpecSchemaError
    ├── EnvelopeError          the DSSE envelope is malformed (form, base64, payloadType)
    ├── SignatureInvalid       the signature does not verify over the exact payload bytes
    ├── PayloadParseError      the payload bytes are not strict JSON (duplicate keys, NaN, ...)
    ├── PayloadSchemaError     the JSON does not match the wire models; carries failing paths
    ├── ProtocolError          a protocol definition is unknown or invalid
    └── LogError               transparency log data does not check out (``specschema.tlog``)
        ├── ProofInvalid       an inclusion or consistency proof does not verify
        ├── NoteInvalid        a signed note or checkpoint is malformed or not signed by the key
        └── TileInvalid        a tile path or tile's bytes are malformed

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


class LogError(SpecSchemaError):
    code = "log_invalid"


class ProofInvalid(LogError):
    code = "bad_proof"


class NoteInvalid(LogError):
    code = "bad_note"


class TileInvalid(LogError):
    code = "bad_tile"
