"""The submission page's "verify it yourself" snippet cannot be poisoned.

Before: the snippet's URL was built from the request's Host header, and the page was
cached under an ETag that ignores Host: after one request with
``Host: attacker.example:8080`` every visitor got ``urlopen("http://attacker.example:8080/
...")``, and the snippet accepted any validly signed envelope it was served. Now the URL
comes from ``public_base_url`` and the snippet checks the key id and the submission id of
what it fetched. The snippet is run here as printed, with ``urlopen`` answered from the
app (no network).
"""

from __future__ import annotations

import html
import io
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from specschema import key_id_of
from tests.reliability.apps import app_on
from tests.reliability.hostile import signing_key, valid_envelope
from tests.support.inprocess import InProcessClient

PUBLIC = "https://specbench.example"
ATTACKER = "attacker.example:8080"


def snippet_of(page: str) -> str:
    found = re.search(r'<pre class="verify">(.*?)</pre>', page, re.S)
    assert found is not None, "no verify snippet on the page"
    return html.unescape(found.group(1))


def run_snippet(snippet: str, served: bytes, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run ``snippet`` with ``urlopen`` answering ``served``; the URLs it asked for."""
    asked: list[str] = []

    def urlopen(url: str, *args: Any, **kwargs: Any) -> io.BytesIO:
        asked.append(url)
        return io.BytesIO(served)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    exec(compile(snippet, "<snippet>", "exec"), {"__name__": "snippet"})  # noqa: S102
    return asked


def test_a_host_header_does_not_reach_the_cached_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with app_on("duckdb", tmp_path, public_base_url=PUBLIC) as app, \
            InProcessClient(app) as client:
        receipt = client.post("/v1/submissions", content=valid_envelope(1))
        assert receipt.status_code == 201
        sid = receipt.json()["submission_id"]
        page_url = f"/submissions/{sid}"
        poisoned = client.get(page_url, headers={"Host": ATTACKER})
        assert poisoned.status_code == 200
        visitor = client.get(page_url)
        assert visitor.headers["etag"] == poisoned.headers["etag"]  # one cached page
        for body in (poisoned.text, visitor.text):
            assert "attacker.example" not in body
            assert f'url = "{PUBLIC}/v1/submissions/{sid}/envelope"' in snippet_of(body)
        # The snippet runs as printed against the stored bytes.
        envelope = client.get(f"/v1/submissions/{sid}/envelope").content
        printed: list[str] = []
        monkeypatch.setattr("builtins.print", lambda *a: printed.append(" ".join(map(str, a))))
        asked = run_snippet(snippet_of(visitor.text), envelope, monkeypatch)
        assert asked == [f"{PUBLIC}/v1/submissions/{sid}/envelope"]
        key_id = key_id_of(bytes(signing_key(1).verify_key))
        assert printed == [f"verified {sid} signed by {key_id}"]


def test_the_snippet_refuses_another_submissions_envelope(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same key, another submission: validly signed, and still not this page's result."""
    with app_on("duckdb", tmp_path, public_base_url=PUBLIC) as app, \
            InProcessClient(app) as client:
        key = signing_key(1)
        first = client.post("/v1/submissions", content=valid_envelope(1, key=key)).json()
        other = client.post("/v1/submissions", content=valid_envelope(2, key=key)).json()
        snippet = snippet_of(client.get(f"/submissions/{first['submission_id']}").text)
        swapped = client.get(f"/v1/submissions/{other['submission_id']}/envelope").content
        with pytest.raises(AssertionError, match="another submission's envelope"):
            run_snippet(snippet, swapped, monkeypatch)
