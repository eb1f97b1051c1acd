"""One subscription to the runtime's container events, shared by the caches and the CRI socket.

``EventHub`` holds serve's one ``GetContainerEvents`` stream and hands every event to every
follower: the caches' streams (``follower()``: ``ContainerEvent`` values, docs/architecture.md
§7) and the CRI socket's clients (``attach()``: each event's bytes as the runtime sent them).
The rules are docs/architecture.md §10 rule 5; what the code adds to them:

1. **One upstream stream**, kept ``LINGER_SECONDS`` after the last follower or client left.
   Followers that open while it is opening wait for that opening's outcome and share its
   failure; a stream closed for want of readers ends nobody.
2. **Every client gets every event from its attachment on**: the reading thread appends it
   to every client's queue under one lock, before the caches see it: O(clients) per event,
   never a wait for a client.
3. **A client's queue is bounded** (``EventBuffer``). ``subscribers``, the gauge, is what
   ``max_clients`` counts.
4. **An upstream end holds every client** while the hub reopens the stream every
   ``REOPEN_EVERY``; the caches' followers end with the stream's error and resubscribe by
   their own rules, sharing that opening. The judge is the watched cache (``watch``): its
   first full listing begun after the reopening (``_judge`` asks for one) must show the
   revision it showed when the old stream ended; else, or past ``HOLD_SECONDS``, the client
   ends with UNAVAILABLE (``cut_off["upstream"]``). Without a watched cache every client ends
   at once.
5. **Thread and loop.** The upstream stream, the followers and the opening run on the cache's
   event loop; the stream's reading thread pushes to the clients under one lock; clients wait
   on the socket's own loop (``EventClient.next``, a future woken by
   ``call_soon_threadsafe``: no thread per client); ``attach``, on the socket's loop, asks
   the cache's to open the stream when none is.

Deliberately not here: gRPC serving (``serve.crisock.server``), the caches' subscription rules
(``cache``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, Self

import grpc

from podcache.errors import RuntimeUnavailableError
from podcache.model import ContainerEvent, Pod, PodList

__all__ = [
    "DEFAULT_EVENT_BUFFER",
    "EventBuffer",
    "EventClient",
    "EventHub",
    "HubFollower",
    "HubGetter",
    "SubscribersFullError",
]

log = logging.getLogger("podcache.serve.crisock")

HOLD_SECONDS = 30.0
"""Longest a client is held through an outage before its stream ends (rule 4)."""
REOPEN_EVERY = 0.5
"""Seconds between the hub's own attempts to reopen the stream while it holds clients."""
LINGER_SECONDS = 5.0
"""Seconds the stream stays open once its last follower or client left (rule 1)."""


@dataclass(frozen=True, slots=True)
class EventBuffer:
    """A client's queue bounds (``--cri-event-buffer EVENTS,SIZE``)."""

    events: int = 10_000
    bytes: int = 16 * 1024 * 1024


DEFAULT_EVENT_BUFFER = EventBuffer()


class _Upstream(Protocol):
    """The runtime's stream as ``AsyncCRIRuntime.container_events()`` returns it."""

    connected: bool

    async def open(self) -> None: ...
    def __aiter__(self) -> Any: ...
    async def aclose(self) -> None: ...
    def set_raw_sink(self, sink: Callable[[bytes], None]) -> None: ...


class EventClient:
    """One socket client's queue of event bytes (rule 3), read on the socket's loop with
    ``next``; pushed by the upstream's reading thread."""

    def __init__(self, hub: EventHub, bounds: EventBuffer, loop: asyncio.AbstractEventLoop) -> None:
        self._hub = hub
        self._bounds = bounds
        self._loop = loop
        self._queue: collections.deque[bytes] = collections.deque()
        self._pending: collections.deque[bytes] | None = None  # held: the new stream's events
        self._bytes = 0  # of the queue and the pending events
        self._lock = threading.Lock()
        self._wake: asyncio.Future[None] | None = None  # next() waits on it
        self.end: tuple[grpc.StatusCode, str] | None = None
        """Why the stream ends (set once): the status to answer with."""

    def push(self, data: bytes) -> bool:
        """Append one event (under the hub's lock); False: the client was cut off (rule 3).
        While held (``hold``) it waits apart, sent only once ``release`` says nothing was lost."""
        with self._lock:
            if self.end is not None:
                return False
            pending = self._pending
            queued = len(self._queue) + (0 if pending is None else len(pending))
            if queued >= self._bounds.events or self._bytes + len(data) > self._bounds.bytes:
                self.end = (
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "GetContainerEvents: this subscriber fell behind by more than "
                    f"{self._bounds.events} events or {self._bounds.bytes} bytes and was cut "
                    "off (podcache's CRI socket)",
                )
                self._queue.clear()
                self._pending, self._bytes = None, 0
                self._wake_locked()
                return False
            (self._queue if pending is None else pending).append(data)
            self._bytes += len(data)
            if pending is None:
                self._wake_locked()
            return True

    def hold(self) -> None:
        """Events from now on wait apart until ``release`` (rule 4: a held client is sent
        nothing of a reopened stream before a listing shows that nothing was lost)."""
        with self._lock:
            if self._pending is None:
                self._pending = collections.deque()

    def release(self) -> None:
        """Nothing was lost: the events held apart are sent, and those after them."""
        with self._lock:
            if self._pending is not None:
                self._queue.extend(self._pending)
                self._pending = None
                self._wake_locked()

    def finish(self, code: grpc.StatusCode, details: str) -> None:
        """End the stream after the events already queued (rule 4); events held apart are
        dropped: once a client is to be ended, it is sent nothing more."""
        with self._lock:
            if self.end is None:
                self.end = (code, details)
            if self._pending is not None:
                self._bytes -= sum(len(data) for data in self._pending)
                self._pending = None
            self._wake_locked()

    async def next(self) -> bytes | None:
        """The next event's bytes, or None once the stream ended (then ``end`` says why;
        queued events come first unless the client was cut off)."""
        while True:
            with self._lock:
                if self._queue:
                    data = self._queue.popleft()
                    self._bytes -= len(data)
                    return data
                if self.end is not None:
                    return None
                wake = self._wake = self._loop.create_future()
            await wake

    def _wake_locked(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # the socket's loop is closed
                self._loop.call_soon_threadsafe(_settle, wake)

    def detach(self) -> None:
        """The client left: the hub forgets it."""
        self._hub.detach(self)


def _settle(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


class HubFollower:
    """A cache's event stream over the hub: ``open``, ``async for``, ``aclose``, ``connected``
    (the shape of ``AsyncContainerEventStream`` that the cache's subscription uses)."""

    def __init__(self, hub: EventHub) -> None:
        self._hub = hub
        self._events: collections.deque[ContainerEvent] = collections.deque()
        self._wake = asyncio.Event()
        self._end: BaseException | None = None
        self._ended = False
        self._closed = False
        self.connected = True

    @property
    def endpoint(self) -> str:
        return self._hub.endpoint

    async def open(self) -> None:
        await self._hub.join(self)

    def deliver(self, event: ContainerEvent) -> None:
        self._events.append(event)
        self._wake.set()

    def ended(self, error: BaseException | None, connected: bool) -> None:
        self._ended, self._end, self.connected = True, error, connected
        self._wake.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ContainerEvent:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._events:
                return self._events.popleft()
            if self._ended:
                if self._end is not None:
                    raise self._end
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    async def aclose(self) -> None:
        self._closed = True
        self._wake.set()
        self._hub.leave(self)


class SubscribersFullError(Exception):
    """``attach`` refused: ``max_clients`` subscribers already (RESOURCE_EXHAUSTED)."""


class EventHub:
    """The one subscription (rules above) over ``runtime`` (its ``container_events()``); at
    most ``max_clients`` socket clients at once (held ones included)."""

    def __init__(
        self, runtime: Any, buffer: EventBuffer = DEFAULT_EVENT_BUFFER, max_clients: int = 64
    ) -> None:
        self._runtime = runtime
        self.buffer = buffer
        self.max_clients = max_clients
        self._loop: asyncio.AbstractEventLoop | None = None
        self._upstream: _Upstream | None = None
        self._opening: asyncio.Future[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._followers: set[HubFollower] = set()
        self._connected = True  # whether the last failed opening reached the runtime
        self._cache: Any = None  # the watched cache (rule 4), with its clock
        self._clock: Callable[[], float] = time.monotonic
        self._revision: int | None = None  # the watched cache's latest published revision
        self._held_revision: int | None = None
        self._held_at = 0.0  # when the outage began (cache clock)
        self._reopened_at: float | None = None  # the stream reopened for them (cache clock)
        self._holds = 0  # the hold's number: a timer of an earlier hold does nothing
        self._closing = False
        self._retiring: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()  # the clients, the held, and each event's push to them
        self._clients: set[EventClient] = set()  # sent every event (held ones apart: hold())
        self._held: set[EventClient] = set()  # clients held through an outage (rule 4)
        self._attaching: set[EventClient] = set()  # admitted, not yet attached (they count)
        self.statuses: Any = None
        """The socket's ``statuses.StatusStore`` (None: none): told of each opening, end and
        event (each event before any client gets it)."""
        self.subscriptions = 0
        """Upstream streams opened (one per outage, if all goes well)."""
        self.events = 0
        """Events received from the runtime."""
        self.cut_off: dict[str, int] = {"slow": 0, "upstream": 0}
        """Clients ended by the hub, by reason (rules 3 and 4); a client's own leave is not."""

    @property
    def endpoint(self) -> str:
        return str(self._runtime.endpoint)

    @property
    def subscribers(self) -> int:
        """Socket clients attached now (held ones included): what the cap counts, but for
        those being attached this instant."""
        with self._lock:
            return len(self._clients | self._held)

    @property
    def held(self) -> int:
        """Socket clients held through an outage, not yet told whether they lost anything."""
        return len(self._held)

    def follower(self) -> HubFollower:
        """A cache's stream (what its getter's ``container_events()`` returns)."""
        return HubFollower(self)

    # -- the upstream stream (on the loop) -----------------------------------------------------
    async def join(self, follower: HubFollower) -> None:
        """Open (or share) the upstream stream, then deliver its events to ``follower``; an
        opening that failed says whether the runtime was reached (``connected``)."""
        try:
            await self._open()
        except BaseException:
            follower.connected = self._connected
            raise
        self._followers.add(follower)

    def leave(self, follower: HubFollower) -> None:
        self._followers.discard(follower)
        self._close_if_unused()

    async def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._reader is not None and not self._reader.done():
            return
        opening = self._opening
        if opening is None:
            opening = self._opening = self._loop.create_future()
            self._loop.create_task(self._open_upstream(opening), name="podcache-cri-events")
        await asyncio.shield(opening)

    async def _open_upstream(self, opening: asyncio.Future[None]) -> None:
        upstream: _Upstream = self._runtime.container_events()
        upstream.set_raw_sink(self._fan_out)
        try:
            await upstream.open()
        except BaseException as error:
            self._opening = None
            self._connected = upstream.connected
            opening.set_exception(error)
            opening.exception()  # retrieved: each joiner raises it itself
            await upstream.aclose()
            return
        self.subscriptions += 1
        self._upstream = upstream
        if self.statuses is not None:
            self.statuses.stream_opened()
        assert self._loop is not None
        with self._lock:
            held = set(self._held)
            for client in held:
                client.hold()  # sent nothing of this stream until the listing decides
            self._clients |= held
        if held:
            reopened_at = self._reopened_at = self._clock()
            self._loop.create_task(self._judge(reopened_at), name="podcache-cri-events-judge")
        self._reader = self._loop.create_task(self._read(upstream), name="podcache-cri-events")
        self._opening = None
        opening.set_result(None)

    async def _judge(self, reopened_at: float) -> None:
        """Ask the watched cache for the full listing rule 4 waits for: one begun after the
        stream reopened at ``reopened_at``. A cache refreshes on a resubscription only when
        read, and nobody may read it within ``HOLD_SECONDS``; its failure leaves the clients
        to ``_expire``."""
        cache = self._cache
        if cache is None:
            return
        with contextlib.suppress(Exception):
            await cache.force_update_if_older(reopened_at, timeout=HOLD_SECONDS)

    async def _read(self, upstream: _Upstream) -> None:
        """Every event to every follower, until the stream ends; then end them all (a stream
        retired for want of readers ends nobody: it had none)."""
        error: BaseException | None = None
        try:
            async for event in upstream:
                self.events += 1
                for follower in tuple(self._followers):
                    follower.deliver(event)
        except Exception as exc:
            error = exc
        finally:
            if self._upstream is upstream:
                self._upstream = None
            if self.statuses is not None and self._upstream is None:
                self.statuses.stream_ended()  # events may be lost until one opens again
            await upstream.aclose()
        if self._reader is not asyncio.current_task():
            return  # retired (_retire_if_unused): a newer stream has the followers and clients
        followers, self._followers = self._followers, set()
        for follower in followers:
            follower.ended(error, upstream.connected)
        why = "ended" if error is None else f"failed: {error}"
        if self._cache is None or self._closing:
            self._end_clients(self._take_clients(), why)
        else:
            self._hold(why)

    def _take_clients(self) -> set[EventClient]:
        with self._lock:
            clients, self._clients = self._clients | self._held, set()
            self._held = set()
        return clients

    def _end_clients(self, clients: set[EventClient], why: str) -> None:
        for client in clients:
            self.cut_off["upstream"] += 1
            client.finish(
                grpc.StatusCode.UNAVAILABLE,
                f"GetContainerEvents: podcache's stream from the runtime {why}; events may "
                "have been lost: subscribe again",
            )

    # -- holding clients through an outage (rule 4) ---------------------------------------------
    def watch(self, cache: Any, clock: Callable[[], float] = time.monotonic) -> None:
        """Hold clients through outages, judged by ``cache``'s full listings (its publish
        hook, on the loop) on ``clock``, the cache's clock."""
        self._cache, self._clock = cache, clock
        cache.on_publish(self._published)

    def _hold(self, why: str) -> None:
        with self._lock:
            held, self._clients = self._clients, set()
            if not held and not self._held:
                return
            new_outage = not self._held
            self._held |= held
        if new_outage:  # the state it must find again is the one now
            self._held_revision, self._held_at = self._revision, self._clock()
            self._holds += 1
            assert self._loop is not None
            self._loop.call_later(HOLD_SECONDS, self._expire, self._holds, why)
            self._loop.create_task(self._reopen(), name="podcache-cri-events-reopen")
        self._reopened_at = None

    async def _reopen(self) -> None:
        """Open the stream again for the held clients (the caches may do it first)."""
        while self._held and self._reopened_at is None and not self._closing:
            with contextlib.suppress(Exception):
                await self._open()
                return
            await asyncio.sleep(REOPEN_EVERY)

    def _expire(self, hold: int, why: str) -> None:
        if hold == self._holds and self._held:
            self._end_clients(self._release_held(), f"{why} (no listing showed nothing lost)")

    def _release_held(self) -> set[EventClient]:
        with self._lock:
            held, self._held = self._held, set()
            self._clients -= held
        return held

    def _published(self, publication: Any) -> None:
        """The watched cache's publish hook: a full listing begun after the reopening decides
        whether the held clients lost anything (rule 4)."""
        revision = publication.pods.revision
        if self._held and self._held_revision is None and _before(publication, self._held_at):
            self._held_revision = revision  # the node as it was, from a listing begun before
        if (
            self._held
            and self._reopened_at is not None
            and publication.relisted is None
            and publication.timestamp >= self._reopened_at
        ):
            if revision == self._held_revision:
                with self._lock:
                    kept, self._held = self._held, set()  # nothing was lost: they go on
                    for client in kept:
                        client.release()
            else:
                self._end_clients(self._release_held(), "ended and the node changed meanwhile")
        self._revision = revision

    def _in_use(self) -> bool:
        with self._lock:
            clients = bool(self._clients or self._held or self._attaching)
        return clients or bool(self._followers)

    def _close_if_unused(self) -> None:
        """The last follower or client left: the stream is kept ``LINGER_SECONDS`` more, so
        that one who comes back at once (a client that subscribes again, a cache that
        resubscribes) finds it open; then closed if still unused."""
        upstream = self._upstream
        if upstream is None or self._loop is None or self._in_use():
            return
        self._loop.call_later(LINGER_SECONDS, self._retire_if_unused, upstream)

    def _retire_if_unused(self, upstream: _Upstream) -> None:
        if upstream is not self._upstream or self._in_use() or self._loop is None:
            return
        self._upstream, self._reader = None, None  # the next one to come opens another
        task = self._loop.create_task(upstream.aclose(), name="podcache-cri-events-retire")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    # -- the socket's clients (their calls on the socket's loop) ------------------------------
    def _fan_out(self, data: bytes) -> None:
        """In the upstream's reading thread: the event's bytes to every client (rules 2, 3; a
        client cut off leaves the hub at once). The status store reads it first: a client
        told of a change finds the status it asks for next as new as the event."""
        if self.statuses is not None:
            self.statuses.event(data)
        with self._lock:
            cut = [client for client in self._clients if not client.push(data)]
            for client in cut:
                self._clients.discard(client)
                self._held.discard(client)
                self.cut_off["slow"] += 1
        for _ in cut:
            log.warning(
                "CRI socket: a GetContainerEvents subscriber fell behind by more than %d "
                "events or %d bytes and was cut off (RESOURCE_EXHAUSTED)",
                self.buffer.events,
                self.buffer.bytes,
            )

    async def attach(self, timeout: float) -> EventClient:
        """A new client (on the socket's loop, the one it reads on), attached once the
        upstream stream is open (opened now if needed, within ``timeout`` s). Raises
        ``SubscribersFullError`` at the cap, ``RuntimeUnavailableError``, TimeoutError or the
        opening's error."""
        loop = self._loop
        if loop is None:
            raise RuntimeUnavailableError(self.endpoint, "podcache's event hub is not running")
        client = EventClient(self, self.buffer, asyncio.get_running_loop())
        with self._lock:
            if len(self._clients | self._held | self._attaching) >= self.max_clients:
                raise SubscribersFullError(
                    f"GetContainerEvents: {self.max_clients} subscribers already "
                    "(podcache's CRI socket)"
                )
            self._attaching.add(client)
        attached = asyncio.run_coroutine_threadsafe(self._attach(client), loop)
        try:
            # asyncio.timeout, not wait_for: wait_for may return a result it was cancelled
            # under (3.11), and the client's leave would be lost.
            async with asyncio.timeout(timeout):
                await asyncio.wrap_future(attached)
        except BaseException:
            attached.cancel()
            self.detach(client)  # admitted or attached meanwhile, perhaps: forgotten
            raise
        return client

    async def _attach(self, client: EventClient) -> None:
        await self._open()
        with self._lock:
            if client in self._attaching:  # else it gave up waiting (detached)
                self._attaching.discard(client)
                self._clients.add(client)

    def detach(self, client: EventClient) -> None:
        """The client left (from any thread): it is forgotten, held or not; its leave is
        never counted as a cut-off."""
        with self._lock:
            self._attaching.discard(client)
            self._clients.discard(client)
            self._held.discard(client)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to close
                loop.call_soon_threadsafe(self._close_if_unused)

    def attach_statuses(self, store: Any) -> None:
        """Tell ``store`` (a ``statuses.StatusStore``) of every opening, end and event from now
        on (on the loop: a stream open now counts as opened now)."""
        self.statuses = store
        if self._upstream is not None:
            store.stream_opened()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the hub runs on (before any client attaches)."""
        self._loop = loop

    async def aclose(self) -> None:
        """End every client and the upstream stream."""
        self._closing = True
        self._end_clients(self._take_clients(), "ended (podcache is stopping)")
        upstream = self._upstream
        if upstream is not None:
            await upstream.aclose()


class HubGetter:
    """``getter`` for a cache, its ``container_events()`` a follower of ``hub`` (rule 1):
    every cache of the process shares the one upstream stream."""

    def __init__(self, getter: Any, hub: EventHub) -> None:
        self._getter = getter
        self._hub = hub

    @property
    def endpoint(self) -> str:
        """The runtime's endpoint: the caches' log lines name it, never this class."""
        return self._hub.endpoint

    async def get_pods(self, all: bool) -> PodList:
        pods: PodList = await self._getter.get_pods(all)
        return pods

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        pod: Pod | None = await self._getter.get_pod(uid, all)
        return pod

    async def pod_uid_of(self, ident: str) -> str | None:
        uid: str | None = await self._getter.pod_uid_of(ident)
        return uid

    def container_events(self) -> HubFollower:
        return self._hub.follower()


def _before(publication: Any, moment: float) -> bool:
    """Whether ``publication`` is a full listing begun before ``moment`` (cache clock): the
    node's state before an outage, when the outage began before the watched cache had
    published anything (a listing in flight then lands during it)."""
    return bool(publication.relisted is None and publication.timestamp <= moment)
