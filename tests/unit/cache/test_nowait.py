"""AsyncRuntimeCache.get_pods_nowait: the hit path without awaiting, as serve's respond_now
uses it. It returns exactly what get_pods would return at once, and None whenever get_pods
would wait or start a refresh; it never starts one itself."""

from __future__ import annotations

from podcache import AsyncFakeRuntime, AsyncRuntimeCache, Pod

PODS = [Pod(id="uid-1", name="web", namespace="default")]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_none_before_the_first_fill_and_no_refresh_started() -> None:
    runtime = AsyncFakeRuntime(PODS)
    cache = AsyncRuntimeCache(runtime, 10.0, clock=Clock())
    assert cache.get_pods_nowait() is None
    assert runtime.calls == 0


async def test_the_same_object_as_get_pods_while_fresh_then_none() -> None:
    runtime = AsyncFakeRuntime(PODS)
    clock = Clock()
    cache = AsyncRuntimeCache(runtime, 10.0, clock=clock, stats=True)
    pods = await cache.get_pods()
    clock.now += 10.0  # the last instant of the period: still fresh
    assert cache.get_pods_nowait() is pods
    assert cache.stats().hits == 1
    clock.now += 0.001
    assert cache.get_pods_nowait() is None  # get_pods would refresh: the caller awaits it
    assert runtime.calls == 1
    await cache.get_pods()
    assert runtime.calls == 2
    assert cache.get_pods_nowait() is not None


async def test_none_in_the_refresh_ahead_window() -> None:
    runtime = AsyncFakeRuntime(PODS)
    clock = Clock()
    cache = AsyncRuntimeCache(runtime, 10.0, clock=clock, refresh_ahead=2.0)
    await cache.get_pods()
    clock.now += 9.0  # get_pods would serve, and start a refresh behind: nowait does neither
    assert cache.get_pods_nowait() is None
    assert runtime.calls == 1
