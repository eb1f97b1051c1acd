"""Events relist the pod they name, on both twins (docs/architecture.md §7 rules 1-5), and every
snapshot reaches the publish hooks first (§3 rules 10-11).

Both caches run their real threads and tasks over the fakes (``FakeRuntime`` and
``AsyncFakeRuntime``, whose ``get_pod`` can be held with ``block_pods``); every wait is for a
condition, never for a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from functools import partial

import msgspec
import pytest

from podcache import (
    ChangeType,
    ContainerEvent,
    ContainerEventType,
    ContainerState,
    Pod,
    PodList,
)
from podcache.cache.core import EVENT_BUDGET
from podcache.cache.publishing import Publication
from podcache.errors import RuntimeUnavailableError
from tests.unit.cache.drivers import (
    AsyncEventsDriver,
    FakeClock,
    SyncEventsDriver,
    make_pod,
)

WAIT = 10.0
Twin = SyncEventsDriver | AsyncEventsDriver


def settle(driver: Twin, check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` holds, letting the driver's threads or loop run meanwhile."""
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        if isinstance(driver, AsyncEventsDriver):
            driver.loop.run_until_complete(asyncio.sleep(0.002))
        else:
            time.sleep(0.002)


@pytest.fixture(params=[SyncEventsDriver, AsyncEventsDriver], ids=["threads", "asyncio"])
def twin(request: pytest.FixtureRequest) -> Iterator[Twin]:
    driver = request.param(60.0, FakeClock())
    driver.fake.set_pods([make_pod(2), make_pod(1)])
    driver.get()
    yield driver
    driver.close()


def stopped(pod: Pod) -> Pod:
    """``pod`` with its containers exited (a changed pod, same UID)."""
    containers = [msgspec.structs.replace(c, state=ContainerState.EXITED) for c in pod.containers]
    return msgspec.structs.replace(pod, containers=tuple(containers))


def event(container: str = "", pod_uid: str = "", sandbox: str = "") -> ContainerEvent:
    return ContainerEvent(
        type=ContainerEventType.STOPPED,
        container_id=container,
        pod_sandbox_id=sandbox,
        pod_uid=pod_uid,
    )


def pod_in(pods: PodList, uid: str) -> Pod | None:
    return pods.by_uid(uid)


def test_an_event_naming_a_pod_relists_that_pod_alone(twin: Twin) -> None:
    fake = twin.fake
    before = twin.get()
    stamp = twin.cache_time
    watch = twin.watch(before.revision)
    changed = stopped(make_pod(1))
    fake.set_pods([make_pod(2), changed])
    fake.emit(event("anything", pod_uid="uid-1"))
    settle(twin, lambda: twin.stats().pod_relists == 1, "the pod's relist")
    after = twin.get()
    assert pod_in(after, "uid-1") == changed and pod_in(after, "uid-2") is before[0]
    assert [pod.id for pod in after] == ["uid-2", "uid-1"]  # the getters' order kept
    assert (fake.calls, fake.pod_calls) == (1, 1)  # no listing of the node
    assert twin.cache_time == stamp  # §3 rule 11: the timestamp stays the full listing's
    assert after.revision == before.revision + 1
    changes = watch.read(WAIT)
    assert [(c.type, c.pod.id, c.previous) for c in changes] == [
        (ChangeType.MODIFIED, "uid-1", make_pod(1))
    ]
    watch.close()


def test_a_removed_and_a_created_pod_enter_and_leave_one_change_each(twin: Twin) -> None:
    fake = twin.fake
    fake.set_pods([make_pod(3), make_pod(2)])  # 1 removed, 3 created
    fake.emit(event(pod_uid="uid-1"), event(pod_uid="uid-3"))
    settle(twin, lambda: twin.stats().pod_relists == 2, "both relists")
    assert [pod.id for pod in twin.get()] == ["uid-3", "uid-2"]
    assert fake.calls == 1 and twin.get() == fake.pods


def test_an_event_with_only_an_id_relists_the_pod_the_snapshot_lists_for_it(twin: Twin) -> None:
    fake = twin.fake
    container = make_pod(2).containers[0].id.id
    fake.set_pods([stopped(make_pod(2)), make_pod(1)])
    fake.emit(event(container))  # no pod UID: the snapshot's pod for the container
    settle(twin, lambda: twin.stats().pod_relists == 1, "the pod's relist")
    assert fake.calls == 1 and twin.get() == fake.pods


def test_an_event_naming_no_known_pod_relists_the_node(twin: Twin) -> None:
    fake = twin.fake
    fake.set_pods([make_pod(3), make_pod(2), make_pod(1)])
    fake.emit(event("not-listed"))
    settle(twin, lambda: fake.calls == 2, "a full listing")
    settle(twin, lambda: twin.get() == fake.pods, "the new pod")
    assert fake.pod_calls == 0


def test_a_failed_relist_asks_for_a_full_listing(twin: Twin) -> None:
    fake = twin.fake
    fake.pod_error = RuntimeUnavailableError("fake://", "relist failed")
    fake.set_pods([stopped(make_pod(2)), make_pod(1)])
    fake.emit(event(pod_uid="uid-2"))
    settle(twin, lambda: twin.stats().pod_relist_errors == 1, "the failure")
    settle(twin, lambda: fake.calls == 2, "the full listing it asked for")
    settle(twin, lambda: twin.get() == fake.pods, "the listing's pods")


def test_the_stream_is_read_on_while_a_relist_is_held(twin: Twin) -> None:
    """The reader never waits for a relist (§7): with ``get_pod`` held, every event is still
    received, and the held pod is relisted at most twice (rule 4)."""
    fake = twin.fake
    fake.block_pods()
    fake.set_pods([stopped(make_pod(2)), make_pod(1)])
    fake.emit(event(pod_uid="uid-2"))
    settle(twin, lambda: fake.pod_calls == 1, "the first relist began")
    fake.emit(*[event(pod_uid="uid-2") for _ in range(200)])
    settle(twin, lambda: twin.stats().events_received == 201, "every event read")
    assert fake.pods_held and twin.stats().pod_relists == 0  # all read while it is held
    fake.release_pods()
    settle(twin, lambda: twin.stats().pod_relists == 2, "the relist and the one queued")
    assert fake.pod_calls == 2 and fake.calls == 1
    assert twin.get() == fake.pods


def test_hooks_hear_every_publish_in_order_before_any_caller(twin: Twin) -> None:
    heard: list[Publication] = []
    order: list[str] = []

    def hook(publication: Publication) -> None:
        heard.append(publication)
        order.append("hook")

    remove = twin.cache.on_publish(hook)
    fake = twin.fake
    fake.set_pods([stopped(make_pod(2)), make_pod(1)])
    fake.emit(event(pod_uid="uid-2"))
    settle(twin, lambda: len(heard) == 1, "the relist's publication")
    twin.force(1e9)
    order.append("caller")
    assert order == ["hook", "hook", "caller"]
    relist, listing = heard
    assert relist.relisted == "uid-2" and listing.relisted is None
    assert [c.pod.id for c in relist.changes] == ["uid-2"] and listing.changes == ()
    assert listing.revision == relist.revision == relist.pods.revision
    assert listing.pods is twin.get()  # the very object callers are handed
    remove()
    remove()  # idempotent
    twin.force(1e10)
    assert len(heard) == 2


def test_a_hook_that_raises_is_logged_and_the_others_still_run(
    twin: Twin, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[int] = []

    def broken(publication: Publication) -> None:
        raise ValueError("a broken hook")

    twin.cache.on_publish(broken)
    twin.cache.on_publish(lambda publication: heard.append(publication.revision))
    with caplog.at_level(logging.ERROR, logger="podcache.cache"):
        twin.fake.set_pods([make_pod(9)])
        twin.force(1e9)
    assert twin.get() == twin.fake.pods and len(heard) == 1
    assert "a publish hook failed" in caplog.text and "a broken hook" in caplog.text
    with pytest.raises(TypeError, match="callable"):
        twin.cache.on_publish("not a hook")  # type: ignore[arg-type]


def test_a_deleted_event_naming_nothing_listed_relists_nothing(twin: Twin) -> None:
    """containerd 1.7 sends a sandbox's DELETED with an empty sandbox status after the relist
    that removed its pod: its IDs are in no pod of the snapshot, and nothing changes."""
    fake = twin.fake
    gone = ContainerEvent(type=ContainerEventType.DELETED, container_id="sandbox-long-gone")
    fake.emit(gone, event(pod_uid="uid-2"))  # read in order: the second marks the first done
    settle(twin, lambda: twin.stats().pod_relists == 1, "the second event's relist")
    assert twin.stats().event_refreshes == 0 and fake.calls == 1
    fake.emit(event("also-unknown"))  # any other event naming nothing lists the node
    settle(twin, lambda: twin.stats().event_refreshes == 1, "the full listing asked for")


def test_events_that_happened_before_the_listing_relist_nothing(twin: Twin) -> None:
    """§7 rule 4: an event whose time is before the start of the call that fetched its pod's
    data needs no relist (a runtime replaying old events to a new subscriber)."""
    fake = twin.fake
    long_ago = ContainerEvent(
        type=ContainerEventType.STARTED, container_id="c", pod_uid="uid-1", created_at=10**18
    )  # 2001: before every call this cache made
    fake.emit(long_ago, event(pod_uid="uid-2"))  # no time: relisted
    settle(twin, lambda: twin.stats().pod_relists == 1, "the untimed event's relist")
    assert twin.stats().pod_events_covered == 1 and fake.pod_calls == 1


# -- the budget (§7 rule 7) ----------------------------------------------------------------------
RELIST_TAKES = 0.01
"""How long every relist takes on the cache's clock in the budget's tests (the fake moves it)."""


@pytest.fixture(params=[SyncEventsDriver, AsyncEventsDriver], ids=["threads", "asyncio"])
def timed_twin(request: pytest.FixtureRequest) -> Iterator[tuple[Twin, FakeClock, list[str]]]:
    """A twin whose every relist takes ``RELIST_TAKES`` on its clock; the pods it relisted,
    in order. (The drivers' timers run on real time: one that ends before the fake clock
    reached the budget's time finds nothing due and is armed again; the test moves the clock.)"""
    clock = FakeClock()
    driver = request.param(60.0, clock)
    driver.fake.set_pods([make_pod(2), make_pod(1)])
    driver.get()
    asked: list[str] = []
    fake = driver.fake
    if isinstance(driver, AsyncEventsDriver):
        original = fake.get_pod

        async def takes_time(uid: str, all: bool = False) -> Pod | None:
            asked.append(uid)
            clock.advance(RELIST_TAKES)
            result: Pod | None = await original(uid, all)
            return result

        fake.get_pod = takes_time
    else:
        plain = fake.get_pod

        def takes_time_in_threads(uid: str, all: bool = False) -> Pod | None:
            asked.append(uid)
            clock.advance(RELIST_TAKES)
            result: Pod | None = plain(uid, all)
            return result

        fake.get_pod = takes_time_in_threads
    yield driver, clock, asked
    driver.close()


def quiet(driver: Twin) -> None:
    """Let the driver's threads or loop run a while (its timers fire meanwhile, finding
    nothing due): what the test asserts next must not have happened by then."""
    if isinstance(driver, AsyncEventsDriver):
        driver.loop.run_until_complete(asyncio.sleep(0.05))
    else:
        time.sleep(0.05)


def test_a_flood_of_events_for_one_pod_waits_for_the_budget(
    timed_twin: tuple[Twin, FakeClock, list[str]],
) -> None:
    """One pod named 200 times: one relist, then one more only when
    ``EVENT_BUDGET`` times its duration has passed after it ended; the rest coalesced."""
    driver, clock, asked = timed_twin
    driver.fake.emit(event(pod_uid="uid-1"))
    settle(driver, lambda: driver.stats().pod_relists == 1, "the first relist")
    driver.fake.emit(*[event(pod_uid="uid-1") for _ in range(200)])
    settle(driver, lambda: driver.stats().events_received == 201, "every event read")
    quiet(driver)
    assert asked == ["uid-1"]  # the budget holds the next one back
    clock.advance(EVENT_BUDGET * RELIST_TAKES)  # its time has come: the timer finds it due
    settle(driver, lambda: driver.stats().pod_relists == 2, "the coalesced relist")
    quiet(driver)
    assert asked == ["uid-1", "uid-1"]


def _asked(asked: list[str], count: int) -> bool:
    return len(asked) == count


def test_events_naming_new_pods_are_relisted_one_budget_apart_in_arrival_order(
    timed_twin: tuple[Twin, FakeClock, list[str]],
) -> None:
    """Events each naming another pod the runtime never listed: one relist per
    ``(1 + EVENT_BUDGET)`` relist durations, the pods in the order their first event came,
    each once however often it is named meanwhile."""
    driver, clock, asked = timed_twin
    driver.fake.emit(event(pod_uid="uid-1"))  # a relist that took RELIST_TAKES: the budget's
    settle(driver, lambda: driver.stats().pod_relists == 1, "the first relist")
    names = [f"new-{n}" for n in range(4)]
    driver.fake.emit(*[event(pod_uid=uid) for uid in names + names[::-1]])
    settle(driver, lambda: driver.stats().events_received == 9, "every event read")
    for done in range(len(names)):
        quiet(driver)
        assert asked == ["uid-1", *names[:done]]
        clock.advance((1 + EVENT_BUDGET) * RELIST_TAKES)
        settle(driver, partial(_asked, asked, done + 2), "the next in the budget")
    settle(driver, lambda: driver.stats().pod_relists == 1 + len(names), "the last relist")
    quiet(driver)
    assert asked == ["uid-1", *names]


def test_close_forgets_the_relists_waiting_for_the_budget(
    timed_twin: tuple[Twin, FakeClock, list[str]],
) -> None:
    """Closing the subscription leaves the waiting relists to the period, as every change after
    it: none starts after ``close()``, which waits only for the relist in flight (``podcache
    serve`` took more than 30 s to stop under a flood when close waited for them at the
    budget's pace)."""
    driver, clock, asked = timed_twin
    fake = driver.fake
    fake.emit(event(pod_uid="uid-1"))
    settle(driver, lambda: driver.stats().pod_relists == 1, "the first relist")
    clock.advance(EVENT_BUDGET * RELIST_TAKES)
    fake.block_pods()
    fake.emit(*[event(pod_uid=f"new-{n}") for n in range(4)])
    settle(driver, lambda: len(asked) == 2, "the next relist began, and is held")
    clock.advance(100.0)  # the budget would let every waiting pod start now
    if isinstance(driver, AsyncEventsDriver):
        closing = driver.loop.create_task(driver.cache.close())
        driver.loop.run_until_complete(asyncio.sleep(0.3))  # timers armed before may fire
        assert asked == ["uid-1", "new-0"]
        fake.release_pods()
        driver.loop.run_until_complete(asyncio.wait_for(closing, WAIT))
    else:
        driver.cache.close()
        time.sleep(0.3)  # timers armed before may fire
        assert asked == ["uid-1", "new-0"]
        fake.release_pods()
    settle(driver, lambda: driver.stats().pod_relists == 2, "the held relist ended")
    quiet(driver)
    assert asked == ["uid-1", "new-0"]


def test_no_relist_begins_while_one_has_been_in_flight_for_a_while(
    timed_twin: tuple[Twin, FakeClock, list[str]],
) -> None:
    """A cold start knows no relist's duration yet: were it charged nothing, a burst of events
    would start ``MAX_IN_FLIGHT`` relists at once, and their durations times ten would then
    silence events for long. One that has been in flight for any time on the clock holds the
    others back; they begin when it ends and the budget allows (§7 rule 7)."""
    driver, clock, asked = timed_twin
    fake = driver.fake
    fake.block_pods()
    fake.emit(event(pod_uid="new-0"))
    settle(driver, lambda: asked == ["new-0"], "the first relist began, and is held")
    fake.emit(*[event(pod_uid=f"new-{n}") for n in range(1, 4)])
    settle(driver, lambda: driver.stats().events_received == 4, "every event read")
    quiet(driver)
    assert asked == ["new-0"]
    fake.release_pods()
    settle(driver, lambda: driver.stats().pod_relists == 1, "the first relist ended")
    clock.advance(EVENT_BUDGET * RELIST_TAKES)
    settle(driver, lambda: len(asked) == 2, "the next, when the budget allows")
    quiet(driver)
    assert asked == ["new-0", "new-1"]
