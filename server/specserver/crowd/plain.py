"""The steps that drafted nothing, per result and kind of work, from the stored trials.

A prediction needs, beside a candidate's acceptance per position, the share of the decoded
tokens that came from plain steps (``specschema.predict``: a lookup that found no match
drafts nothing, and the engine steps once). Per trial that recorded draft rounds,
``eval_count - 1 - accepted - rounds`` (llama-server counts the prefill's token in
``eval_count``); summed per (submission, config) and per domain of the protocol's prompt
set, the trial's domain being its prompt's (``specschema.summary.by_domain``: trial index
modulo the prompt set's size). The sums are made by the store, grouped by that index
modulo every prompt set's size at once, so a read returns a few rows per result however
many trials it ran.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection

from sqlalchemy import Connection, case, func, select

from specschema.crowd import ALL_DOMAINS
from specschema.protocol_files import all_protocols, find_protocol
from specserver.store import tables

__all__ = ["PlainCounts", "plain_counts", "prompt_slots", "shares"]

# Per (submission, config), per domain (ALL_DOMAINS: every trial): (plain steps, decoded
# tokens).
PlainCounts = dict[tuple[str, str], dict[str, tuple[int, int]]]


def prompt_slots() -> int:
    """A multiple of every shipped prompt set's size: trial index modulo it still tells
    each trial's prompt."""
    return math.lcm(*(len(p.prompts) for p in all_protocols() if p.prompts)) or 1


def plain_counts(conn: Connection, digest: str, wanted: Collection[tuple[str, str]]
                 ) -> PlainCounts:
    """The plain steps and decoded tokens of the ``wanted`` (submission, config) pairs of
    results of the target ``digest``, over every trial and per domain."""
    if not wanted:
        return {}
    t, sub = tables.trials, tables.submissions
    slots = prompt_slots()
    steps = t.c.eval_count - 1 - t.c.accepted - t.c.rounds
    slot = (t.c.trial_index % slots).label("slot")
    found = conn.execute(
        select(t.c.submission_id, t.c.config_name, sub.c.protocol_id, sub.c.protocol_version,
               sub.c.protocol_sha256, slot,
               func.sum(case((steps > 0, steps), else_=0)).label("plain"),
               func.sum(case((t.c.eval_count > 1, t.c.eval_count - 1), else_=0))
               .label("decoded"))
        .join(sub, sub.c.submission_id == t.c.submission_id)
        .where(sub.c.target_digest == digest, t.c.rounds.is_not(None),
               t.c.accepted.is_not(None))
        .group_by(t.c.submission_id, t.c.config_name, sub.c.protocol_id,
                  sub.c.protocol_version, sub.c.protocol_sha256, slot)).all()
    out: PlainCounts = defaultdict(dict)
    for r in found:
        key = (str(r.submission_id), str(r.config_name))
        if key not in wanted:
            continue
        protocol = find_protocol(r.protocol_id, r.protocol_version, r.protocol_sha256)
        domains = [p.domain for p in (protocol.prompts or [])] if protocol is not None else []
        names = [ALL_DOMAINS] + ([domains[int(r.slot) % len(domains)]] if domains else [])
        for name in names:
            plain, decoded = out[key].get(name, (0, 0))
            out[key][name] = (plain + int(r.plain or 0), decoded + int(r.decoded or 0))
    return dict(out)


def shares(counts: dict[str, list[tuple[int, int]]]) -> dict[str, tuple[float]]:
    """Per key, its rows' plain steps over their decoded tokens (keys with none decoded
    left out)."""
    out: dict[str, tuple[float]] = {}
    for key, rows in counts.items():
        plain, decoded = (sum(column) for column in zip(*rows, strict=True))
        if decoded > 0:
            out[key] = (plain / decoded,)
    return out
