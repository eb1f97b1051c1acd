"""Container events on real containerd: 1.7 and 2.1 stream them (the cache follows changes
without its period, and survives a SIGKILL and restart), 1.6 answers UNIMPLEMENTED (the cache
polls). What 2.x does differently is tested here too: sandbox events carry the sandbox's ID as
``container_id`` (1.7 as well), events made while nobody subscribed are replayed to the next
subscriber (only hints: they change nothing the cache shows), and containerd blocks its CRI
calls while a subscriber does not read (so the cache reads on while a refresh is held).

Every pod made here is removed here; the cache period is 60 s wherever only events may explain
what a reader sees.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from podcache import (
    AsyncRuntimeCache,
    ContainerEvent,
    ContainerEventType,
    EventsUnsupportedError,
    PodList,
    RuntimeCache,
)
from podcache.cri import AsyncCRIRuntime, ContainerEventStream, CRIRuntime
from tests.containerd.conftest import EVENT_VERSIONS, Containerd
from tests.containerd.harness import ContainerRecord, CRIHarness, SandboxRecord
from tests.serve.conftest import Client, ServeProcess

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(300)]

LONG_PERIOD = 60.0
# Seen well before the period ran out, a change can only have come through an event: that is
# what these tests assert. How fast (within 2 s of a restart) is measured by
# benchmarks/bench_events.py, never bounded here, where a loaded machine could miss it.
BEFORE_THE_PERIOD = LONG_PERIOD / 2
WAIT = 10.0  # for what must happen, on a loaded machine
with_events = pytest.mark.parametrize("containerd", EVENT_VERSIONS, indirect=True)
only_16 = pytest.mark.parametrize("containerd", ["1.6"], indirect=True)
LIFE = [  # the events of a sandbox or container made, started, stopped and removed
    ContainerEventType.CREATED,
    ContainerEventType.STARTED,
    ContainerEventType.STOPPED,
    ContainerEventType.DELETED,
]


def within(seconds: float, check: Callable[[], bool]) -> float:
    """Wait until ``check()``; the seconds it took (fails after ``seconds``)."""
    started = time.monotonic()
    while not check():
        elapsed = time.monotonic() - started
        assert elapsed < seconds, f"not within {seconds} s"
        time.sleep(0.005)
    return time.monotonic() - started


def running(cache: RuntimeCache) -> set[str]:
    return {c.id.id for pod in cache.get_pods() for c in pod.containers}


def settled(cache: RuntimeCache | AsyncRuntimeCache) -> bool:
    """Every refresh the subscription asked for has run (none in flight, none waiting for the
    event budget), besides the first reader's."""
    stats = cache.stats()
    return not stats.in_flight and stats.refreshes >= 1 + stats.event_refreshes


@pytest.fixture
def pods(cri_harness: CRIHarness) -> Iterator[list[SandboxRecord]]:
    """The pods a test makes (append them); removed afterwards."""
    made: list[SandboxRecord] = []
    yield made
    cri_harness.remove_all([s.id for s in made if not s.removed])


def new_pod(h: CRIHarness, made: list[SandboxRecord], name: str) -> SandboxRecord:
    sandbox = h.run_pod(name, "events", labels={"test": "events"})
    made.append(sandbox)
    return sandbox


class Reader:
    """A thread reading a stream into ``events`` (and the error that ended it, if any)."""

    def __init__(self, stream: ContainerEventStream) -> None:
        self.events: list[ContainerEvent] = []
        self.error: BaseException | None = None
        self._stream = stream
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                self.events.append(event)
        except Exception as exc:
            self.error = exc

    def of(self, ident: str) -> list[ContainerEvent]:
        """The events whose ``container_id`` is ``ident``, in order."""
        return [e for e in list(self.events) if e.container_id == ident]

    def close(self) -> None:
        self._stream.close()
        self._thread.join(5)


@with_events
def test_stream_carries_created_and_started_with_the_sandbox(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    with CRIRuntime(containerd.endpoint) as runtime, runtime.container_events() as stream:
        stream.open()
        sandbox = new_pod(cri_harness, pods, "ev-stream")
        container = cri_harness.create_container(sandbox, "app")
        seen = []
        for event in stream:
            seen.append(event)
            if event.container_id == container.id and event.type is ContainerEventType.STARTED:
                break
    mine = [(e.type, e.pod_sandbox_id) for e in seen if e.container_id == container.id]
    assert mine == [
        (ContainerEventType.CREATED, sandbox.id),
        (ContainerEventType.STARTED, sandbox.id),
    ]
    assert all(e.created_at > 0 for e in seen)


@with_events
def test_cache_sees_a_started_container_without_waiting_for_the_period(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    with (
        CRIRuntime(containerd.endpoint) as runtime,
        RuntimeCache(runtime, LONG_PERIOD, events=True) as cache,
    ):
        cache.get_pods()
        within(WAIT, lambda: cache.stats().events_state == "subscribed")
        sandbox = new_pod(cri_harness, pods, "ev-start")
        container = cri_harness.create_container(sandbox, "app", start=False)
        cri_harness.start_container(container)
        took = within(BEFORE_THE_PERIOD, lambda: container.id in running(cache))
        ms = took * 1e3
        print(f"\n[containerd {containerd.version}] StartContainer -> get_pods: {ms:.1f} ms")
        assert cache.stats().events_received > 0


@with_events
def test_cache_drops_a_container_that_exits_on_its_own(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    with (
        CRIRuntime(containerd.endpoint) as runtime,
        RuntimeCache(runtime, LONG_PERIOD, events=True) as cache,
    ):
        cache.get_pods()
        within(WAIT, lambda: cache.stats().events_state == "subscribed")
        sandbox = new_pod(cri_harness, pods, "ev-exit")
        container: ContainerRecord = cri_harness.create_container(
            sandbox, "job", command=("sleep", "1")
        )
        within(BEFORE_THE_PERIOD, lambda: container.id in running(cache))
        cri_harness.wait_exited(container)
        within(BEFORE_THE_PERIOD, lambda: container.id not in running(cache))


@with_events
def test_sigkill_and_restart_resubscribes_once_and_shows_changes_within_2s(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    with (
        CRIRuntime(containerd.endpoint) as runtime,
        RuntimeCache(runtime, LONG_PERIOD, events=True) as cache,
    ):
        cache.get_pods()
        within(WAIT, lambda: cache.stats().events_state == "subscribed")
        containerd.kill()
        try:
            within(WAIT, lambda: cache.stats().events_state == "reconnecting")
            time.sleep(1.0)  # an outage of several failed attempts
        finally:
            containerd.start()
        back = time.monotonic()
        sandbox = new_pod(cri_harness, pods, "ev-restart")
        container = cri_harness.create_container(sandbox, "app")
        within(BEFORE_THE_PERIOD, lambda: container.id in running(cache))
        print(f"\n[containerd {containerd.version}] visible {time.monotonic() - back:.2f} s after")
        stats = cache.stats()
        assert stats.events_state == "subscribed"
        assert stats.resubscriptions == 1


class ManualClock:
    """The cache's clock, moved by the test: expiry is then decided by what the test did, never
    by how long the runtime took (a loaded machine makes that anything)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@only_16
def test_1_6_has_no_events_and_the_cache_polls(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    with CRIRuntime(containerd.endpoint) as runtime:
        with pytest.raises(EventsUnsupportedError) as caught:
            runtime.container_events().open()
        assert containerd.socket_path in str(caught.value)
        period = 1.0
        clock = ManualClock()
        with RuntimeCache(runtime, period, clock=clock, events=True) as cache:
            before = cache.get_pods()
            within(WAIT, lambda: cache.stats().events_state == "unsupported")
            sandbox = new_pod(cri_harness, pods, "poll")
            container = cri_harness.create_container(sandbox, "app")
            assert container.id in {c.id.id for p in runtime.get_pods(False) for c in p.containers}
            # The runtime lists it, but without events only the period refreshes the cache: the
            # clock has not moved, so the snapshot is still the one from before the container.
            assert cache.get_pods() is before
            clock.now += period  # exactly the period: fresh (docs/architecture.md §3 rule 1)
            assert cache.get_pods() is before
            clock.now += 0.001
            assert container.id in running(cache)  # expired: polled, and the container is there
            stats = cache.stats()
            assert (stats.refreshes, stats.events_received) == (2, 0)


# -- what 2.x does differently (and what 1.7 shares) -----------------------------------------------
@with_events
def test_sandbox_events_carry_the_sandbox_id_as_container_id(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    with CRIRuntime(containerd.endpoint) as runtime:
        stream = runtime.container_events()
        stream.open()
        reader = Reader(stream)
        try:
            sandbox = new_pod(cri_harness, pods, "ev-sandbox")
            cri_harness.stop_pod(sandbox)
            cri_harness.remove_pod(sandbox)
            within(WAIT, lambda: len(reader.of(sandbox.id)) >= len(LIFE))
        finally:
            reader.close()
    own = reader.of(sandbox.id)
    assert [e.type for e in own] == LIFE
    # 2.1 names the sandbox on all four; 1.7 sends its DELETED with an empty sandbox status.
    named = own if containerd.version != "1.7" else own[:-1]
    assert {e.pod_sandbox_id for e in named} == {sandbox.id}


@with_events
def test_a_pod_of_only_a_sandbox_comes_and_goes_by_sandbox_events(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    """No container ever exists and the period is 60 s: only the sandbox's own events can
    make the cache list the pod, and drop it once its sandbox is stopped."""
    with (
        CRIRuntime(containerd.endpoint) as runtime,
        RuntimeCache(runtime, LONG_PERIOD, events=True) as cache,
    ):
        cache.get_pods()
        within(WAIT, lambda: cache.stats().events_state == "subscribed")
        sandbox = new_pod(cri_harness, pods, "ev-sandbox-only")
        within(BEFORE_THE_PERIOD, lambda: cache.get_pods().by_uid(sandbox.uid) is not None)
        cri_harness.stop_pod(sandbox)
        within(BEFORE_THE_PERIOD, lambda: cache.get_pods().by_uid(sandbox.uid) is None)


def fresh_event_queue(containerd: Containerd) -> None:
    """SIGKILL and restart containerd: its event queue then holds nothing and no subscriber
    that left. A stream's handler in containerd notices its client left only when it fails to
    send the next event: 1.7 loses that one event, 2.1 that one and each later one with
    probability 1/2 until it drops the subscriber (a Go select between two ready cases)."""
    containerd.kill()
    containerd.start()


class RecordedEvents:
    """A CRIRuntime whose ``container_events()`` waits until ``allow()`` (the cache's first
    listing is then made before its subscription opens) and records what its streams give."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self.runtime = runtime
        self.events: list[ContainerEvent] = []
        self._allowed = threading.Event()

    def allow(self) -> None:
        self._allowed.set()

    def of(self, ident: str) -> list[ContainerEvent]:
        """The events recorded whose ``container_id`` is ``ident``, in order."""
        return [e for e in list(self.events) if e.container_id == ident]

    def get_pods(self, all: bool) -> PodList:
        return self.runtime.get_pods(all)

    def container_events(self) -> _Recording:
        self._allowed.wait(WAIT)
        return _Recording(self.runtime.container_events(), self.events)


class _Recording:
    """A stream that appends each event it yields to ``into``."""

    def __init__(self, stream: ContainerEventStream, into: list[ContainerEvent]) -> None:
        self._stream = stream
        self._into = into

    def open(self) -> None:
        self._stream.open()

    def __iter__(self) -> _Recording:
        return self

    def __next__(self) -> ContainerEvent:
        event = next(self._stream)
        self._into.append(event)
        return event

    def close(self) -> None:
        self._stream.close()


@with_events
def test_events_made_without_a_subscriber_reach_the_next_one_as_hints_only(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    """With nobody subscribed, 2.1 keeps events (5 minutes) and so does 1.7 (its buffer): the
    next subscription first receives events older than itself. The cache takes them as hints
    (rule 1 of podcache.cache.events: each asks for a refresh), never as data: a pod made and
    removed before the cache's first listing leaves the snapshot at its revision, no watcher
    sees a change, and the cache equals a fresh listing."""
    fresh_event_queue(containerd)
    kept = new_pod(cri_harness, pods, "ev-kept")
    kept_app = cri_harness.create_container(kept, "app")
    gone = new_pod(cri_harness, pods, "ev-gone")
    gone_app = cri_harness.create_container(gone, "app")
    cri_harness.remove_pod(gone)
    made = time.time_ns()
    with CRIRuntime(containerd.endpoint) as runtime:
        getter = RecordedEvents(runtime)
        with RuntimeCache(getter, LONG_PERIOD, events=True) as cache:
            first = cache.get_pods()
            watch = cache.watch(since=first.revision)
            getter.allow()
            within(WAIT, lambda: len(getter.of(gone.id)) >= len(LIFE))
            within(WAIT, lambda: settled(cache))
            after = cache.get_pods()
            assert after.revision == first.revision
            assert watch.read_nowait() == []
            watch.close()
            assert after == runtime.get_pods(False)
            assert after.by_uid(kept.uid) is not None and after.by_uid(gone.uid) is None
    started = LIFE[:2]
    ids = (gone.id, gone_app.id, kept.id, kept_app.id)
    replayed = {ident: [e.type for e in getter.of(ident)] for ident in ids}
    assert replayed == {gone.id: LIFE, gone_app.id: LIFE, kept.id: started, kept_app.id: started}
    ours = [e for ident in replayed for e in getter.of(ident)]
    assert all(0 < e.created_at < made for e in ours)


class HeldListing:
    """A CRIRuntime whose ``get_pods`` waits while ``hold()`` is in force (``waiting`` is set
    once a call waits): a refresh that cannot finish."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self.runtime = runtime
        self.waiting = threading.Event()
        self._go = threading.Event()
        self._go.set()

    def hold(self) -> None:
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    def get_pods(self, all: bool) -> PodList:
        if not self._go.is_set():
            self.waiting.set()
            self._go.wait(60)
        return self.runtime.get_pods(all)

    def container_events(self) -> ContainerEventStream:
        return self.runtime.container_events()


@with_events
def test_the_stream_is_read_while_a_refresh_is_held(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    """containerd (2.x: every subscriber) blocks its CRI calls once a subscriber stops reading,
    so the cache's reader hands each event on and reads the next without waiting for the
    refresh it asked for: four events (the sandbox's and the container's CREATED and STARTED)
    are read while the first one's refresh cannot finish."""
    with CRIRuntime(containerd.endpoint) as runtime:
        getter = HeldListing(runtime)
        with RuntimeCache(getter, LONG_PERIOD, events=True) as cache:
            cache.get_pods()
            within(WAIT, lambda: cache.stats().events_state == "subscribed")
            within(WAIT, lambda: settled(cache))
            before = cache.stats().events_received
            getter.hold()
            try:
                sandbox = new_pod(cri_harness, pods, "ev-held")
                assert getter.waiting.wait(WAIT), "no refresh started on the sandbox's events"
                container = cri_harness.create_container(sandbox, "app")
                within(WAIT, lambda: cache.stats().events_received >= before + 4)
                assert cache.stats().in_flight, "the held refresh ended"
                assert container.id not in running(cache)
            finally:
                getter.release()
            within(BEFORE_THE_PERIOD, lambda: container.id in running(cache))


class AsyncHeldListing:
    """``HeldListing`` for the asyncio cache, over an AsyncCRIRuntime."""

    def __init__(self, runtime: AsyncCRIRuntime) -> None:
        self.runtime = runtime
        self.waiting = asyncio.Event()
        self._go = asyncio.Event()
        self._go.set()

    def hold(self) -> None:
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    async def get_pods(self, all: bool) -> PodList:
        if not self._go.is_set():
            self.waiting.set()
            await self._go.wait()
        return await self.runtime.get_pods(all)

    def container_events(self) -> Any:
        return self.runtime.container_events()


async def _until(check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        await asyncio.sleep(0.005)


@with_events
def test_the_async_cache_reads_the_stream_while_a_refresh_is_held(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    """The same for AsyncRuntimeCache (what ``podcache serve`` runs)."""

    async def run() -> None:
        async with AsyncCRIRuntime(containerd.endpoint) as runtime:
            getter = AsyncHeldListing(runtime)
            async with AsyncRuntimeCache(getter, LONG_PERIOD, events=True) as cache:
                await cache.get_pods()
                await _until(lambda: cache.stats().events_state == "subscribed", 5)
                await _until(lambda: settled(cache), WAIT)
                before = cache.stats().events_received
                getter.hold()
                try:
                    sandbox = await asyncio.to_thread(new_pod, cri_harness, pods, "ev-aheld")
                    await asyncio.wait_for(getter.waiting.wait(), WAIT)
                    await asyncio.to_thread(cri_harness.create_container, sandbox, "app")
                    await _until(lambda: cache.stats().events_received >= before + 4, WAIT)
                    assert cache.stats().in_flight, "the held refresh ended"
                finally:
                    getter.release()

    asyncio.run(run())


# -- podcache serve's views: one stream to the runtime -------------------------------------------


def _running_in(client: Client, target: str) -> set[str]:
    reply = client.get(target)
    assert reply.status == 200, reply
    return {
        c["id"].partition("://")[2]
        for pod in reply.json()["items"]
        for c in pod["containers"]
        if c["state"] == "running"
    }


def _shows(client: Client, target: str, containers: set[str]) -> Callable[[], bool]:
    return lambda: containers <= _running_in(client, target)


@with_events
def test_serves_two_views_follow_one_stream_and_each_sees_every_change(
    containerd: Containerd, cri_harness: CRIHarness, pods: list[SandboxRecord]
) -> None:
    """``podcache serve`` without --cri-listen: the default view's cache and the all view's
    follow one GetContainerEvents stream, so on 1.7, which hands each event to one of its
    subscribers (containerd#7318), each view still sees every container start by its events
    (the period is 60 s); with a stream each, one view missed some until the period."""
    with tempfile.TemporaryDirectory(prefix="pc-ev-") as tmp:
        http = f"{tmp}/http.sock"
        args = ["-r", containerd.endpoint, "--listen", f"unix:{http}"]
        args += ["--cache-period", f"{LONG_PERIOD:g}s", "--log-level", "info"]
        with ServeProcess(args) as server:
            client = Client(path=http)
            assert client.get("/pods?all=1").status == 200  # the all view, built by now
            within(WAIT, lambda: server.stderr.count(": subscribed") >= 2)
            started = []
            for n in range(6):
                sandbox = new_pod(cri_harness, pods, f"ev-views-{n}")
                started.append(cri_harness.create_container(sandbox, "app").id)
            for target in ("/pods", "/pods?all=1"):
                within(BEFORE_THE_PERIOD, _shows(client, target, set(started)))
        assert "Traceback" not in server.stderr, server.stderr
