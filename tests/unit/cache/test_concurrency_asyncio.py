"""docs/architecture.md §3 rules 5 and 8 with real asyncio tasks.

Sharing, joining, timeouts, cancellation; every test twice, polling and with ``events=True``
(subscribed before the test goes on), as the threads' twin does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from podcache import AsyncFakeRuntime, AsyncRuntimeCache, FakeRuntime, PodList
from tests.unit.cache.drivers import FakeClock, make_pod

Make = Callable[..., Awaitable[AsyncRuntimeCache]]


@pytest.fixture(params=[False, True], ids=["polling", "events"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[Make]:
    """``AsyncRuntimeCache(getter, ...)``, with ``events=True`` in the second run, returned
    once the cache has subscribed; every cache made is closed after the test."""
    made: list[AsyncRuntimeCache] = []

    async def factory(
        getter: AsyncFakeRuntime | FakeRuntime, *args: Any, **kw: Any
    ) -> AsyncRuntimeCache:
        before = getter.subscriptions
        cache = AsyncRuntimeCache(getter, *args, events=request.param, **kw)
        made.append(cache)
        deadline = time.monotonic() + 5.0
        while request.param and getter.subscriptions <= before:
            assert time.monotonic() < deadline, "the cache did not subscribe"
            await asyncio.sleep(0.001)
        return cache

    yield factory
    for cache in made:
        await cache.aclose()


class Boom(Exception):
    """The runtime failed."""


async def test_1000_tasks_on_one_expiry_cause_one_call_and_share_one_object(make: Make) -> None:
    fake = AsyncFakeRuntime([make_pod(1)], latency=0.02)
    cache = await make(fake, 60.0)
    results = await asyncio.gather(*(cache.get_pods() for _ in range(1000)))
    assert fake.calls == 1
    assert all(r is results[0] for r in results)


async def test_forced_caller_after_inflight_start_gets_exactly_one_more_refresh(make: Make) -> None:
    clock = FakeClock()
    fake = AsyncFakeRuntime([make_pod(1)])
    cache = await make(fake, 60.0, clock=clock)
    fake.block()
    first = asyncio.create_task(cache.get_pods())
    assert await fake.wait_for_calls(1)
    clock.advance(1.0)
    forced = [asyncio.create_task(cache.force_update_if_older(clock.now)) for _ in range(8)]
    await asyncio.sleep(0.02)
    assert fake.calls == 1
    fake.set_pods([make_pod(2)])
    fake.release()
    await first
    await asyncio.gather(*forced)
    assert fake.calls == 2
    assert fake.max_in_flight == 1
    assert list(await cache.get_pods()) == [make_pod(2)]


async def test_joiners_of_a_failed_refresh_all_get_that_failure(make: Make) -> None:
    fake = AsyncFakeRuntime()
    cache = await make(fake, 60.0)
    error = Boom()
    fake.error = error
    results = await asyncio.gather(*(cache.get_pods() for _ in range(50)), return_exceptions=True)
    assert fake.calls == 1
    assert all(r is error for r in results)
    fake.error = None
    await cache.get_pods()
    assert fake.calls == 2


async def test_timeout_returns_promptly_and_refresh_still_fills_cache(make: Make) -> None:
    fake = AsyncFakeRuntime([make_pod(1)])
    cache = await make(fake, 60.0)
    fake.block()
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"0\.1 s"):
        await cache.get_pods(timeout=0.1)
    # It returned while the getter is still held (released below): the timeout, not the
    # getter, ended the wait; and not before the timeout.
    assert time.monotonic() - began >= 0.1
    assert cache.cache_time is None
    fake.release()
    await cache.aclose()
    assert cache.cache_time is not None
    assert fake.calls == 1


async def test_cancelling_the_caller_never_cancels_the_shared_refresh(make: Make) -> None:
    fake = AsyncFakeRuntime([make_pod(1)])
    cache = await make(fake, 60.0)
    fake.block()
    starter = asyncio.create_task(cache.get_pods())
    joiner = asyncio.create_task(cache.get_pods())
    assert await fake.wait_for_calls(1)
    starter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starter
    fake.release()
    pods = await joiner
    assert list(pods) == [make_pod(1)]
    assert fake.calls == 1
    assert cache.cache_time is not None


async def test_period_zero_task_takes_the_next_refresh(make: Make) -> None:
    clock = FakeClock()
    fake = AsyncFakeRuntime([make_pod(1)])
    cache = await make(fake, 0, clock=clock)
    fake.block()
    first = asyncio.create_task(cache.get_pods())
    assert await fake.wait_for_calls(1)
    late = asyncio.create_task(cache.get_pods())
    await asyncio.sleep(0.01)
    fake.set_pods([make_pod(2)])
    fake.release()
    await first
    assert list(await late) == [make_pod(2)]
    assert fake.calls == 2


async def test_sync_getter_runs_off_the_event_loop(make: Make) -> None:
    fake = FakeRuntime([make_pod(1)])
    fake.block()
    cache = await make(fake, 60.0)
    task = asyncio.create_task(cache.get_pods())
    ticks = 0
    while fake.calls == 0:
        await asyncio.sleep(0.001)
    for _ in range(5):  # the loop keeps running while the sync getter is held
        await asyncio.sleep(0.001)
        ticks += 1
    fake.release()
    pods: PodList = await task
    assert ticks == 5
    assert list(pods) == [make_pod(1)]


async def test_refresh_ahead_serves_now_and_refreshes_behind(make: Make) -> None:
    clock = FakeClock()
    fake = AsyncFakeRuntime([make_pod(1)])
    cache = await make(fake, 10.0, clock=clock, refresh_ahead=3.0)
    first = await cache.get_pods()
    clock.advance(7.5)
    fake.block()
    assert await cache.get_pods(timeout=0) is first
    assert await fake.wait_for_calls(2)
    fake.set_pods([make_pod(3)])
    fake.release()
    await cache.aclose()
    assert list(await cache.get_pods(timeout=0)) == [make_pod(3)]
    assert fake.calls == 2
