"""The asyncio getter's calls: made on a sync channel, in threads, cancellable by a task.

Holds ``_ListCaller``, which ``AsyncCRIRuntime`` holds for its calls and its event stream: a
``caller.SyncCaller`` of its own (answers left as bytes) whose calls are gRPC futures (or
streaming calls, for a node's listing when the runtime streams lists) made in a small pool of
threads (``LIST_CALL_THREADS``), and ``_CallHandle``, through which the awaiting task's
cancellation cancels the call. Deliberately not here: the deadline, channel replacement,
error mapping and when to stream (``SyncCaller``'s) and reading the answers (``converter``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from google.protobuf.message import Message

from podcache.cri.caller import SyncCaller
from podcache.cri.channels import _ASYNC_METHODS, _Line
from podcache.cri.endpoint import Endpoint
from podcache.cri.eventstream import ContainerEventStream
from podcache.cri.eventwire import EventFields
from podcache.cri.liststream import STREAMED, StreamedAnswer, collect
from podcache.cri.values import RuntimeVersion
from podcache.errors import CRIError

__all__ = ["LIST_CALL_THREADS"]

_T = TypeVar("_T")


LIST_CALL_THREADS = 4
"""Threads making ``AsyncCRIRuntime``'s list calls: at most this many calls wait on the
runtime at once per getter; more wait for a thread (the cache makes one refresh at a time)."""


class _Cancellable(Protocol):
    """A gRPC call in flight, future or stream: it can be cancelled."""

    def cancel(self) -> object: ...


class _CallHandle:
    """One list call made in a thread for a task on the event loop: the task's cancellation
    cancels the gRPC call it is waiting for (and any it would make next)."""

    __slots__ = ("_call", "_cancelled", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._call: _Cancellable | None = None
        self._cancelled = False

    def attach(self, call: _Cancellable) -> None:
        """``call`` is the gRPC call made now (in the calling thread)."""
        with self._lock:
            self._call = call
            cancelled = self._cancelled
        if cancelled:
            call.cancel()

    def cancel(self) -> None:
        """The task gave up (on the event loop)."""
        with self._lock:
            self._cancelled = True
            call = self._call
        if call is not None:
            call.cancel()


class _ListCaller:
    """``AsyncCRIRuntime``'s calls on a sync channel of their own, each made in a thread
    of a small pool (``LIST_CALL_THREADS``), with ``CRIRuntime``'s deadlines, channel
    replacement and error mapping: both hold a ``SyncCaller`` and delegate to it.

    The answers become bytes in gRPC's threads, never on the event loop (grpc.aio would build
    them in a loop callback); the loop only receives the finished ``bytes`` object. Calls are
    gRPC futures so that the awaiting task's cancellation cancels them (``_CallHandle``).
    """

    def __init__(self, endpoint: Endpoint, timeout: float) -> None:
        self._local = threading.local()  # the handle of the call the current thread makes
        self._pool: ThreadPoolExecutor | None = None
        self._caller = SyncCaller(
            endpoint, timeout, "AsyncCRIRuntime", methods=_ASYNC_METHODS, invoke=self._invoke
        )

    def _invoke(self, line: _Line, method: str, request: Message, timeout: float) -> object:
        handle: _CallHandle | None = getattr(self._local, "handle", None)
        stream = line.streams.get(method)
        if stream is not None:
            messages = stream(request, timeout=timeout, wait_for_ready=True)
            if handle is not None:
                handle.attach(messages)
            return collect(messages, method)
        call = line.rpcs[method].future(request, timeout=timeout, wait_for_ready=True)
        if handle is not None:
            handle.attach(call)
        return call.result()

    def backing_off(self) -> bool:
        """Whether the channel is in reconnect backoff (read from any thread)."""
        return self._caller.backing_off()

    async def listing(self, method: str, request: Message) -> tuple[str, list[bytes]]:
        """A node's list call (``SyncCaller.listing``: its streaming twin when the runtime
        streams lists) in a pool thread: the method that answered, and its answer's messages
        as bytes (one for a unary call). Cancelling the caller cancels the call."""
        return await self._in_thread(functools.partial(self._listing, method, request))

    async def version(self) -> RuntimeVersion:
        """``SyncCaller.version`` in a pool thread (cancelling the caller cancels the call)."""
        return await self._in_thread(self._caller.version)

    def known_version(self) -> RuntimeVersion | None:
        """The Version answer of the current channel while it is still good: None before one
        came, and while the channel is in reconnect backoff (as after a runtime restart)."""
        return None if self.backing_off() else self._caller.line.version

    async def call(self, method: str, request: Message, response: type[_T]) -> _T:
        """``SyncCaller.call`` in a pool thread: its answer (cancelling the caller cancels
        the call)."""
        answer, _ = await self._in_thread(
            functools.partial(self._caller.call, method, request, response)
        )
        return answer

    async def _in_thread(self, work: Callable[[], _T]) -> _T:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(LIST_CALL_THREADS, thread_name_prefix="podcache-list")
        handle = _CallHandle()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, self._with, handle, work)
        except asyncio.CancelledError:
            handle.cancel()
            raise

    def _with(self, handle: _CallHandle, work: Callable[[], _T]) -> _T:
        """``work()`` in this pool thread, its calls cancelled through ``handle``."""
        self._local.handle = handle
        try:
            return work()
        finally:
            self._local.handle = None

    def _listing(self, method: str, request: Message) -> tuple[str, list[bytes]]:
        answer, _ = self._caller.listing(method, request, bytes)
        if isinstance(answer, StreamedAnswer):
            return STREAMED[method][0], answer.parts
        return method, [answer]

    @property
    def list_streaming(self) -> bool | None:
        """``SyncCaller.list_streaming`` of this caller's channel."""
        return self._caller.list_streaming

    async def pod_calls(self, requests: Sequence[tuple[str, Message]]) -> list[bytes]:
        """``SyncCaller.pod_calls`` in a pool thread: the filtered list calls of one pod or
        one ID, made together (one thread hand-off for both). A cancelled caller leaves them
        to finish in their thread (small answers, within the call timeout); nothing waits for
        them."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(LIST_CALL_THREADS, thread_name_prefix="podcache-list")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._caller.pod_calls, requests)

    def statuses(self, sandbox_ids: Sequence[str]) -> list[EventFields | CRIError]:
        """``SyncCaller.statuses``; blocking (made in ``networks.StatusReader``'s thread, never
        on the event loop)."""
        return self._caller.statuses(sandbox_ids)

    def container_events(self) -> ContainerEventStream:
        """The GetContainerEvents stream on this channel (read in a thread of its own)."""
        return self._caller.container_events()

    def close(self) -> None:
        """Close the channel (calls in flight end CANCELLED) and let the threads go."""
        self._caller.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
