"""A free TCP port on the loopback interface, for the servers the tests and benches start."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick; another process may take it before
    the caller binds it, which on a test machine's loopback does not happen in practice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
