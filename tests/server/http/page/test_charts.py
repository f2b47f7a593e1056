"""The inline SVG chart (pure)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from specserver.http.page.charts import Bar, axis_max, speedup_chart

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def test_one_bar_per_entry_and_whiskers_only_with_quartiles():
    bars = [Bar("Apple M2 · 24 GB · spec_4", 1.3, 1.2, 1.4, 5),
            Bar("RTX 4090 · 64 GB · spec_4", 0.9, None, None, 1),
            Bar("no data", None, None, None, 1)]
    root = parse(speedup_chart(bars, title="t", board="b"))
    rects = root.findall(f".//{SVG}rect")
    assert len(rects) == 3
    assert [r.get("class") for r in rects] == ["bar faster", "bar slower", "bar slower"]
    assert float(rects[2].get("width")) == 0.0
    assert len(root.findall(f".//{SVG}g[@class='iqr']")) == 1
    assert len(root.findall(f".//{SVG}line[@class='unity']")) == 1
    assert root.get("data-board") == "b"


def test_bar_lengths_are_proportional_and_the_unity_line_sits_at_one():
    root = parse(speedup_chart([Bar("a", 1.0, None, None, 1), Bar("b", 2.0, None, None, 1)],
                               title="t"))
    one, two = (float(r.get("width")) for r in root.findall(f".//{SVG}rect"))
    assert two == 2 * one
    unity = root.find(f".//{SVG}line[@class='unity']")
    assert float(unity.get("x1")) - float(root.findall(f".//{SVG}rect")[0].get("x")) == one


def test_axis_covers_the_largest_value_and_labels_are_escaped():
    assert axis_max([Bar("a", 1.1, None, None, 1)]) == 2.0  # at least 1.5x, rounded up
    assert axis_max([Bar("a", 1.2, 1.1, 3.1, 3)]) >= 3.1
    svg = speedup_chart([Bar('<b>"x"</b> & y', 1.0, None, None, 1)], title="<t>")
    parse(svg)
    assert "<b>" not in svg and "&lt;b&gt;" in svg
    assert not re.search(r"<script", svg)
