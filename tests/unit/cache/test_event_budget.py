"""Listings that only the runtime's events ask for have a time budget (the core's
invariant 6, ``docs/architecture.md`` §3 rule 6): after a successful listing that took *d*,
the next one only hints need begins at least ``EVENT_BUDGET`` * *d* after that listing ended.
Readers and forced callers keep their own rules.

The core is tested alone (decisions, and a hypothesis model of random hints, readers and
listing durations); the two drivers with a fake clock and a fake runtime whose calls move it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import AsyncRuntimeCache, FakeRuntime, PodList
from podcache.cache.core import EVENT_BUDGET, FreshnessCore, Refresh
from tests.unit.cache.drivers import FakeClock, make_pod
from tests.unit.cache.test_events import EVENT, eventually, subscribed_cache

PODS = PodList([make_pod(1)])


def _filled(duration: float) -> FreshnessCore[object]:
    """A core whose first listing ran from 0 to ``duration``, with a 60 s period."""
    core: FreshnessCore[object] = FreshnessCore(60.0, object)
    _, first, _ = core.plan(0.0)
    assert first is not None
    core.complete(first, PODS, None, duration)
    return core


def test_a_hint_soon_after_a_listing_waits_nine_of_its_durations() -> None:
    core = _filled(1.0)  # ended at 1.0 after 1 s: the next hinted listing at 1 + 9
    assert core.hint(2.0) == (None, True)  # scheduled, not started
    assert core.queued is not None and core.inflight is None
    assert core.arm(2.0) == 1.0 + EVENT_BUDGET - 2.0  # the driver's timer for its time
    assert core.hint(3.0) == (None, False)  # the queued one covers it
    assert core.fire(9.0) == (None, 1.0)  # a timer that ended early: armed again for the rest
    started, _ = core.fire(1.0 + EVENT_BUDGET)
    assert started is not None and started.started_at == 1.0 + EVENT_BUDGET


def test_a_hint_long_after_the_last_listing_starts_at_once() -> None:
    core = _filled(1.0)
    refresh, scheduled = core.hint(10.0)
    assert refresh is not None and scheduled and refresh.started_at == 10.0


def test_a_reader_that_needs_a_hinted_refresh_starts_it_at_once() -> None:
    core = _filled(1.0)
    core.hint(2.0)
    queued = core.queued
    _, refresh, start = core.plan(61.5)  # the snapshot is past its period: a reader waits
    assert start and refresh is queued and refresh is not None and refresh.started_at == 61.5


def test_a_forced_caller_joining_a_hinted_refresh_starts_it_at_the_earlier_time() -> None:
    core: FreshnessCore[object] = FreshnessCore(60.0, object, min_refresh_interval=0.5)
    _, first, _ = core.plan(0.0)
    assert first is not None
    core.complete(first, PODS, None, 1.0)
    core.hint(2.0)  # due at 10
    _, refresh, start = core.plan(2.0, 2.0)
    assert start and refresh is not None and refresh.started_at == 2.0  # forced: due at 0.5


def test_a_failed_listing_leaves_the_budget_as_the_last_good_one_set_it() -> None:
    core = _filled(0.1)  # due 0.1 + 0.9 = 1.0
    _, refresh, _ = core.plan(5.0, 5.0)
    assert refresh is not None
    core.complete(refresh, None, TimeoutError("slow"), 15.0)  # 10 s, failed
    started, _ = core.hint(15.5)
    assert started is not None  # not 15 + 90


class _Run:
    """The core driven by random steps, beside the reference: when each refresh that only
    hints need may begin (the last successful listing's end plus the budget)."""

    def __init__(self) -> None:
        self.core = _filled(0.5)
        self.last_end = 0.5
        self.last_duration = 0.5
        self.now = 1.0
        self.hinted_only: list[tuple[Refresh[object], float]] = []

    def due(self) -> float:
        return self.last_end + EVENT_BUDGET * self.last_duration

    def note(self, refresh: Refresh[object] | None) -> None:
        if refresh is not None and not refresh.routine and not refresh.forced:
            self.hinted_only.append((refresh, self.due()))

    def hint(self, _fails: bool) -> None:
        refresh, _ = self.core.hint(self.now)
        self.note(refresh)
        core = self.core
        assert core.queued is not None or core.inflight is not None, "a hint left no refresh"

    def read(self, _fails: bool) -> None:
        _, refresh, start = self.core.plan(self.now)
        if start:
            self.note(refresh)

    def complete(self, fails: bool) -> None:
        inflight = self.core.inflight
        if inflight is None:
            return
        assert inflight.started_at is not None
        if fails:
            queued = self.core.complete(inflight, None, RuntimeError("failed"), self.now)
        else:
            queued = self.core.complete(inflight, PODS, None, self.now)
            self.last_end, self.last_duration = self.now, self.now - inflight.started_at
        self.note(queued)

    def fire(self, _fails: bool) -> None:
        started, _ = self.core.fire(self.now)
        self.note(started)


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["hint", "read", "complete", "fire"]),
        st.floats(min_value=0.0, max_value=3.0, allow_nan=False),
        st.booleans(),  # a listing that completes fails
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_STEPS)
def test_no_hinted_only_listing_begins_before_its_budget_allows(
    steps: list[tuple[str, float, bool]],
) -> None:
    """Random hints, readers, completions (some failing) and timer firings: every listing that
    only hints needed began at or after the reference's due time, and a hint always leaves a
    refresh to run after it (in flight or queued)."""
    run = _Run()
    for action, gap, fails in steps:
        run.now += gap
        getattr(run, action)(fails)
    for refresh, due in run.hinted_only:
        assert refresh.started_at is not None and refresh.started_at >= due


def _timed_runtime(clock: FakeClock, duration: float) -> FakeRuntime:
    """A fake runtime whose every listing takes ``duration`` on ``clock``. (The drivers' timers
    run on real time: a timer that ends before the fake clock reached the refresh's time finds
    it not yet due and is armed again, so the test moves the clock and the next one starts it.)"""
    fake = FakeRuntime([make_pod(1)])

    def takes_time(_all: bool) -> None:
        clock.advance(duration)

    fake.on_call = takes_time
    return fake


def _settle(check: Callable[[], bool]) -> None:
    eventually(check)
    time.sleep(0.05)  # nothing more may happen: asserted by the caller


def test_a_flood_of_events_waits_for_the_budget_in_threads() -> None:
    clock = FakeClock()
    fake = _timed_runtime(clock, 0.01)  # each listing takes 10 ms of the cache's clock
    with subscribed_cache(fake, clock=clock) as cache:
        cache.get_pods()  # the first listing (the subscription's hint found an empty cache)
        _settle(lambda: cache.stats().refreshes == 1)
        for _ in range(200):
            fake.emit(EVENT)
        eventually(lambda: cache.stats().events_received == 200)
        _settle(lambda: True)
        assert cache.stats().refreshes == 1  # the budget holds the next one back
        clock.advance(EVENT_BUDGET * 0.01)  # its time has come: the timer finds it due
        eventually(lambda: cache.stats().refreshes == 2)
        assert fake.max_in_flight == 1


async def test_a_flood_of_events_waits_for_the_budget_in_asyncio() -> None:
    clock = FakeClock()
    fake = _timed_runtime(clock, 0.01)
    async with AsyncRuntimeCache(fake, 60.0, clock=clock, events=True) as cache:
        assert await asyncio.to_thread(fake.wait_for_subscriptions, 1)
        await cache.get_pods()
        await asyncio.sleep(0.05)
        assert cache.stats().refreshes == 1
        for _ in range(200):
            fake.emit(EVENT)
        while cache.stats().events_received < 200:
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.05)
        assert cache.stats().refreshes == 1
        clock.advance(EVENT_BUDGET * 0.01)
        while cache.stats().refreshes < 2:
            await asyncio.sleep(0.002)


# -- close: a refresh only events asked for is dropped, not waited for ---------------------------


def test_closing_the_events_drops_a_queued_refresh_only_hints_asked_for() -> None:
    core = _filled(1.0)
    core.hint(2.0)
    queued = core.queued
    assert queued is not None
    assert core.events_closed() is queued  # returned, for the driver to release its signal
    assert core.queued is None and core.arm(3.0) is None
    assert core.fire(1.0 + EVENT_BUDGET) == (None, None)  # a timer left armed finds nothing


def test_closing_the_events_keeps_a_queued_refresh_a_reader_waits_for() -> None:
    core = _filled(1.0)
    _, first, _ = core.plan(61.5)  # a reader's refresh in flight...
    assert first is not None
    core.hint(62.0)  # ...a hint queues one behind it...
    assert core.queued is not None
    core.plan(200.0)  # ...which a reader then needs as well
    assert core.queued is not None and (core.queued.routine or core.queued.forced)
    assert core.events_closed() is None
    assert core.queued is not None


def test_close_drops_the_budgeted_refresh_in_threads() -> None:
    clock = FakeClock()
    fake = _timed_runtime(clock, 0.01)
    cache = subscribed_cache(fake, clock=clock)
    cache.get_pods()
    _settle(lambda: cache.stats().refreshes == 1)
    fake.emit(EVENT)
    eventually(lambda: cache.stats().events_received == 1)
    _settle(lambda: True)
    cache.close()
    clock.advance(EVENT_BUDGET * 0.01)  # its time would have come: nothing runs
    _settle(lambda: True)
    assert cache.stats().refreshes == 1


async def test_close_drops_the_budgeted_refresh_in_asyncio() -> None:
    """``close()`` returns while the budget still holds the hinted refresh back (the fake
    clock never reaches its time: waiting for it would never end); it never runs."""
    clock = FakeClock()
    fake = _timed_runtime(clock, 0.01)
    cache = AsyncRuntimeCache(fake, 60.0, clock=clock, events=True)
    assert await asyncio.to_thread(fake.wait_for_subscriptions, 1)
    await cache.get_pods()
    await asyncio.sleep(0.05)
    fake.emit(EVENT)
    while cache.stats().events_received < 1:
        await asyncio.sleep(0.002)
    await asyncio.sleep(0.05)
    assert cache.stats().refreshes == 1
    await asyncio.wait_for(cache.close(), 60)  # a safety net: without the drop, it never ends
    assert cache.stats().refreshes == 1
