"""Pods that just left, and who held a key at a time (docs/architecture.md §3 rule 12).

A hypothesis model rebuilds "who held IP X (UID U, container C) at time t" from a history of
creations, removals and IP reuse, and compares it with ``find`` at random times, on both
twins; the bounds (``departed_for``, ``departed_max``) are checked at and past their limits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import (
    AsyncFakeRuntime,
    AsyncRuntimeCache,
    Container,
    ContainerID,
    ContainerState,
    FakeRuntime,
    Found,
    Pod,
    RuntimeCache,
)
from podcache.cache.departed import Departed
from tests.unit.cache.drivers import FakeClock

IPS = ["10.0.0.1", "10.0.0.2", "fd00::1"]


class Wall:
    """The caches' wall clock, moved by the test."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pod(n: int, ip: str, created: float, host_network: bool = False) -> Pod:
    return Pod(
        id=f"uid-{n}",
        name=f"pod-{n}",
        namespace="default",
        created_at=int(created * 1e9),
        ips=() if host_network else (ip,),
        host_network=host_network,
        containers=[
            Container(
                id=ContainerID("containerd", f"{n:064x}"), name="app", state=ContainerState.RUNNING
            )
        ],
    )


@dataclass
class Holding:
    pod: Pod
    start: float
    end: float | None = None


class Twin:
    """One cache over a fake, refreshed at each step of the model (threads or asyncio)."""

    def __init__(self, asynchronous: bool, wall: Wall, **kw: object) -> None:
        self.asynchronous = asynchronous
        self.loop = asyncio.new_event_loop()
        clock = FakeClock()
        self.fake: FakeRuntime | AsyncFakeRuntime
        if asynchronous:
            self.fake = AsyncFakeRuntime()
            self.cache: RuntimeCache | AsyncRuntimeCache = AsyncRuntimeCache(
                self.fake,
                1e9,
                clock=clock,
                wall_clock=wall,
                **kw,  # type: ignore[arg-type]
            )
        else:
            self.fake = FakeRuntime()
            self.cache = RuntimeCache(self.fake, 1e9, clock=clock, wall_clock=wall, **kw)  # type: ignore[arg-type]
        self.clock = clock

    def show(self, pods: list[Pod]) -> None:
        self.fake.set_pods(pods)
        self.clock.advance(1.0)
        if isinstance(self.cache, AsyncRuntimeCache):
            self.loop.run_until_complete(self.cache.force_update_if_older(self.clock.now))
        else:
            self.cache.force_update_if_older(self.clock.now)

    def find(self, **kw: object) -> Found | None:
        if isinstance(self.cache, AsyncRuntimeCache):
            return self.loop.run_until_complete(self.cache.find(**kw))  # type: ignore[arg-type]
        return self.cache.find(**kw)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.close()


steps = st.lists(
    st.tuples(st.sampled_from(["create", "remove", "wait"]), st.integers(0, 7), st.integers(0, 2)),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    history=steps, probes=st.lists(st.floats(0, 1.0), min_size=1, max_size=10), asyn=st.booleans()
)
def test_find_answers_who_held_a_key_at_a_time_as_the_model_does(
    history: list[tuple[str, int, int]], probes: list[float], asyn: bool
) -> None:
    wall = Wall()
    begin = wall.now
    twin = Twin(asyn, wall)
    running: dict[int, Pod] = {}
    holdings: list[Holding] = []
    twin.show([])
    for action, n, ip_at in history:
        wall.now += 1.0
        if action == "create" and n not in running:
            ip = IPS[ip_at]
            if any(ip in p.ips for p in running.values()):
                continue  # one holder of an IP at a time, as an IPAM gives them out
            running[n] = pod(n + 100 * len(holdings), ip, wall.now - 0.5)
            holdings.append(Holding(running[n], wall.now - 0.5))
        elif action == "remove" and n in running:
            gone = running.pop(n)
            next(h for h in holdings if h.pod is gone).end = wall.now
        twin.show(list(running.values()))
    end = wall.now + 1.0
    for fraction in probes:
        at = begin + fraction * (end - begin)
        for ip in IPS:
            held = [h for h in holdings if h.start <= at and (h.end is None or at < h.end)]
            held = [h for h in held if ip in h.pod.ips]
            expected = max(held, key=lambda h: h.start).pod if held else None
            found = twin.find(ip=ip, at=at)
            assert (found.pod if found else None) == expected, (ip, at)
            if found is not None:
                holding = next(h for h in holdings if h.pod == found.pod)
                assert found.departed_at == holding.end
    for holding in holdings:  # by UID and by container ID, now (the latest holder)
        found = twin.find(uid=holding.pod.id)
        assert found is not None and found.pod == holding.pod
        assert found.departed_at == holding.end
        by_id = twin.find(container_id=str(holding.pod.containers[0].id))
        assert by_id is not None and by_id.container == holding.pod.containers[0]
    twin.close()


@pytest.mark.parametrize("asyn", [False, True], ids=["threads", "asyncio"])
def test_a_reused_ip_never_answers_for_a_time_before_its_new_holder_was_created(asyn: bool) -> None:
    wall = Wall()
    twin = Twin(asyn, wall)
    first = pod(1, "10.0.0.9", wall.now)
    twin.show([first])
    wall.now += 10.0
    twin.show([])  # first leaves at +10
    left = wall.now
    wall.now += 5.0
    second = pod(2, "10.0.0.9", wall.now)  # the IP again, 5 s later
    twin.show([second])
    assert twin.find(ip="10.0.0.9") == Found(second, None, None)
    assert twin.find(ip="10.0.0.9", at=left - 1.0) == Found(first, None, left, left)
    assert twin.find(ip="10.0.0.9", at=left + 1.0) is None  # between the two holdings
    when = datetime.fromtimestamp(wall.now + 1.0, UTC)
    assert twin.find(ip="10.0.0.9", at=when) == Found(second, None, None)
    assert twin.find(uid="uid-1") == Found(first, None, left, left)
    twin.close()


@pytest.mark.parametrize("asyn", [False, True], ids=["threads", "asyncio"])
def test_departed_pods_are_bounded_by_age_and_count(asyn: bool) -> None:
    wall = Wall()
    # Each pod holds three keys (its UID, its container's ID, its IP): 9 keys are 3 pods.
    twin = Twin(asyn, wall, departed_for=60.0, departed_max=9)
    pods = [pod(n, f"10.1.0.{n}", wall.now) for n in range(6)]
    twin.show(pods)
    for n in range(5):  # five leave, one at a time
        wall.now += 1.0
        twin.show(pods[n + 1 :])
    remembered = [n for n in range(6) if twin.find(uid=f"uid-{n}") is not None]
    assert remembered == [2, 3, 4, 5]  # the newest 3 departures, and the one still there
    wall.now += 58.5  # uid-2 left at +3, now 60.5 s ago: forgotten; +4 and +5 are within 60 s
    assert [n for n in range(5) if twin.find(uid=f"uid-{n}") is not None] == [3, 4]
    twin.close()


def test_departed_for_zero_turns_it_off_and_bad_bounds_are_refused() -> None:
    wall = Wall()
    twin = Twin(False, wall, departed_for=0)
    twin.show([pod(1, "10.0.0.1", wall.now)])
    twin.show([])
    assert twin.find(uid="uid-1") is None
    for bad, error in ((-1.0, ValueError), (float("nan"), ValueError), ("5", TypeError)):
        with pytest.raises(error, match="departed_for"):
            Departed(departed_for=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="departed_max"):
        Departed(departed_max=-1)


def test_find_takes_exactly_one_key_and_checks_at() -> None:
    twin = Twin(False, Wall())
    twin.show([])
    with pytest.raises(TypeError, match="exactly one"):
        twin.find()
    with pytest.raises(TypeError, match="exactly one"):
        twin.find(uid="a", ip="10.0.0.1")
    with pytest.raises(ValueError, match="not an IP address"):
        twin.find(ip="10.0.0.999")
    with pytest.raises(ValueError, match="aware datetime"):
        twin.find(uid="a", at=datetime(2026, 1, 1))
    with pytest.raises(TypeError, match="epoch seconds"):
        twin.find(uid="a", at=timedelta(1))
    twin.close()
