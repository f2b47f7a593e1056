"""The page's templates escape every value they print (http/page/render.py): autoescape on,
and each value written as html.escape writes it, the form the Python-built fragments use."""

from __future__ import annotations

from html import escape

from markupsafe import Markup

from specserver.http.page import render
from specserver.http.page.result import LONG_WORD

HOSTILE = """<script>alert("x")</script> & 'M2' <img src=x onerror=alert(1)>"""


def test_a_value_is_text_in_an_element_and_in_an_attribute() -> None:
    template = render.templates.env.from_string('<p title="{{ v }}">{{ v }}</p>')
    page = template.render(v=HOSTILE)
    assert page == f'<p title="{escape(HOSTILE)}">{escape(HOSTILE)}</p>'
    assert "<script>" not in page and "<img" not in page and '"x"' not in page
    assert "&#x27;M2&#x27;" in page  # html.escape's form, as result.py writes it


def test_markup_built_by_the_page_is_kept_and_nothing_else() -> None:
    template = render.templates.env.from_string("{{ built }}|{{ given }}")
    built = Markup('<span class="x">1.2x</span>')
    assert template.render(built=built, given=str(built)) == (
        f'<span class="x">1.2x</span>|{escape(str(built))}')


def test_contributor_text_wraps_a_pathologically_long_word() -> None:
    template = render.templates.env.from_string("{{ v|text }}")
    assert template.render(v="Apple M2") == "Apple M2"
    long = "<" + "X" * LONG_WORD
    assert template.render(v=long) == f'<span class="wrap">{escape(long)}</span>'
    assert template.render(v=None) == "–"
