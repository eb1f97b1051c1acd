"""Property: random changes, delivered as events through random faults, never leave the cache
(1) serving a snapshot older than its period, nor (2) missing, once quiet, a change made before
its last successful (re)subscription or a change whose event reached it.

The runtime is the fake one; the faults (drop, duplicate, delay, reorder, stream cut) are
applied here between the change and ``emit``. The cache's clock is fake; its threads are real,
so every step waits until the cache is quiet (no refresh in flight or queued, every delivered
event read, the subscription open) before checking. The backoff is shrunk to milliseconds: the
property is about what is refreshed, not when.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache import ContainerEvent, ContainerEventType, FakeRuntime, PodList, RuntimeCache
from podcache.cache import events as subscription_rules
from podcache.errors import RuntimeUnavailableError
from tests.unit.cache.drivers import FakeClock, make_pod

PERIOD = 1.0
FAULTS = ("deliver", "drop", "duplicate", "delay", "reorder")

steps = st.lists(
    st.one_of(
        st.tuples(st.just("change"), st.sampled_from(FAULTS)),
        st.tuples(st.just("flush"), st.none()),
        st.tuples(st.just("cut"), st.none()),
        st.tuples(st.just("advance"), st.sampled_from([0.1, 0.5, 0.99, 1.0, 1.5, 3.0])),
        st.tuples(st.just("read"), st.none()),
        st.tuples(st.just("race"), st.none()),
    ),
    max_size=25,
)


def event(version: int) -> ContainerEvent:
    return ContainerEvent(
        type=ContainerEventType.STARTED, container_id=f"c{version}", pod_sandbox_id="s"
    )


def wait(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never quiet: {what}"
        time.sleep(0.0005)


class ListingAtStart(FakeRuntime):
    """A fake that answers with the pods it had when the call began, as a runtime's listing
    does: a change made while the call is held is not in its answer."""

    def get_pods(self, all: bool) -> PodList:
        pods = self.pods
        super().get_pods(all)
        return pods


class Harness:
    """The runtime's version, what was delivered, and what the cache must show when quiet."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.fake = ListingAtStart([make_pod(0)])
        self.cache = RuntimeCache(self.fake, PERIOD, clock=self.clock, events=True)
        self.version = 0
        self.delivered = 0  # events sent to open streams
        self.subscriptions = 1
        self.must_show = 0  # the oldest version a quiet, filled cache may hold
        self.held: list[int] = []  # delayed events
        self.reordered: int | None = None  # an event waiting to go after the next one
        self.quiet()

    def shown(self) -> int | None:
        pods = self.cache._core.snapshot[0]  # peek: a read would refresh
        return None if pods is None else pods[0].created_at

    def quiet(self) -> None:
        cache, fake = self.cache, self.fake
        wait(lambda: fake.subscriptions >= self.subscriptions, "subscription")
        wait(lambda: cache.stats().events_state == "subscribed", "subscribed state")
        wait(lambda: cache.stats().events_received == self.delivered, "events read")
        wait(lambda: not cache.stats().in_flight and cache._core.queued is None, "refreshes done")

    def send(self, *versions: int) -> None:
        self.fake.emit(*(event(v) for v in versions))
        self.delivered += len(versions)
        if self.shown() is not None or self.cache.stats().in_flight:
            self.must_show = max(self.must_show, *versions)

    def change(self, fault: str) -> None:
        self.version += 1
        self.fake.set_pods([make_pod(self.version)])
        pending, self.reordered = self.reordered, None
        if fault == "deliver":
            self.send(self.version)
        elif fault == "duplicate":
            self.send(self.version, self.version)
        elif fault == "delay":
            self.held.append(self.version)
        elif fault == "reorder":
            self.reordered = self.version
        if pending is not None:
            self.send(pending)  # after the event that followed it

    def flush(self) -> None:
        if self.held:
            held, self.held = self.held, []
            self.send(*held)

    def cut(self) -> None:
        self.quiet()  # events already sent are read before the cut
        self.held, self.reordered = [], None  # lost with the stream
        self.fake.end_streams(RuntimeUnavailableError("fake://runtime", "cut"))
        self.subscriptions += 1
        if self.shown() is not None:
            self.must_show = self.version  # everything before the resubscription

    def race(self) -> None:
        """A change, and its event, while a refresh that listed before it is still running."""
        if self.shown() is None:
            return  # an empty cache starts no refresh on an event
        self.fake.block()
        calls = self.fake.calls
        self.send(self.version)
        assert self.fake.wait_for_calls(calls + 1)
        self.change("deliver")
        self.fake.release()

    def read(self) -> None:
        self.cache.get_pods()
        cache_time = self.cache.cache_time
        assert cache_time is not None
        assert self.clock() - cache_time <= PERIOD  # (1) never older than the period

    def check(self) -> None:
        self.quiet()
        shown = self.shown()
        if shown is not None:
            assert shown >= self.must_show  # (2) nothing missed
        cache_time = self.cache.cache_time
        if cache_time is not None and self.clock() - cache_time <= PERIOD:
            assert self.cache.get_pods()[0].created_at == shown  # a hit serves what is held


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subscription_rules, "BACKOFF_FIRST", 0.001)
    monkeypatch.setattr(subscription_rules, "BACKOFF_CAP", 0.004)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.usefixtures("fast_backoff")
@given(script=steps)
def test_random_events_through_random_faults_never_leave_the_cache_stale(
    script: list[tuple[str, object]],
) -> None:
    h = Harness()
    try:
        for action, argument in script:
            if action == "change":
                h.change(str(argument))
            elif action == "flush":
                h.flush()
            elif action == "cut":
                h.cut()
            elif action == "race":
                h.race()
            elif action == "advance":
                assert isinstance(argument, float)
                h.clock.advance(argument)
            else:
                h.read()
            h.check()
    finally:
        h.cache.close()
        h.fake.release()
