"""Inline SVG charts for the page (pure: numbers in, markup out; no JavaScript).

A horizontal bar per group: the bar is the median speedup, the whisker the interquartile
range (only when the group has enough contributors), and a dashed line marks 1.0x.
"""

from __future__ import annotations

import math
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
    label: str
    median: float | None
    p25: float | None
    p75: float | None
    contributors: int
    # "unverified": speculation could run but was not seen; drawn neutral like the noise
    # floor, never as a speedup or a slowdown. None: by the median (or noise, per chart).
    style: str | None = None


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
        parts.append(f'<text x="{LABEL_WIDTH - 8}" y="{centre + 4:.1f}" text-anchor="end">'
                     f"{escape(bar.label)}</text>")
        median = bar.median or 0.0
        kind = "noise" if noise else bar.style or ("faster" if median >= 1.0 else "slower")
        tooltip = (f"{bar.label}: median {_fmt(median)}x from {bar.contributors} contributor(s)"
                   if bar.median is not None else f"{bar.label}: no speedup measured")
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
