"""The check queue: signed POSTs' checks served per address in turn, by the CPU they took.

Why: the rate buckets bound what an address may spend on checks over a minute, not when.
Fifty addresses that spend their buckets together queue seconds of checks, and a FIFO makes
an honest POST that arrives then wait behind all of them (BENCHMARKS.md, "Check CPU charged
to the sender"). Here checks are served by weighted fair queuing (Demers, Keshav and Shenker,
SIGCOMM 1989) over check CPU seconds, each address one flow, the work measured after each
check:

- A virtual clock (``clock``) follows an even share of the check CPU: each check done moves
  it on by the CPU the check took divided by the addresses with checks waiting or running.
- A check is tagged to finish at ``max(clock, finish[address]) + expected``, its expected
  cost being its address's last measured check (``first_cost_s`` for an address not seen
  lately); when the check is done its address's finish is corrected by what it really took,
  so an address whose checks are dear waits longer for its next turn.
- Checks are admitted in finish-tag order (arrival order among equal tags) while fewer than
  ``slots`` run (one per check worker) or the running checks' expected cost stays within
  ``depth_s`` a slot: cheap checks still reach the workers many at a time (their frames
  batched), dear ones one per worker.

So a check from an address with nothing queued finishes, in virtual time, one expected check
after the clock: it goes before every queued check tagged later, which is all of a flooding
address's queued checks but (at most) its first, once its checks cost more than this one.

``Schedule`` is the pure bookkeeping; ``CheckQueue`` awaits a turn on the event loop. An
address's entry is dropped once nothing of it waits or runs and its finish is behind the
clock, and all idle entries go when there are more than ``max_addresses``: forgetting an
idle address only forgives its recent use, so memory stays bounded by the addresses with
checks in the queue.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

# Expected CPU of a check from an address with no measured check: an honest result's (the
# hardnumbers and llama-server kinds take 1-3 ms, bench/check_cost.py).
FIRST_COST_S = 0.002
# Expected check CPU let through to each check worker at once, beyond its first check: a
# waiting check is about this much work from its turn. 20 ms (~40 honest checks) cost the
# stored honest path 0.08 ms of CPU a submission at 192 connections (smaller batches of
# frames after each commit's burst of answers); 100 ms cost nothing measurable
# (BENCHMARKS.md, "The check queue and the bootstrap without drawing").
DEPTH_PER_SLOT_S = 0.1
MAX_ADDRESSES = 65_536
SWEEP_EVERY = 1024  # checks done between sweeps of the addresses left behind the clock


@dataclass(eq=False)
class Ticket:
    """One check's place: ``cost_s`` is what the check took, set by its caller (left None
    when the check failed without a measure: the expected cost stands)."""

    address: str
    finish: float  # virtual time
    expected_s: float
    seq: int
    cost_s: float | None = None
    admitted: bool = False
    withdrawn: bool = False


@dataclass
class _Address:
    finish: float
    last_cost_s: float
    present: int = 0  # tickets waiting or running


@dataclass
class Schedule:
    """Weighted fair queuing of checks by address (see the module docstring)."""

    slots: int = 1
    depth_s: float = DEPTH_PER_SLOT_S
    first_cost_s: float = FIRST_COST_S
    max_addresses: int = MAX_ADDRESSES
    clock: float = 0.0
    running: int = 0
    running_s: float = 0.0
    _addresses: dict[str, _Address] = field(default_factory=dict)
    _heap: list[tuple[float, int, Ticket]] = field(default_factory=list)
    _seq: int = 0
    _left: int = 0
    _active: int = 0  # addresses with checks waiting or running

    def arrive(self, address: str) -> Ticket:
        """A check from ``address`` joins the queue (``admit`` says when it may run)."""
        entry = self._addresses.get(address)
        if entry is None:
            if len(self._addresses) >= self.max_addresses:
                self._forget_idle(all_of_them=True)
            entry = self._addresses[address] = _Address(self.clock, self.first_cost_s)
        if entry.present == 0:
            self._active += 1
        expected = entry.last_cost_s
        entry.finish = max(self.clock, entry.finish) + expected
        entry.present += 1
        self._seq += 1
        ticket = Ticket(address, entry.finish, expected, self._seq)
        heapq.heappush(self._heap, (ticket.finish, self._seq, ticket))
        return ticket

    def admit(self) -> list[Ticket]:
        """The waiting tickets that may run now, in turn; each is marked admitted."""
        admitted: list[Ticket] = []
        while self._heap:
            ticket = self._heap[0][2]
            if ticket.withdrawn:
                heapq.heappop(self._heap)
                continue
            if (
                self.running >= self.slots
                and self.running_s + ticket.expected_s > self.depth_s * self.slots
            ):
                break
            heapq.heappop(self._heap)
            ticket.admitted = True
            self.running += 1
            self.running_s += ticket.expected_s
            admitted.append(ticket)
        return admitted

    def done(self, ticket: Ticket) -> None:
        """An admitted ticket's check is over: the clock moves on by its share, and its
        address's finish is corrected by what the check took (``ticket.cost_s``), which its
        next check expects."""
        self.running -= 1
        self.running_s = max(0.0, self.running_s - ticket.expected_s)
        entry = self._addresses[ticket.address]
        if ticket.cost_s is not None:
            entry.finish += ticket.cost_s - ticket.expected_s
            entry.last_cost_s = ticket.cost_s
        took = ticket.expected_s if ticket.cost_s is None else ticket.cost_s
        self.clock += took / max(1, self._active)
        self._leave(ticket.address, entry)

    def withdraw(self, ticket: Ticket) -> None:
        """A waiting ticket leaves unserved (its client went away): it costs nothing."""
        ticket.withdrawn = True
        entry = self._addresses[ticket.address]
        entry.finish -= ticket.expected_s
        self._leave(ticket.address, entry)

    def waiting(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.withdrawn)

    def addresses(self) -> int:
        return len(self._addresses)

    def _leave(self, address: str, entry: _Address) -> None:
        entry.present -= 1
        if entry.present == 0:
            self._active -= 1
        if entry.present == 0 and entry.finish <= self.clock:
            del self._addresses[address]
        self._left += 1
        if self._left % SWEEP_EVERY == 0:  # those still ahead of the clock when they left
            self._forget_idle(all_of_them=False)

    def _forget_idle(self, *, all_of_them: bool) -> None:
        """Drop idle addresses: those behind the clock, or (when full) every idle one."""
        for address, entry in list(self._addresses.items()):
            if entry.present == 0 and (all_of_them or entry.finish <= self.clock):
                del self._addresses[address]


class CheckQueue:
    """``async with queue.turn(address) as ticket``: the body of the block runs in the
    address's turn; set ``ticket.cost_s`` to the CPU seconds the check took."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._waiters: dict[Ticket, asyncio.Future[None]] = {}

    @asynccontextmanager
    async def turn(self, address: str) -> AsyncIterator[Ticket]:
        ticket = self.schedule.arrive(address)
        self._wake()
        if not ticket.admitted:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters[ticket] = future
            try:
                await future
            except asyncio.CancelledError:
                self._waiters.pop(ticket, None)
                if ticket.admitted:  # its turn came as it was cancelled: give it back
                    self.schedule.done(ticket)
                    self._wake()
                else:
                    self.schedule.withdraw(ticket)
                raise
        try:
            yield ticket
        finally:
            self.schedule.done(ticket)
            self._wake()

    def _wake(self) -> None:
        for ticket in self.schedule.admit():
            future = self._waiters.pop(ticket, None)
            if future is not None and not future.done():
                future.set_result(None)
