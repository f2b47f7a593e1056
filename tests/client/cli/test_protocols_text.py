"""What `specsubmit protocols` shows of a protocol's description: its own words, for every
version (older ones too, should the listing ever show them), none citing the project's
tracker."""

from __future__ import annotations

import io
import re

from rich.console import Console

from specschema.protocol_files import all_protocols
from specsubmit.cli import protocols

ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_no_protocol_listing_cites_an_issue_number() -> None:
    for protocol in all_protocols():
        out = io.StringIO()
        protocols._describe(protocol, Console(file=out, width=200))
        shown = out.getvalue()
        assert protocol.id in shown
        assert not ISSUE_NUMBER.search(shown), protocol.id
        assert protocols.as_data(protocol)["description"] == protocol.description
        assert not ISSUE_NUMBER.search(protocols.as_data(protocol)["description"])
