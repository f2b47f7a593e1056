"""The keys' standing as ``incremental.Maintainer`` keeps it: each key's arrival, its
address range's cohort, whether it is new (on probation) or recent (graduated inside the
settle time), brought up to date from the keys a refresh names (``newkeys`` forms the
cohorts; ``columns.Standing`` is what the rules read), and who speaks for each key
(``Voices``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import Connection

from specserver.board import newkeys
from specserver.board.columns import NAT, Bools, Codes, Ints, Standing, micros

# The voice of every key still new (``newkeys``: one block). No contributor is named so:
# a key's name is its hex id, an imported result's starts with ``changes.IMPORTED``.
NEW_KEYS_VOICE = "new keys"


@dataclass(frozen=True)
class Voices:
    """The contributors that do not speak alone on the boards (``newkeys``' fold: a
    cohort's keys as its first key, every new key in one block, ``NEW_KEYS_VOICE``) or
    whose cohort is a recent graduate (``aggregate`` rule 8: a disputed group's other
    side), each with its voice and whether that voice is recent; every other contributor
    is its own voice, established. Listed, not a function: a query takes them as arrays."""

    names: list[str]
    voices: list[str]
    recent: list[bool]


class KeyStanding:
    """``newkeys``' rules 1-4 over every key, kept as arrays by contributor code and formed
    again per address range (keys without one each alone) when keys' arrivals change."""

    def __init__(self, rules: newkeys.CohortRules, codes: Codes) -> None:
        self.rules = rules
        self.codes = codes
        self.arrays = Standing.empty()
        self.first_seen = np.zeros(0, np.int64)
        self.aged_from = np.zeros(0, np.int64)
        self.origin = np.zeros(0, np.int64)  # a range's number; -1: none; -2: not a key
        self.graduation = np.zeros(0, np.int64)  # of the cohort a code names
        self.is_cohort = np.zeros(0, np.bool_)  # the code names a cohort (its first key)
        self.accepted = np.zeros(0, np.bool_)  # a maintainer accepted the cohort it names
        self.arrays.names = codes.names
        self.ranges = Codes()  # address ranges (origin hashes) by number
        self.newest = int(NAT)

    def fit(self, size: int) -> None:
        have = len(self.first_seen)
        self.arrays.fit(size)
        grow = len(self.arrays.cohort) - have
        if grow <= 0:
            return
        never = np.full(grow, NAT, np.int64)
        self.first_seen = np.concatenate([self.first_seen, never])
        self.aged_from = np.concatenate([self.aged_from, never])
        self.origin = np.concatenate([self.origin, np.full(grow, -2, np.int64)])
        self.graduation = np.concatenate([self.graduation, never])
        self.is_cohort = np.concatenate([self.is_cohort, np.zeros(grow, np.bool_)])
        self.accepted = np.concatenate([self.accepted, np.zeros(grow, np.bool_)])

    @staticmethod
    def fetch(conn: Connection) -> tuple[int, newkeys.ArrivalColumns, frozenset[str]]:
        """What ``build`` needs of the store: its clock, every key's arrival and the
        cohorts maintainers accepted."""
        return (micros(newkeys.newest_receipt(conn)), newkeys.arrival_columns(conn),
                newkeys.accepted_keys(conn))

    def accept(self, keys: frozenset[str]) -> None:
        """The cohorts (first keys) maintainers accepted: every one known so far."""
        index = self.codes.index
        self.accepted[:] = False
        self.accepted[[index[k] for k in keys if k in index]] = True

    def learn(self, found: newkeys.ArrivalColumns) -> Ints:
        """The keys' codes, their hashes learnt (``Codes.learn_hashes``)."""
        codes = self.codes.encode(found.key_ids, distinct=True)  # one arrival per key
        if found.key_hashes is not None:
            self.codes.learn_hashes(codes, found.key_hashes)
        return codes

    def build(self, newest: int, found: newkeys.ArrivalColumns, codes: Ints,
              accepted: frozenset[str]) -> None:
        """Every key's standing from every key's arrival (``codes``: ``learn``'s)."""
        self.newest = newest
        self.fit(len(self.codes))
        self._take(codes, found)
        # Ranges (and keys without one) are independent: every one formed in one call is
        # what forming each alone gives.
        self._form(codes, found)
        self.accept(accepted)
        self.arrays.new, self.arrays.recent = self._new_now(), self._recent_now()

    def _take(self, codes: Ints, found: newkeys.ArrivalColumns) -> Ints:
        ranged = [o is not None for o in found.origin]
        origins = np.full(len(found), -1, np.int64)
        origins[np.fromiter(ranged, dtype=np.bool_, count=len(found))] = self.ranges.encode(
            [o for o in found.origin if o is not None])
        self.first_seen[codes] = found.first_seen
        self.aged_from[codes] = found.aged_from
        self.origin[codes] = origins
        return origins

    def _form(self, codes: Ints, found: newkeys.ArrivalColumns) -> None:
        formed = newkeys.form_cohorts(found, self.rules, self.origin[codes])
        heads = codes[formed.first]
        self.arrays.cohort[codes] = heads
        self.is_cohort[codes] = False
        self.is_cohort[heads] = True
        self.arrays.arrived[heads] = found.first_seen[formed.first]
        self.graduation[heads] = formed.graduation

    def _new_now(self) -> Bools:
        if self.rules.probation.total_seconds() <= 0 or self.newest == NAT:
            return np.zeros(len(self.is_cohort), np.bool_)
        ageing = self.graduation
        new: Bools = (self.is_cohort & ~self.accepted
                      & ((ageing == NAT) | (ageing > self.newest)))
        return new

    def _recent_now(self) -> Bools:
        """Rule 6: cohorts that graduated within the settle time, unless accepted."""
        settle = micros(self.rules.settle)
        if settle <= 0 or self.newest == NAT:
            return np.zeros(len(self.is_cohort), np.bool_)
        ageing = self.graduation
        recent: Bools = (self.is_cohort & ~self.accepted & (ageing != NAT)
                         & (ageing <= self.newest) & (ageing > self.newest - settle))
        return recent

    def voices(self) -> Voices:
        """Who speaks for each contributor coded so far (``Voices``)."""
        standing = self.arrays
        size = min(len(self.codes), len(standing.cohort))
        cohort = standing.cohort[:size]
        new, recent = standing.new[cohort], standing.recent[cohort]
        moved = np.flatnonzero((cohort != np.arange(size)) | new | recent).tolist()
        names = self.codes.names
        return Voices([names[c] for c in moved],
                      [NEW_KEYS_VOICE if new[c] else names[cohort[c]] for c in moved],
                      recent[moved].tolist())

    def _keys_of(self, codes: Ints) -> newkeys.ArrivalColumns:
        return newkeys.ArrivalColumns(
            [self.codes.names[c] for c in codes.tolist()], self.first_seen[codes],
            [None if o < 0 else self.ranges.names[o] for o in self.origin[codes].tolist()],
            self.aged_from[codes])

    def update(self, conn: Connection, newest: int, audited: bool) -> Ints:
        """After writes touching the keys ``conn`` is restricted to (``sql.restricted_to``;
        ``audited``: audit rows among them, which may accept a cohort): the codes of the
        contributors whose cohort, probation, recency or cohort arrival changed."""
        found = newkeys.arrival_columns(conn)
        codes = self.learn(found)
        self.fit(len(self.codes))
        before_origin = self.origin[codes]
        changed = ((self.first_seen[codes] != found.first_seen)
                   | (self.aged_from[codes] != found.aged_from))
        after_origin = self._take(codes, found)
        changed |= before_origin != after_origin
        moved = codes[changed]
        ranges = {int(o) for o in (*before_origin[changed].tolist(),
                                   *after_origin[changed].tolist()) if o >= 0}
        alone = moved[self.origin[moved] < 0]
        slots = [np.flatnonzero(self.origin == r) for r in sorted(ranges)]
        slots += [alone[i:i + 1] for i in range(len(alone))]
        affected = np.concatenate([moved, *slots]) if slots else moved
        cohorts = self.arrays.cohort
        before = (cohorts[affected].copy(), self.arrays.new[cohorts[affected]].copy(),
                  self.arrays.arrived[cohorts[affected]].copy())
        for slot in slots:
            self._form(slot, self._keys_of(slot))
        self.newest = newest
        if audited:
            self.accept(newkeys.accepted_keys(conn))
        was_new, now_new = self.arrays.new, self._new_now()
        was_recent, now_recent = self.arrays.recent, self._recent_now()
        self.arrays.new, self.arrays.recent = now_new, now_recent
        flipped = (was_new != now_new) | (was_recent != now_recent)
        restanded = [np.flatnonzero(flipped[cohorts])] if flipped.any() else []
        status_changed = ((cohorts[affected] != before[0])
                          | (now_new[cohorts[affected]] != before[1])
                          | (self.arrays.arrived[cohorts[affected]] != before[2]))
        restanded.append(affected[status_changed])
        return np.unique(np.concatenate(restanded))


# --- one maintained board --------------------------------------------------------------------
