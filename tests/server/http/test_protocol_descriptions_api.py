"""/v1/protocols lists every accepted version, the two whose words were mended after they
were published included (``Protocol.published_sha256``), each in its own words and under
the identity its results name."""

from __future__ import annotations

import re

from specschema.protocol_files import all_protocols

ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_the_protocols_api_never_cites_an_issue_number(client):
    items = client.get("/v1/protocols").json()["items"]
    shown = {(i["id"], i["version"], i["sha256"]): i["description"] for i in items}
    mended = [p for p in all_protocols() if p.published_sha256 is not None]
    assert mended and all((p.id, p.version, p.published_sha256) in shown for p in mended)
    assert not any(ISSUE_NUMBER.search(text) for text in shown.values())
    assert all(shown[(p.id, p.version, p.sha256)] == p.description for p in all_protocols())
