"""LM Studio as the client runs it: reached at ``--engine-url`` (default the port
``lms server start`` uses), never started or stopped by the client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from specsubmit.engines.base import DEFAULT_TIMEOUT_S, Adapter, Engine, Flag, RunSettings
from specsubmit.engines.lmstudio.api import DEFAULT_URL, LMStudioApi
from specsubmit.engines.lmstudio.engine import LMStudioEngine
from specsubmit.errors import UsageError
from specsubmit.outside_text import visible


@dataclass(frozen=True)
class LMStudioOptions:
    """What the command line says about the LM Studio server a run reaches."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    url: str | None = None  # --engine-url (else the port `lms server start` uses)


def _url(options: LMStudioOptions) -> str:
    text = options.url or DEFAULT_URL
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"--engine-url {visible(text, 120)!r} is not an http(s) URL")
    return text


def _check(options: LMStudioOptions) -> None:
    _url(options)


@contextlib.contextmanager
def _open(settings: RunSettings, options: LMStudioOptions) -> Iterator[Engine]:
    api = LMStudioApi(_url(options), timeout_s=options.timeout_s)
    try:
        yield LMStudioEngine(api, settings)
    finally:
        api.close()


ADAPTER: Adapter[LMStudioOptions] = Adapter(
    name="lmstudio", summary="lmstudio (a running LM Studio server, `lms server start`; "
                             "protocol lmstudio-draft by default)",
    flags=(Flag("--engine-url", "url"),), options=LMStudioOptions, open=_open, check=_check,
    default_protocol="lmstudio-draft",
    address=lambda options: _url(options).rstrip("/"),
)
