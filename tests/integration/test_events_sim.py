"""Container events over real gRPC: the client streams (threads and asyncio) and the cache's
subscription against the simulated runtime and every event fault it injects.

The cache tests freeze the cache's clock (a fake one that never moves, 60 s period): whatever
a reader sees beyond the first listing came through an event or a (re)subscription, never
through the period. Where the period must act (dropped events), the fake clock is moved.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from podcache import (
    AsyncRuntimeCache,
    ContainerEvent,
    ContainerEventType,
    ContainerState,
    EventsUnsupportedError,
    Pod,
    PodList,
    RuntimeCache,
)
from podcache.cri import AsyncCRIRuntime, CRIRuntime, caller
from podcache.cri.support import events_unsupported
from podcache.errors import RuntimeUnavailableError
from podcache.sim import PodShape, SimEvent, SimEventType, SimRuntime
from tests.unit.cache.drivers import FakeClock

WAIT = 5.0
_TYPES = {0: ContainerEventType.CREATED, 1: ContainerEventType.STARTED}
_TYPES |= {2: ContainerEventType.STOPPED, 3: ContainerEventType.DELETED}


def eventually(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def expected(events: list[SimEvent]) -> list[ContainerEvent]:
    return [
        ContainerEvent(
            type=_TYPES[int(e.type)],
            container_id=e.container_id,
            pod_sandbox_id=e.sandbox.id if e.sandbox is not None else "",
            created_at=e.created_at,
            pod_uid=e.sandbox.uid if e.sandbox is not None and e.sandbox.has_metadata else "",
        )
        for e in events
    ]


def bare(events: list[ContainerEvent]) -> list[ContainerEvent]:
    """``events`` without the pods they describe (``ContainerEvent.pod``: what they say of
    them is tested in test_events_facts.py)."""
    return [msgspec.structs.replace(event, pod=None) for event in events]


@pytest.fixture(params=["containerd", "crio"])
def sim(request: pytest.FixtureRequest) -> Iterator[SimRuntime]:
    """Each test over the simulator as containerd and as CRI-O (``podcache.sim.flavor``)."""
    with SimRuntime(20, seed=3, flavor=request.param) as runtime:
        yield runtime


def sent(sim: SimRuntime, events: list[SimEvent]) -> list[SimEvent]:
    """Which of the population's ``events`` the runtime sends (CRI-O: no removals)."""
    sandboxes = frozenset(e.sandbox.id for e in events if e.sandbox is not None)
    return sim.flavor.sent(events, sandboxes)


# -- the client streams --------------------------------------------------------------------------
def test_stream_carries_the_population_events_exactly(sim: SimRuntime) -> None:
    with CRIRuntime(sim.endpoint) as runtime, runtime.container_events() as stream:
        stream.open()
        assert stream.connected
        sim.wait_for_event_subscribers(1)
        made = sent(sim, sim.churn_step(2))
        got = [next(stream) for _ in made]
    assert bare(got) == expected(made)
    removals = {ContainerEventType.DELETED} if sim.flavor.sends_removal_events else set()
    assert {e.type for e in got} == {
        ContainerEventType.CREATED,
        ContainerEventType.STARTED,
        ContainerEventType.STOPPED,
    } | removals


def test_async_stream_sees_the_same_events_as_the_thread_stream(sim: SimRuntime) -> None:
    async def both() -> tuple[list[ContainerEvent], list[ContainerEvent], list[SimEvent]]:
        async with AsyncCRIRuntime(sim.endpoint) as aruntime:
            with CRIRuntime(sim.endpoint) as runtime, runtime.container_events() as stream:
                astream = aruntime.container_events()
                await astream.open()
                stream.open()
                await asyncio.to_thread(sim.wait_for_event_subscribers, 2)
                made = sent(sim, sim.churn_step(1))
                threaded = [next(stream) for _ in made]
                asynced = [await anext(astream) for _ in made]
                await astream.aclose()
        return threaded, asynced, made

    threaded, asynced, made = asyncio.run(both())
    assert bare(threaded) == bare(asynced) == expected(made)
    assert threaded == asynced


def test_unimplemented_is_events_unsupported_naming_the_endpoint(sim: SimRuntime) -> None:
    # open() raises when the end comes within its confirmation window (CONFIRM_SECONDS); on a
    # loaded machine it may come later, and the first read raises it.
    sim.faults.unimplemented = {"GetContainerEvents"}
    with CRIRuntime(sim.endpoint) as runtime:
        with pytest.raises(EventsUnsupportedError) as caught:
            stream = runtime.container_events()
            stream.open()
            next(stream)
        assert sim.endpoint in str(caught.value)
        with pytest.raises(EventsUnsupportedError):
            next(iter(runtime.container_events()))

    async def aopen() -> None:
        async with AsyncCRIRuntime(sim.endpoint) as aruntime:
            stream = aruntime.container_events()
            await stream.open()
            await anext(stream)

    with pytest.raises(EventsUnsupportedError):
        asyncio.run(aopen())


def test_an_endpoint_with_nothing_there_fails_to_open_at_once(tmp_path: object) -> None:
    endpoint = f"unix://{tmp_path}/none.sock"
    with CRIRuntime(endpoint, timeout=60.0) as runtime:
        started = time.monotonic()
        stream = runtime.container_events()
        with pytest.raises(RuntimeUnavailableError) as caught:
            stream.open()
        assert stream.connected is False  # never reached (the cache counts the outage so)
    assert time.monotonic() - started < 30.0  # without waiting for the 60 s deadline
    assert "none.sock" in str(caught.value)


def test_a_cut_stream_raises_unavailable_naming_the_endpoint(sim: SimRuntime) -> None:
    with CRIRuntime(sim.endpoint) as runtime, runtime.container_events() as stream:
        stream.open()
        sim.wait_for_event_subscribers(1)
        assert sim.cut_event_streams() == 1
        with pytest.raises(RuntimeUnavailableError) as caught:
            next(stream)
    assert sim.endpoint in str(caught.value)


def test_a_stream_the_server_closes_like_containerd_2_ends_the_iteration(
    sim: SimRuntime,
) -> None:
    """containerd 2.x closes a subscription with UNAVAILABLE "container events subscription
    closed by server" where 1.7 ends it OK: an end of the stream, not a failure (the events
    before it are delivered)."""
    with CRIRuntime(sim.endpoint) as runtime, runtime.container_events() as stream:
        stream.open()
        sim.wait_for_event_subscribers(1)
        made = sent(sim, sim.churn_step(1))
        assert sim.close_event_streams() == 1
        assert bare(list(stream)) == expected(made)


def test_an_async_stream_the_server_closes_like_containerd_2_ends_the_iteration(
    sim: SimRuntime,
) -> None:
    async def read() -> tuple[list[ContainerEvent], list[SimEvent]]:
        async with AsyncCRIRuntime(sim.endpoint) as runtime:
            stream = runtime.container_events()
            await stream.open()
            await asyncio.to_thread(sim.wait_for_event_subscribers, 1)
            made = sent(sim, sim.churn_step(1))
            sim.close_event_streams()
            return [event async for event in stream], made

    got, made = asyncio.run(read())
    assert bare(got) == expected(made)


def test_close_from_another_thread_ends_the_iteration(sim: SimRuntime) -> None:
    with CRIRuntime(sim.endpoint) as runtime:
        stream = runtime.container_events()
        stream.open()
        import threading

        threading.Timer(0.1, stream.close).start()
        assert list(stream) == []


# -- the cache over the simulated runtime, one fault at a time -----------------------------------
def running_ids(cache: RuntimeCache) -> set[str]:
    return {c.id.id for pod in cache.get_pods() for c in pod.containers}


def start_pod(sim: SimRuntime) -> set[str]:
    """A new running pod; its running container IDs."""
    uid, _ = sim.population.create_pod(PodShape.RUNNING)
    snapshot = sim.population.snapshot()
    sandboxes = {s.id for s in snapshot.sandboxes if s.uid == uid}
    return {c.id for c in snapshot.containers if c.pod_sandbox_id in sandboxes and c.state == 1}


@pytest.fixture
def subscribed(sim: SimRuntime) -> Iterator[tuple[RuntimeCache, FakeClock]]:
    clock = FakeClock()
    with (
        CRIRuntime(sim.endpoint) as runtime,
        RuntimeCache(runtime, 60.0, clock=clock, events=True) as cache,
    ):
        cache.get_pods()
        eventually(lambda: cache.stats().events_state == "subscribed")
        sim.wait_for_event_subscribers(1)
        eventually(lambda: not cache.stats().in_flight)
        yield cache, clock


def test_no_fault_a_new_pod_shows_without_the_period(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, _ = subscribed
    new = start_pod(sim)
    eventually(lambda: new <= running_ids(cache))


def test_stream_cut_midway_resubscribes_and_catches_up(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, _ = subscribed
    sim.faults.event_drop_rate = 1.0  # nothing reaches the cache by events...
    new = start_pod(sim)
    sim.cut_event_streams()  # ...but the resubscription refreshes
    eventually(lambda: cache.stats().resubscriptions == 1)
    eventually(lambda: new <= running_ids(cache))
    assert cache.stats().events_state == "subscribed"


def test_a_stream_the_server_closes_like_containerd_2_is_resubscribed_and_refreshed(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, _ = subscribed
    sim.faults.event_drop_rate = 1.0  # nothing reaches the cache by events...
    new = start_pod(sim)
    assert sim.close_event_streams() == 1  # ...but the resubscription refreshes
    eventually(lambda: cache.stats().resubscriptions == 1)
    eventually(lambda: new <= running_ids(cache))
    assert cache.stats().events_state == "subscribed"
    sim.faults.event_drop_rate = 0.0
    newer = start_pod(sim)  # the new stream carries events again
    eventually(lambda: newer <= running_ids(cache))


def test_stream_cut_after_n_events_every_time_never_stops_the_subscription(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, _ = subscribed
    sim.faults.event_cut_after = 1
    for _ in range(3):
        new = start_pod(sim)
        eventually(lambda new=new: new <= running_ids(cache))  # type: ignore[misc]
    assert cache.stats().resubscriptions >= 1


EVENT_DELAY = 1.0
"""How long the delay fault holds each event: ten times the test's look before it."""


def test_delayed_events_show_the_change_when_they_arrive(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, _ = subscribed
    sim.faults.event_delay = EVENT_DELAY
    started = time.monotonic()
    new = start_pod(sim)
    time.sleep(0.1)  # far less than the delay, even on a loaded machine
    assert not new & running_ids(cache)  # the frozen clock keeps the old snapshot
    eventually(lambda: new <= running_ids(cache))
    assert time.monotonic() - started >= EVENT_DELAY


def test_dropped_events_leave_the_period_as_the_bound(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, clock = subscribed
    sim.faults.event_drop_rate = 1.0
    new = start_pod(sim)
    time.sleep(0.3)
    assert not new & running_ids(cache)
    assert cache.stats().events_received == 0
    clock.advance(60.001)
    assert new <= running_ids(cache)


def test_duplicated_events_are_counted_and_coalesced(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, _ = subscribed
    sim.faults.event_duplicate_rate = 1.0
    before = cache.stats()
    with sim.pause_churn():
        _, made = sim.population.create_pod(PodShape.RUNNING)
    events = sent(sim, made)
    eventually(lambda: cache.stats().events_received - before.events_received == 2 * len(events))
    eventually(lambda: not cache.stats().in_flight)
    after = cache.stats()
    assert after.event_refreshes - before.event_refreshes <= 2 * len(events)
    assert after.refreshes - before.refreshes == after.event_refreshes - before.event_refreshes


def test_out_of_order_events_still_end_in_the_current_state(
    sim: SimRuntime, subscribed: tuple[RuntimeCache, FakeClock]
) -> None:
    cache, _ = subscribed
    sim.faults.event_reorder_rate = 0.5
    for _ in range(4):
        sim.churn_step(1)
    sim.faults.event_reorder_rate = 0.0
    sim.churn_step(1)  # flushes an event still held back
    truth = {
        c.id
        for c in sim.population.snapshot().containers
        if c.state == 1 and sim.population.sandbox(c.pod_sandbox_id) is not None
    }
    eventually(lambda: running_ids(cache) == truth)


def test_unimplemented_polls_by_the_period(sim: SimRuntime) -> None:
    sim.faults.unimplemented = {"GetContainerEvents"}
    clock = FakeClock()
    with (
        CRIRuntime(sim.endpoint) as runtime,
        RuntimeCache(runtime, 60.0, clock=clock, events=True) as cache,
    ):
        cache.get_pods()
        eventually(lambda: cache.stats().events_state == "unsupported")
        new = start_pod(sim)
        time.sleep(0.2)
        assert not new & running_ids(cache)
        clock.advance(60.001)
        assert new <= running_ids(cache)


def test_async_cache_over_the_simulated_runtime_follows_events(sim: SimRuntime) -> None:
    async def run() -> None:
        clock = FakeClock()
        async with (
            AsyncCRIRuntime(sim.endpoint) as runtime,
            AsyncRuntimeCache(runtime, 60.0, clock=clock, events=True) as cache,
        ):
            await cache.get_pods()
            await asyncio.to_thread(sim.wait_for_event_subscribers, 1)
            new = start_pod(sim)
            deadline = time.monotonic() + WAIT
            while not new <= {c.id.id for p in await cache.get_pods() for c in p.containers}:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
            sim.cut_event_streams()
            while cache.stats().resubscriptions < 1:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)

    asyncio.run(run())


def test_a_restarted_runtime_is_found_again_and_counted_once(tmp_path: object) -> None:
    """The runtime goes away for 3 s (the backoff grows to its 2 s cap meanwhile) and comes
    back on the same socket: the cache subscribes again (within one backoff step) and counts
    the outage once."""
    path = f"{tmp_path}/rt.sock"
    clock = FakeClock()
    first = SimRuntime(5, seed=1, socket=path).start()
    try:
        with (
            CRIRuntime(first.endpoint) as runtime,
            RuntimeCache(runtime, 60.0, clock=clock, events=True) as cache,
        ):
            cache.get_pods()
            eventually(lambda: cache.stats().events_state == "subscribed")
            first.stop()
            eventually(lambda: cache.stats().events_state == "reconnecting")
            time.sleep(3.0)
            with SimRuntime(7, seed=2, socket=path) as second:
                eventually(lambda: cache.stats().resubscriptions == 1)
                eventually(lambda: not cache.stats().in_flight)
                with CRIRuntime(second.endpoint) as direct:
                    assert cache.get_pods() == direct.get_pods()  # the new runtime's pods
                time.sleep(0.2)
                assert cache.stats().resubscriptions == 1
    finally:
        first.stop()


# -- CRI-O: no event on removal --------------------------------------------------------------------
class _AllPods:
    """``runtime`` as the all view reads it (NotReady pods too), its events and pod relists."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self._runtime = runtime
        self.endpoint = runtime.endpoint

    def get_pods(self, all: bool) -> PodList:
        return self._runtime.get_pods(True)

    def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        return self._runtime.get_pod(uid, True)

    def pod_uid_of(self, ident: str) -> str | None:
        return self._runtime.pod_uid_of(ident)

    def container_events(self) -> Any:
        return self._runtime.container_events()


def listed_uids(cache: RuntimeCache) -> set[str]:
    return {pod.id for pod in cache.get_pods()}


def stopped_in(cache: RuntimeCache, uid: str) -> bool:
    """Whether the cache holds pod ``uid`` with every sandbox stopped."""
    pods = [p for p in cache.get_pods() if p.id == uid]
    return bool(pods) and all(s.state is ContainerState.EXITED for s in pods[0].sandboxes)


def test_crios_stream_has_no_deleted_event_and_no_sandbox_created() -> None:
    """What the simulator's CRI-O sends (``podcache.sim.flavor``): a new pod's sandbox is
    STARTED without CREATED, a stop is STOPPED, a removal is nothing (the next events on the
    stream are the following change's)."""
    with (
        SimRuntime(4, seed=3, flavor="crio") as sim,
        CRIRuntime(sim.endpoint) as runtime,
        runtime.container_events() as stream,
    ):
        stream.open()
        sim.wait_for_event_subscribers(1)
        uid, made = sim.population.create_pod(PodShape.RUNNING)
        sandbox = next(e.container_id for e in made if e.sandbox and e.container_id == e.sandbox.id)
        created = [next(stream) for _ in range(len(made) - 1)]  # all but the sandbox's CREATED
        assert (ContainerEventType.STARTED, sandbox) in {(e.type, e.container_id) for e in created}
        assert (ContainerEventType.CREATED, sandbox) not in {
            (e.type, e.container_id) for e in created
        }
        stopped = sim.population.stop_pod(uid)
        assert [next(stream).type for _ in stopped] == [ContainerEventType.STOPPED] * len(stopped)
        removed = sim.population.remove_pod(uid)
        assert {e.type for e in removed} == {SimEventType.DELETED}  # the population's truth
        _, marker = sim.population.create_pod(PodShape.RUNNING)
        after = next(stream)  # the removal sent nothing: the next event is the marker pod's
        assert after.container_id in {e.container_id for e in marker}
        assert after.type is not ContainerEventType.DELETED


@pytest.mark.parametrize("flavor", ["containerd", "crio"])
def test_a_removed_pod_leaves_by_its_events_or_at_the_period_on_crio(flavor: str) -> None:
    """containerd's DELETED events relist the removed pod at once; CRI-O sends none, so the
    pod stays listed until the period's full listing (its STOPPED events came earlier, when
    the pod was still there): the period bounds a removal on CRI-O."""
    clock = FakeClock()
    with (
        SimRuntime(6, seed=3, flavor=flavor) as sim,
        CRIRuntime(sim.endpoint) as runtime,
        RuntimeCache(_AllPods(runtime), 60.0, clock=clock, events=True) as cache,
    ):
        cache.get_pods()
        eventually(lambda: cache.stats().events_state == "subscribed")
        sim.wait_for_event_subscribers(1)
        uid, _ = sim.population.create_pod(PodShape.RUNNING)
        eventually(lambda: uid in listed_uids(cache))
        sim.population.stop_pod(uid)
        eventually(lambda: stopped_in(cache, uid))
        # Every relist the STOPPED events scheduled has run before the removal (a barrier
        # pod's events come after theirs): only an event or the period can see it leave.
        barrier, _ = sim.population.create_pod(PodShape.RUNNING)
        eventually(lambda: barrier in listed_uids(cache) and _relists_idle(cache))
        sim.population.remove_pod(uid)
        marker, _ = sim.population.create_pod(PodShape.RUNNING)
        eventually(lambda: marker in listed_uids(cache))  # events after the removal arrived
        if flavor == "containerd":
            eventually(lambda: uid not in listed_uids(cache))
            return
        assert uid in listed_uids(cache)  # no event said it left
        clock.advance(60.001)
        assert uid not in listed_uids(cache)  # the period's listing did


def _relists_idle(cache: RuntimeCache) -> bool:
    """No pod relist running, queued or waiting (the cache's own bookkeeping)."""
    relists = cache._core.pod_relists
    return not relists.pending() and not relists.inflight


def test_the_start_up_check_refuses_crio_without_events_even_when_its_end_comes_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--events on``'s check (``support.events_unsupported``): CRI-O's at-once end read only
    after the stream counted as open (no confirmation window at all here, as a loaded machine
    may make it) is still a runtime without events; a runtime with events is not refused."""
    monkeypatch.setattr(caller, "CONFIRM_SECONDS", 0.0)
    with SimRuntime(2, seed=1, flavor="crio", pod_events=False) as sim:
        refused = events_unsupported(sim.endpoint, 5.0)
    assert refused is not None and "enable_pod_events = false" in str(refused)
    with SimRuntime(2, seed=1, flavor="crio") as sim:
        assert events_unsupported(sim.endpoint, 5.0) is None


def test_a_cache_reading_crios_end_past_the_confirmation_still_polls_without_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The end read by the iteration, not ``open()`` (as on a loaded machine): the cache turns
    to ``unsupported`` all the same and asks no more (no resubscription loop)."""
    monkeypatch.setattr(caller, "CONFIRM_SECONDS", 0.0)
    clock = FakeClock()
    with (
        SimRuntime(2, seed=1, flavor="crio", pod_events=False) as sim,
        CRIRuntime(sim.endpoint) as runtime,
        RuntimeCache(runtime, 60.0, clock=clock, events=True) as cache,
    ):
        cache.get_pods()
        eventually(lambda: cache.stats().events_state == "unsupported")
        calls = sim.event_calls
        for _ in range(5):  # five periods polled
            clock.advance(60.001)
            cache.get_pods()
        assert sim.event_calls == calls and cache.stats().event_stream_failures == 1
