"""Read-only calls forwarded to the runtime as bytes (docs/architecture.md §10 rule 4). Rules:

1. **One call in flight per key** (the method and the request's bytes): a call whose deadline
   is no later than the identical call's in flight waits for that one (``saved``).
2. **Bounded.** At most ``max_in_flight`` calls at the runtime, ``max_waiting`` more waiting
   for a slot, each within its deadline; past the queue, RESOURCE_EXHAUSTED at once.
3. **The client's deadline is passed on** (``timeout`` when it set none); a client that gave
   up leaves the call to whoever shares it.
4. **Version is kept**: one answer per method, asked again after the runtime's connection
   left READY, and given while the runtime cannot be reached.
5. **The runtime's answer is the answer** (bytes, code, details); a failure of podcache's own
   is said in podcache's words, naming the runtime's endpoint and the method.
6. **Waiting holds no thread.** Everything but ``close`` runs on the socket's loop; a shared
   call is a task of its own, so a client that leaves ends neither it nor another's wait.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from podcache.cri.channels import MAX_RECEIVE_MESSAGE_BYTES, channel_options
from podcache.cri.endpoint import Endpoint

__all__ = ["MAX_IN_FLIGHT", "MAX_WAITING", "Currency", "Forwarder", "UpstreamError"]

MAX_IN_FLIGHT = 16
"""Forwarded calls at the runtime at once."""
MAX_WAITING = 4 * MAX_IN_FLIGHT
"""Forwarded calls waiting for a slot at once: four rounds of the slots (a call past them is
better failed at once and retried than kept waiting five answers in turn)."""


class UpstreamError(Exception):
    """The runtime's (or the wait's) failure of one forwarded call: its status and details;
    ``unreachable``: the runtime was not reached at all (rule 4 answers a kept Version)."""

    def __init__(self, code: grpc.StatusCode, details: str, *, unreachable: bool = False) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.unreachable = unreachable


def _method(path: str) -> str:
    return path.rsplit("/", 1)[-1]


_REASON_BYTES = 200
"""At most this much of gRPC's own text is kept as the reason a runtime cannot be reached."""


def _reason(details: str | None) -> str:
    """The end of gRPC's connection error (``...: Connection refused``), bounded."""
    if not details:
        return "no connection"
    return details.rsplit(": ", 1)[-1].strip()[:_REASON_BYTES] or "no connection"


class _Flight:
    """One upstream call and the callers waiting for it (its ``outcome``: the answer's bytes,
    or the ``UpstreamError``)."""

    __slots__ = ("deadline", "outcome")

    def __init__(self, deadline: float, outcome: asyncio.Future[bytes]) -> None:
        self.deadline = deadline
        self.outcome = outcome


class _QueueFullError(Exception):
    """Rule 2: the queue for a slot is full."""


class _Slots:
    """Rule 2: ``size`` slots, and a FIFO queue of at most ``queue`` calls waiting for one (on
    the socket's loop: no lock)."""

    def __init__(self, size: int, queue: int) -> None:
        self.size = size
        self.queue = queue
        self._free = size
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now."""
        return len(self._waiting)

    async def acquire(self, budget: float) -> None:
        """A slot within ``budget`` s; ``_QueueFullError`` when the queue is full, TimeoutError
        when the budget runs out first."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        if len(self._waiting) >= self.queue:
            raise _QueueFullError
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            async with asyncio.timeout(budget):
                await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.release()  # handed over as the wait ended: passed on
            raise
        finally:
            # A turn handed over is already off the queue.
            with contextlib.suppress(ValueError):
                self._waiting.remove(turn)

    def release(self) -> None:
        """Hand the slot to the longest waiting call still waiting, or free it."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1


def identity(data: bytes) -> bytes:
    """Raw bytes as gRPC's serializer and deserializer."""
    return data


class Currency:
    """Rule 4: the kept answers given since the connection was last READY. A runtime that went
    away may come back another, so a connection that was READY and is no longer ends their
    currency. grpcio reports states late, on a thread of its own: the IDLE and CONNECTING
    before the first READY can come after an answer was kept, and they end nothing."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self._ready = False

    def reported(self, state: grpc.ChannelConnectivity) -> None:
        """grpcio's report of the connection's ``state``."""
        if state is grpc.ChannelConnectivity.READY:
            self._ready = True
        elif self._ready:
            self._ready = False
            self.paths.clear()


class Forwarder:
    """Forwards raw requests to the runtime at ``endpoint`` (see the rules above)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_waiting: int = MAX_WAITING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._endpoint = endpoint
        self._timeout = timeout
        self._clock = clock
        self._channel = grpc.insecure_channel(
            endpoint.target,
            options=[
                *channel_options(endpoint),
                ("grpc.max_send_message_length", MAX_RECEIVE_MESSAGE_BYTES),
            ],
        )
        self._calls: dict[str, Any] = {}
        self._slots = _Slots(max_in_flight, max_waiting)
        self._lock = threading.Lock()
        self._flights: dict[tuple[str, bytes], _Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._kept: dict[str, bytes] = {}
        """Rule 4: the last answer by method path (Version only: one entry)."""
        self._currency = Currency()
        self.upstream: dict[str, int] = {}
        """Calls made to the runtime, by method path."""
        self.saved: dict[str, int] = {}
        """Calls answered without a runtime call of their own, by method path (§10 rule 7)."""
        self._channel.subscribe(self._currency.reported, try_to_connect=False)

    @property
    def waiting(self) -> int:
        """Calls waiting for an upstream slot now (rule 2)."""
        return self._slots.waiting

    @property
    def endpoint(self) -> str:
        """The runtime's endpoint, as messages name it."""
        return self._endpoint.url

    @property
    def target(self) -> Endpoint:
        """The runtime's endpoint, parsed."""
        return self._endpoint

    def count_saved(self, path: str) -> None:
        """Count a call on ``path`` answered without the runtime (``saved``)."""
        self._count(self.saved, path)

    def _count(self, table: dict[str, int], path: str) -> None:
        with self._lock:
            table[path] = table.get(path, 0) + 1

    async def call(
        self, path: str, request: bytes, remaining: float | None, *, keep: bool
    ) -> bytes:
        """The runtime's answer to ``request`` on ``path``; ``remaining``: the client's time
        left (None: ``timeout``). ``keep``: rule 4. Raises ``UpstreamError``."""
        if keep and path in self._currency.paths:
            self._count(self.saved, path)
            return self._kept[path]
        try:
            answer = await self._shared(path, request, remaining)
        except UpstreamError as error:
            kept = self._kept.get(path) if keep and error.unreachable else None
            if kept is None:
                raise
            self._count(self.saved, path)
            return kept  # rule 4: what the runtime last said, while it cannot be reached
        if keep:
            self._kept[path] = answer
            self._currency.paths.add(path)
        return answer

    async def _shared(self, path: str, request: bytes, remaining: float | None) -> bytes:
        """Rule 1: the answer of the identical call in flight, or of a call of its own."""
        key = (path, request)
        budget = self._timeout if remaining is None else max(0.0, remaining)
        deadline = self._clock() + budget
        flight = self._flights.get(key)
        if flight is not None and flight.deadline >= deadline:
            self._count(self.saved, path)
            return await joined(flight.outcome, budget, self.endpoint, path)
        loop = asyncio.get_running_loop()
        flight = self._flights[key] = _Flight(deadline, loop.create_future())
        task = loop.create_task(self._fly(key, flight))
        self._tasks.add(task)  # held until done (the loop keeps only a weak reference)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(flight.outcome)  # a caller that leaves cancels only itself

    async def _fly(self, key: tuple[str, bytes], flight: _Flight) -> None:
        """The shared call (rule 1), for whoever still waits for it."""
        path, request = key
        try:
            flight.outcome.set_result(await self._upstream(path, request, flight.deadline))
        except UpstreamError as error:
            fail_shared(flight.outcome, error)
        finally:
            if self._flights.get(key) is flight:
                del self._flights[key]
            end_shared(flight.outcome)

    async def _slot(self, path: str, deadline: float) -> None:
        """A slot (rule 2) before ``deadline``, or the call's UpstreamError."""
        try:
            await self._slots.acquire(max(0.0, deadline - self._clock()))
        except _QueueFullError:
            raise UpstreamError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"podcache: {self._slots.queue} calls already wait for one of the "
                f"{self._slots.size} slots to ask the runtime at {self.endpoint}; "
                f"{_method(path)} was not asked (the CRI socket's queue bound)",
            ) from None
        except TimeoutError:
            raise UpstreamError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"podcache: no slot to ask the runtime at {self.endpoint} {_method(path)} "
                f"within the deadline ({self._slots.size} calls at the runtime already)",
            ) from None

    async def _upstream(self, path: str, request: bytes, deadline: float) -> bytes:
        """One call to the runtime, within a slot (rule 2) and the deadline (rule 3)."""
        await self._slot(path, deadline)
        try:
            self._count(self.upstream, path)
            method = self._calls.get(path)
            if method is None:
                method = self._calls[path] = self._channel.unary_unary(
                    path, request_serializer=identity, response_deserializer=identity
                )
            call = method.future(request, timeout=max(0.0, deadline - self._clock()))
            try:
                answer: bytes = await _answer_of(call)
            except asyncio.CancelledError:
                call.cancel()
                raise
            return answer
        except grpc.RpcError as error:
            raise self._failure(path, error, deadline) from None
        finally:
            self._slots.release()

    def _failure(self, path: str, error: grpc.RpcError, deadline: float) -> UpstreamError:
        """The client's error for a failed call: the runtime's own answer as it gave it; not
        reaching it, or not hearing from it in time, in podcache's words (rule 5)."""
        code = error.code() if callable(getattr(error, "code", None)) else None
        details = error.details() if callable(getattr(error, "details", None)) else None
        if code is grpc.StatusCode.UNAVAILABLE:
            return UpstreamError(
                code,
                f"podcache: the runtime at {self.endpoint} cannot be reached "
                f"({_reason(details)}); {_method(path)} was not answered",
                unreachable=True,
            )
        if code is grpc.StatusCode.DEADLINE_EXCEEDED and self._clock() >= deadline:
            return UpstreamError(
                code,
                f"podcache: the runtime at {self.endpoint} did not answer {_method(path)} "
                "within the client's deadline",
            )
        return UpstreamError(code or grpc.StatusCode.UNKNOWN, details or f"{_method(path)} failed")

    def close(self) -> None:
        """Close the runtime's channel (calls in flight end CANCELLED)."""
        self._channel.close()


async def joined(
    outcome: asyncio.Future[bytes], budget: float | None, endpoint: str, path: str
) -> bytes:
    """A shared call's ``outcome`` (its answer, or its UpstreamError) within the caller's
    ``budget`` s (None: unbounded); a caller that leaves cancels only itself."""
    try:
        async with asyncio.timeout(budget):  # not wait_for: it may swallow a cancellation
            return await asyncio.shield(outcome)
    except TimeoutError:
        raise UpstreamError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"podcache: the runtime at {endpoint} did not answer "
            f"{_method(path)} within the deadline ({budget:g}s)",
        ) from None


def fail_shared(outcome: asyncio.Future[bytes], error: UpstreamError) -> None:
    """A shared call failed: ``error`` is its ``outcome``, retrieved (each waiter raises it)."""
    outcome.set_exception(error)
    outcome.exception()


def end_shared(outcome: asyncio.Future[bytes]) -> None:
    """A shared call's task ended: an ``outcome`` still unsettled (cancelled: the socket is
    stopping) fails UNAVAILABLE."""
    if not outcome.done():
        stopping = UpstreamError(grpc.StatusCode.UNAVAILABLE, "podcache's CRI socket is stopping")
        fail_shared(outcome, stopping)


def _answer_of(call: Any) -> asyncio.Future[bytes]:
    """A sync channel's call future as an asyncio future of the running loop: gRPC's thread
    settles it through ``call_soon_threadsafe`` (a stopped loop: nobody waits any more)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bytes] = loop.create_future()

    def settle(done: Any) -> None:
        if answer.done() or done.cancelled():
            return
        error = done.exception()
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(done.result())

    def finished(done: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(settle, done)

    call.add_done_callback(finished)
    return answer
