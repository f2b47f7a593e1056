"""/v1/protocols lists every accepted version, the pinned ones whose hashed descriptions
cite the project's tracker included, in the words every surface shows
(``specschema.protocol_text``)."""

from __future__ import annotations

import re

from specschema.protocol import all_protocols
from specschema.protocol_text import shown_description

ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_the_protocols_api_never_cites_an_issue_number(client):
    items = client.get("/v1/protocols").json()["items"]
    shown = {(i["id"], i["version"]): i["description"] for i in items}
    pinned = [p for p in all_protocols() if ISSUE_NUMBER.search(p.description)]
    assert pinned and all((p.id, p.version) in shown for p in pinned)
    assert not any(ISSUE_NUMBER.search(text) for text in shown.values())
    assert all(shown[(p.id, p.version)] == shown_description(p) for p in all_protocols())
