"""The words shown for a protocol: its hashed description, reworded only by
``specschema.protocol_text``'s rules, and never citing the project's issue numbers."""

import re

from specschema.protocol import all_protocols
from specschema.protocol_text import REWORDINGS, shown_description

ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_no_shown_description_cites_an_issue_number() -> None:
    for protocol in all_protocols():
        shown = shown_description(protocol)
        assert not ISSUE_NUMBER.search(shown), (protocol.id, protocol.version)


def test_each_rewording_changes_a_shipped_protocol_and_only_its_words() -> None:
    for pattern, words in REWORDINGS:
        matched = [p for p in all_protocols() if pattern.search(p.description)]
        assert matched, pattern.pattern  # a stale rule fails here
        for protocol in matched:
            shown = shown_description(protocol)
            assert words in shown
            # the rest of the hashed text is shown unchanged
            assert pattern.sub("", protocol.description) == shown.replace(words, "")


def test_a_protocol_the_rules_do_not_touch_shows_its_own_description() -> None:
    plain = [p for p in all_protocols()
             if not any(pattern.search(p.description) for pattern, _ in REWORDINGS)]
    assert plain
    for protocol in plain:
        assert shown_description(protocol) == protocol.description
