"""GetContainerEvents as an iterator (threads) and an async iterator (asyncio); no channel logic.

The runtimes open the call (an ``http2.StreamCall`` on a connection of its own) and say what a
failed status means; this module turns the call into checked ``ContainerEvent`` values. The
rules are docs/architecture.md §7's (a stream *open* after ``CONFIRM_SECONDS``, the checks of
every response, the receive limit, the ends that are clean, ``MAX_PENDING_EVENTS`` and what a
dropped event costs, nothing on the event loop) and §4 "Two runtimes" rule 2's (a stream that
ends OK with no event within ``NO_EVENTS_SECONDS`` is ``EventsUnsupportedError``); besides
them:

- a call that fails within ``CONFIRM_SECONDS`` fails ``open()`` itself; ``connected`` tells a
  failure to reach the runtime at all (False: nothing listening, no connection) from a
  failure of a runtime that was reached (True);
- a stream that lived past ``NO_EVENTS_SECONDS`` before a clean end (a runtime shutting down)
  is an ordinary end;
- iterating opens the stream first if needed; a stream that was ``close()``d stops the
  iteration; a runtime that breaks HTTP/2 (``WireViolationError``) ends the stream with
  ``RuntimeProtocolError``, in ``open()`` as in the iteration;
- a container ID is required of every event, and the pod UID too.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import threading
import time
from collections.abc import Callable
from typing import Self

import grpc

from podcache.cri.eventpod import pod_of_event
from podcache.cri.eventwire import (
    EventFields,
    EventWireError,
    event_fields,
)
from podcache.cri.h2core import CallFailedError, WireViolationError
from podcache.cri.http2 import StreamCall
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import CRIError, EventsUnsupportedError, RuntimeProtocolError
from podcache.model import MAX_ID_LENGTH, ContainerEvent, ContainerEventType

__all__ = [
    "CONFIRM_SECONDS",
    "MAX_PENDING_EVENTS",
    "NO_EVENTS",
    "NO_EVENTS_SECONDS",
    "AsyncContainerEventStream",
    "ContainerEventStream",
    "event_from_bytes",
]

CONFIRM_SECONDS = 0.05
"""How long a new event stream must stay open before it counts as subscribed."""
NO_EVENTS_SECONDS = 1.0
"""A stream that ends with OK before any event within this many seconds of its call is a
runtime that sends no events (CRI-O with ``enable_pod_events = false`` ends it at once)."""
NO_EVENTS = (
    "GetContainerEvents ended at once with OK and no event: the runtime sends none "
    "(CRI-O with enable_pod_events = false)"
)
"""The ``reason`` of the ``EventsUnsupportedError`` such a stream raises."""
MAX_PENDING_EVENTS = 10_000
"""Most events an ``AsyncContainerEventStream``'s thread holds for the loop (then it drops the
oldest)."""
_SERVER_CLOSED = "subscription closed by server"
"""What containerd 2.x's UNAVAILABLE says when it ends a subscription itself (lowercase)."""

_EVENT_TYPES: dict[int, ContainerEventType] = {
    pb.CONTAINER_CREATED_EVENT: ContainerEventType.CREATED,
    pb.CONTAINER_STARTED_EVENT: ContainerEventType.STARTED,
    pb.CONTAINER_STOPPED_EVENT: ContainerEventType.STOPPED,
    pb.CONTAINER_DELETED_EVENT: ContainerEventType.DELETED,
}
_ID = re.compile(r"[A-Za-z0-9_.+-]+", re.ASCII)
_METHOD = "GetContainerEvents"

ErrorMapper = Callable[[grpc.StatusCode | None, str], CRIError]
"""The runtime's reading of a failed stream call (its status code and details): the podcache
error to raise."""


def _bad(url: str, what: str) -> RuntimeProtocolError:
    return RuntimeProtocolError(url, f"its {_METHOD} sent an event with {what}")


def _checked_id(url: str, field: str, value: str, *, required: bool) -> str:
    if not value:
        if required:
            raise _bad(url, f"an empty {field}")
        return value
    if len(value) > MAX_ID_LENGTH:
        raise _bad(url, f"a {field} of {len(value)} characters (at most {MAX_ID_LENGTH})")
    if _ID.fullmatch(value) is None:
        raise _bad(url, f"a {field} that is not [A-Za-z0-9_.+-]: {value[:80]!r}")
    return value


def _valid_id(value: str) -> bool:
    """Whether a container status's ID passes the event's ID check (else it is left out)."""
    return 0 < len(value) <= MAX_ID_LENGTH and _ID.fullmatch(value) is not None


def _checked(url: str, fields: EventFields, runtime: str = "") -> ContainerEvent:
    kind = _EVENT_TYPES.get(fields.container_event_type)
    if kind is None:
        raise _bad(url, f"an unknown event type {fields.container_event_type}")
    if fields.created_at < 0:
        raise _bad(url, f"a negative created_at ({fields.created_at})")
    return ContainerEvent(
        type=kind,
        container_id=_checked_id(url, "container_id", fields.container_id, required=True),
        pod_sandbox_id=_checked_id(url, "pod_sandbox_status.id", fields.sandbox_id, required=False),
        created_at=fields.created_at,
        pod_uid=_checked_id(url, "pod_sandbox_status.metadata.uid", fields.pod_uid, required=False),
        pod=pod_of_event(fields, runtime, _valid_id),
    )


SandboxSink = Callable[[EventFields], None]
"""Takes the fields of each checked event (its sandbox status: a getter's network memo)."""


def event_from_bytes(
    url: str, data: bytes, sink: SandboxSink | None = None, runtime: str = ""
) -> ContainerEvent:
    """The checked event of one response's wire bytes (``eventwire``); ``RuntimeProtocolError``
    naming ``url`` when they are not a valid message or break a rule. ``sink`` gets the fields
    of an event that passed the checks; ``runtime`` qualifies the IDs of the pod it describes
    (``ContainerEvent.pod``)."""
    try:
        fields = event_fields(data)
    except EventWireError as error:
        raise RuntimeProtocolError(url, f"its {_METHOD} sent a malformed event: {error}") from None
    event = _checked(url, fields, runtime)
    if sink is not None:
        sink(fields)
    return event


def _ended_by_server(code: grpc.StatusCode | None, details: str) -> bool:
    """Whether a stream's final status is the runtime closing the subscription on purpose
    (containerd 2.x: UNAVAILABLE, "container events subscription closed by server"), an end
    like 1.7's clean one, not a failure."""
    return code is grpc.StatusCode.UNAVAILABLE and _SERVER_CLOSED in details.lower()


class ContainerEventStream:
    """The runtime's container events, for one thread to iterate (``close()`` from any thread).

    ``for event in runtime.container_events(): ...``; ``open()`` subscribes without waiting for
    an event. Use it as a context manager, or call ``close()``.
    """

    def __init__(
        self, url: str, start: Callable[[], StreamCall], error: ErrorMapper, confirm: float
    ) -> None:
        self._url = url
        self._start = start
        self._error = error
        self._confirm = confirm
        self._call: StreamCall | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False
        self._started = 0.0  # time.monotonic() when the call was made
        self._received = 0  # messages read
        self.connected = False
        """Whether the call's connection was made (the runtime was reached)."""
        self.sandbox_sink: SandboxSink | None = None
        """Given each checked event's fields (a getter learns sandbox networks from them)."""
        self.runtime_type: Callable[[], str] = str
        """The runtime's name as far as it is known ("" before its Version answer): the type
        of the IDs of each event's pod."""
        self.raw_sink: Callable[[bytes], None] | None = None
        """Given each checked event's bytes as the runtime sent them, in the reading thread,
        before the event is returned (the CRI socket's fan-out, docs/architecture.md §10)."""

    @property
    def endpoint(self) -> str:
        """The runtime's endpoint URL."""
        return self._url

    def open(self) -> None:
        """Subscribe (once): returns when the stream is open, raises the runtime's error if not."""
        if self._call is not None:
            return
        self._started = time.monotonic()
        call = self._start()
        self.connected = True
        with self._lock:
            if self._closed:
                call.cancel()
                call.close()
                return
            self._call = call
        try:
            ended = call.confirm(self._confirm)
        except WireViolationError as violation:
            call.close()
            if self._closed:
                return
            raise self._broke(violation) from None
        if ended is not None and not self._closed:
            self._check_end(call, *ended)

    def _check_end(self, call: StreamCall, code: grpc.StatusCode | None, details: str) -> None:
        """A stream that ended while it was confirmed: a runtime without events (OK, no
        message), or its error; one the server ended is read as an ordinary end."""
        if code is grpc.StatusCode.OK and not call.has_message():
            raise EventsUnsupportedError(self._url, NO_EVENTS)
        if code is not grpc.StatusCode.OK and not _ended_by_server(code, details):
            raise self._error(code, details) from None

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ContainerEvent:
        if self._call is None:
            self.open()
        call = self._reading_call()
        try:
            response = call.next_message()
        except CallFailedError as e:
            raise self._read_failed(call, e) from e
        if self._done_reading(call) or response is None:
            call.close()
            if response is None and not self._closed and self._sends_none():
                raise EventsUnsupportedError(self._url, NO_EVENTS)
            raise StopIteration
        self._received += 1
        event = event_from_bytes(self._url, response, self.sandbox_sink, self.runtime_type())
        if self.raw_sink is not None:
            self.raw_sink(response)
        return event

    def _reading_call(self) -> StreamCall:
        """The call, marked as being read (StopIteration once the stream is closed)."""
        with self._lock:
            call = self._call
            if self._closed or call is None:
                raise StopIteration
            self._reading = True
        return call

    def _read_failed(self, call: StreamCall, failure: CallFailedError) -> Exception:
        """What ends the iteration when a read failed (the call and its connection closed):
        the stream's end when it was closed or the server ended it, else its error."""
        self._done_reading(call)
        call.close()  # the call is over: its connection too
        if self._closed or _ended_by_server(failure.code, failure.details):
            return StopIteration()
        if isinstance(failure, WireViolationError):
            return self._broke(failure)
        return self._error(failure.code, failure.details)

    def _sends_none(self) -> bool:
        """Whether the clean end just read is a runtime that sends no events (rule above)."""
        return self._received == 0 and time.monotonic() - self._started < NO_EVENTS_SECONDS

    def _broke(self, violation: WireViolationError) -> RuntimeProtocolError:
        """The error of a stream whose runtime broke HTTP/2 or gRPC (a flood included)."""
        return RuntimeProtocolError(
            self._url, f"its {_METHOD} stream broke HTTP/2 or gRPC: {violation.details}"
        )

    def _done_reading(self, call: StreamCall) -> bool:
        """After a read: whether the stream was closed meanwhile (its connection is then
        closed here, by the reading thread, never under a read)."""
        with self._lock:
            self._reading = False
            closed = self._closed
        if closed:
            call.close()
        return closed

    def close(self) -> None:
        """End the stream; an iteration in progress stops. Idempotent."""
        with self._lock:
            self._closed = True
            call, reading = self._call, self._reading
        if call is not None:
            call.cancel()
            if not reading:
                call.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncContainerEventStream:
    """The asyncio twin of ``ContainerEventStream``: ``async for``, ``open()``, ``aclose()``.

    It reads ``stream`` (a ``ContainerEventStream``) in a thread of its own, which receives,
    reads and checks each message (at most ``MAX_PENDING_EVENTS`` waiting for the loop: the
    module rules). Failures reach the iteration as ``stream``'s errors.
    """

    def __init__(self, stream: ContainerEventStream, pending: int = MAX_PENDING_EVENTS) -> None:
        self._stream = stream
        self._pending_bound = pending
        self._pending: collections.deque[ContainerEvent] = collections.deque()
        self._end: BaseException | None = None
        self._ended = False
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opened = False
        self._closed = False
        self.dropped = 0
        """Events dropped because ``pending`` waited for the loop already."""

    @property
    def endpoint(self) -> str:
        """The runtime's endpoint URL."""
        return self._stream.endpoint

    @property
    def connected(self) -> bool:
        """Whether the call's connection was made (the runtime was reached)."""
        return self._stream.connected

    def set_raw_sink(self, sink: Callable[[bytes], None]) -> None:
        """``ContainerEventStream.raw_sink``: each checked event's bytes, in the stream's
        thread, before the event is handed to the loop."""
        self._stream.raw_sink = sink

    async def open(self) -> None:
        """Subscribe (once): returns when the stream is open, raises the runtime's error if not."""
        if self._opened or self._closed:
            return
        await asyncio.to_thread(self._stream.open)
        self._opened = True
        if self._closed:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        threading.Thread(target=self._pump, name="podcache-events", daemon=True).start()

    def _pump(self) -> None:
        """In the stream's thread: every event to the loop, then how the stream ended."""
        loop = self._loop
        assert loop is not None
        end: BaseException | None = None
        try:
            for event in self._stream:
                loop.call_soon_threadsafe(self._arrived, event)
        except BaseException as error:  # the stream's failure, for the iteration to raise
            end = error
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody iterates any more
            loop.call_soon_threadsafe(self._finished, end)

    def _arrived(self, event: ContainerEvent) -> None:
        pending = self._pending
        if len(pending) >= self._pending_bound:
            pending.popleft()
            self.dropped += 1
        pending.append(event)
        assert self._wake is not None
        self._wake.set()

    def _finished(self, end: BaseException | None) -> None:
        self._ended = True
        self._end = end
        assert self._wake is not None
        self._wake.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ContainerEvent:
        if not self._opened:
            await self.open()
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._pending:
                return self._pending.popleft()
            if self._ended:
                if self._end is not None:
                    raise self._end
                raise StopAsyncIteration
            wake = self._wake
            assert wake is not None
            wake.clear()
            await wake.wait()

    async def aclose(self) -> None:
        """End the stream; an iteration in progress stops. Idempotent."""
        self._closed = True
        self._stream.close()
        if self._wake is not None:
            self._wake.set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
