"""get_pods_nowait, on both twins: the hit path alone (serve's respond_now uses the asyncio
one). It returns exactly what get_pods would return at once, and None whenever get_pods would
wait or start a refresh; it never starts one itself."""

from __future__ import annotations

from tests.unit.cache.conftest import MakeDriver
from tests.unit.cache.drivers import FakeClock


def test_none_before_the_first_fill_and_no_refresh_started(make: MakeDriver) -> None:
    driver = make(10.0)
    assert driver.nowait() is None
    assert driver.fake.calls == 0


def test_the_same_object_as_get_pods_while_fresh_then_none(
    make: MakeDriver, clock: FakeClock
) -> None:
    driver = make(10.0, stats=True)
    pods = driver.get()
    clock.advance(10.0)  # the last instant of the period: still fresh
    assert driver.nowait() is pods
    assert driver.stats().hits == 1
    clock.advance(0.001)
    assert driver.nowait() is None  # get_pods would refresh: the caller does that
    assert driver.fake.calls == 1
    driver.get()
    assert driver.fake.calls == 2
    assert driver.nowait() is not None


def test_none_in_the_refresh_ahead_window(make: MakeDriver, clock: FakeClock) -> None:
    driver = make(10.0, refresh_ahead=2.0)
    driver.get()
    clock.advance(9.0)  # get_pods would serve and start a refresh behind: nowait does neither
    assert driver.nowait() is None
    assert driver.fake.calls == 1
