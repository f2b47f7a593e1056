"""What a protocol's description reads as on every surface (the CLI's ``protocols``, the
board, the submission page, ``/v1/protocols``), apart from the text hashed into its
identity.

A protocol's ``description`` is part of its sha256 (``Protocol.sha256``): a pinned version
cannot be edited without becoming another protocol, and submissions made with it name that
hash. Where a pinned text reads wrong to a reader (it points at the project's internal
tracker), the words shown are reworded here and the hashed file stays as it is. A new
protocol version needs no entry: its own description is what is shown.
"""

from __future__ import annotations

import re

from specschema.protocol import Protocol

# (what the hashed texts say, what is shown instead). Each rule is held by a test to match
# a shipped protocol's hashed description (no stale rule), and no shown text may cite the
# tracker.
REWORDINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"in the measurements behind issue \d+"),
     "in the measurements this protocol was designed from"),
)


def shown_description(protocol: Protocol) -> str:
    """The description as every surface shows it: the hashed one, reworded by
    ``REWORDINGS``."""
    text = protocol.description
    for pattern, words in REWORDINGS:
        text = pattern.sub(words, text)
    return text
