"""FakeRuntime and AsyncFakeRuntime: in-memory pod getters for tests (yours and ours).

They count calls, can fail, can be slow, and can hold every call until released, so a test can
put a cache exactly where it wants it. They also stream container events: ``emit()`` sends an
event to every open ``container_events()`` stream, ``end_streams()`` ends them (cleanly or with
an error), ``events_unsupported`` makes new streams fail as a runtime without the RPC does.
They speak no protocol; ``podcache.sim`` is the simulated runtime that speaks real CRI over a
socket.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Self

from podcache.errors import EventsUnsupportedError
from podcache.model import ContainerEvent, Pod, PodList

__all__ = ["AsyncFakeEventStream", "AsyncFakeRuntime", "FakeEventStream", "FakeRuntime"]

FAKE_ENDPOINT = "fake://runtime"


def _polls(done: Callable[[], bool], timeout: float) -> Iterator[None]:
    """One item per poll of ``done`` while it is false, for ``timeout`` seconds at most."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        yield


class _End:
    """Queued behind a stream's events: the stream ends here (with ``error``, if set)."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _FakeStreamBase:
    def __init__(self, runtime: _FakeBase) -> None:
        self._runtime = runtime
        self.opened = False
        self.closed = False

    def _check_open(self) -> None:
        runtime = self._runtime
        if runtime.events_unsupported:
            raise EventsUnsupportedError(FAKE_ENDPOINT, "GetContainerEvents is UNIMPLEMENTED")
        if runtime.events_error is not None:
            raise runtime.events_error
        with runtime._lock:
            self.opened = True
            runtime.subscriptions += 1
            runtime._streams.append(self)

    def _forget(self) -> None:
        with self._runtime._lock:
            self.closed = True
            if self in self._runtime._streams:
                self._runtime._streams.remove(self)

    def _put(self, item: ContainerEvent | _End) -> None:
        raise NotImplementedError

    def _taken(self, item: ContainerEvent | _End) -> ContainerEvent | None:
        """The event ``item`` is, or None where the stream ends (raising the runtime's error
        when it ended the stream with one; a stream the client closed ends without)."""
        if not isinstance(item, _End):
            return item
        closed = self.closed
        self._forget()
        if item.error is not None and not closed:
            raise item.error
        return None


class FakeEventStream(_FakeStreamBase):
    """``FakeRuntime.container_events()``: events ``emit()``ted while it is open."""

    def __init__(self, runtime: _FakeBase) -> None:
        super().__init__(runtime)
        self._inbox: queue.SimpleQueue[ContainerEvent | _End] = queue.SimpleQueue()

    def open(self) -> None:
        if not self.opened:
            self._check_open()

    def _put(self, item: ContainerEvent | _End) -> None:
        self._inbox.put(item)

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ContainerEvent:
        self.open()
        if self.closed:
            raise StopIteration
        event = self._taken(self._inbox.get())
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        self._forget()
        self._inbox.put(_End(None))


class AsyncFakeEventStream(_FakeStreamBase):
    """``AsyncFakeRuntime.container_events()``; use it from the runtime's event loop."""

    def __init__(self, runtime: _FakeBase) -> None:
        super().__init__(runtime)
        self._inbox: asyncio.Queue[ContainerEvent | _End] = asyncio.Queue()

    async def open(self) -> None:
        if not self.opened:
            self._check_open()

    def _put(self, item: ContainerEvent | _End) -> None:
        self._inbox.put_nowait(item)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ContainerEvent:
        await self.open()
        if self.closed:
            raise StopAsyncIteration
        event = self._taken(await self._inbox.get())
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        self._forget()
        self._inbox.put_nowait(_End(None))


class _FakeBase:
    """State shared by the twins: the pods, the fault settings and the call records."""

    def __init__(
        self,
        pods: Iterable[Pod] = (),
        *,
        all_pods: Iterable[Pod] | None = None,
        latency: float = 0.0,
        error: BaseException | None = None,
    ) -> None:
        self.pods = PodList(pods)
        """What ``get_pods(False)`` returns (replace it to change the runtime's state)."""
        self.all_pods = None if all_pods is None else PodList(all_pods)
        """What ``get_pods(True)`` returns; None means the same as ``pods``."""
        self.latency = latency
        """Seconds each call takes before it answers."""
        self.error = error
        """Raised by every call while set (the same exception object each time)."""
        self.calls = 0
        """Calls started so far."""
        self.all_args: list[bool] = []
        """The ``all`` argument of each call, in order."""
        self.in_flight = 0
        """Calls started and not yet finished."""
        self.on_call: Callable[[bool], None] | None = None
        """Run inside each call with its ``all`` argument, before it answers (e.g. to move
        a fake clock, or change ``pods``, while the fetch is under way)."""
        self.max_in_flight = 0
        """The most calls ever in flight at once (a cache should keep this at 1)."""
        self.events_unsupported = False
        """New event streams fail with ``EventsUnsupportedError`` while set."""
        self.events_error: BaseException | None = None
        """New event streams fail to open with this error while set."""
        self.subscriptions = 0
        """Event streams opened so far."""
        self.pod_calls = 0
        """``get_pod`` calls so far (one pod's relist; not counted in ``calls``)."""
        self.probe_calls = 0
        """``pod_uid_of`` calls so far (a lookup of one ID; not counted in ``calls``)."""
        self.pod_error: BaseException | None = None
        """Raised by every ``get_pod`` call while set (``error`` fails them too)."""
        self.pods_held = False
        """``get_pod`` calls wait while set (``block_pods``, ``release_pods``)."""
        self._streams: list[_FakeStreamBase] = []
        self._lock = threading.Lock()
        self._init_gate()

    @property
    def endpoint(self) -> str:
        """A name for messages (a fake has no socket)."""
        return FAKE_ENDPOINT

    @property
    def open_streams(self) -> int:
        """Event streams open now."""
        return len(self._streams)

    def emit(self, *events: ContainerEvent) -> None:
        """Send ``events`` to every open event stream, in order."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            for event in events:
                stream._put(event)

    def end_streams(self, error: BaseException | None = None) -> None:
        """End every open event stream after the events already sent: cleanly, or raising
        ``error`` from the iteration (a runtime restart looks like this)."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream._put(_End(error))

    def _init_gate(self) -> None:
        """Set up the twin's way of holding calls (threading or asyncio)."""
        raise NotImplementedError

    def set_pods(self, pods: Iterable[Pod]) -> None:
        """Replace the running pods."""
        self.pods = PodList(pods)

    def _enter(self, all: bool) -> None:
        with self._lock:
            self.calls += 1
            self.all_args.append(all)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _one_pod(self, uid: str, all: bool) -> Pod | None:
        if self.error is not None:
            raise self.error
        if self.pod_error is not None:
            raise self.pod_error
        pods = self.all_pods if all and self.all_pods is not None else self.pods
        return pods.by_uid(uid)

    def _owner(self, ident: str) -> str | None:
        with self._lock:
            self.probe_calls += 1
        if self.error is not None:
            raise self.error
        pods = self.all_pods if self.all_pods is not None else self.pods
        for pod in pods:
            if any(part.id.id == ident for part in (*pod.containers, *pod.sandboxes)):
                return pod.id
        return None

    def _exit(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _leave(self, all: bool) -> PodList:
        self._exit()
        if self.on_call is not None:
            self.on_call(all)
        if self.error is not None:
            raise self.error
        if all and self.all_pods is not None:
            return self.all_pods
        return self.pods


class FakeRuntime(_FakeBase):
    """A thread-safe in-memory getter: ``get_pods(all)`` returns ``pods`` after the faults."""

    def _init_gate(self) -> None:
        self._gate = threading.Event()
        self._gate.set()
        self._pod_gate = threading.Event()
        self._pod_gate.set()
        self._entered = threading.Condition(self._lock)

    def block(self) -> None:
        """Hold every call (new and in flight) until ``release``."""
        self._gate.clear()

    def release(self) -> None:
        """Let held calls answer."""
        self._gate.set()

    def wait_for_calls(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` calls have started; False on timeout."""
        with self._entered:
            return self._entered.wait_for(lambda: self.calls >= count, timeout)

    def container_events(self) -> FakeEventStream:
        """A stream of the events ``emit()``ted while it is open (opens on first use)."""
        return FakeEventStream(self)

    def wait_for_subscriptions(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` event streams were opened; False on timeout."""
        for _ in _polls(lambda: self.subscriptions >= count, timeout):
            time.sleep(0.001)
        return self.subscriptions >= count

    def get_pods(self, all: bool) -> PodList:
        """The pods, after the configured latency and while not blocked; or ``error``."""
        self._enter(all)
        with self._entered:
            self._entered.notify_all()
        try:
            self._gate.wait()
            if self.latency:
                time.sleep(self.latency)
        except BaseException:
            self._exit()
            raise
        return self._leave(all)

    def block_pods(self) -> None:
        """Hold every ``get_pod`` call (new and in flight) until ``release_pods``."""
        self.pods_held = True
        self._pod_gate.clear()

    def release_pods(self) -> None:
        """Let held ``get_pod`` calls answer."""
        self.pods_held = False
        self._pod_gate.set()

    def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The pod with ``uid`` in ``pods`` (``all_pods`` with ``all``), or None; or ``error``
        (or ``pod_error``); held while ``block_pods`` is in force. Read when it is released."""
        with self._lock:
            self.pod_calls += 1
        self._pod_gate.wait()
        return self._one_pod(uid, all)

    def pod_uid_of(self, ident: str) -> str | None:
        """The UID of the pod holding the container or sandbox ``ident``; or ``error``."""
        return self._owner(ident)


class AsyncFakeRuntime(_FakeBase):
    """The asyncio twin of FakeRuntime; use it (block, release, await) from one event loop."""

    def _init_gate(self) -> None:
        self._gate: asyncio.Event | None = None
        self._hold = False

    def _event(self) -> asyncio.Event:
        if self._gate is None:
            self._gate = asyncio.Event()
            if not self._hold:
                self._gate.set()
        return self._gate

    def block(self) -> None:
        """Hold every call (new and in flight) until ``release``."""
        self._hold = True
        if self._gate is not None:
            self._gate.clear()

    def release(self) -> None:
        """Let held calls answer."""
        self._hold = False
        if self._gate is not None:
            self._gate.set()

    async def wait_for_calls(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` calls have started; False on timeout."""
        for _ in _polls(lambda: self.calls >= count, timeout):
            await asyncio.sleep(0.001)
        return self.calls >= count

    def container_events(self) -> AsyncFakeEventStream:
        """A stream of the events ``emit()``ted while it is open (opens on first use)."""
        return AsyncFakeEventStream(self)

    async def wait_for_subscriptions(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` event streams were opened; False on timeout."""
        for _ in _polls(lambda: self.subscriptions >= count, timeout):
            await asyncio.sleep(0.001)
        return self.subscriptions >= count

    async def get_pods(self, all: bool) -> PodList:
        """The pods, after the configured latency and while not blocked; or ``error``."""
        self._enter(all)
        try:
            await self._event().wait()
            if self.latency:
                await asyncio.sleep(self.latency)
        except BaseException:
            self._exit()
            raise
        return self._leave(all)

    def block_pods(self) -> None:
        """Hold every ``get_pod`` call (new and in flight) until ``release_pods``."""
        self.pods_held = True

    def release_pods(self) -> None:
        """Let held ``get_pod`` calls answer."""
        self.pods_held = False

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The twin of ``FakeRuntime.get_pod``."""
        with self._lock:
            self.pod_calls += 1
        while self.pods_held:
            await asyncio.sleep(0.001)
        return self._one_pod(uid, all)

    async def pod_uid_of(self, ident: str) -> str | None:
        """The twin of ``FakeRuntime.pod_uid_of``."""
        return self._owner(ident)
