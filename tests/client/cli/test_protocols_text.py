"""What `specsubmit protocols` shows of a protocol's description: the words every surface
shows (``specschema.protocol_text``), never the pinned text's reference to the project's
tracker, for every version (older ones too, should the listing ever show them)."""

from __future__ import annotations

import io
import re

from rich.console import Console

from specschema.protocol import all_protocols
from specschema.protocol_text import REWORDINGS
from specsubmit.cli import protocols

ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_no_protocol_listing_cites_an_issue_number() -> None:
    pinned = [p for p in all_protocols() if ISSUE_NUMBER.search(p.description)]
    assert pinned  # the hashed texts that do (v1 files), which this listing must reword
    for protocol in all_protocols():
        out = io.StringIO()
        protocols._describe(protocol, Console(file=out, width=200))
        shown = out.getvalue()
        assert protocol.id in shown
        assert not ISSUE_NUMBER.search(shown), protocol.id
        assert not ISSUE_NUMBER.search(protocols.as_data(protocol)["description"])
    words = REWORDINGS[0][1]
    assert all(words in protocols.as_data(p)["description"] for p in pinned)
