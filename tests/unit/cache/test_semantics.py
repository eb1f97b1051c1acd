"""docs/architecture.md §3 rules 1-4, 6 and 9, one behaviour per test, for both drivers.

Time is a fake clock here; concurrency (rules 5, 7, 8) lives in test_concurrency*.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from podcache import AsyncRuntimeCache, FakeRuntime, RuntimeCache
from tests.unit.cache.conftest import MakeDriver
from tests.unit.cache.drivers import FakeClock, make_pod


class Boom(Exception):
    """The runtime failed."""


# -- 1. expiry --------------------------------------------------------------------------------
def test_first_call_fills_the_cache(make: MakeDriver) -> None:
    d = make(1.0)
    d.fake.set_pods([make_pod(1)])
    assert list(d.get()) == [make_pod(1)]
    assert d.fake.calls == 1
    assert d.fake.all_args == [False]


def test_served_from_cache_until_age_exceeds_period_strictly(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(1.0)
    d.fake.set_pods([make_pod(1)])
    first = d.get()
    d.fake.set_pods([make_pod(2)])
    clock.advance(1.0)  # age == period: still fresh (strictly greater expires)
    assert d.get() is first
    assert d.fake.calls == 1
    clock.advance(1e-6)
    assert list(d.get()) == [make_pod(2)]
    assert d.fake.calls == 2


@pytest.mark.parametrize(
    ("period", "age", "refreshes"),
    [
        (3.0, 0.0, False),
        (3.0, 2.999, False),
        (3.0, 3.0, False),
        (3.0, 3.001, True),
        (timedelta(seconds=3), 3.0, False),
        (timedelta(seconds=3), 3.5, True),
        (0.25, 0.25, False),
        (0.25, 0.2500001, True),
    ],
)
def test_expiry_table(
    make: MakeDriver, clock: FakeClock, period: float, age: float, refreshes: bool
) -> None:
    d = make(period)
    d.get()
    clock.advance(age)
    d.get()
    assert d.fake.calls == (2 if refreshes else 1)


def test_period_zero_refreshes_every_call_even_when_clock_stands_still(make: MakeDriver) -> None:
    d = make(0)
    for expected_calls in range(1, 5):
        d.fake.set_pods([make_pod(expected_calls)])
        assert list(d.get()) == [make_pod(expected_calls)]
        assert d.fake.calls == expected_calls


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
@pytest.mark.parametrize("period", [-1, -0.001, timedelta(seconds=-1), float("nan")])
def test_negative_period_is_rejected(cls: type, period: object) -> None:
    with pytest.raises(ValueError, match="cache_period"):
        cls(FakeRuntime(), period)


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
@pytest.mark.parametrize("period", ["3s", None, True])
def test_non_numeric_period_is_rejected(cls: type, period: object) -> None:
    with pytest.raises(TypeError, match="cache_period"):
        cls(FakeRuntime(), period)


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
@pytest.mark.parametrize("getter", [object(), None, "runtime", type("G", (), {"get_pods": 1})()])
def test_getter_without_get_pods_is_rejected(cls: type, getter: object) -> None:
    with pytest.raises(TypeError, match="get_pods"):
        cls(getter, 1.0)


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
def test_timedelta_period_is_seconds(cls: type) -> None:
    assert cls(FakeRuntime(), timedelta(milliseconds=1500)).cache_period == 1.5


# -- 2. timestamp taken before the fetch; never backward --------------------------------------
def test_timestamp_is_read_before_the_getter_is_called(make: MakeDriver, clock: FakeClock) -> None:
    d = make(10.0)
    d.fake.on_call = lambda _all: clock.advance(5.0)  # the fetch takes 5 s
    before = clock.now
    d.get()
    assert d.cache_time == before
    assert clock.now == before + 5.0


def test_cache_time_is_none_until_filled(make: MakeDriver, clock: FakeClock) -> None:
    d = make(1.0)
    assert d.cache_time is None
    d.get()
    assert d.cache_time == clock.now


def test_timestamp_never_moves_backward(make: MakeDriver, clock: FakeClock) -> None:
    d = make(0)
    d.get()
    assert d.cache_time == 1000.0
    clock.now = 900.0  # a clock that jumps back must not make the cache claim older data
    d.fake.set_pods([make_pod(7)])
    assert list(d.get()) == [make_pod(7)]  # the caller still gets what it fetched
    assert d.cache_time == 1000.0


def test_equal_timestamp_replaces_the_snapshot(make: MakeDriver, clock: FakeClock) -> None:
    d = make(5.0)
    d.get()
    d.fake.set_pods([make_pod(2)])
    d.force(clock.now + 0.5)  # refresh at the same clock reading as the first fill
    assert d.cache_time == clock.now
    assert list(d.get()) == [make_pod(2)]
    assert d.fake.calls == 2


# -- 3. errors --------------------------------------------------------------------------------
def test_getter_error_propagates_unchanged_and_is_not_cached(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(1.0)
    error = Boom("runtime down")
    d.fake.error = error
    with pytest.raises(Boom) as caught:
        d.get()
    assert caught.value is error
    assert d.cache_time is None
    d.fake.error = None
    d.fake.set_pods([make_pod(3)])
    assert list(d.get()) == [make_pod(3)]  # the next call retries at once
    assert d.fake.calls == 2


def test_old_pods_are_never_returned_in_place_of_an_error(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(1.0)
    d.fake.set_pods([make_pod(1)])
    d.get()
    stamp = d.cache_time
    clock.advance(2.0)
    d.fake.error = Boom()
    for _ in range(3):
        with pytest.raises(Boom):
            d.get()
    assert d.fake.calls == 4  # every call after expiry retried
    assert d.cache_time == stamp


def test_failed_force_raises_and_keeps_the_old_snapshot(make: MakeDriver, clock: FakeClock) -> None:
    d = make(10.0)
    d.fake.set_pods([make_pod(1)])
    first = d.get()
    d.fake.error = Boom()
    with pytest.raises(Boom):
        d.force(clock.now + 1)
    assert d.get() is first


# -- 4. force_update_if_older -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("offset", "refreshes"),
    [(-1200.0, False), (-0.001, False), (0.0, False), (0.001, True), (20.0, True)],
)
def test_force_refreshes_iff_cache_time_is_older(
    make: MakeDriver, clock: FakeClock, offset: float, refreshes: bool
) -> None:
    d = make(60.0)
    d.get()
    stamp = d.cache_time
    assert stamp is not None
    d.force(stamp + offset)
    assert d.fake.calls == (2 if refreshes else 1)


def test_force_on_an_empty_cache_fills_it(make: MakeDriver) -> None:
    d = make(60.0)
    d.force(float("-inf"))
    assert d.fake.calls == 1
    assert d.cache_time is not None


def test_upstream_force_update_example(make: MakeDriver, clock: FakeClock) -> None:
    # The Go original's test: one pod cached; the runtime then has three.
    d = make(60.0)
    d.fake.set_pods([make_pod(1)])
    d.get()
    d.fake.set_pods([make_pod(1), make_pod(2), make_pod(3)])
    d.force(clock.now - 20 * 60)
    assert len(d.get()) == 1
    d.force(clock.now + 20)
    assert len(d.get()) == 3


# -- 6. one object per snapshot ---------------------------------------------------------------
def test_every_caller_of_one_snapshot_gets_the_same_object(make: MakeDriver) -> None:
    d = make(5.0)
    results = [d.get() for _ in range(10)]
    assert all(r is results[0] for r in results)


def test_snapshot_cannot_be_mutated(make: MakeDriver) -> None:
    d = make(5.0)
    d.fake.set_pods([make_pod(1, containers=2)])
    pods = d.get()
    with pytest.raises(AttributeError):
        pods._pods = ()
    with pytest.raises(AttributeError):
        pods[0].name = "x"  # type: ignore[misc]
    assert isinstance(pods[0].containers, tuple)


# -- 9. extensions ----------------------------------------------------------------------------
def test_max_stale_serves_last_good_snapshot_within_bound(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(1.0, max_stale=2.0, stats=True)
    d.fake.set_pods([make_pod(1)])
    good = d.get()
    d.fake.error = Boom()
    clock.advance(2.5)  # age 2.5 <= period + max_stale = 3
    assert d.get() is good
    assert d.stats().stale_served == 1
    clock.advance(0.6)  # age 3.1: too old even for stale-if-error
    with pytest.raises(Boom):
        d.get()
    assert d.stats().errors == 2


def test_max_stale_never_serves_before_first_fill(make: MakeDriver) -> None:
    d = make(1.0, max_stale=100.0)
    d.fake.error = Boom()
    with pytest.raises(Boom):
        d.get()


def test_max_stale_does_not_hide_errors_from_force(make: MakeDriver, clock: FakeClock) -> None:
    d = make(1.0, max_stale=100.0)
    d.get()
    d.fake.error = Boom()
    with pytest.raises(Boom):
        d.force(clock.now + 1)


def test_stats_count_hits_misses_refreshes_errors(make: MakeDriver, clock: FakeClock) -> None:
    d = make(1.0, stats=True)
    d.get()
    d.get()
    d.get()
    clock.advance(2)
    d.fake.error = Boom()
    with pytest.raises(Boom):
        d.get()
    s = d.stats()
    assert (s.hits, s.misses, s.refreshes, s.errors, s.joins) == (2, 2, 1, 1, 0)
    assert s.age == 2.0
    assert s.in_flight is False
    assert s.last_refresh_duration == 0.0


def test_stats_off_counts_no_hits(make: MakeDriver) -> None:
    d = make(1.0)
    d.get()
    d.get()
    assert d.stats().hits == 0
    assert d.stats().misses == 1


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
def test_refresh_ahead_longer_than_period_is_rejected(cls: type) -> None:
    with pytest.raises(ValueError, match="refresh_ahead"):
        cls(FakeRuntime(), 1.0, refresh_ahead=2.0)


@pytest.mark.parametrize("timeout", [-1, -0.5, float("nan")])
def test_negative_timeout_is_rejected_when_a_wait_would_start(
    make: MakeDriver, timeout: float
) -> None:
    d = make(0)
    with pytest.raises(ValueError, match="timeout"):
        d.get(timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        d.force(1e9, timeout=timeout)
    assert d.fake.calls == 0


# -- the documented get_pods is the one that runs ---------------------------------------------
def test_get_pods_is_documented_on_the_class_and_built_per_instance() -> None:
    assert "refreshes when older" in (RuntimeCache.get_pods.__doc__ or "")
    cache = RuntimeCache(FakeRuntime(), 1.0)
    assert cache.get_pods is cache.__dict__["get_pods"]  # the lock-free closure, no wrapper
    unbuilt = RuntimeCache.__new__(RuntimeCache)
    with pytest.raises(AttributeError, match=r"RuntimeCache\.get_pods is set by __init__"):
        unbuilt.get_pods()
