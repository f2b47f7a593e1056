"""Text from outside the client, made safe to print: the one sanitizer.

Whatever a server, an engine, a model name or a file hands the client can reach the
contributor's terminal: an error message, a receipt's URL, an engine's error text or
version, a line of a saved index. A terminal obeys what it is sent, so OSC 52 writes the
clipboard, OSC 0 sets the window title and CSI sequences clear the screen and draw lines
that the client never printed (a fake "submitted (accepted)"). ``visible`` shows every
such character as a visible escape instead (``\\x1b``, ``\\u202e``), and caps the length, so
a 30 MB error message prints as a few hundred characters and a count of the rest.

What is shown as an escape: every control character (C0, DEL, C1: U+009B is a one-byte
CSI to some terminals), the Unicode format characters (bidirectional overrides and
isolates, zero-width characters), line and paragraph separators, surrogates and private-use
characters. Newlines and tabs too: outside text never gets a line of its own.

Every place the client prints outside text passes it through ``visible`` (and
``specsubmit.cli.main`` passes every error line through it once more).
"""

from __future__ import annotations

import unicodedata

# What a one-line piece of outside text is cut to (a server's error message, an engine's).
DEFAULT_LIMIT = 300
# An error line as a whole: ours around the outside pieces it quotes.
LINE_LIMIT = 2000
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def _needs_escape(char: str) -> bool:
    return unicodedata.category(char) in _ESCAPED_CATEGORIES


def visible(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` (str, bytes or anything with a str()) with every control, format and
    separator character shown as an escape, cut to ``limit`` characters; what was cut off
    is counted at the end."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text[: limit * 4 + 4]).decode("utf-8", errors="replace") \
            + ("\u2026" if len(text) > limit * 4 + 4 else "")
    raw = text if isinstance(text, str) else str(text)
    pieces: list[str] = []
    length = used = 0
    for char in raw[:limit]:
        piece = _escape(char) if _needs_escape(char) else char
        if length + len(piece) > limit:
            break
        pieces.append(piece)
        length += len(piece)
        used += 1
    cut = len(raw) - used
    shown = "".join(pieces)
    return f"{shown}\u2026 ({cut:,} more characters)" if cut > 0 else shown


def is_plain(text: str, limit: int = DEFAULT_LIMIT) -> bool:
    """True when ``visible`` would print ``text`` unchanged (nothing to escape or cut)."""
    return len(text) <= limit and not any(_needs_escape(c) for c in text)


__all__ = ["DEFAULT_LIMIT", "LINE_LIMIT", "is_plain", "visible"]
