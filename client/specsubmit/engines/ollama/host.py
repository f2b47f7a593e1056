"""OLLAMA_HOST parsed exactly as Ollama parses it (``envconfig.Host`` + ``ConnectableHost``).

    ""                       -> http://127.0.0.1:11434
    "example.com"            -> http://example.com:11434
    "example.com:56789"      -> http://example.com:56789
    ":56789"                 -> http://127.0.0.1:56789
    "http://example.com"     -> http://example.com:80     (a scheme without a port: 80/443)
    "https://example.com/x"  -> https://example.com:443/x (the path is kept)
    "0.0.0.0" / "::"         -> 127.0.0.1 / [::1]         (a listen-anywhere address is
                                                           reached through loopback)
An unparseable port falls back to the default port, as Ollama does. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress

from specsubmit.errors import UsageError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434
_SCHEME_PORTS = {"http": 80, "https": 443}


def _split_host_port(hostport: str) -> tuple[str, str] | None:
    """Go's net.SplitHostPort: None when there is no port (or the form is invalid)."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0 or not hostport[end + 1 :].startswith(":"):
            return None
        return hostport[1:end], hostport[end + 2 :]
    if hostport.count(":") != 1:
        return None
    host, port = hostport.split(":")
    return host, port


def _connectable(host: str) -> str:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host or DEFAULT_HOST
    if ip.is_unspecified:
        return "127.0.0.1" if ip.version == 4 else "::1"
    return str(ip)


def parse_ollama_host(value: str | None) -> str:
    """The base URL a client connects to for an OLLAMA_HOST value (no trailing slash)."""
    text = (value or "").strip()
    scheme, sep, hostport = text.partition("://")
    default_port = DEFAULT_PORT
    if not sep:
        scheme, hostport = "http", text
    else:
        scheme = scheme.lower()
        if scheme not in _SCHEME_PORTS:
            raise UsageError(f"unsupported scheme in Ollama URL {text!r}: use http:// or https://")
        default_port = _SCHEME_PORTS[scheme]
    hostport, _, path = hostport.partition("/")
    split = _split_host_port(hostport)
    if split is None:
        host, port_text = hostport.strip("[]") or DEFAULT_HOST, str(default_port)
    else:
        host, port_text = split
    try:
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError(port_text)
    except ValueError:
        port = default_port
    host = _connectable(host)
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    url = f"{scheme}://{netloc}"
    path = path.rstrip("/")
    return f"{url}/{path}" if path else url
