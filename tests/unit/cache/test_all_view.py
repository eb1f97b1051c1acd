"""The library's all view (``all=True``: a cache of ``get_pods(True)``), its ``events=`` words,
and what ``find`` says of a sandbox: on both twins (and, for the view, with and without an event
subscription: ``make`` builds every driver)."""

from __future__ import annotations

import asyncio
import time

import pytest

from podcache import (
    AsyncFakeRuntime,
    AsyncRuntimeCache,
    Container,
    ContainerEvent,
    ContainerEventType,
    ContainerID,
    ContainerState,
    FakeRuntime,
    Pod,
    PodList,
    RuntimeCache,
)
from podcache.cache.pids import async_probe, sync_probe
from tests.unit.cache.conftest import MakeDriver
from tests.unit.cache.drivers import make_pod


def with_exited(pod: Pod) -> Pod:
    """``pod`` as ``get_pods(True)`` lists it: an exited container more, and its old sandbox."""
    exited = Container(
        id=ContainerID("containerd", f"dead{pod.id}"), name="old", state=ContainerState.EXITED
    )
    old_sandbox = Container(
        id=ContainerID("containerd", f"0ld5{pod.id}"), state=ContainerState.EXITED
    )
    return Pod(
        id=pod.id,
        name=pod.name,
        namespace=pod.namespace,
        created_at=pod.created_at,
        containers=(*pod.containers, exited),
        sandboxes=(*pod.sandboxes, old_sandbox),
    )


RUNNING = [make_pod(2), make_pod(1)]
ALL = [with_exited(make_pod(2)), with_exited(make_pod(1)), make_pod(0)]


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
def test_the_cache_lists_the_view_it_was_made_for(make: MakeDriver, all_: bool) -> None:
    driver = make(1.0, all=all_)
    driver.fake.set_pods(RUNNING)
    driver.fake.all_pods = PodList(ALL)
    assert list(driver.get()) == (ALL if all_ else RUNNING)
    assert set(driver.fake.all_args) == {all_}


def test_an_event_relists_its_pod_in_the_all_view() -> None:
    fake = FakeRuntime(RUNNING, all_pods=ALL)
    with RuntimeCache(fake, 3600.0, events=True, all=True) as cache:
        assert fake.wait_for_subscriptions(1)
        cache.get_pods()
        changed = with_exited(make_pod(1))
        changed = Pod(id=changed.id, name="renamed", containers=changed.containers)
        fake.all_pods = PodList([ALL[0], changed, ALL[2]])
        fake.emit(
            ContainerEvent(type=ContainerEventType.STOPPED, container_id="x", pod_uid="uid-1")
        )
        deadline = time.monotonic() + 10
        while cache.get_pods().by_uid("uid-1") != changed:
            assert time.monotonic() < deadline, "the event's relist never landed"
            time.sleep(0.005)
    assert fake.pod_calls >= 1
    assert set(fake.all_args) == {True}


def test_the_pid_probe_asks_for_the_view_of_its_cache() -> None:
    fake = FakeRuntime(RUNNING, all_pods=ALL)
    running, every = sync_probe(fake), sync_probe(fake, True)
    assert running is not None and every is not None
    assert running.get_pod("uid-1") == RUNNING[1]
    assert every.get_pod("uid-1") == ALL[1]
    assert every.pod_uid_of(f"dead{'uid-1'}") == "uid-1"


def test_the_asyncio_pid_probe_asks_for_the_view_of_its_cache() -> None:
    fake = AsyncFakeRuntime(RUNNING, all_pods=ALL)
    every = async_probe(fake, True)
    assert every is not None
    assert asyncio.run(every.get_pod("uid-1")) == ALL[1]


# -- events= ------------------------------------------------------------------------------------


@pytest.mark.parametrize("events", ["auto", "on", True])
def test_events_auto_and_on_subscribe(events: object) -> None:
    fake = FakeRuntime(RUNNING)
    with RuntimeCache(fake, 3600.0, events=events):  # type: ignore[arg-type]
        assert fake.wait_for_subscriptions(1)


@pytest.mark.parametrize("events", ["off", False])
def test_events_off_subscribes_to_nothing(events: object) -> None:
    fake = FakeRuntime(RUNNING)
    with RuntimeCache(fake, 3600.0, events=events) as cache:  # type: ignore[arg-type]
        cache.get_pods()
        assert fake.subscriptions == 0
        assert cache.stats().events_state == "off"


class _NoEvents:
    def get_pods(self, all: bool) -> PodList:
        return PodList(RUNNING)


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
def test_events_on_needs_a_getter_with_events(cls: type) -> None:
    with pytest.raises(TypeError, match="container_events"):
        cls(_NoEvents(), 1.0, events="on")
    cls(_NoEvents(), 1.0, events="auto")  # auto: polled by the period


@pytest.mark.parametrize("cls", [RuntimeCache, AsyncRuntimeCache])
@pytest.mark.parametrize("events", ["yes", "ON", 1, None])
def test_events_takes_only_its_words(cls: type, events: object) -> None:
    with pytest.raises(ValueError, match="events must be"):
        cls(FakeRuntime(), 1.0, events=events)


def test_asyncio_events_auto_subscribes() -> None:
    async def main() -> int:
        fake = AsyncFakeRuntime(RUNNING)
        async with AsyncRuntimeCache(fake, 3600.0, events="auto") as cache:
            await cache.get_pods()
            for _ in range(1000):
                if fake.subscriptions:
                    break
                await asyncio.sleep(0.005)
        return fake.subscriptions

    assert asyncio.run(main()) >= 1


# -- Found says what it found -------------------------------------------------------------------


def test_found_says_a_sandbox_is_the_sandbox() -> None:
    pods = ALL
    with RuntimeCache(FakeRuntime(pods), 3600.0) as cache:
        sandbox = cache.find(container_id=pods[0].sandboxes[0].id.id)
        container = cache.find(container_id=pods[0].containers[0].id.qualified)
        by_uid = cache.find(uid=pods[0].id)
    assert sandbox is not None and container is not None and by_uid is not None
    assert (sandbox.is_sandbox, sandbox.kind) == (True, "sandbox")
    assert sandbox.container == pods[0].sandboxes[0]
    assert (container.is_sandbox, container.kind) == (False, "container")
    assert (by_uid.is_sandbox, by_uid.kind) == (False, None)
