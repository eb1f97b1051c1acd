"""Read-only calls forwarded to the runtime as bytes: shared in flight, bounded, deadlines kept.

Rules (docs/architecture.md §10):

1. **One call in flight per key.** The key is the method and the request's bytes. A call that
   arrives while an identical one is in flight, whose deadline is no earlier than its own,
   waits for that call's answer (or failure) instead of making another: the runtime cache's
   rule 5, applied to what the socket forwards. ``saved`` counts them.
2. **Bounded.** At most ``max_in_flight`` (16) calls reach the runtime at once; the others
   wait, within their own deadline, for a slot.
3. **The client's deadline is passed on**: the upstream call's timeout is the time the client
   has left (``timeout`` when it set none); a client that gave up leaves the call to whoever
   shares it.
4. **Version is kept** (``Route.CACHED_FORWARD``): its answer is held per request until the
   runtime's connection leaves READY (a restart: the runtime may have been upgraded).
5. **The runtime's answer is the answer**: bytes, status code and details as the runtime sent
   them (a method the runtime lacks is its UNIMPLEMENTED).

Deliberately not here: which methods are forwarded (``routes``), gRPC serving (``server``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from podcache.cri.channels import MAX_RECEIVE_MESSAGE_BYTES, channel_options
from podcache.cri.endpoint import Endpoint

__all__ = ["MAX_IN_FLIGHT", "Forwarder", "UpstreamError"]

MAX_IN_FLIGHT = 16
"""Forwarded calls at the runtime at once."""


class UpstreamError(Exception):
    """The runtime's (or the wait's) failure of one forwarded call: its status and details."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class _Flight:
    """One upstream call and the callers waiting for it."""

    __slots__ = ("answer", "deadline", "done", "error")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.done = threading.Event()
        self.answer: bytes | None = None
        self.error: UpstreamError | None = None


def _identity(data: bytes) -> bytes:
    return data


class Forwarder:
    """Forwards raw requests to the runtime at ``endpoint`` (see the rules above)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float,
        max_in_flight: int = MAX_IN_FLIGHT,
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
        self._channel.subscribe(self._connectivity, try_to_connect=False)
        self._calls: dict[str, Any] = {}
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._lock = threading.Lock()
        self._flights: dict[tuple[str, bytes], _Flight] = {}
        self._kept: dict[tuple[str, bytes], bytes] = {}
        self.upstream: dict[str, int] = {}
        """Calls made to the runtime, by method path."""
        self.saved: dict[str, int] = {}
        """Calls answered without one of their own (shared in flight, or a kept Version)."""

    def _connectivity(self, state: grpc.ChannelConnectivity) -> None:
        if state is not grpc.ChannelConnectivity.READY:
            self._kept.clear()  # rule 4: a runtime that went away may come back another

    def _count(self, table: dict[str, int], path: str) -> None:
        with self._lock:
            table[path] = table.get(path, 0) + 1

    def call(self, path: str, request: bytes, remaining: float | None, *, keep: bool) -> bytes:
        """The runtime's answer to ``request`` on ``path``; ``remaining``: the client's time
        left (None: ``timeout``). ``keep``: rule 4. Raises ``UpstreamError``."""
        key = (path, request)
        if keep and (kept := self._kept.get(key)) is not None:
            self._count(self.saved, path)
            return kept
        budget = self._timeout if remaining is None else max(0.0, remaining)
        deadline = self._clock() + budget
        with self._lock:
            flight = self._flights.get(key)
            joined = flight is not None and flight.deadline >= deadline
            if not joined:
                flight = self._flights[key] = _Flight(deadline)
        assert flight is not None
        if joined:
            self._count(self.saved, path)
            return self._wait(path, flight, budget)
        try:
            flight.answer = self._upstream(path, request, deadline)
            if keep:
                self._kept[key] = flight.answer
        except UpstreamError as error:
            flight.error = error
        finally:
            with self._lock:
                if self._flights.get(key) is flight:
                    del self._flights[key]
            flight.done.set()
        return self._outcome(flight)

    def _wait(self, path: str, flight: _Flight, budget: float) -> bytes:
        if not flight.done.wait(budget):
            raise UpstreamError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{path.lstrip('/')}: the runtime did not answer within the deadline",
            )
        return self._outcome(flight)

    @staticmethod
    def _outcome(flight: _Flight) -> bytes:
        if flight.error is not None:
            raise flight.error
        assert flight.answer is not None
        return flight.answer

    def _upstream(self, path: str, request: bytes, deadline: float) -> bytes:
        """One call to the runtime, within a slot (rule 2) and the deadline (rule 3)."""
        if not self._slots.acquire(timeout=max(0.0, deadline - self._clock())):
            raise UpstreamError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{path.lstrip('/')}: no upstream slot within the deadline "
                f"({MAX_IN_FLIGHT} calls at the runtime)",
            )
        try:
            self._count(self.upstream, path)
            method = self._calls.get(path)
            if method is None:
                method = self._calls[path] = self._channel.unary_unary(
                    path, request_serializer=_identity, response_deserializer=_identity
                )
            answer: bytes = method(request, timeout=max(0.0, deadline - self._clock()))
            return answer
        except grpc.RpcError as error:
            code = error.code() if callable(getattr(error, "code", None)) else None
            details = error.details() if callable(getattr(error, "details", None)) else None
            raise UpstreamError(
                code or grpc.StatusCode.UNKNOWN, details or f"{path.lstrip('/')} failed"
            ) from None
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close the runtime's channel (calls in flight end CANCELLED)."""
        self._channel.close()
