"""The forced-refresh rate limit (``min_refresh_interval``), for both twins.

A forced refresh (one only ``force_update_if_older`` callers wait for) begins no sooner than
``min_refresh_interval`` after the last forced one began; a caller arriving sooner waits for
that later refresh instead of starting one, and still gets data fetched after it arrived.
Semantics on a fake clock for both drivers, the same claims with real threads and tasks, and
a hypothesis state machine holding the I/O-free core to a reference model of the rule.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from podcache import AsyncFakeRuntime, AsyncRuntimeCache, FakeRuntime, PodList, RuntimeCache
from podcache.cache.core import NEVER, FreshnessCore, Refresh
from tests.unit.cache.conftest import MakeDriver
from tests.unit.cache.drivers import FakeClock, make_pod

# -- semantics on a fake clock, both drivers --------------------------------------------------


def test_forced_request_within_the_interval_waits_instead_of_starting_a_refresh(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(60.0, min_refresh_interval=0.05)
    d.force(clock.now)
    assert d.fake.calls == 1
    clock.advance(0.01)
    arrival = clock.now
    with pytest.raises(TimeoutError):
        d.force(arrival, timeout=0.1)  # the clock stands still: its refresh is not due yet
    assert d.fake.calls == 1
    clock.advance(0.04)  # the interval has passed since the last forced start
    d.force(arrival)
    assert d.fake.calls == 2
    assert d.cache_time is not None and d.cache_time >= arrival


def test_forced_request_after_the_interval_starts_at_once(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(60.0, min_refresh_interval=timedelta(milliseconds=50))
    d.force(clock.now)
    clock.advance(0.05)
    d.force(clock.now)
    assert d.fake.calls == 2
    assert d.cache_time == clock.now  # begun at this reading: nothing held it back


def test_deferred_refresh_starts_when_its_time_comes_without_new_callers(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(60.0, min_refresh_interval=0.05)
    d.force(clock.now)
    clock.advance(0.01)
    with pytest.raises(TimeoutError):
        d.force(clock.now, timeout=0.02)
    clock.advance(0.1)
    # Nobody asks again: the driver's timer starts it. A plain get (a hit) lets the asyncio
    # driver's loop run meanwhile.
    deadline = time.monotonic() + 5
    while d.fake.calls < 2 and time.monotonic() < deadline:
        d.get()
        time.sleep(0.01)
    assert d.fake.calls == 2


def test_get_pods_starts_a_deferred_forced_refresh_at_once(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(1.0, min_refresh_interval=10.0)
    d.force(clock.now)
    clock.advance(0.5)
    arrival = clock.now
    with pytest.raises(TimeoutError):
        d.force(arrival, timeout=0.02)
    clock.advance(0.6)  # the snapshot expires: a routine refresh, not rate-limited
    d.fake.set_pods([make_pod(2)])
    assert list(d.get()) == [make_pod(2)]
    assert d.fake.calls == 2
    d.force(arrival)  # the forced need rode along on it
    assert d.fake.calls == 2


def test_routine_refreshes_are_not_rate_limited(make: MakeDriver, clock: FakeClock) -> None:
    d = make(0, min_refresh_interval=10.0)
    for calls in range(1, 4):
        d.get()
        assert d.fake.calls == calls


def test_rate_limit_is_off_by_default(make: MakeDriver, clock: FakeClock) -> None:
    d = make(60.0)
    for calls in range(1, 4):
        clock.advance(1e-6)
        d.force(clock.now)
        assert d.fake.calls == calls


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
@pytest.mark.parametrize("interval", [-1, float("nan"), timedelta(seconds=-1)])
def test_negative_interval_is_rejected(cls: type, interval: object) -> None:
    with pytest.raises(ValueError, match="min_refresh_interval"):
        cls(FakeRuntime(), 1.0, min_refresh_interval=interval)


# -- the same claims under real concurrency -----------------------------------------------------

INTERVAL = 0.1
RUN_FOR = 1.0


def max_calls(ran_for: float) -> int:
    """Forced starts at most one per interval of the run's real length (a loaded machine makes
    it outlast RUN_FOR), plus the first (at time 0) and one routine refresh."""
    return int(ran_for / INTERVAL) + 2


def test_threads_hammering_force_cause_at_most_one_refresh_per_interval() -> None:
    fake = FakeRuntime([make_pod(1)], latency=0.002)
    cache = RuntimeCache(fake, 60.0, min_refresh_interval=INTERVAL)
    late: list[float] = []
    began = time.monotonic()
    stop = began + RUN_FOR

    def hammer() -> None:
        while time.monotonic() < stop:
            arrival = time.monotonic()
            cache.force_update_if_older(arrival, timeout=5)
            cache_time = cache.cache_time
            if cache_time is None or cache_time < arrival:
                late.append(arrival)

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ran_for = time.monotonic() - began
    assert late == []
    assert 2 <= fake.calls <= max_calls(ran_for)
    assert fake.max_in_flight == 1


async def test_tasks_hammering_force_cause_at_most_one_refresh_per_interval() -> None:
    fake = AsyncFakeRuntime([make_pod(1)], latency=0.002)
    cache = AsyncRuntimeCache(fake, 60.0, min_refresh_interval=INTERVAL)
    late: list[float] = []
    loop = asyncio.get_running_loop()
    began = loop.time()
    stop = began + RUN_FOR

    async def hammer() -> None:
        while loop.time() < stop:
            arrival = time.monotonic()
            await cache.force_update_if_older(arrival, timeout=5)
            cache_time = cache.cache_time
            if cache_time is None or cache_time < arrival:
                late.append(arrival)

    await asyncio.gather(*(hammer() for _ in range(64)))
    ran_for = loop.time() - began
    await cache.aclose()
    assert late == []
    assert 2 <= fake.calls <= max_calls(ran_for)
    assert fake.max_in_flight == 1


async def test_aclose_waits_for_a_deferred_refresh() -> None:
    fake = AsyncFakeRuntime([make_pod(1)])
    cache = AsyncRuntimeCache(fake, 60.0, min_refresh_interval=0.05)
    await cache.force_update_if_older(time.monotonic())
    waiter = asyncio.create_task(cache.force_update_if_older(time.monotonic()))
    await asyncio.sleep(0)
    assert fake.calls == 1
    await cache.aclose()
    assert fake.calls == 2
    await waiter


# -- the core against a reference model of the rule --------------------------------------------


@dataclass
class Waiter:
    arrival: float
    forced: bool
    refresh: Refresh[object]


@dataclass
class RuleModel:
    """What the rule allows: forced-only starts at least ``interval`` apart."""

    interval: float
    forced_starts: list[float] = field(default_factory=list)

    def may_start_forced(self, now: float) -> bool:
        return not self.forced_starts or now >= self.forced_starts[-1] + self.interval


class CoreRateLimit(RuleBasedStateMachine):
    """Random arrivals (get or force), clock moves, completions and timer firings."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.interval = 0.3
        self.core: FreshnessCore[object] = FreshnessCore(1.0, object, min_refresh_interval=0.3)
        self.model = RuleModel(self.interval)
        self.waiters: list[Waiter] = []
        self.timer_due: float | None = None
        self.begun: list[Refresh[object]] = []
        self.forced_kinds: list[bool] = []  # per forced start: only forced callers needed it

    def _arm(self) -> None:
        delay = self.core.arm(self.now)
        if delay is not None:
            assert self.timer_due is None, "a second timer armed"
            self.timer_due = self.now + delay

    def _record_start(self, refresh: Refresh[object] | None) -> None:
        if refresh is None:
            return
        assert refresh.started_at == self.now
        assert all(r is not refresh for r in self.begun), "a refresh begun twice"
        self.begun.append(refresh)
        if refresh.forced:
            if refresh.deferrable:
                assert self.model.may_start_forced(self.now)
            self.model.forced_starts.append(self.now)
            self.forced_kinds.append(refresh.deferrable)

    @rule(dt=st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.7, 1.5]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(forced=st.booleans())
    def arrive(self, forced: bool) -> None:
        queued_before = self.core.queued
        idle = self.core.inflight is None and queued_before is None
        pods, refresh, start = self.core.plan(self.now, self.now if forced else None)
        if start:
            self._record_start(refresh)
        elif refresh is not None and pods is None:
            self.waiters.append(Waiter(self.now, forced, refresh))
            if forced and idle:
                # Held back only while the rule forbids a start.
                assert not self.model.may_start_forced(self.now)
        if start and pods is None and refresh is not None:
            self.waiters.append(Waiter(self.now, forced, refresh))
        self._arm()

    @precondition(lambda self: self.core.inflight is not None)
    @rule(ok=st.booleans())
    def complete(self, ok: bool) -> None:
        refresh = self.core.inflight
        assert refresh is not None
        error = None if ok else RuntimeError("down")
        queued = self.core.complete(refresh, PodList() if ok else None, error, self.now)
        self._record_start(queued)
        self.waiters = [w for w in self.waiters if w.refresh is not refresh]
        self._arm()

    @precondition(lambda self: self.timer_due is not None)
    @rule()
    def timer_fires(self) -> None:
        assert self.timer_due is not None
        self.now = max(self.now, self.timer_due)
        self.timer_due = None
        refresh, again = self.core.fire(self.now)
        self._record_start(refresh)
        if again is not None:
            self.timer_due = self.now + again

    @invariant()
    def forced_waiters_get_data_fetched_after_they_arrived(self) -> None:
        for waiter in self.waiters:
            started = waiter.refresh.started_at
            if waiter.forced:
                assert started is None or started >= waiter.arrival

    @invariant()
    def no_refresh_is_forgotten(self) -> None:
        # Something will start the queued refresh: the in-flight one ending, or the timer.
        if self.core.queued is not None:
            assert self.core.inflight is not None or self.timer_due is not None

    @invariant()
    def forced_starts_are_spaced(self) -> None:
        starts = self.model.forced_starts
        assert all(b >= a for a, b in itertools.pairwise(starts))
        assert all(
            b >= a + self.interval
            for a, b, r in zip(starts, starts[1:], self.forced_kinds[1:], strict=False)
            if r
        )
        assert self.core.last_forced_start == (starts[-1] if starts else NEVER)


TestCoreRateLimit = CoreRateLimit.TestCase
TestCoreRateLimit.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
