"""OLLAMA_HOST parsing: the table from Ollama's envconfig.Host + ConnectableHost."""

from __future__ import annotations

import pytest

from specsubmit.engines.ollama.host import parse_ollama_host
from specsubmit.errors import UsageError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "http://127.0.0.1:11434"),
        ("", "http://127.0.0.1:11434"),
        ("   ", "http://127.0.0.1:11434"),
        ("1.2.3.4", "http://1.2.3.4:11434"),
        ("example.com", "http://example.com:11434"),
        ("example.com:56789", "http://example.com:56789"),
        (":56789", "http://127.0.0.1:56789"),
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://example.com", "http://example.com:80"),
        ("https://example.com", "https://example.com:443"),
        ("HTTP://example.com", "http://example.com:80"),
        ("http://example.com:56789", "http://example.com:56789"),
        ("https://example.com:56789/path", "https://example.com:56789/path"),
        ("https://example.com/ollama/", "https://example.com:443/ollama"),
        ("example.com/path", "http://example.com:11434/path"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:1234", "http://127.0.0.1:1234"),
        ("http://0.0.0.0", "http://127.0.0.1:80"),
        ("::", "http://[::1]:11434"),
        ("[::]:1234", "http://[::1]:1234"),
        ("::1", "http://[::1]:11434"),
        ("[::1]:56789", "http://[::1]:56789"),
        ("[fe80::1]", "http://[fe80::1]:11434"),
        ("example.com:abc", "http://example.com:11434"),
        ("example.com:99999", "http://example.com:11434"),
        ("http://example.com:notaport", "http://example.com:80"),
        ("example.com:", "http://example.com:11434"),
    ],
)
def test_parse_like_ollama(value: str | None, expected: str) -> None:
    assert parse_ollama_host(value) == expected


def test_unsupported_scheme_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="use http:// or https://"):
        parse_ollama_host("ftp://example.com")
