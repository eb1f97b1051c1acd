"""The cache's event subscription over the fake runtimes: refresh on events, coalescing,
resubscription, UNIMPLEMENTED, close; and the subscription's table and backoff on a fake clock.

The drivers run real threads and tasks here; time that matters (backoff, the healthy-stream
reset) is the cache's fake clock, checked on the I/O-free ``Subscription``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

import pytest

from podcache import (
    AsyncFakeRuntime,
    AsyncRuntimeCache,
    ContainerEvent,
    ContainerEventType,
    FakeRuntime,
    PodList,
    RuntimeCache,
)
from podcache.cache.core import FreshnessCore
from podcache.cache.events import (
    BACKOFF_CAP,
    BACKOFF_FIRST,
    TRANSITIONS,
    EventState,
    Signal,
    Step,
    Subscription,
    failure,
)
from podcache.errors import RuntimeUnavailableError
from tests.unit.cache.drivers import FakeClock, make_pod

EVENT = ContainerEvent(type=ContainerEventType.STARTED, container_id="c1", pod_sandbox_id="s1")
WAIT = 5.0


def eventually(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


async def eventually_async(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


def subscribed_cache(fake: FakeRuntime, period: float = 60.0, **kw: object) -> RuntimeCache:
    cache = RuntimeCache(fake, period, events=True, **kw)  # type: ignore[arg-type]
    assert fake.wait_for_subscriptions(1)
    eventually(lambda: cache.stats().events_state == "subscribed")
    return cache


# -- the table and the numbers (no I/O) --------------------------------------------------------
def test_table_covers_every_live_state_and_signal() -> None:
    live = [s for s in EventState if s is not EventState.OFF]
    signals = [s for s in Signal if s is not Signal.CLOSE]
    impossible = {  # events come only on an open stream; a stream opens only when none is;
        # an open stream had reached the runtime
        (EventState.SUBSCRIBING, Signal.EVENT),
        (EventState.RECONNECTING, Signal.EVENT),
        (EventState.UNSUPPORTED, Signal.EVENT),
        (EventState.SUBSCRIBED, Signal.OPENED),
        (EventState.SUBSCRIBED, Signal.UNREACHABLE),
    }
    every = {(state, signal) for state in live for signal in signals}
    assert set(TRANSITIONS) == every - impossible
    for (_, signal), (after, step) in TRANSITIONS.items():
        assert (step is Step.REFRESH) == (signal in (Signal.OPENED, Signal.EVENT))
        assert (after is EventState.SUBSCRIBED) == (signal in (Signal.OPENED, Signal.EVENT))


def test_close_stops_from_every_state_and_off_stays_off() -> None:
    for state in EventState:
        sub = Subscription("x", FakeClock())
        sub.state = state
        assert sub.on(Signal.CLOSE) is Step.STOP
        assert sub.state is EventState.OFF
        assert sub.on(Signal.OPENED) is Step.STOP


def test_backoff_doubles_from_50ms_to_2s_within_the_jitter_band() -> None:
    sub = Subscription("x", FakeClock(), rng=random.Random(1))
    sub.on(Signal.FAILED)
    ceilings = [min(BACKOFF_FIRST * 2**i, BACKOFF_CAP) for i in range(8)]
    assert ceilings[:3] == [0.05, 0.1, 0.2] and ceilings[-1] == BACKOFF_CAP
    for ceiling in ceilings:
        delay = sub.retry_delay()
        assert ceiling / 2 <= delay <= ceiling
    assert BACKOFF_CAP / 2 <= sub.retry_delay() <= BACKOFF_CAP  # capped for good


def test_backoff_starts_over_only_after_a_healthy_stream() -> None:
    clock = FakeClock()
    sub = Subscription("x", clock, rng=random.Random(2))
    for _ in range(6):
        sub.retry_delay()  # grown to the cap
    sub.on(Signal.OPENED)
    clock.advance(BACKOFF_CAP - 0.01)  # a stream that dies young keeps the backoff
    sub.on(Signal.FAILED)
    assert sub.retry_delay() >= BACKOFF_CAP / 2
    sub.on(Signal.OPENED)
    clock.advance(BACKOFF_CAP)
    sub.on(Signal.FAILED)
    assert sub.retry_delay() <= BACKOFF_FIRST


def test_an_unreachable_runtime_is_retried_with_the_growing_backoff() -> None:
    """Nothing listening is no cheaper than any failure: 50 ms doubling to 2 s
    (a fixed ~40 ms would make 262 attempts in 10 s)."""
    sub = Subscription("x", FakeClock(), rng=random.Random(3))
    waits = []
    for _ in range(12):  # a long outage: nothing listening
        step = sub.on(Signal.UNREACHABLE)
        assert step is Step.RETRY and sub.state is EventState.RECONNECTING
        waits.append(sub.delay(step))
    ceilings = [min(BACKOFF_FIRST * 2**i, BACKOFF_CAP) for i in range(12)]
    for wait, ceiling in zip(waits, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling
    assert sub.delay(Step.WAIT_SUPPORT) == 300.0


def test_attempts_against_a_missing_runtime_follow_the_backoff_on_the_clock() -> None:
    """Counted on a fake clock: 10 s of outage are at most 7 attempts in the first 2 s (50,
    100, ... ms) and then one per 1-2 s, not one per 40 ms."""
    clock = FakeClock()
    sub = Subscription("x", clock, rng=random.Random(4))
    attempts = 0
    start = clock()
    while clock() - start < 10.0:
        attempts += 1
        clock.advance(sub.delay(sub.on(Signal.UNREACHABLE)))
    assert sub.failures == attempts
    assert 8 <= attempts <= 6 + 10  # the doubling, then at most one per BACKOFF_CAP / 2


def test_the_state_reads_subscribing_until_the_first_attempt_ends() -> None:
    sub = Subscription("x", FakeClock())
    assert sub.counters().state is EventState.SUBSCRIBING
    sub.on(Signal.UNREACHABLE)
    assert sub.counters().state is EventState.RECONNECTING  # now it is: the first one failed
    first = Subscription("x", FakeClock())
    first.on(Signal.OPENED)
    assert first.state is EventState.SUBSCRIBED  # never "reconnecting" on the way


def test_failure_says_unreachable_only_for_a_stream_that_never_connected() -> None:
    class Stream:
        def __init__(self, connected: bool) -> None:
            self.connected = connected

    assert failure(Stream(False)) is Signal.UNREACHABLE
    assert failure(Stream(True)) is Signal.FAILED
    assert failure(object()) is Signal.FAILED  # streams that do not say
    assert failure(None) is Signal.FAILED


def test_resubscriptions_count_successes_after_the_first_not_attempts() -> None:
    sub = Subscription("x", FakeClock())
    assert sub.on(Signal.OPENED) is Step.REFRESH
    for _ in range(5):  # an outage of many failed attempts...
        assert sub.on(Signal.FAILED) is Step.RETRY
    assert sub.on(Signal.OPENED) is Step.REFRESH  # ...is one resubscription
    assert (sub.subscriptions, sub.resubscriptions) == (2, 1)


def test_a_young_resubscription_lost_again_is_the_same_outage() -> None:
    clock = FakeClock()
    sub = Subscription("x", clock)
    sub.on(Signal.OPENED)  # the first subscription
    sub.on(Signal.FAILED)  # lost young, the runtime still there: a stream dropped
    sub.on(Signal.OPENED)
    assert sub.resubscriptions >= 1
    sub.on(Signal.FAILED)  # lost young again: not part of a restart, counted again
    sub.on(Signal.OPENED)
    assert sub.resubscriptions == 2
    sub.on(Signal.FAILED)  # a restart: the stream fails, nothing listens for a while
    for _ in range(5):
        sub.on(Signal.UNREACHABLE)
    sub.on(Signal.OPENED)
    assert sub.resubscriptions == 3
    for _ in range(3):  # the runtime drops the streams it takes while still recovering
        clock.advance(0.5)
        sub.on(Signal.FAILED)
        sub.on(Signal.OPENED)
    assert sub.resubscriptions == 3  # one restart, counted once
    clock.advance(BACKOFF_CAP)
    sub.on(Signal.FAILED)  # a healthy stream lost: a new outage
    sub.on(Signal.OPENED)
    assert (sub.resubscriptions, sub.subscriptions) == (4, 8)


def test_unsupported_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    sub = Subscription("unix:///x.sock", FakeClock())
    with caplog.at_level(logging.INFO, "podcache.cache"):
        for _ in range(3):
            assert sub.on(Signal.UNSUPPORTED, "it is UNIMPLEMENTED") is Step.WAIT_SUPPORT
            sub.on(Signal.FAILED)
    unsupported = [r for r in caplog.records if "UNIMPLEMENTED" in r.getMessage()]
    assert len(unsupported) == 1
    assert "unix:///x.sock" in unsupported[0].getMessage()


def test_unsupported_wait_ends_when_a_refresh_succeeds_after_one_failed() -> None:
    sub = Subscription("x", FakeClock())
    sub.on(Signal.UNSUPPORTED)
    assert sub.refresh_done(True) is False  # nothing was down
    assert sub.refresh_done(False) is False
    assert sub.refresh_done(True) is True  # down, then back: a restart
    assert sub.refresh_done(True) is False


def test_hint_coalesces_to_one_in_flight_and_one_queued() -> None:
    core: FreshnessCore[object] = FreshnessCore(60.0, object)
    assert core.hint(1.0) == (None, False)  # empty cache: its first reader fetches
    _, first, start = core.plan(1.0)
    assert start and first is not None
    core.complete(first, make_pods(1), None, 1.0)  # took no time: no event budget to wait out
    refresh, scheduled = core.hint(3.0)
    assert refresh is not None and scheduled
    assert core.hint(4.0) == (None, True)  # queued behind it
    for t in (5.0, 6.0, 7.0):
        assert core.hint(t) == (None, False)  # the queued one covers these
    assert core.inflight is refresh and core.queued is not None
    assert core.misses == 1 and core.joins == 0  # readers' counters untouched


def make_pods(n: int) -> PodList:
    return PodList([make_pod(n)])


# -- the thread driver ---------------------------------------------------------------------------
def test_event_refreshes_in_background_without_waiting_for_the_period() -> None:
    fake = FakeRuntime([make_pod(1)])
    clock = FakeClock()
    with subscribed_cache(fake, clock=clock) as cache:
        assert list(cache.get_pods()) == [make_pod(1)]
        fake.set_pods([make_pod(2)])
        fake.emit(EVENT)
        eventually(lambda: list(cache.get_pods()) == [make_pod(2)])  # clock never moved
        stats = cache.stats()
        assert (stats.events_received, stats.event_refreshes, stats.refreshes) == (1, 1, 2)


def test_a_flood_of_events_costs_one_refresh_in_flight_and_one_queued() -> None:
    fake = FakeRuntime([make_pod(1)])
    with subscribed_cache(fake) as cache:
        cache.get_pods()
        fake.block()
        fake.emit(*[EVENT] * 200)
        eventually(lambda: cache.stats().events_received == 200)
        assert fake.wait_for_calls(2)  # the one in flight (its thread may still be starting)
        assert fake.calls == 2  # and one more queued behind it, held by the one in flight
        fake.release()
        eventually(lambda: fake.calls == 3 and not cache.stats().in_flight)
        assert fake.max_in_flight == 1
        assert cache.stats().event_refreshes == 2


def test_stream_failure_resubscribes_and_refreshes_once() -> None:
    fake = FakeRuntime([make_pod(1)])
    with subscribed_cache(fake) as cache:
        cache.get_pods()
        fake.set_pods([make_pod(2)])  # changed while the stream is down: no event for it
        fake.end_streams(RuntimeUnavailableError("fake://runtime", "restarted"))
        assert fake.wait_for_subscriptions(2)
        eventually(lambda: list(cache.get_pods()) == [make_pod(2)])
        stats = cache.stats()
        assert (stats.resubscriptions, stats.events_state) == (1, "subscribed")


def test_stream_that_ends_cleanly_is_reopened_too() -> None:
    fake = FakeRuntime([make_pod(1)])
    with subscribed_cache(fake) as cache:
        fake.end_streams()
        assert fake.wait_for_subscriptions(2)
        eventually(lambda: cache.stats().resubscriptions == 1)


def test_failing_opens_are_retried_forever_and_counted_once_when_back() -> None:
    fake = FakeRuntime([make_pod(1)])
    with subscribed_cache(fake) as cache:
        cache.get_pods()
        fake.events_error = RuntimeUnavailableError("fake://runtime", "down")
        fake.end_streams(RuntimeUnavailableError("fake://runtime", "down"))
        eventually(lambda: cache.stats().events_state == "reconnecting")
        time.sleep(0.3)  # several failed attempts (backoff 50, 100, 200 ms)
        fake.events_error = None
        assert fake.wait_for_subscriptions(2)
        eventually(lambda: cache.stats().events_state == "subscribed")
        assert cache.stats().resubscriptions == 1


def test_unsupported_runtime_polls_by_period_and_asks_again_after_a_restart() -> None:
    fake = FakeRuntime([make_pod(1)])
    fake.events_unsupported = True
    clock = FakeClock()
    with RuntimeCache(fake, 1.0, events=True, clock=clock) as cache:
        eventually(lambda: cache.stats().events_state == "unsupported")
        cache.get_pods()
        fake.set_pods([make_pod(2)])
        assert list(cache.get_pods()) == [make_pod(1)]  # polling: until the period passes
        clock.advance(1.5)
        assert list(cache.get_pods()) == [make_pod(2)]
        fake.events_unsupported = False  # upgraded runtime, restarted:
        fake.error = RuntimeUnavailableError("fake://runtime", "down")
        clock.advance(1.5)
        with pytest.raises(RuntimeUnavailableError):
            cache.get_pods()
        fake.error = None
        clock.advance(1.5)
        cache.get_pods()  # back: the subscription asks again at once, not in 5 minutes
        assert fake.wait_for_subscriptions(1)
        eventually(lambda: cache.stats().events_state == "subscribed")


def test_close_ends_the_subscription_and_the_cache_still_serves() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = subscribed_cache(fake, period=0.0)
    cache.close()
    cache.close()  # idempotent
    assert fake.open_streams == 0
    assert cache.stats().events_state == "off"
    assert list(cache.get_pods()) == [make_pod(1)]


def test_events_false_or_a_getter_without_events_means_no_subscription() -> None:
    class Plain:
        def get_pods(self, all: bool) -> object:
            return make_pods(1)

    for cache in (RuntimeCache(FakeRuntime(), 1.0), RuntimeCache(Plain(), 1.0, events=True)):  # type: ignore[arg-type]
        assert cache.stats().events_state == "off"
        cache.close()  # harmless without events


# -- the asyncio driver --------------------------------------------------------------------------
async def test_async_event_refreshes_in_background_and_coalesces() -> None:
    fake = AsyncFakeRuntime([make_pod(1)])
    # A clock that stands still: listings take no time, so no event budget holds one back
    # (test_event_budget.py tests the budget).
    async with AsyncRuntimeCache(fake, 60.0, events=True, clock=FakeClock()) as cache:
        assert await fake.wait_for_subscriptions(1)
        await eventually_async(lambda: cache.stats().events_state == "subscribed")
        await cache.get_pods()
        fake.set_pods([make_pod(2)])
        fake.block()
        fake.emit(*[EVENT] * 100)
        await eventually_async(lambda: cache.stats().events_received == 100)
        assert fake.calls == 2 and fake.max_in_flight == 1
        fake.release()
        await eventually_async(lambda: fake.calls == 3 and not cache.stats().in_flight)
        assert list(await cache.get_pods()) == [make_pod(2)]
        assert cache.stats().event_refreshes == 2
    assert fake.open_streams == 0
    assert cache.stats().events_state == "off"


async def test_async_resubscribes_after_failure_and_refreshes() -> None:
    fake = AsyncFakeRuntime([make_pod(1)])
    async with AsyncRuntimeCache(fake, 60.0, events=True) as cache:
        await cache.get_pods()  # made outside a loop's task? no: inside; subscribes now
        assert await fake.wait_for_subscriptions(1)
        fake.set_pods([make_pod(2)])
        fake.end_streams(RuntimeUnavailableError("fake://runtime", "restarted"))
        assert await fake.wait_for_subscriptions(2)
        # The refresh the resubscription owes may wait for the event budget (§7), so the
        # test waits for its outcome, as the thread twin does, not for in_flight to clear.
        deadline = time.monotonic() + WAIT
        while list(await cache.get_pods()) != [make_pod(2)]:
            assert time.monotonic() < deadline, "the resubscription never refreshed"
            await asyncio.sleep(0.002)
        stats = cache.stats()
        assert (stats.resubscriptions, stats.events_state) == (1, "subscribed")


async def test_async_unsupported_polls() -> None:
    fake = AsyncFakeRuntime([make_pod(1)])
    fake.events_unsupported = True
    async with AsyncRuntimeCache(fake, 60.0, events=True) as cache:
        await eventually_async(lambda: cache.stats().events_state == "unsupported")
        assert list(await cache.get_pods()) == [make_pod(1)]


def test_async_cache_made_outside_a_loop_subscribes_on_first_miss() -> None:
    fake = AsyncFakeRuntime([make_pod(1)])
    cache = AsyncRuntimeCache(fake, 60.0, events=True)

    async def use() -> None:
        await cache.get_pods()
        assert await fake.wait_for_subscriptions(1)
        await cache.close()

    asyncio.run(use())
    assert fake.subscriptions == 1


def test_async_cache_over_a_thread_getter_reads_the_stream_in_threads() -> None:
    fake = FakeRuntime([make_pod(1)])

    async def use() -> None:
        async with AsyncRuntimeCache(fake, 60.0, events=True, clock=FakeClock()) as cache:
            await cache.get_pods()
            assert await asyncio.to_thread(fake.wait_for_subscriptions, 1)
            await eventually_async(lambda: cache.stats().events_state == "subscribed")
            fake.set_pods([make_pod(2)])
            fake.emit(EVENT)
            await eventually_async(lambda: cache.stats().events_received == 1)
            await eventually_async(lambda: not cache.stats().in_flight)
            assert list(await cache.get_pods()) == [make_pod(2)]

    asyncio.run(use())
    assert fake.open_streams == 0


def test_a_runtime_that_streamed_is_retried_on_the_backoff_when_a_stream_ends_at_once() -> None:
    """A runtime that streamed, then ends a stream at once with OK (shutting down or
    recovering), looked like one without events: the cache waited UNSUPPORTED_RETRY (300 s)
    before it subscribed again."""
    clock = FakeClock()
    sub = Subscription("x", clock)
    assert sub.on(Signal.UNSUPPORTED, "ended at once") is Step.WAIT_SUPPORT  # never streamed
    sub.on(Signal.OPENED)
    assert sub.on(Signal.UNSUPPORTED, "ended at once") is Step.WAIT_SUPPORT  # opened, no event
    sub.on(Signal.OPENED)
    sub.on(Signal.EVENT)  # it has events
    sub.on(Signal.FAILED, "the runtime restarts")
    assert sub.on(Signal.UNSUPPORTED, "ended at once") is Step.RETRY
    assert sub.state is EventState.RECONNECTING
    sub.on(Signal.OPENED)
    assert sub.resubscriptions >= 1
