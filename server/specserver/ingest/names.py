"""Canonical free-text names (pure): one spelling per chip, nothing invisible, no lookalikes.

A name that forms a leaderboard group (the chip, the backend) or is shown beside one (CPU and
GPU names, model names, the client's name) must render as what it is and group with its
twins. A review found seven spellings of ``Apple M2`` that render the same and formed seven
groups: a Cyrillic А, a zero-width space, an NBSP, a trailing space, lower case, an RTL
override, CR/LF.

Two steps, both documented in docs/aggregation.md ("Names"):

- ``name_problem`` (a consistency rule, 422 naming the field), by the Unicode standard's
  data through ICU (PyICU; a second review found Cherokee, Lisu and Armenian lookalikes, U+2800
  as a space, combining marks and ``AppIe M2`` past the first, hand-listed round): no
  control, format, surrogate, private-use or separator character (Cc, Cf, Cs, Co, Zl, Zp)
  and no Default_Ignorable_Code_Point; only UTS #39's recommended identifier characters
  plus Common/Inherited punctuation, symbols and digits; no combining mark left on a
  Latin, Greek or Cyrillic letter or a digit after NFKC; scripts within UTS #39's Highly
  Restrictive level and one digit system; no non-ASCII name whose confusable skeleton is
  ASCII; and a chip or model name whose skeleton (``skeleton``), or the skeleton of its
  letters without their marks (``unmarked``: NFKC composes ``M`` + U+0323 into ``Ṃ``, which
  leaves no mark over), is a known chip's or model's must be that one
  (``lookalike_problem``, ASCII names included). Refusing beats
  folding here: a sender whose name carries an invisible or foreign letter learns it, and
  the stored envelope never disagrees with what the board shows.
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
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import icu  # PyICU: ICU's UTS #39 SpoofChecker and Unicode property sets

# Unicode general categories refused in any name.
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
# Characters a note (the one free-text field that is prose, not a name) may hold beyond
# printable ones.
NOTE_ALLOWED = frozenset("\n\t")
# Names repeat across submissions (a few chips and models among thousands of them), and
# the functions below that build stored spellings are pure: each process remembers the
# latest results. Bounded, so a sender of ever new names costs what it cost without the
# cache, plus the bookkeeping (bench/names_check.py).
NAME_CACHE_SIZE = 4096
# Scripts on whose letters a leftover combining mark is a lookalike trick, not spelling
# (``Apple M2`` + U+0307): NFKC composes every real accented Latin, Greek or Cyrillic
# letter, so a mark still apart after it sits on a letter it does not belong to.
_MARKED_SCRIPTS = frozenset({"Latn", "Zyyy", "Grek", "Cyrl"})


@cache
def _invisible() -> Any:
    """Unicode's Default_Ignorable_Code_Point set (ICU): invisible letters and marks too
    (Hangul fillers, the combining grapheme joiner, variation selectors)."""
    found = icu.UnicodeSet("[:Default_Ignorable_Code_Point:]")
    found.freeze()  # read-only: safe to share between threads
    return found


@cache
def _allowed() -> Any:
    """UTS #39's recommended identifier characters, plus the Common and Inherited scripts'
    punctuation, symbols, digits and spaces that names use (``Intel(R) Core(TM) i7 @ 2.3
    GHz``, ``®``). Limited-use scripts (Cherokee, Lisu, ...), Braille (U+2800 renders
    blank) and unassigned code points are outside it."""
    found = icu.UnicodeSet()  # not a copy: ICU's recommended set is frozen, and so its copy
    found.addAll(icu.SpoofChecker().getRecommendedUnicodeSet())
    found.addAll(icu.UnicodeSet("[[[:scx=Zyyy:][:scx=Zinh:]] - [:Cn:]]"))
    found.freeze()
    return found


@cache
def _spoof_checker() -> Any:
    """UTS #39 mixed-script detection: the Highly Restrictive level (one script, or Latin
    with Han and Japanese kana, Han and Hangul, or Han and Bopomofo) and one digit
    system; skeletons for the lookalike tests."""
    checker = icu.SpoofChecker()
    checker.setRestrictionLevel(icu.URestrictionLevel.HIGHLY_RESTRICTIVE)
    checker.setChecks(icu.USpoofChecks.RESTRICTION_LEVEL | icu.USpoofChecks.MIXED_NUMBERS)
    return checker


def skeleton(value: str) -> str:
    """The UTS #39 confusable skeleton, in any case: the skeleton, case-folded, and its
    skeleton again (a lower-case ``m`` is ``rn`` there, an upper-case ``M`` is not). Two
    names with one such skeleton render alike in some case (``AppIe M2``, ``ᎪᏢᏢᏞᎬ Ꮇ2``,
    ``apple m2`` and ``Apple M2`` share one)."""
    checker = _spoof_checker()
    return str(checker.getSkeleton(0, str(checker.getSkeleton(0, value)).casefold()))


def unmarked(value: str) -> str:
    """``value`` without its combining marks (NFD, then every Mn and Me dropped), composed
    again (NFC): the letters under the accents. ``Apple M`` + U+0323 + ``2`` composes (NFKC)
    to ``Apple Ṃ2``, a real letter, so no mark is left over and its skeleton is not Apple
    M2's (UTS #39 keeps marks in skeletons); unmarked, it is ``Apple M2``."""
    decomposed = unicodedata.normalize("NFD", value)
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Me"))
    return unicodedata.normalize("NFC", kept)


def skeletons(value: str) -> tuple[str, ...]:
    """The skeletons a name is compared by: its own (``skeleton``) and, when it carries
    marks, its unmarked form's (``unmarked``)."""
    own = skeleton(value)
    if value.isascii():  # nearly every name: no marks
        return (own,)
    bare = unmarked(value)
    return (own,) if bare == value else (own, skeleton(bare))


def _char_label(char: str, index: int) -> str:
    label = unicodedata.name(char, f"category {unicodedata.category(char)}")
    return f"U+{ord(char):04X} ({label}) at position {index}"


def name_problem(value: str, *, note: bool = False, chip: bool = False,
                 model: bool = False) -> str | None:
    """Why ``value`` cannot be a name (a one-line message), or None when it can.

    ``note``: the submission's note (prose: line feeds and tabs allowed, scripts may mix).
    ``chip`` / ``model``: a hardware / model name, also compared with the known chips' /
    models' skeletons (``lookalike_problem``, which also runs on ASCII names)."""
    if value.isascii() and value.isprintable():
        return lookalike_problem(value, chip=chip, model=model)
    invisible = _invisible()
    for index, char in enumerate(value):
        if note and char in NOTE_ALLOWED:
            continue
        category = unicodedata.category(char)
        if category in REFUSED_CATEGORIES or invisible.contains(char):
            return (f"character {_char_label(char, index)} is a control, format or invisible "
                    "character")
    if note:
        return None
    folded = unicodedata.normalize("NFKC", value)
    allowed = _allowed()
    for index, char in enumerate(folded):
        if not allowed.contains(char):
            return (f"character {_char_label(char, index)} is outside Unicode's recommended "
                    "identifier characters (UTS #39)")
        if unicodedata.category(char) in ("Mn", "Me") and index > 0 and str(
                icu.Script.getScript(folded[index - 1]).getShortName()) in _MARKED_SCRIPTS:
            return (f"combining mark {_char_label(char, index)} does not form one letter "
                    "with the character before it")
    checks = _spoof_checker().check(folded)
    if checks & icu.USpoofChecks.RESTRICTION_LEVEL:
        return "name mixes scripts (UTS #39: more than the Highly Restrictive level allows)"
    if checks & icu.USpoofChecks.MIXED_NUMBERS:
        return "name mixes digits of different numbering systems"
    if not folded.isascii():
        shadow = str(_spoof_checker().getSkeleton(0, folded))
        if shadow.isascii():
            return f"name renders like the Latin {collapse(shadow)!r} (UTS #39 skeleton)"
    return lookalike_problem(folded, chip=chip, model=model)


def lookalike_problem(value: str, *, chip: bool = False, model: bool = False) -> str | None:
    """A chip or model name whose skeleton is a known chip's or model's must be that one
    (any case, an alias) or it is refused: ``AppIe M2`` is not a new chip. Skeletons are
    taken of the composed form (NFKC) and of its letters without their marks
    (``skeletons``): ``Apple Ṃ2`` and ``Applẹ M2``, decomposed or precomposed, are not new
    chips either."""
    if not (chip or model):
        return None
    name = collapse(unicodedata.normalize("NFKC", value))  # the composed form, as stored
    for shadow in skeletons(name):
        if chip:
            known = _known_chip_skeletons().get(shadow)
            if known is not None and _known_by_folded().get(name.casefold()) != known:
                return f"name is a lookalike of the known chip {known!r}"
        if model:
            known = _known_model_skeletons().get(shadow)
            if known is not None and canonical_model(name) != known:
                return f"name is a lookalike of the known model {known!r}"
    return None


def collapse(value: str) -> str:
    """Whitespace runs (any Unicode space) as one U+0020, ends stripped."""
    return " ".join(value.split())


@lru_cache(maxsize=NAME_CACHE_SIZE)
def canonical(value: str) -> str:
    """NFKC with whitespace collapsed: the stored spelling of a name."""
    if not value.isascii():
        value = unicodedata.normalize("NFKC", value)
    return collapse(value)


@lru_cache(maxsize=NAME_CACHE_SIZE)
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


@cache
def _known_chip_skeletons() -> dict[str, str]:
    """Skeleton of every known chip's name and alias -> the chip's name."""
    found: dict[str, str] = {}
    for entry in known_chips():
        for spelling in (entry["name"], *entry.get("aliases", ())):
            for shadow in skeletons(spelling):
                if found.setdefault(shadow, entry["name"]) != entry["name"]:
                    raise ValueError(f"known_chips.json: {spelling!r} looks like another chip")
    return found


@cache
def _known_model_skeletons() -> dict[str, str]:
    """Skeleton of every model name in known_models.json -> the name."""
    raw = resources.files("specserver").joinpath("known_models.json").read_text("utf-8")
    return {shadow: entry["name"] for entry in json.loads(raw)["models"]
            for shadow in skeletons(entry["name"])}


@lru_cache(maxsize=NAME_CACHE_SIZE)
def canonical_chip(value: str | None) -> str | None:
    """The chip's stored name: the known spelling when it is one, else its canonical form."""
    name = canonical_optional(value)
    if name is None:
        return None
    return _known_by_folded().get(name.casefold(), name)


def chip_is_known(value: str | None) -> bool:
    """True when the (stored) chip name is one of the table's names: else it shows as new."""
    return value is not None and _known_by_folded().get(value.casefold()) == value
