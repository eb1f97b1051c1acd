"""Test helpers: a fake clock, sample pods, and one synchronous face for both cache drivers.

``Driver`` lets a semantic test run unchanged against RuntimeCache and AsyncRuntimeCache (the
async one on a private event loop), so the twins are held to the same specification.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from podcache import (
    AsyncFakeRuntime,
    AsyncRuntimeCache,
    Container,
    ContainerID,
    ContainerState,
    FakeRuntime,
    Pod,
    PodChange,
    PodList,
    RuntimeCache,
)
from podcache.cache.core import CacheStats


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_pod(n: int, containers: int = 1) -> Pod:
    """A small pod numbered ``n`` (UID ``uid-n``)."""
    return Pod(
        id=f"uid-{n}",
        name=f"pod-{n}",
        namespace="default",
        created_at=n,
        containers=[
            Container(
                id=ContainerID("containerd", f"{n:04x}{i:060x}"),
                name=f"c{i}",
                image="busybox:1",
                state=ContainerState.RUNNING,
            )
            for i in range(containers)
        ],
    )


class Fake(Protocol):
    """What the semantic tests need of either fake runtime."""

    calls: int
    error: BaseException | None
    max_in_flight: int

    def set_pods(self, pods: list[Pod]) -> None: ...


class Driver:
    """One synchronous face over a cache: ``get``, ``force``, ``nowait``, ``cache_time``,
    ``stats``."""

    name: str
    fake: Any

    def get(self, timeout: float | None = None) -> PodList:
        raise NotImplementedError

    def force(self, t: float, timeout: float | None = None) -> None:
        raise NotImplementedError

    def nowait(self) -> PodList | None:
        raise NotImplementedError

    @property
    def cache_time(self) -> float | None:
        raise NotImplementedError

    def stats(self) -> CacheStats:
        raise NotImplementedError

    def watch(self, since: int | None = None) -> WatchFace:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the driver holds."""


class WatchFace:
    """One synchronous face over a PodWatch or an AsyncPodWatch."""

    def __init__(self, read: Callable[[float | None], list[PodChange]], close: Any) -> None:
        self._read = read
        self._close = close

    def read(self, timeout: float | None = 0) -> list[PodChange]:
        """``next_batch(timeout)``."""
        return self._read(timeout)

    def close(self) -> None:
        self._close()


class SyncDriver(Driver):
    name = "threads"

    def __init__(self, period: float | timedelta, clock: Callable[[], float], **kw: Any) -> None:
        self.fake = FakeRuntime()
        self.cache = RuntimeCache(self.fake, period, clock=clock, **kw)

    def get(self, timeout: float | None = None) -> PodList:
        return self.cache.get_pods(timeout=timeout)

    def force(self, t: float, timeout: float | None = None) -> None:
        self.cache.force_update_if_older(t, timeout=timeout)

    def nowait(self) -> PodList | None:
        return self.cache.get_pods_nowait()

    @property
    def cache_time(self) -> float | None:
        return self.cache.cache_time

    def stats(self) -> CacheStats:
        return self.cache.stats()

    def watch(self, since: int | None = None) -> WatchFace:
        watch = self.cache.watch(since)
        return WatchFace(watch.next_batch, watch.close)


class AsyncDriver(Driver):
    name = "asyncio"

    def __init__(self, period: float | timedelta, clock: Callable[[], float], **kw: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.fake = AsyncFakeRuntime()
        self.cache = AsyncRuntimeCache(self.fake, period, clock=clock, **kw)

    def get(self, timeout: float | None = None) -> PodList:
        return self.loop.run_until_complete(self.cache.get_pods(timeout=timeout))

    def force(self, t: float, timeout: float | None = None) -> None:
        self.loop.run_until_complete(self.cache.force_update_if_older(t, timeout=timeout))

    def nowait(self) -> PodList | None:
        return self.cache.get_pods_nowait()

    @property
    def cache_time(self) -> float | None:
        return self.cache.cache_time

    def stats(self) -> CacheStats:
        return self.cache.stats()

    def watch(self, since: int | None = None) -> WatchFace:
        watch = self.cache.watch(since)

        def read(timeout: float | None) -> list[PodChange]:
            return self.loop.run_until_complete(watch.next_batch(timeout))

        return WatchFace(read, watch.close)

    def close(self) -> None:
        self.loop.run_until_complete(self.cache.aclose())
        self.loop.close()


def _wait_subscribed(cache: RuntimeCache, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while cache.stats().events_state != "subscribed":
        assert time.monotonic() < deadline, "the subscription never acted on its open stream"
        time.sleep(0.001)


class SyncEventsDriver(SyncDriver):
    """RuntimeCache with ``events=True``, subscribed (no events flow unless a test emits)."""

    name = "threads-events"

    def __init__(self, period: float | timedelta, clock: Callable[[], float], **kw: Any) -> None:
        super().__init__(period, clock, events=True, **kw)
        assert self.fake.wait_for_subscriptions(1), "the cache did not subscribe"
        # The stream is open; wait until the subscription has also acted on it (its hint, on
        # the empty cache, asks for nothing), so that it never lands after a test's first
        # fill and adds a fetch the model does not make (seen on a loaded machine).
        _wait_subscribed(self.cache)

    def close(self) -> None:
        self.cache.close()


class AsyncEventsDriver(AsyncDriver):
    """AsyncRuntimeCache with ``events=True``, made inside its loop and subscribed."""

    name = "asyncio-events"

    def __init__(self, period: float | timedelta, clock: Callable[[], float], **kw: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.fake = AsyncFakeRuntime()

        async def build() -> AsyncRuntimeCache:
            return AsyncRuntimeCache(self.fake, period, clock=clock, events=True, **kw)

        self.cache = self.loop.run_until_complete(build())
        subscribed = self.loop.run_until_complete(self.fake.wait_for_subscriptions(1))
        assert subscribed, "the cache did not subscribe"

        async def settled() -> None:
            while self.cache.stats().events_state != "subscribed":
                await asyncio.sleep(0.001)

        self.loop.run_until_complete(asyncio.wait_for(settled(), 10.0))


DRIVERS: list[type[Driver]] = [SyncDriver, AsyncDriver, SyncEventsDriver, AsyncEventsDriver]
"""Every contract test runs on both twins, without and with an event subscription."""
