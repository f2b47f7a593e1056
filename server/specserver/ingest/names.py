"""Canonical free-text names (pure): one spelling per chip, nothing invisible, no lookalikes.

A name that forms a leaderboard group (the chip, the backend) or is shown beside one (CPU and
GPU names, model names, the client's name) must render as what it is and group with its
twins. Issue 15 showed seven spellings of ``Apple M2`` that render the same and formed seven
groups: a Cyrillic А, a zero-width space, an NBSP, a trailing space, lower case, an RTL
override, CR/LF.

Two steps, both documented in docs/aggregation.md ("Names"):

- ``name_problem`` (a consistency rule, 422 naming the field): a name may not hold control,
  format, surrogate, private-use or line/paragraph-separator characters (Unicode Cc, Cf, Cs,
  Co, Zl, Zp: bidi controls and zero-width characters are Cf), nor the other
  default-ignorable (invisible) code points; and it may not mix Latin letters with Cyrillic or
  Greek ones, the scripts whose lookalikes pass for Latin. A chip-like name written wholly in
  those scripts whose lookalike skeleton is a known chip's is refused as well. Refusing beats
  folding here: a sender whose name carries an invisible or foreign letter learns it, and the
  stored envelope never disagrees with what the board shows.
- ``canonical`` (applied to the stored columns, ``ingest.rows``): NFKC (NBSP and the other
  spaces become U+0020, full-width letters become ASCII), whitespace runs collapsed to one
  space, ends stripped; ``canonical_chip`` then maps a chip to its spelling in
  ``known_chips.json`` when its case-folded form is the name or an alias there. A chip that
  is not in the table is kept as sent (canonical form) and shown as new (``chip_is_known``).

The ASCII shortcut matters: nearly every name is printable ASCII, for which no problem can
exist and ``canonical`` only has to collapse spaces.
"""

from __future__ import annotations

import json
import unicodedata
from functools import cache
from importlib import resources
from typing import Any

# Unicode general categories refused in any name.
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
# Default_Ignorable_Code_Point characters outside those categories: invisible, yet letters or
# marks (a Hangul filler, the combining grapheme joiner, variation selectors).
INVISIBLE = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x3164, 0xFFA0]
    + list(range(0xFE00, 0xFE10)) + list(range(0xE0100, 0xE01F0))
)
# The scripts whose letters pass for Latin ones (UTS #39 mixed-script detection, narrowed to
# the lookalike scripts: a Latin name with a CJK suffix is not a spoof).
LOOKALIKE_SCRIPTS = frozenset({"CYRILLIC", "GREEK"})
# Cyrillic and Greek letters that render like a Latin one (from Unicode's confusables.txt,
# the letters a chip or model name can be spelled with). Used only to recognise a known
# chip spelled wholly in a lookalike script; nothing is stored folded.
CONFUSABLE_LATIN = str.maketrans({
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ү": "Y", "Ԛ": "Q",
    "Ԝ": "W", "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x",
    "ѕ": "s", "і": "i", "ј": "j", "ӏ": "l", "һ": "h", "ԁ": "d", "ԛ": "q", "ԝ": "w",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "ο": "o", "ν": "v",
    "ι": "i", "κ": "k", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "α": "a",
})
# Characters a note (the one free-text field that is prose, not a name) may hold beyond
# printable ones.
NOTE_ALLOWED = frozenset("\n\t")


def _script(char: str) -> str:
    """The first word of the character's Unicode name: LATIN, CYRILLIC, GREEK, ..."""
    return unicodedata.name(char, "").split(" ", 1)[0]


def name_problem(value: str, *, note: bool = False, chip: bool = False) -> str | None:
    """Why ``value`` cannot be a name (a one-line message), or None when it can.

    ``note``: the submission's note (prose: line feeds and tabs allowed, scripts may mix).
    ``chip``: a hardware name, also compared with the known chips' lookalike skeletons."""
    if value.isascii() and value.isprintable():
        return None  # printable ASCII: nothing invisible, one script
    for index, char in enumerate(value):
        if note and char in NOTE_ALLOWED:
            continue
        category = unicodedata.category(char)
        if category in REFUSED_CATEGORIES or ord(char) in INVISIBLE:
            label = unicodedata.name(char, f"category {category}")
            return (f"character U+{ord(char):04X} ({label}) at position {index} is a control, "
                    "format or invisible character")
    if note:
        return None
    folded = unicodedata.normalize("NFKC", value)
    scripts = {_script(c) for c in folded if c.isalpha()}
    if "LATIN" in scripts and scripts & LOOKALIKE_SCRIPTS:
        mixed = sorted(scripts & LOOKALIKE_SCRIPTS)
        return f"name mixes Latin letters with {' and '.join(s.title() for s in mixed)} ones"
    if chip and scripts & LOOKALIKE_SCRIPTS:
        skeleton = collapse(folded.translate(CONFUSABLE_LATIN)).casefold()
        known = _known_by_folded().get(skeleton)
        if known is not None and collapse(folded) != known:
            return f"name is a lookalike of the known chip {known!r}"
    return None


def collapse(value: str) -> str:
    """Whitespace runs (any Unicode space) as one U+0020, ends stripped."""
    return " ".join(value.split())


def canonical(value: str) -> str:
    """NFKC with whitespace collapsed: the stored spelling of a name."""
    if not value.isascii():
        value = unicodedata.normalize("NFKC", value)
    return collapse(value)


def canonical_model(value: str) -> str:
    """A model tag as one row: canonical, lower case (Ollama's tags are case-insensitive:
    ``Qwen3:14B`` pulls ``qwen3:14b``), and without the default tag ``:latest`` (``qwen3``
    and ``qwen3:latest`` are one model)."""
    name = canonical(value).lower()
    return name.removesuffix(":latest") if name.endswith(":latest") else name


def canonical_model_optional(value: str | None) -> str | None:
    return None if value is None else canonical_model(value) or None


def canonical_optional(value: str | None) -> str | None:
    if value is None:
        return None
    return canonical(value) or None


# --- the known chips ------------------------------------------------------------------------


@cache
def known_chips() -> tuple[dict[str, Any], ...]:
    """The entries of ``known_chips.json`` (package data), in file order."""
    raw = resources.files("specserver").joinpath("known_chips.json").read_text("utf-8")
    entries: list[dict[str, Any]] = json.loads(raw)["chips"]
    return tuple(entries)


@cache
def _known_by_folded() -> dict[str, str]:
    """Case-folded name or alias -> the table's spelling of the name."""
    found: dict[str, str] = {}
    for entry in known_chips():
        for spelling in (entry["name"], *entry.get("aliases", ())):
            folded = canonical(spelling).casefold()
            if found.setdefault(folded, entry["name"]) != entry["name"]:
                raise ValueError(f"known_chips.json: {spelling!r} names two chips")
    return found


def canonical_chip(value: str | None) -> str | None:
    """The chip's stored name: the known spelling when it is one, else its canonical form."""
    name = canonical_optional(value)
    if name is None:
        return None
    return _known_by_folded().get(name.casefold(), name)


def chip_is_known(value: str | None) -> bool:
    """True when the (stored) chip name is one of the table's names: else it shows as new."""
    return value is not None and _known_by_folded().get(value.casefold()) == value
