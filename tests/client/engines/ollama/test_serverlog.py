"""Counters from the Ollama server log: both line forms, attribution by offset and time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from specsubmit.engines.ollama.serverlog import (
    Segment,
    attribute,
    parse_events,
    parse_time,
    read_counters,
)

MLX = ('time=2026-11-30T09:14:02.512+01:00 level=INFO source=speculate_stats.go:61 '
       'msg="speculative decode stats" iterations=52 drafted=208 accepted=147 acceptance=0.71 '
       'avg_draft=4.00 max_draft=4 avg_accepted=2.83 depth_over_time=[4 4 4]')
LLAMA = "draft acceptance rate = 0.98260 ( 1186 accepted /  1207 generated)"
T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)


def test_parse_both_line_forms_and_ignore_others() -> None:
    text = "\n".join([
        'time=2026-11-30T09:14:01.000+01:00 level=INFO source=routes.go:1 msg="server config"',
        MLX,
        "slot print_timing: id  0 | task 7 | ",
        LLAMA,
        "statistics mtp: #calls(b,g,a) = 1 50 50, #gen tokens = 1207, #acc tokens = 1186",
        'time=2026-11-30T09:14:03.000+01:00 level=WARN msg="invalid option provided" '
        "option=draft_num_predict",
    ]).encode()
    events = parse_events(text, base_offset=100)
    assert [(e.source, e.drafted, e.accepted) for e in events] == [
        ("mlx_log", 208, 147), ("llama_server_log", 1207, 1186)]
    mlx, llama = events
    assert mlx.time == datetime(2026, 11, 30, 8, 14, 2, 512000, tzinfo=UTC)
    # a llama-server line has no timestamp of its own: it inherits the last one above it
    assert llama.time == mlx.time
    assert mlx.offset == 100 + len(text.split(b"\n")[0]) + 1
    assert text[llama.offset - 100:].startswith(b"draft acceptance rate")


def test_parse_time_forms() -> None:
    assert parse_time("2026-11-30T08:00:00Z") == T0
    assert parse_time("2026-11-30T09:00:00.123456789+01:00") == T0 + timedelta(
        microseconds=123456)
    assert parse_time('"2026-11-30T08:00:00.5-02:00"') == T0 + timedelta(hours=2, seconds=0.5)
    assert parse_time("yesterday") is None


def _segments(offsets: list[int | None], counted: list[bool] | None = None,
              configs: list[str] | None = None) -> list[Segment]:
    configs = configs or ["a", "b", "a", "b"][: len(offsets)]
    counted = counted or [True] * len(offsets)
    return [Segment(c, k, o, T0 + timedelta(seconds=10 * i))
            for i, (c, k, o) in enumerate(zip(configs, counted, offsets, strict=True))]


def test_attribution_by_offset_goes_to_the_request_running_then(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    lines = [b"before the run " + LLAMA.encode()]  # offset 0: not ours
    segments_at: list[int] = []
    body = b""
    for drafted, accepted in [(10, 5), (20, 15), (30, 25), (40, 35)]:
        body_len = len(lines[0]) + 1 + len(body)
        segments_at.append(body_len)
        line = f"draft acceptance rate = 0.5 ( {accepted} accepted / {drafted} generated)\n"
        body += line.encode()
    log.write_bytes(lines[0] + b"\n" + body)
    counters = read_counters(log, _segments(list(segments_at)))
    assert counters is not None
    assert (counters["a"].drafted, counters["a"].accepted) == (10 + 30, 5 + 25)
    assert (counters["b"].drafted, counters["b"].accepted) == (20 + 40, 15 + 35)
    assert counters["a"].source == "llama_server_log" and counters["a"].lines == 2


def test_warmup_segments_are_not_counted() -> None:
    data = (LLAMA + "\n" + LLAMA + "\n").encode()
    events = parse_events(data)
    segments = _segments([0, len(LLAMA) + 1], counted=[False, True], configs=["a", "a"])
    counters = attribute(events, segments, by_offset=True)
    assert counters["a"].lines == 1 and counters["a"].drafted == 1207


def test_attribution_by_time_when_offsets_are_unknown(tmp_path: Path) -> None:
    def mlx_at(seconds: int, drafted: int) -> str:
        stamp = (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
        return (f'time={stamp} level=INFO msg="speculative decode stats" iterations=1 '
                f"drafted={drafted} accepted=1")

    log = tmp_path / "server.log"
    log.write_text("\n".join([mlx_at(-5, 1000), mlx_at(5, 4), mlx_at(15, 8), mlx_at(16, 16)]))
    counters = read_counters(log, _segments([None, None]))
    assert counters is not None
    assert counters["a"].drafted == 4  # the line 5 s before the run is outside its window
    assert counters["b"].drafted == 24
    assert counters["a"].source == "mlx_log"


def test_rotated_log_falls_back_to_time(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    stamp = (T0 + timedelta(seconds=1)).isoformat()
    log.write_text(f'time={stamp} level=INFO msg="x"\n{LLAMA}\n')
    # offsets recorded against a bigger, older file than the one now on disk
    counters = read_counters(log, _segments([10_000, 10_100]))
    assert counters is not None and counters["a"].drafted == 1207


def test_unreadable_log_is_none(tmp_path: Path) -> None:
    assert read_counters(tmp_path / "missing.log", _segments([0])) is None
    assert read_counters(tmp_path / "missing.log", []) == {}


def test_wait_for_quiet_log_waits_while_the_log_grows(tmp_path: Path) -> None:
    from specsubmit.engines.ollama.serverlog import wait_for_quiet_log

    log = tmp_path / "server.log"
    log.write_text("start\n")
    naps: list[float] = []

    def sleep(seconds: float) -> None:  # the log grows during the first two naps
        naps.append(seconds)
        if len(naps) <= 2:
            with log.open("a") as handle:
                handle.write(LLAMA + "\n")

    wait_for_quiet_log(log, 0.05, sleep=sleep)
    assert naps == [0.05, 0.05, 0.05]
    naps.clear()
    wait_for_quiet_log(tmp_path / "missing.log", 0.05, sleep=naps.append)
    assert naps == [0.05]

    def always_growing(seconds: float) -> None:
        naps.append(seconds)
        with log.open("a") as handle:
            handle.write("x\n")

    naps.clear()
    wait_for_quiet_log(log, 0.1, max_s=0.3, sleep=always_growing)
    assert len(naps) == 3  # gives up after max_s
