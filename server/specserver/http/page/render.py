"""The page's templates (``templates/``, Jinja2 through FastAPI's ``Jinja2Templates``).

Autoescape is on for every template, and every value a template prints goes through
``html.escape`` (the environment's ``finalize``), the escape the Python-built fragments use
too (``result.py``, ``breakdown.py``, ``charts.py``): one value reads the same wherever the
page shows it. Those fragments come in as ``Markup``, already escaped; nothing else does.
Every public field is hostile: a chip name, a note or a config name is text, never markup.
"""

from __future__ import annotations

from functools import cache
from html import escape
from importlib import resources
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from specserver.http.page import result

__all__ = ["Markup", "css", "page_response", "templates"]


def _escaped(value: Any) -> Any:
    """Every printed value as ``html.escape`` would write it (quotes included); markup
    built by the page's own code (``Markup``) as it is."""
    if isinstance(value, Markup):
        return value
    return Markup(escape(str(value)))


def _text(value: Any) -> Markup:
    """Contributor text (``result.text``): escaped; one very long word may wrap anywhere."""
    return Markup(result.text(value))


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("specserver.http.page", "templates"),
                      autoescape=True, finalize=_escaped, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)
    env.filters["text"] = _text
    return env


templates = Jinja2Templates(env=_environment())


@cache
def css() -> Markup:
    """The page's one stylesheet, inline: the page needs no second request and no CDN."""
    folder = resources.files("specserver.http.page") / "templates"
    return Markup((folder / "style.css").read_text(encoding="utf-8"))


def page_response(request: Request, name: str, context: dict[str, Any],
                  status_code: int = 200) -> Response:
    """Template ``name`` rendered with ``context`` (and the stylesheet) as an HTML response."""
    return templates.TemplateResponse(request, name, {**context, "css": css()},
                                      status_code=status_code)
