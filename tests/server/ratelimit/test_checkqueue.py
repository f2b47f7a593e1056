"""The check queue: checks served per address in turn, by the check CPU each took.

Deterministic: the schedule is driven by hand (arrive, admit, done) and the event loop's
order by events, never by sleeping or timing.
"""

from __future__ import annotations

import asyncio

import pytest

from specserver.http.submissions import in_turn
from specserver.ratelimit import CheckQueue, Schedule
from specserver.ratelimit.checkqueue import FIRST_COST_S, Ticket

FLOOD_COST_S = 0.060  # the dearest kind before its bootstrap got cheaper (check_cost.py)
HONEST_COST_S = 0.001


def serve_one(schedule: Schedule, running: list[Ticket], cost_s: float) -> Ticket:
    """The oldest running check finishes having taken ``cost_s``; the queue moves on."""
    ticket = running.pop(0)
    ticket.cost_s = cost_s
    schedule.done(ticket)
    running.extend(schedule.admit())
    return ticket


def test_a_new_address_is_served_before_a_flooding_addresss_backlog() -> None:
    schedule = Schedule(slots=1, depth_s=0.0)
    flood = [schedule.arrive("198.51.100.7") for _ in range(30)]
    running = schedule.admit()
    assert running == [flood[0]]
    honest = schedule.arrive("203.0.113.5")
    assert schedule.admit() == []  # the one slot is taken
    serve_one(schedule, running, FLOOD_COST_S)
    assert running == [honest]  # before the flood's 2nd (and 30th) queued check
    assert not flood[1].admitted and not flood[29].admitted


class ClosedLoop:
    """Addresses that each keep ``per_address`` checks queued: a new POST as soon as one is
    answered, as check_flood.py's senders do."""

    def __init__(
        self, schedule: Schedule, addresses: list[str], per_address: int, cost_s: dict[str, float]
    ) -> None:
        self.schedule, self.cost_s = schedule, cost_s
        for _ in range(per_address):
            for address in addresses:
                schedule.arrive(address)
        self.running = schedule.admit()

    def serve(self, checks: int) -> list[str]:
        """The addresses of the next ``checks`` checks done, each sent again."""
        served = []
        for _ in range(checks):
            ticket = serve_one(self.schedule, self.running, self.cost_s[self.running[0].address])
            served.append(ticket.address)
            if ticket.address in self.cost_s:
                self.schedule.arrive(ticket.address)
                self.running.extend(self.schedule.admit())
        return served


def test_a_new_address_is_next_after_fifty_flooders_in_closed_loop() -> None:
    schedule = Schedule(slots=1, depth_s=0.0)
    flooders = [f"198.51.100.{i}" for i in range(1, 51)]
    loop = ClosedLoop(schedule, flooders, 1, dict.fromkeys(flooders, FLOOD_COST_S))
    # The first round is tagged with the cost expected of addresses not seen (every one
    # alike, served in arrival order); from then on each flooder's checks are known dear.
    for warm in (50, 25, 333):  # wherever the flooders' round is when it comes
        loop.serve(warm)
        honest = schedule.arrive("203.0.113.5")
        assert not honest.admitted  # the one slot is taken
        loop.serve(1)  # the running check ends
        assert loop.running == [honest]  # next, not after the other 49 flooders' checks
        serve_one(schedule, loop.running, HONEST_COST_S)
        loop.running.extend(schedule.admit())


def test_dear_checks_get_fewer_turns_than_cheap_ones() -> None:
    """Both addresses always have work queued: turns follow the CPU their checks take."""
    loop = ClosedLoop(
        Schedule(slots=1, depth_s=0.0),
        ["dear", "cheap"],
        2,
        {"dear": FLOOD_COST_S, "cheap": HONEST_COST_S},
    )
    later = loop.serve(400)[100:]  # after the first measured checks
    assert later.count("dear") <= 6
    assert later.count("cheap") >= 294


def test_cheap_checks_reach_the_workers_many_at_once_dear_ones_one_per_slot() -> None:
    # powers of two, so that the sums are exact: ~1 ms checks, ~20 ms a slot
    cheap = Schedule(slots=2, depth_s=20 / 1024, first_cost_s=1 / 1024)
    for _ in range(100):
        cheap.arrive("127.0.0.1")
    assert len(cheap.admit()) == 40

    dear = Schedule(slots=2, depth_s=0.02, first_cost_s=FLOOD_COST_S)
    for i in range(10):
        dear.arrive(f"198.51.100.{i}")
    assert len(dear.admit()) == 2  # one per slot


def test_the_measured_cost_is_what_the_next_check_expects() -> None:
    schedule = Schedule(slots=1)
    first = schedule.arrive("a")
    assert first.expected_s == FIRST_COST_S
    running = schedule.admit()
    second = schedule.arrive("a")  # queued while the first runs
    serve_one(schedule, running, FLOOD_COST_S)
    third = schedule.arrive("a")
    assert third.expected_s == FLOOD_COST_S
    # the address's finish was corrected by what the first took: the third ends after the
    # first's real cost, the second's expected one and its own
    assert third.finish == pytest.approx(FLOOD_COST_S + second.expected_s + FLOOD_COST_S)


def test_a_withdrawn_check_is_never_run_and_its_address_is_forgotten() -> None:
    schedule = Schedule(slots=1, depth_s=0.0)
    running = schedule.admit() + [schedule.arrive("a")]
    schedule.admit()
    gone = schedule.arrive("b")
    schedule.withdraw(gone)
    assert schedule.waiting() == 0
    serve_one(schedule, running, HONEST_COST_S)
    assert running == [] and not gone.admitted
    assert schedule.addresses() == 0  # both idle and behind the clock: forgotten


def test_idle_addresses_are_forgotten_so_memory_stays_bounded() -> None:
    schedule = Schedule(slots=1, depth_s=1.0, max_addresses=100)
    for i in range(1000):  # one check each from ever new addresses (IPv6 is cheap)
        ticket = schedule.arrive(f"2001:db8::{i:x}")
        assert schedule.admit() == [ticket]
        ticket.cost_s = HONEST_COST_S
        schedule.done(ticket)
        assert schedule.addresses() <= 100


def test_the_queue_on_the_event_loop_serves_in_turn() -> None:
    async def scenario() -> list[str]:
        queue = CheckQueue(Schedule(slots=1, depth_s=0.0))
        release = asyncio.Event()
        order: list[str] = []

        async def check(address: str, hold: bool) -> None:
            async with queue.turn(address) as ticket:
                order.append(address)
                if hold:
                    await release.wait()
                ticket.cost_s = FLOOD_COST_S

        first = asyncio.create_task(check("flood", True))
        await asyncio.sleep(0)  # the first check holds the one slot
        backlog = [asyncio.create_task(check("flood", False)) for _ in range(29)]
        await asyncio.sleep(0)
        honest = asyncio.create_task(check("honest", False))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, honest, *backlog)
        return order

    order = asyncio.run(scenario())
    assert order[:2] == ["flood", "honest"]
    assert order.count("flood") == 30


def test_a_cancelled_wait_gives_its_turn_away() -> None:
    async def scenario() -> tuple[list[str], int]:
        schedule = Schedule(slots=1, depth_s=0.0)
        queue = CheckQueue(schedule)
        release = asyncio.Event()
        order: list[str] = []

        async def check(address: str, hold: bool) -> None:
            async with queue.turn(address):
                order.append(address)
                if hold:
                    await release.wait()

        first = asyncio.create_task(check("a", True))
        await asyncio.sleep(0)
        gone = asyncio.create_task(check("b", False))
        later = asyncio.create_task(check("c", False))
        await asyncio.sleep(0)
        gone.cancel()  # its client went away while it waited
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, later)
        return order, schedule.running

    order, running = asyncio.run(scenario())
    assert order == ["a", "c"]
    assert running == 0


def test_the_gate_charges_the_queue_what_the_check_took() -> None:
    """``in_turn`` (the gate of submissions and probes) tells the queue each check's CPU."""

    async def scenario() -> Ticket:
        schedule = Schedule(slots=2)
        queue = CheckQueue(schedule)
        schedule.arrive("b")  # another address's check runs: "a" gets half the clock's pace
        schedule.admit()

        async def check(body: bytes) -> tuple[bytes, float]:
            return body, FLOOD_COST_S

        assert await in_turn(queue, "a", check, b"body") == (b"body", FLOOD_COST_S)
        return schedule.arrive("a")

    assert asyncio.run(scenario()).expected_s == FLOOD_COST_S
