"""The one sanitizer for outside text (specsubmit/outside_text.py)."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from specsubmit.outside_text import is_plain, visible

ESCAPED = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


@given(st.text(), st.integers(min_value=1, max_value=400))
def test_nothing_a_terminal_obeys_gets_through_and_the_length_is_capped(text: str,
                                                                      limit: int) -> None:
    shown = visible(text, limit)
    assert not any(unicodedata.category(c) in ESCAPED for c in shown)
    head, _, rest = shown.partition("\u2026 (")
    assert len(head) <= limit
    if len(text) <= limit and is_plain(text, limit):
        assert shown == text


def test_the_sequences_of_the_attack_are_shown_as_escapes() -> None:
    assert visible("\x1b]52;c;aGk=\x07\x1b[2J\x9b\u202e\r\n\t") == \
        "\\x1b]52;c;aGk=\\x07\\x1b[2J\\x9b\\u202e\\r\\n\\t"
    assert visible(b"\x1b[31mred") == "\\x1b[31mred"


def test_what_is_cut_is_counted() -> None:
    assert visible("a" * 1000, 10) == "a" * 10 + "\u2026 (990 more characters)"
    # An escape that would not fit is left out whole, and counted.
    assert visible("abc\x1b", 5) == "abc\u2026 (1 more characters)"
