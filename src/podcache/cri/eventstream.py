"""GetContainerEvents as an iterator (threads) and an async iterator (asyncio); no channel logic.

``CRIRuntime.container_events()`` and ``AsyncCRIRuntime.container_events()`` return these
streams; the runtimes open the gRPC call (on their current channel) and say what a gRPC failure
means, this module turns the call into checked ``ContainerEvent`` values.

Rules:

- A stream is *open* once its call, made on a connected (READY) channel, has stayed alive for
  ``CONFIRM_SECONDS``: gRPC acknowledges nothing, and containerd sends nothing until the first
  change, so this is the only sign that the runtime took the subscription. A call that fails
  within that time fails ``open()`` itself (``EventsUnsupportedError`` for UNIMPLEMENTED, at
  once). ``connected`` tells a failure to reach the runtime at all (False: nothing listening,
  no connection) from a failure of a runtime that was reached (True).
- Iterating opens the stream first if needed. A stream the runtime ends cleanly stops the
  iteration; one that fails raises the runtime's error class naming the endpoint; one that
  was ``close()``d stops the iteration. containerd 2.x ends a subscription it closes itself
  (its CRI service stopping) with UNAVAILABLE "container events subscription closed by
  server" where 1.7 ends it cleanly: that status (``_ended_by_server``) is a clean end too,
  in ``open()`` as in the iteration.
- Every response is hostile until checked (``event_from``): a known event type, IDs of at most
  ``MAX_ID_LENGTH`` characters of ``[A-Za-z0-9_.+-]`` (a container ID is required), a
  ``created_at`` that is not negative. A response that breaks a rule ends the stream with
  ``RuntimeProtocolError``. Messages are bounded by the channel's receive limit (16 MiB).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from podcache.cri.proto import api_pb2 as pb
from podcache.errors import CRIError, RuntimeProtocolError
from podcache.model import MAX_ID_LENGTH, ContainerEvent, ContainerEventType

__all__ = [
    "CONFIRM_SECONDS",
    "AsyncContainerEventStream",
    "ContainerEventStream",
    "event_from",
]

CONFIRM_SECONDS = 0.05
"""How long a new event stream must stay open before it counts as subscribed."""
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
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]  # the stubs lack it; grpc has it

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


def event_from(url: str, response: pb.ContainerEventResponse) -> ContainerEvent:
    """The checked event of one response; ``RuntimeProtocolError`` naming ``url`` if malformed."""
    kind = _EVENT_TYPES.get(response.container_event_type)
    if kind is None:
        raise _bad(url, f"an unknown event type {response.container_event_type}")
    if response.created_at < 0:
        raise _bad(url, f"a negative created_at ({response.created_at})")
    return ContainerEvent(
        type=kind,
        container_id=_checked_id(url, "container_id", response.container_id, required=True),
        pod_sandbox_id=_checked_id(
            url, "pod_sandbox_status.id", response.pod_sandbox_status.id, required=False
        ),
        created_at=response.created_at,
    )


def _failure(error: grpc.RpcError) -> tuple[grpc.StatusCode | None, str]:
    """A failed call's status code and details."""
    return error.code(), error.details() or ""


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
        self, url: str, start: Callable[[], Any], error: ErrorMapper, confirm: float
    ) -> None:
        self._url = url
        self._start = start
        self._error = error
        self._confirm = confirm
        self._call: Any = None
        self._lock = threading.Lock()
        self._closed = False
        self.connected = False
        """Whether the call was made on a connected channel (the runtime was reached)."""

    @property
    def endpoint(self) -> str:
        """The runtime's endpoint URL."""
        return self._url

    def open(self) -> None:
        """Subscribe (once): returns when the stream is open, raises the runtime's error if not."""
        if self._call is not None:
            return
        call = self._start()
        self.connected = True
        with self._lock:
            if self._closed:
                call.cancel()
                return
            self._call = call
        ended = threading.Event()
        call.add_done_callback(lambda _: ended.set())
        if ended.wait(self._confirm) and not self._closed:
            code, details = call.code(), call.details() or ""
            if code is not grpc.StatusCode.OK and not _ended_by_server(code, details):
                raise self._error(code, details) from None

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ContainerEvent:
        if self._call is None:
            self.open()
        if self._closed:
            raise StopIteration
        try:
            response = next(self._call)
        except grpc.RpcError as e:
            if self._closed or _ended_by_server(*_failure(e)):
                raise StopIteration from None
            raise self._error(*_failure(e)) from e
        return event_from(self._url, response)

    def close(self) -> None:
        """End the stream; an iteration in progress stops. Idempotent."""
        with self._lock:
            self._closed = True
            call = self._call
        if call is not None:
            call.cancel()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncContainerEventStream:
    """The asyncio twin of ``ContainerEventStream``: ``async for``, ``open()``, ``aclose()``."""

    def __init__(
        self,
        url: str,
        start: Callable[[], Awaitable[Any]],
        error: ErrorMapper,
        confirm: float,
    ) -> None:
        self._url = url
        self._start = start
        self._error = error
        self._confirm = confirm
        self._call: Any = None
        self._closed = False
        self.connected = False
        """Whether the call was made on a connected channel (the runtime was reached)."""

    @property
    def endpoint(self) -> str:
        """The runtime's endpoint URL."""
        return self._url

    async def open(self) -> None:
        """Subscribe (once): returns when the stream is open, raises the runtime's error if not."""
        if self._call is not None:
            return
        call = await self._start()
        self.connected = True
        if self._closed:
            call.cancel()
            return
        self._call = call
        ended = asyncio.Event()
        call.add_done_callback(lambda _: ended.set())
        try:
            await asyncio.wait_for(ended.wait(), self._confirm)
        except TimeoutError:
            return
        code, details = await call.code(), await call.details() or ""
        if code is grpc.StatusCode.OK or self._closed or _ended_by_server(code, details):
            return
        raise self._error(code, details) from None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ContainerEvent:
        if self._call is None:
            await self.open()
        if self._closed:
            raise StopAsyncIteration
        try:
            response = await self._call.read()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling() > 0:
                raise  # the iterating task itself is cancelled
            if self._closed:
                raise StopAsyncIteration from None
            # grpc.aio cancels the reads of a channel being closed (the runtime was closed,
            # or its channel replaced): a failure of the stream, not of the task.
            raise self._error(grpc.StatusCode.CANCELLED, "channel closed") from None
        except grpc.RpcError as e:
            if self._closed or _ended_by_server(*_failure(e)):
                raise StopAsyncIteration from None
            raise self._error(*_failure(e)) from e
        if response is _EOF:
            raise StopAsyncIteration
        if not isinstance(response, pb.ContainerEventResponse):
            raise RuntimeProtocolError(self._url, f"its {_METHOD} answer is not a CRI message")
        return event_from(self._url, response)

    async def aclose(self) -> None:
        """End the stream; an iteration in progress stops. Idempotent."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
