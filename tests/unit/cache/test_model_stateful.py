"""Hypothesis stateful test: both caches against a small reference model of the Go original.

The model is the kubelet's runtime_cache.go, sequential and mutex-held, plus the explicit rule
that a period of 0 always refreshes (docs/architecture.md §3 rule 1). Random sequences of get,
force, clock advances, runtime changes, failures and fetch durations must give the same
answers, the same errors, the same cache_time and the same number of runtime calls.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.unit.cache.drivers import (
    AsyncDriver,
    AsyncEventsDriver,
    Driver,
    FakeClock,
    SyncDriver,
    SyncEventsDriver,
    make_pod,
)


class RuntimeDown(Exception):
    """The simulated runtime failed."""


class GoRuntimeCache:
    """The reference: runtime_cache.go, with a runtime that has a version, may fail, takes time."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.cache_time: float | None = None
        self.version: int | None = None
        self.calls = 0

    def _refresh(self, clock: FakeClock, runtime: dict[str, Any]) -> None:
        timestamp = clock.now  # taken first
        self.calls += 1
        clock.advance(runtime["latency"])
        if runtime["failing"]:
            raise RuntimeDown()
        self.version, self.cache_time = runtime["version"], timestamp

    def get(self, clock: FakeClock, runtime: dict[str, Any]) -> int:
        if self.period == 0 or self.cache_time is None or clock.now - self.cache_time > self.period:
            self._refresh(clock, runtime)
        assert self.version is not None
        return self.version

    def force(self, t: float, clock: FakeClock, runtime: dict[str, Any]) -> None:
        if self.cache_time is None or self.cache_time < t:
            self._refresh(clock, runtime)


offsets = st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0]) | st.floats(0, 5, allow_nan=False)


class CacheAgainstModel(RuleBasedStateMachine):
    driver_type: type[SyncDriver] | type[AsyncDriver] = SyncDriver

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(100.0)
        self.runtime: dict[str, Any] = {"version": 0, "failing": False, "latency": 0.0}
        self.driver: Driver | None = None
        self.model: GoRuntimeCache | None = None

    @initialize(period=st.sampled_from([0.0, 0.5, 1.0, 3.0]))
    def build(self, period: float) -> None:
        self.driver = self.driver_type(period, self.clock)
        self.model = GoRuntimeCache(period)
        self.driver.fake.set_pods([make_pod(0)])
        # The fake's fetch takes runtime["latency"] seconds of fake time.
        self.driver.fake.on_call = lambda _all: self.clock.advance(self.runtime["latency"])

    def teardown(self) -> None:
        if self.driver is not None:
            self.driver.close()

    @rule(dt=offsets)
    def advance(self, dt: float) -> None:
        self.clock.advance(dt)

    @rule()
    def runtime_changes(self) -> None:
        assert self.driver is not None
        self.runtime["version"] += 1
        self.driver.fake.set_pods([make_pod(self.runtime["version"])])

    @rule(failing=st.booleans())
    def runtime_health(self, failing: bool) -> None:
        assert self.driver is not None
        self.runtime["failing"] = failing
        self.driver.fake.error = RuntimeDown() if failing else None

    @rule(latency=st.sampled_from([0.0, 0.0, 0.1, 1.0, 4.0]))
    def fetch_duration(self, latency: float) -> None:
        self.runtime["latency"] = latency

    def _both(self, real: Any, ref: Any) -> None:
        """Run the real call and the model's from the same clock reading; compare outcomes."""
        start = self.clock.now
        try:
            got: Any = ("ok", real())
        except RuntimeDown:
            got = ("err",)
        after_real = self.clock.now
        self.clock.now = start
        try:
            want: Any = ("ok", ref())
        except RuntimeDown:
            want = ("err",)
        assert self.clock.now == after_real  # same number of fetches took the same time
        assert got == want

    @precondition(lambda self: self.driver is not None)
    @rule()
    def get(self) -> None:
        assert self.driver is not None and self.model is not None
        model = self.model
        self._both(
            lambda: self.driver.get()[0].created_at,
            lambda: model.get(self.clock, self.runtime),
        )

    @precondition(lambda self: self.driver is not None)
    @rule(relative_to_cache=st.booleans(), offset=st.sampled_from([-2.0, -0.5, 0.0, 0.5, 2.0]))
    def force(self, relative_to_cache: bool, offset: float) -> None:
        assert self.driver is not None and self.model is not None
        model = self.model
        base = self.model.cache_time if relative_to_cache else self.clock.now
        t = (base if base is not None else self.clock.now) + offset
        self._both(
            lambda: self.driver.force(t),
            lambda: model.force(t, self.clock, self.runtime),
        )

    @invariant()
    def same_state(self) -> None:
        if self.driver is None or self.model is None:
            return
        assert self.driver.cache_time == self.model.cache_time
        assert self.driver.fake.calls == self.model.calls
        assert self.driver.fake.max_in_flight <= 1


class AsyncCacheAgainstModel(CacheAgainstModel):
    driver_type = AsyncDriver


TestRuntimeCacheAgainstGoModel = CacheAgainstModel.TestCase
TestRuntimeCacheAgainstGoModel.settings = settings(max_examples=150, stateful_step_count=40)
TestAsyncRuntimeCacheAgainstGoModel = AsyncCacheAgainstModel.TestCase
TestAsyncRuntimeCacheAgainstGoModel.settings = settings(max_examples=100, stateful_step_count=40)


class EventsCacheAgainstModel(CacheAgainstModel):
    """The same model with a subscription open (no events: readers' behaviour is unchanged)."""

    driver_type = SyncEventsDriver


class AsyncEventsCacheAgainstModel(CacheAgainstModel):
    driver_type = AsyncEventsDriver


TestEventsRuntimeCacheAgainstGoModel = EventsCacheAgainstModel.TestCase
TestEventsRuntimeCacheAgainstGoModel.settings = settings(max_examples=60, stateful_step_count=40)
TestAsyncEventsRuntimeCacheAgainstGoModel = AsyncEventsCacheAgainstModel.TestCase
TestAsyncEventsRuntimeCacheAgainstGoModel.settings = settings(
    max_examples=60, stateful_step_count=40
)
