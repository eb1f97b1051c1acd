"""The upstream slots and their queue (``forward._Slots``, docs/architecture.md §10 rule 4): at
and past the queue's bound, a wait ended by its deadline, a slot handed over in turn."""

from __future__ import annotations

import asyncio

import pytest

from podcache.serve.crisock.forward import _QueueFullError, _Slots


async def _taken(slots: _Slots, count: int) -> None:
    for _ in range(count):
        await slots.acquire(0.0)


def test_the_queue_holds_exactly_its_bound_and_refuses_past_it() -> None:
    async def scenario() -> None:
        slots = _Slots(2, 3)
        await _taken(slots, 2)
        waiters = [asyncio.create_task(slots.acquire(60.0)) for _ in range(3)]
        await asyncio.sleep(0)  # each is queued
        assert slots.waiting == 3
        with pytest.raises(_QueueFullError):
            await slots.acquire(60.0)  # the fourth: past the bound, at once
        for _ in range(3):
            slots.release()
        await asyncio.gather(*waiters)  # each got the slot handed over, in turn
        assert slots.waiting == 0

    asyncio.run(scenario())


def test_a_wait_ends_at_its_deadline_and_leaves_the_queue() -> None:
    async def scenario() -> None:
        slots = _Slots(1, 4)
        await _taken(slots, 1)
        with pytest.raises(TimeoutError):
            await slots.acquire(0.01)
        assert slots.waiting == 0
        slots.release()
        await slots.acquire(0.0)  # the slot is free again: nobody kept it

    asyncio.run(scenario())


def test_a_caller_that_leaves_while_waiting_takes_no_slot() -> None:
    async def scenario() -> None:
        slots = _Slots(1, 4)
        await _taken(slots, 1)
        leaver = asyncio.create_task(slots.acquire(60.0))
        await asyncio.sleep(0)
        leaver.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaver
        assert slots.waiting == 0
        slots.release()
        await slots.acquire(0.0)  # released to nobody: free

    asyncio.run(scenario())
