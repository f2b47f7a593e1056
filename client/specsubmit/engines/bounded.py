"""Reading an engine's answer within bounds, for every adapter: a total deadline, a size
limit, and lines gathered in one buffer that grows linearly.

An engine's address can be anything's, and an engine can break: an answer that trickles
(a byte at a time, so that no read timeout fires), never ends, or never ends its line
must cost the client a bounded time and memory. httpx bounds the silence between reads
(``timeout``), not the whole; these helpers bound the whole, checked as each block
arrives. Each raises ``PastDeadline`` or ``TooLong``; the adapter turns them into its
own ``specsubmit.errors`` class with a one-line message.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx

# One request to an engine in all (a trial, a model list), whatever its read timeout.
REQUEST_DEADLINE_S = 1800.0
# An engine's stream line is a token's chunk; a JSON answer a model list or a reply.
MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class PastDeadline(Exception):
    """The answer did not end before its deadline (``time.monotonic()`` seconds)."""


class TooLong(Exception):
    """The answer (or one of its lines) is longer than its limit."""


def read_bounded(response: httpx.Response, limit: int, deadline: float, *,
                 cut: bool = False) -> bytes:
    """The body, at most ``limit`` bytes (past it: TooLong, or the first ``limit`` bytes
    with ``cut``), read before ``deadline``."""
    body = bytearray()
    for block in response.iter_bytes():
        body += block
        if len(body) > limit:
            if cut:
                return bytes(body[:limit])
            raise TooLong
        if time.monotonic() > deadline:
            raise PastDeadline
    return bytes(body)


def bounded_lines(response: httpx.Response, max_line: int, deadline: float
                  ) -> Iterator[tuple[float, bytes]]:
    """(``time.perf_counter()`` when its block arrived, line without its newline) for each
    non-blank line, as the blocks arrive. A line split over blocks is gathered in one
    bytearray, each byte copied once (joining ``rest + block`` per block copies the whole
    unfinished line again every time: a 40 MB line without a newline cost 16 s of CPU)."""
    partial = bytearray()
    for block in response.iter_bytes():
        arrived = time.perf_counter()
        if time.monotonic() > deadline:
            raise PastDeadline
        begin = 0
        while (end := block.find(b"\n", begin)) != -1:
            if partial:
                partial += block[begin:end]
                line, partial = bytes(partial), bytearray()
            else:
                line = block[begin:end]
            begin = end + 1
            if line.strip():
                yield arrived, line
        partial += block[begin:]
        if len(partial) > max_line:
            raise TooLong
    if partial.strip():
        yield time.perf_counter(), bytes(partial)


__all__ = ["MAX_ANSWER_BYTES", "MAX_LINE_BYTES", "REQUEST_DEADLINE_S", "PastDeadline",
           "TooLong", "bounded_lines", "read_bounded"]
