"""The keeper (``serve/keeper.py``): a served snapshot nobody reads stays within its
period, so a runtime failure is answered stale for ``max_stale`` as a busy server's is; the
metrics say when the last full listing began and the last event arrived.

On the real clock (the keeper sleeps on it), over a fake runtime; every wait is "until it
happened", with a generous safety net."""

from __future__ import annotations

import asyncio
import time

import pytest

from podcache import AsyncFakeRuntime, ContainerEvent, ContainerEventType
from podcache.errors import RuntimeUnavailableError
from podcache.serve import App
from podcache.serve.keeper import KEEP_MIN, next_read
from tests.serve.test_app import call_server, pod

PERIOD = 0.2
WAIT = 30.0


async def until(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


def metric(app: App, name: str) -> float | None:
    for line in app.metrics.render().decode().splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


@pytest.mark.parametrize(
    ("fresh_for", "age", "delay"),
    [
        (1.5, None, 0.0),  # no snapshot yet: read (fill) now
        (1.5, 1.5, 0.0),  # at the refresh-ahead point
        (1.5, 9.0, 0.0),  # long past it
        (1.5, 1.0, 0.5 + 0.001),  # just past the point, where a hit starts a refresh
    ],
)
def test_the_keeper_reads_when_the_snapshot_reaches_its_refresh_ahead_point(
    fresh_for: float, age: float | None, delay: float
) -> None:
    assert next_read(fresh_for, age) == pytest.approx(delay)


async def test_an_idle_app_lists_by_its_period_and_answers_stale_when_the_runtime_fails() -> None:
    runtime = AsyncFakeRuntime([pod("uid-1", "a", "default", "c1")])
    app = App(runtime, PERIOD, max_stale=30.0)
    try:
        assert await app.warm() is None
        filled = runtime.calls
        await until(lambda: runtime.calls >= filled + 3, "the keeper lists while nobody reads")
        listed_at = metric(app, "podcache_last_full_listing_timestamp_seconds")
        assert listed_at is not None and listed_at <= time.time()
        age = metric(app, "podcache_snapshot_age_seconds")
        assert age is not None
        runtime.error = RuntimeUnavailableError("unix:///x.sock", "gone")
        failed = runtime.calls
        await until(lambda: runtime.calls > failed, "the keeper meets the failure")
        reply = await call_server(app, "/pods")
        while "x-podcache-stale" not in reply.headers:  # until past its period
            assert reply.status == 200, reply
            await asyncio.sleep(0.01)
            reply = await call_server(app, "/pods")
        assert reply.status == 200 and reply.json()["items"][0]["id"] == "uid-1"
        assert (await call_server(app, "/readyz")).status == 503
    finally:
        await app.aclose()
    stopped = runtime.calls
    await asyncio.sleep(max(PERIOD, KEEP_MIN) * 3)  # nothing may list after aclose
    assert runtime.calls == stopped


async def test_a_period_of_0_has_no_keeper_and_apps_not_warmed_have_none() -> None:
    runtime = AsyncFakeRuntime([])
    cold = App(runtime, PERIOD)
    assert not cold.keeper.running
    await cold.aclose()
    uncached = App(runtime, 0.0)
    await uncached.warm()
    assert not uncached.keeper.running
    await uncached.aclose()


async def test_the_last_event_is_a_timestamp_in_metrics() -> None:
    runtime = AsyncFakeRuntime([pod("uid-1", "a", "default", "c1")])
    app = App(runtime, 60.0, events=True)
    try:
        assert await app.warm() is None
        assert metric(app, "podcache_last_event_timestamp_seconds") is None  # none yet
        await until(lambda: app.cache.stats().events_state == "subscribed", "subscribed")
        before = time.time()
        runtime.emit(ContainerEvent(type=ContainerEventType.STARTED, container_id="c1"))
        await until(lambda: app.cache.stats().events_received >= 1, "the event arrived")
        at = metric(app, "podcache_last_event_timestamp_seconds")
        assert at is not None and before <= at <= time.time()
    finally:
        await app.aclose()
