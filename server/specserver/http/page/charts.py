"""Inline SVG charts for the page (pure: numbers in, markup out; no JavaScript).

A horizontal bar per group: the bar is the median speedup, the whisker the interquartile
range (only when the group has enough contributors), and a dashed line marks 1.0x.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

LABEL_WIDTH = 300
PLOT_WIDTH = 440
ROW_HEIGHT = 24
TOP = 26
BOTTOM = 8


@dataclass(frozen=True)
class Bar:
    label: str  # shown as given (fit it first, ``fit``/``fit_parts``); the tooltip says it all
    median: float | None
    p25: float | None
    p75: float | None
    contributors: int
    # "faster" / "slower" / "unclear" (speedup not resolved): the outcome's colour;
    # "unverified": speculation could run but was not seen; drawn neutral like the noise
    # floor, never as a speedup or a slowdown. None: by the median (or noise, per chart).
    style: str | None = None
    full_label: str | None = None  # the whole label for the tooltip, when ``label`` is cut


# An upper bound of each character's advance at the chart's 12 px label font, so that a label
# cut to fit by this estimate fits in any of the fonts a browser may pick (measured in
# headless Chromium with Debian's DejaVu Sans, the widest common fallback: lowercase about
# 6.5-7 px, capitals 7-9, "M"/"W" about 10-11.5, CJK 12).
_NARROW = frozenset("iljtfrI.,:;'|!()[]{} ")
_WIDE = frozenset("MWmw@%")
LABEL_ROOM = LABEL_WIDTH - 14  # right-aligned at LABEL_WIDTH - 8, a little air on the left


def char_width(char: str) -> float:
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return 12.5
    if char in _NARROW:
        return 4.6
    if char in _WIDE:
        return 12.0
    if char.isupper():
        return 9.0
    if char.isdigit():
        return 7.7
    if char.islower():
        return 7.4
    return 9.5  # symbols, marks and anything else: on the wide side


def text_width(text: str) -> float:
    return sum(char_width(c) for c in text)


def fit(text: str, room: float = LABEL_ROOM) -> str:
    """``text`` cut with an ellipsis so that its estimated width is at most ``room``."""
    if text_width(text) <= room:
        return text
    width = char_width("…")
    kept = []
    for char in text:
        width += char_width(char)
        if width > room:
            break
        kept.append(char)
    return "".join(kept).rstrip() + "…"


def fit_parts(head: str, tail: str, room: float = LABEL_ROOM) -> str:
    """``head · tail`` in ``room``: ``head`` (the long, free-text part: a chip name) is cut
    first, so the short tail (memory, config) stays readable; then the whole if need be."""
    joined = f"{head} · {tail}" if head else tail
    if text_width(joined) <= room:
        return joined
    room_for_head = room - text_width(f" · {tail}")
    if room_for_head >= text_width("Apple…"):
        return f"{fit(head, room_for_head)} · {tail}"
    return fit(joined, room)


def _fmt(value: float) -> str:
    return f"{value:.2f}"


def axis_max(bars: Sequence[Bar]) -> float:
    """The right end of the axis: at least 1.5x, rounded up to a half."""
    top = max([1.5] + [v for b in bars for v in (b.median, b.p75) if v is not None])
    return math.ceil(top * 1.1 * 2) / 2


def speedup_chart(bars: Sequence[Bar], *, title: str, noise: bool = False,
                  board: str = "") -> str:
    """One ``rect.bar`` per entry of ``bars`` (also those without a median, at zero width)."""
    height = TOP + ROW_HEIGHT * max(len(bars), 1) + BOTTOM
    width = LABEL_WIDTH + PLOT_WIDTH + 20
    top = axis_max(bars)

    def x(value: float) -> float:
        return LABEL_WIDTH + PLOT_WIDTH * min(value, top) / top

    parts = [
        f'<svg class="chart" data-board="{escape(board)}" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        '<g class="axis">',
    ]
    step = 0.5 if top <= 4 else 1.0
    tick = 0.0
    while tick <= top + 1e-9:
        parts.append(f'<line class="grid" x1="{x(tick):.1f}" y1="{TOP - 4}" x2="{x(tick):.1f}" '
                     f'y2="{height - BOTTOM}"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{TOP - 8}" text-anchor="middle">'
                     f'{tick:g}x</text>')
        tick += step
    parts.append("</g>")
    for index, bar in enumerate(bars):
        y = TOP + index * ROW_HEIGHT
        centre = y + ROW_HEIGHT / 2
        whole = bar.full_label or bar.label
        parts.append(f'<text class="label" x="{LABEL_WIDTH - 8}" y="{centre + 4:.1f}" '
                     f'text-anchor="end">{escape(bar.label)}<title>{escape(whole)}</title></text>')
        median = bar.median or 0.0
        kind = "noise" if noise else bar.style or ("faster" if median >= 1.0 else "slower")
        tooltip = (f"{whole}: median {_fmt(median)}x from {bar.contributors} contributor(s)"
                   if bar.median is not None else f"{whole}: no speedup measured")
        if bar.p25 is not None and bar.p75 is not None:
            tooltip += f", interquartile {_fmt(bar.p25)}x to {_fmt(bar.p75)}x"
        parts.append(
            f'<rect class="bar {kind}" x="{LABEL_WIDTH}" y="{y + 5}" '
            f'width="{x(median) - LABEL_WIDTH:.1f}" height="{ROW_HEIGHT - 10}">'
            f"<title>{escape(tooltip)}</title></rect>")
        if bar.p25 is not None and bar.p75 is not None:
            x1, x2 = x(bar.p25), x(bar.p75)
            parts.append(f'<g class="iqr"><line class="iqr" x1="{x1:.1f}" y1="{centre:.1f}" '
                         f'x2="{x2:.1f}" y2="{centre:.1f}"/>'
                         f'<line class="iqr" x1="{x1:.1f}" y1="{y + 7}" x2="{x1:.1f}" '
                         f'y2="{y + ROW_HEIGHT - 7}"/>'
                         f'<line class="iqr" x1="{x2:.1f}" y1="{y + 7}" x2="{x2:.1f}" '
                         f'y2="{y + ROW_HEIGHT - 7}"/></g>')
    parts.append(f'<line class="unity" x1="{x(1.0):.1f}" y1="{TOP - 4}" x2="{x(1.0):.1f}" '
                 f'y2="{height - BOTTOM}"><title>1.0x: no change</title></line>')
    parts.append("</svg>")
    return "".join(parts)
