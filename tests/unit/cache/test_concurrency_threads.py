"""docs/architecture.md §3 rules 5, 7 and 8 with real threads.

Sharing, joining, lock-free hits, timeouts.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from podcache import FakeRuntime, PodList, RuntimeCache
from tests.unit.cache.drivers import FakeClock, make_pod


@pytest.fixture(autouse=True, params=[False, True], ids=["polling", "events"])
def events(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Every test twice: as written, and with ``events=True`` (subscribed before it goes on)."""
    made: list[RuntimeCache] = []
    if request.param:
        real = RuntimeCache

        def subscribed(getter: FakeRuntime, *args: Any, **kw: Any) -> RuntimeCache:
            before = getter.subscriptions
            cache = real(getter, *args, events=True, **kw)
            made.append(cache)
            assert getter.wait_for_subscriptions(before + 1), "the cache did not subscribe"
            return cache

        monkeypatch.setattr(sys.modules[__name__], "RuntimeCache", subscribed)
    yield request.param
    for cache in made:
        cache.close()


class Boom(Exception):
    """The runtime failed."""


def start_blocked_refresh(cache: RuntimeCache, fake: FakeRuntime) -> threading.Thread:
    """A thread whose get_pods is inside the (blocked) getter when this returns."""
    fake.block()
    calls = fake.calls
    thread = threading.Thread(target=cache.get_pods, daemon=True)
    thread.start()
    assert fake.wait_for_calls(calls + 1)
    return thread


def test_64_threads_on_one_expiry_cause_one_call_and_share_one_object() -> None:
    fake = FakeRuntime([make_pod(1)], latency=0.05)
    cache = RuntimeCache(fake, 60.0)
    barrier = threading.Barrier(64)

    def reader() -> PodList:
        barrier.wait()
        return cache.get_pods()

    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda _: reader(), range(64)))
    assert fake.calls == 1
    assert fake.max_in_flight == 1
    assert all(r is results[0] for r in results)


def test_64_threads_through_repeated_expiries_never_overlap_calls() -> None:
    fake = FakeRuntime([make_pod(1)], latency=0.002)
    cache = RuntimeCache(fake, 0.01)
    stop = time.monotonic() + 0.5

    def reader() -> int:
        n = 0
        while time.monotonic() < stop:
            cache.get_pods()
            n += 1
        return n

    with ThreadPoolExecutor(64) as pool:
        total = sum(pool.map(lambda _: reader(), range(64)))
    assert fake.max_in_flight == 1
    # One call per expiry at most (plus the first), far fewer than the reads.
    assert fake.calls <= 0.5 / 0.01 + 2
    assert total > fake.calls


def test_forced_caller_after_inflight_start_gets_exactly_one_more_refresh() -> None:
    clock = FakeClock()
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 60.0, clock=clock)
    first = start_blocked_refresh(cache, fake)  # refresh 1 began at t=1000
    clock.advance(1.0)
    forced = [
        threading.Thread(target=cache.force_update_if_older, args=(clock.now,), daemon=True)
        for _ in range(8)
    ]
    for t in forced:
        t.start()
    time.sleep(0.05)
    assert fake.calls == 1  # the second refresh waits for the first to end
    fake.set_pods([make_pod(2)])
    fake.release()
    first.join(5)
    for t in forced:
        t.join(5)
    assert fake.calls == 2  # eight forced callers shared one more refresh
    assert fake.max_in_flight == 1
    assert cache.cache_time == clock.now
    assert list(cache.get_pods()) == [make_pod(2)]


def test_caller_whose_need_the_inflight_refresh_meets_joins_it() -> None:
    clock = FakeClock()
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 60.0, clock=clock)
    first = start_blocked_refresh(cache, fake)
    started_at = clock.now
    clock.advance(1.0)
    results: list[PodList] = []
    joiners = [
        threading.Thread(target=lambda: results.append(cache.get_pods()), daemon=True),
        threading.Thread(
            target=lambda: cache.force_update_if_older(started_at), daemon=True
        ),  # needs data from started_at on: the in-flight refresh began then
    ]
    for t in joiners:
        t.start()
    time.sleep(0.05)
    fake.release()
    first.join(5)
    for t in joiners:
        t.join(5)
    assert fake.calls == 1
    assert cache.stats().joins == 2


def test_period_zero_caller_never_joins_an_inflight_refresh() -> None:
    clock = FakeClock()  # even with a clock that stands still
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 0, clock=clock)
    first = start_blocked_refresh(cache, fake)
    late: list[PodList] = []
    t = threading.Thread(target=lambda: late.append(cache.get_pods()), daemon=True)
    t.start()
    time.sleep(0.05)
    fake.set_pods([make_pod(2)])  # what the late caller must see: fetched after it called
    fake.release()
    first.join(5)
    t.join(5)
    assert fake.calls == 2
    assert list(late[0]) == [make_pod(2)]


def test_joiners_of_a_failed_refresh_all_get_that_failure_then_next_call_retries() -> None:
    fake = FakeRuntime()
    cache = RuntimeCache(fake, 60.0)
    error = Boom("sick runtime")
    fake.error = error
    fake.block()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            cache.get_pods()
        except Boom as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(16)]
    for t in threads:
        t.start()
    assert fake.wait_for_calls(1)
    time.sleep(0.05)
    fake.release()
    for t in threads:
        t.join(5)
    assert fake.calls == 1  # no retry storm
    assert len(errors) == 16
    assert all(e is error for e in errors)
    fake.error = None
    cache.get_pods()
    assert fake.calls == 2


def test_hits_take_no_lock() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 60.0)
    pods = cache.get_pods()
    got: list[PodList] = []
    with cache._lock:  # a miss would wait here forever; a hit must not
        t = threading.Thread(target=lambda: got.append(cache.get_pods()), daemon=True)
        t.start()
        t.join(2)
        assert not t.is_alive()
    assert got == [pods]
    assert got[0] is pods


def test_hit_while_a_refresh_is_in_flight_returns_at_once() -> None:
    clock = FakeClock()
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 10.0, clock=clock)
    pods = cache.get_pods()
    clock.advance(5)
    forced = threading.Thread(target=cache.force_update_if_older, args=(clock.now,), daemon=True)
    fake.block()
    forced.start()
    assert fake.wait_for_calls(2)
    assert cache.get_pods() is pods  # still fresh: no waiting on the refresh
    fake.release()
    forced.join(5)


def test_timeout_returns_promptly_while_getter_hangs_and_cache_fills_later() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 60.0)
    fake.block()
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"0\.1 s"):
        cache.get_pods(timeout=0.1)
    # It returned while the getter is still held (released below): the timeout, not the
    # getter, ended the wait; and not before the timeout.
    assert time.monotonic() - began >= 0.1
    assert cache.cache_time is None
    fake.release()  # the abandoned refresh completes and fills the cache for others
    deadline = time.monotonic() + 5
    while cache.cache_time is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert cache.cache_time is not None
    assert list(cache.get_pods(timeout=0)) == [make_pod(1)]
    assert fake.calls == 1


def test_joiner_timeout_is_its_own() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 60.0)
    first = start_blocked_refresh(cache, fake)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        cache.get_pods(timeout=0.1)
    # It returned while the getter is still held (released below): the timeout, not the
    # getter, ended the wait; and not before the timeout.
    assert time.monotonic() - began >= 0.1
    fake.release()
    first.join(5)
    assert not first.is_alive()
    assert fake.calls == 1


def test_forced_caller_timeout() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 60.0)
    fake.block()
    with pytest.raises(TimeoutError):
        cache.force_update_if_older(time.monotonic(), timeout=0.05)
    fake.release()


def test_refresh_ahead_refreshes_in_background_and_readers_never_wait() -> None:
    clock = FakeClock()
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 10.0, clock=clock, refresh_ahead=2.0)
    first = cache.get_pods()
    clock.advance(8.5)  # inside the refresh-ahead window, still fresh
    fake.block()
    assert cache.get_pods(timeout=0) is first  # served now, refresh started behind it
    assert fake.wait_for_calls(2)
    assert cache.get_pods(timeout=0) is first  # no second background refresh
    fake.set_pods([make_pod(2)])
    fake.release()
    deadline = time.monotonic() + 5
    while cache.cache_time != 1008.5 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert cache.cache_time == 1008.5
    assert list(cache.get_pods(timeout=0)) == [make_pod(2)]
    assert fake.calls == 2


def test_stats_count_hits_exactly_under_threads() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 60.0, stats=True)
    cache.get_pods()

    def reader() -> None:
        for _ in range(2000):
            cache.get_pods()

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = cache.stats()
    assert s.hits == 16000
    assert s.misses == 1
