"""Fixtures for the cache tests: a fake clock and a factory that builds either driver."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.unit.cache.drivers import DRIVERS, Driver, FakeClock

MakeDriver = Callable[..., Driver]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=DRIVERS, ids=lambda d: d.name)
def make(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[MakeDriver]:
    """``make(period, **options)`` -> a driver over a fresh fake runtime and the fake clock."""
    made: list[Driver] = []

    def build(period: float = 1.0, **kw: Any) -> Driver:
        kw.setdefault("clock", clock)
        driver: Driver = request.param(period, **kw)
        made.append(driver)
        return driver

    yield build
    for driver in made:
        driver.close()
