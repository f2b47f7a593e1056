"""Kinds of work as data (pure): the one table of the domains a protocol's prompts are
labelled with.

Acceptance depends on the kind of work more than on anything else: an n-gram drafter wins
where the answer repeats the input (editing code, summarising with quotes), a small draft
model where the text is predictable, and little anywhere on free prose. A protocol with a
prompt set (``Protocol.prompts``) labels each prompt with one of these; results are given
per domain and over all of them. Every surface (the CLI's tables, ``protocols --json``, the
docs) reads the words here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DOMAINS", "Domain", "domain_label"]


@dataclass(frozen=True)
class Domain:
    name: str  # the protocol files' and the wire's word
    label: str  # how a person reads it
    about: str  # one phrase: what kind of answer it asks for


DOMAINS: Mapping[str, Domain] = {d.name: d for d in (
    Domain("code", "code", "new code written from a description"),
    Domain("code_edit", "code edit", "a given function rewritten: the answer repeats much of "
           "the input"),
    Domain("chat", "chat", "free prose in answer to a question"),
    Domain("summary", "summary", "a given passage summarised"),
    Domain("math", "maths", "a worked calculation, step by step"),
    Domain("translation", "translation", "a given passage translated"),
)}


def domain_label(name: str) -> str:
    found = DOMAINS.get(name)
    return found.label if found is not None else name
