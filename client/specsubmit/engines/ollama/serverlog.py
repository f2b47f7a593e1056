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
Lines without a timestamp inherit the last timestamp seen above them (journald's own
leading timestamp counts too, for ``journalctl -o short-iso-precise`` output).

Since llama.cpp PR #24536 (Ollama 0.33.2 on) the llama-server line reads
``draft acceptance = 0.82090 (  110 accepted /   134 generated), mean len =  7.47``; both
forms are parsed, the mean accepted length when present.

Besides counters the log says how each engine start was configured (wire v2): Ollama's
``msg="starting llama-server" cmd="…"`` line (``llm/llama_server.go``) gives the spec type,
n-max, the draft model (kept as its blob digest, never a path) and synthetic-acceptance
flags; llama-server's ``synthetic speculative acceptance is enabled`` warning marks a start
whose flags came from the environment (``LLAMA_ARG_SPEC_SYNTH_LEN``). ``read_requests``
attributes all of it to the request during which it was logged.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from specschema import Launch, TrialCounters
from specsubmit.engines.base import CounterSource, DraftCounters

_TIME = re.compile(r"(?:^|\s)time=(\S+)")
# journalctl -o short-iso-precise: "2026-12-01T21:50:00.123456+0000 host ollama[1]: ..."
_LEADING_TIME = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)\s")
_MLX = re.compile(r'msg="speculative decode stats".*?\bdrafted=(\d+)\b.*?\baccepted=(\d+)\b')
_MLX_MEAN = re.compile(r"\bavg_accepted=([0-9.]+)")
# Old: "draft acceptance rate = 0.98260 ( 1186 accepted /  1207 generated)"; new (PR
# #24536): "draft acceptance = 0.82090 (  110 accepted /   134 generated), mean len =  7.47"
_LLAMA = re.compile(
    r"draft acceptance(?: rate)?\s*=\s*[0-9.]+\s*\(\s*(\d+)\s+accepted\s*/\s*(\d+)\s+"
    r"generated\s*\)(?:,\s*mean (?:len|acceptance length)\s*=\s*([0-9.]+))?"
)
_STARTING = re.compile(r'msg="starting llama-server".*?\bcmd="((?:[^"\\]|\\.)*)"')
_SYNTHETIC_WARNING = "synthetic speculative acceptance is enabled"
_SYNTH_FLAGS = ("--spec-synth-len", "--spec-synth-rates")
_SYNTH_ENV = ("LLAMA_ARG_SPEC_SYNTH_LEN", "LLAMA_ARG_SPEC_SYNTH_RATES")
_BLOB = re.compile(r"sha256[-:]([0-9a-f]{64})$")
# Ollama's access log (gin): `[GIN] 2026/12/01 - 10:00:00 | 200 | 1.2s | 127.0.0.1 | POST
# "/api/generate"`. Only the endpoints that generate tokens (and so can log counters).
_GIN = re.compile(r'\[GIN\].*\|\s*POST\s+"(/api/generate|/api/chat|/v1/chat/completions|'
                  r'/v1/completions|/v1/responses)(?:\?[^"]*)?"')


@dataclass(frozen=True)
class CounterEvent:
    offset: int
    time: datetime | None
    drafted: int
    accepted: int
    source: CounterSource
    mean_len: float | None = None


@dataclass(frozen=True)
class LaunchEvent:
    """A ``starting llama-server`` line, or (``warning``) llama-server's synthetic warning."""

    offset: int
    time: datetime | None
    launch: Launch | None  # None for the warning
    warning: bool = False


@dataclass(frozen=True)
class RequestEvent:
    """Ollama's access line for a generation request (``[GIN] ... | POST "/api/generate"``),
    written as the request ends, ours or anyone's."""

    offset: int
    time: datetime | None
    path: str


LogEvent = CounterEvent | LaunchEvent | RequestEvent


@dataclass
class RequestEvidence:
    """What the log says about one request the runner sent (one ``Segment``)."""

    counters: list[CounterEvent] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    synthetic_warning: bool = False
    requests: int = 0  # generation requests Ollama logged while this one was the latest

    def trial_counters(self) -> TrialCounters | None:
        """This request's counters (summed when it logged several lines), if it drafted."""
        drafted = sum(c.drafted for c in self.counters)
        if not self.counters or drafted == 0:
            return None
        means = [c.mean_len for c in self.counters if c.mean_len is not None]
        source = max(self.counters, key=lambda c: c.drafted).source
        return TrialCounters(drafted=drafted, accepted=sum(c.accepted for c in self.counters),
                             mean_accepted_len=round(sum(means) / len(means), 4) if means
                             else None, source=source)

    def all_launches(self) -> list[Launch]:
        """The engine starts, a synthetic warning folded into them as the flag 'warning'."""
        if not self.synthetic_warning:
            return list(self.launches)
        if not self.launches:
            return [Launch(source="llama_server_log", synthetic_flags=["warning"])]
        return [launch.model_copy(update={"synthetic_flags": sorted(
            {*launch.synthetic_flags, "warning"})}) for launch in self.launches]


@dataclass(frozen=True)
class Segment:
    """One request the runner sent: which config, and where/when it started."""

    config: str
    counted: bool
    start_offset: int | None
    start_time: datetime


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


def _flag_values(argv: Sequence[str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            values[name] = inline if eq else (
                nxt if nxt is not None and not nxt.startswith("--") else None)
    return values


def parse_launch(cmd: str) -> Launch:
    """What one ``starting llama-server`` command line ran with (never a path: digests)."""
    try:
        argv = shlex.split(cmd)
    except ValueError:
        argv = cmd.split()
    flags = _flag_values(argv)
    spec_type = flags.get("--spec-type")
    n_max = flags.get("--spec-draft-n-max") or flags.get("--draft-max")
    draft = flags.get("--spec-draft-model") or flags.get("--model-draft")
    digest = None
    if draft:
        blob = _BLOB.search(draft.replace("\\", "/").rsplit("/", 1)[-1])
        digest = blob.group(1) if blob else None
    synthetic = [f for f in _SYNTH_FLAGS if f in flags] + [e for e in _SYNTH_ENV if e in cmd]
    return Launch(
        source="llama_server_log",
        spec_type=spec_type if spec_type and re.fullmatch(r"[A-Za-z0-9_.\-]{1,48}", spec_type)
        else None,
        draft_n_max=int(n_max) if n_max and n_max.isdigit() and int(n_max) <= 4096 else None,
        draft_model=draft is not None,
        draft_model_digest=digest,
        synthetic_flags=synthetic,
    )


def _unquote(text: str) -> str:
    """Go's strconv.Quote escapes (slog's quoted values) undone for \\" and \\\\."""
    return re.sub(r"\\(.)", r"\1", text)


def parse_log(data: bytes, base_offset: int = 0) -> list[LogEvent]:
    """Every counter, engine-start and synthetic-warning line in ``data`` (which starts at
    byte ``base_offset`` of the log), with its offset and inherited time."""
    events: list[LogEvent] = []
    offset = base_offset
    last_time: datetime | None = None
    for raw in data.splitlines(keepends=True):
        line = raw.decode("utf-8", errors="replace")
        leading = _LEADING_TIME.match(line)
        if leading:
            base, zone = leading.groups()
            zone = zone if zone == "Z" or ":" in zone else f"{zone[:3]}:{zone[3:]}"
            last_time = parse_time(f"{base}{zone}") or last_time
        time_match = _TIME.search(line)
        if time_match:
            last_time = parse_time(time_match.group(1)) or last_time
        mlx = _MLX.search(line)
        if mlx:
            mean = _MLX_MEAN.search(line)
            events.append(CounterEvent(offset, last_time, int(mlx.group(1)), int(mlx.group(2)),
                                       "mlx_log", float(mean.group(1)) if mean else None))
        elif llama := _LLAMA.search(line):
            events.append(CounterEvent(offset, last_time, int(llama.group(2)),
                                       int(llama.group(1)), "llama_server_log",
                                       float(llama.group(3)) if llama.group(3) else None))
        elif starting := _STARTING.search(line):
            events.append(LaunchEvent(offset, last_time, parse_launch(_unquote(
                starting.group(1)))))
        elif _SYNTHETIC_WARNING in line:
            events.append(LaunchEvent(offset, last_time, None, warning=True))
        elif gin := _GIN.search(line):
            events.append(RequestEvent(offset, last_time, gin.group(1)))
        offset += len(raw)
    return events


def parse_events(data: bytes, base_offset: int = 0) -> list[CounterEvent]:
    """Every counter line in ``data`` (which starts at byte ``base_offset`` of the log)."""
    return [e for e in parse_log(data, base_offset) if isinstance(e, CounterEvent)]


def _owner(event: LogEvent, segments: Sequence[Segment], by_offset: bool) -> Segment | None:
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


def requests_evidence(events: Iterable[LogEvent], segments: Sequence[Segment], *,
                      by_offset: bool) -> list[RequestEvidence]:
    """Per segment (in the given order), what the log says about that request."""
    found = [RequestEvidence() for _ in segments]
    index = {id(s): i for i, s in enumerate(segments)}
    ordered = sorted(segments, key=lambda s: (s.start_offset or 0, s.start_time)
                     if by_offset else (s.start_time, 0))
    for event in events:
        owner = _owner(event, ordered, by_offset)
        if owner is None:
            continue
        evidence = found[index[id(owner)]]
        if isinstance(event, CounterEvent):
            evidence.counters.append(event)
        elif isinstance(event, RequestEvent):
            evidence.requests += 1
        elif event.warning:
            evidence.synthetic_warning = True
        elif event.launch is not None:
            evidence.launches.append(event.launch)
    return found


def read_requests(data: bytes | None, segments: Sequence[Segment]
                  ) -> list[RequestEvidence] | None:
    """Per segment, from the whole log ``data``; None when the log could not be read."""
    if data is None:
        return None
    if not segments:
        return []
    offsets = [s.start_offset for s in segments]
    first = min((o for o in offsets if o is not None), default=None)
    if first is not None and None not in offsets and first <= len(data):
        return requests_evidence(parse_log(data[first:], first), segments, by_offset=True)
    return requests_evidence(parse_log(data), segments, by_offset=False)
