"""GET /v1/predict: the server's prediction for one machine, and the crowd's inputs to it.

One GET under the same deadline and size limit as delivery (``send.delivery``); a server
that does not answer is ``ServerUnreachable``, a refusal (4xx/5xx) a ``SubmitError`` with
the server's message as ``outside_text.visible`` shows it, an answer that is not the
prediction's shape likewise. Not retried: the command is asked again by hand.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import httpx

from specsubmit import __version__
from specsubmit.errors import ServerUnreachable, SubmitError
from specsubmit.outside_text import visible
from specsubmit.send.delivery import _exchange, _PastDeadline, _tls_context, answer_message

PREDICT_PATH = "/v1/predict"


def fetch_prediction(server: str, query: dict[str, str], *, timeout_s: float = 60.0,
                     transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    url = f"{server}{PREDICT_PATH}?{urlencode(query)}"
    try:
        with httpx.Client(timeout=timeout_s, transport=transport, verify=_tls_context(),
                          follow_redirects=False) as client:
            response, body = _exchange(client, url, None,
                                       {"User-Agent": f"specsubmit/{__version__}"}, timeout_s)
    except _PastDeadline:
        raise ServerUnreachable(f"{server} did not finish answering GET {PREDICT_PATH} "
                                f"within {timeout_s:g} s") from None
    except httpx.TransportError as exc:
        problem = visible(f"{type(exc).__name__}: {exc}".rstrip(": "), 200)
        raise ServerUnreachable(f"cannot reach {server}: {problem}") from None
    if response.status_code != 200:
        message = answer_message(response.status_code, response.reason_phrase, body)
        raise SubmitError(f"the server could not predict ({response.status_code}): {message}")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if not (isinstance(data, dict) and isinstance(data.get("candidates"), list)
            and isinstance(data.get("inputs"), dict)):
        raise SubmitError(f"{server} answered GET {PREDICT_PATH} with something other than a "
                          "prediction")
    return data
