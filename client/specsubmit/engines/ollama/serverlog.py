"""Speculation counters from the Ollama server log (pure parsing and attribution).

The Ollama API returns no draft counters; the log does, in two forms:

- MLX engine (``x/mlxrunner/speculate_stats.go``), a slog line with its own timestamp::

    time=2026-11-30T09:14:02.512+01:00 level=INFO source=speculate_stats.go:61
    msg="speculative decode stats" iterations=52 drafted=208 accepted=147 acceptance=0.71 ...

- llama-server (v0.30.0+, passed through by Ollama), usually without a timestamp::

    slot print_timing: id  0 | task 7 |
        draft acceptance rate = 0.98260 ( 1186 accepted /  1207 generated)

The runner records, for every request it sends, where the log ended (byte offset) and the
UTC time when the request started. A counter line belongs to the request whose start is
the last one before it: only that request was running. Ollama forwards llama-server's
output asynchronously, so after each request the runner waits until the log has been
quiet for a moment (``wait_for_quiet_log``): a line flushed just after its response
still lands before the next request starts. Byte offsets are exact and need no
clock; timestamps are the fallback when the log was rotated or unreadable at the start.
Lines without a timestamp inherit the last timestamp seen above them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

# engine_api: not from a log but summed from the engine's own per-request counters
# (llama-server's timings.draft_n), which the runner keeps in the same DraftCounters.
CounterSource = Literal["mlx_log", "llama_server_log", "engine_api"]

_TIME = re.compile(r"(?:^|\s)time=(\S+)")
_MLX = re.compile(r'msg="speculative decode stats".*?\bdrafted=(\d+)\b.*?\baccepted=(\d+)\b')
_LLAMA = re.compile(
    r"draft acceptance rate\s*=\s*[0-9.]+\s*\(\s*(\d+)\s+accepted\s*/\s*(\d+)\s+generated\s*\)"
)


@dataclass(frozen=True)
class CounterEvent:
    offset: int
    time: datetime | None
    drafted: int
    accepted: int
    source: CounterSource


@dataclass(frozen=True)
class Segment:
    """One request the runner sent: which config, and where/when it started."""

    config: str
    counted: bool
    start_offset: int | None
    start_time: datetime


@dataclass(frozen=True)
class DraftCounters:
    drafted: int
    accepted: int
    source: CounterSource
    lines: int


def parse_time(text: str) -> datetime | None:
    """RFC 3339 with up to nanoseconds (Go's slog format) -> aware UTC datetime."""
    text = text.strip('"')
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$", text)
    if not match:
        return None
    base, fraction, zone = match.groups()
    fraction = (fraction or "")[:7]
    zone = "+00:00" if zone in (None, "Z") else zone
    try:
        return datetime.fromisoformat(f"{base}{fraction}{zone}").astimezone(UTC)
    except ValueError:
        return None


def parse_events(data: bytes, base_offset: int = 0) -> list[CounterEvent]:
    """Every counter line in ``data`` (which starts at byte ``base_offset`` of the log)."""
    events: list[CounterEvent] = []
    offset = base_offset
    last_time: datetime | None = None
    for raw in data.splitlines(keepends=True):
        line = raw.decode("utf-8", errors="replace")
        time_match = _TIME.search(line)
        if time_match:
            last_time = parse_time(time_match.group(1)) or last_time
        mlx = _MLX.search(line)
        if mlx:
            events.append(CounterEvent(offset, last_time, int(mlx.group(1)), int(mlx.group(2)),
                                       "mlx_log"))
        else:
            llama = _LLAMA.search(line)
            if llama:
                events.append(CounterEvent(offset, last_time, int(llama.group(2)),
                                           int(llama.group(1)), "llama_server_log"))
        offset += len(raw)
    return events


def _owner(event: CounterEvent, segments: Sequence[Segment], by_offset: bool) -> Segment | None:
    owner: Segment | None = None
    for segment in segments:
        if by_offset:
            assert segment.start_offset is not None
            started = segment.start_offset <= event.offset
        else:
            started = event.time is not None and segment.start_time <= event.time
        if not started:
            break
        owner = segment
    return owner


def attribute(
    events: Iterable[CounterEvent], segments: Sequence[Segment], *, by_offset: bool
) -> dict[str, DraftCounters]:
    """Sum the counters of the counted segments, per config name."""
    ordered = sorted(segments, key=lambda s: (s.start_offset or 0, s.start_time)
                     if by_offset else (s.start_time, 0))
    totals: dict[str, dict[CounterSource, list[int]]] = {}
    for event in events:
        owner = _owner(event, ordered, by_offset)
        if owner is None or not owner.counted:
            continue
        slot = totals.setdefault(owner.config, {}).setdefault(event.source, [0, 0, 0])
        slot[0] += event.drafted
        slot[1] += event.accepted
        slot[2] += 1
    result: dict[str, DraftCounters] = {}
    for config, by_source in totals.items():
        source, (drafted, accepted, lines) = max(by_source.items(), key=lambda kv: kv[1][0])
        result[config] = DraftCounters(drafted, accepted, source, lines)
    return result


def log_size(path: Path) -> int | None:
    """The log's current size, or None when it cannot be read."""
    try:
        with path.open("rb"):
            return path.stat().st_size
    except OSError:
        return None


def wait_for_quiet_log(path: Path, quiet_s: float, max_s: float = 0.5,
                       sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once the log has not grown for ``quiet_s`` (or after ``max_s``)."""
    waited = 0.0
    size = log_size(path)
    while waited < max_s:
        sleep(quiet_s)
        waited += quiet_s
        now = log_size(path)
        if now == size:
            return
        size = now


def read_counters(path: Path, segments: Sequence[Segment]) -> dict[str, DraftCounters] | None:
    """Counters per config from the log at ``path``; None when the log is unreadable."""
    if not segments:
        return {}
    try:
        data = path.read_bytes()
    except OSError:
        return None
    offsets = [s.start_offset for s in segments]
    first = min((o for o in offsets if o is not None), default=None)
    if first is not None and None not in offsets and first <= len(data):
        return attribute(parse_events(data[first:], first), segments, by_offset=True)
    # The log was unreadable at the start or has been rotated since: use timestamps.
    return attribute(parse_events(data), segments, by_offset=False)
