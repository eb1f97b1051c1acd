"""The sync caller: calls on one sync channel with their deadline, channel replacement, errors.

Holds ``SyncCaller``, which ``CRIRuntime`` and ``AsyncCRIRuntime``'s list calls
(``listcalls._ListCaller``) each hold one of and delegate to: the current ``_Line`` and its
replacement when the runtime is back but the channel is in reconnect backoff, each call made
with the remaining deadline (straight to gRPC on a READY channel: the hot path), its failures
mapped (``failures``), a deadline followed by one probe (``diagnosis``), the Version asked
once per channel, the GetContainerEvents stream, and closing. How a call is made is handed in
(``invoke``): blocking, or a gRPC future a task can cancel. Deliberately not here: what the
calls are for (the getters' requests and conversions).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from podcache.cri.channels import (
    _CORE_BACKING_OFF,
    _CORE_READY,
    _EVENTS_METHOD,
    _METHODS,
    _Line,
    _Methods,
)
from podcache.cri.diagnosis import _os_reason, _probe, _probe_budget, _unreachable
from podcache.cri.endpoint import Endpoint
from podcache.cri.eventstream import CONFIRM_SECONDS, ContainerEventStream
from podcache.cri.failures import (
    _answer,
    _closed_error,
    _deadline_error,
    _events_error,
    _status_error,
)
from podcache.cri.http2 import (
    CallFailedError,
    Connection,
    ConnectionPool,
    StreamCall,
    WireViolationError,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import CRI_VERSION
from podcache.cri.values import RuntimeVersion, _version_from
from podcache.errors import CRIError, RuntimeProtocolError, RuntimeUnavailableError

__all__ = ["Invoke", "SyncCaller"]

_EVENTS_REQUEST = pb.GetEventsRequest().SerializeToString()

_R = TypeVar("_R")

Invoke = Callable[[_Line, str, Message, float], object]
"""``invoke(line, method, request, timeout)``: one call of ``method`` on ``line``, blocking
until its answer; raises gRPC's errors."""


def _blocking(line: _Line, method: str, request: Message, timeout: float) -> object:
    """``Invoke`` as ``CRIRuntime`` makes its calls: gRPC's blocking call."""
    return line.rpcs[method](request, timeout=timeout, wait_for_ready=True)


class SyncCaller:
    """Calls on a sync channel of its own, safe to make from many threads at once.

    ``owner``: the name of the getter it serves, for the error of a call after ``close()``.
    ``methods``: each method's request type and answer decoder; ``invoke``: how a call is made.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        timeout: float,
        owner: str,
        *,
        methods: _Methods = _METHODS,
        invoke: Invoke = _blocking,
    ) -> None:
        self._endpoint = endpoint
        self._url = endpoint.url
        self._timeout = timeout
        self._owner = owner
        self._methods = methods
        self._invoke = invoke
        self._version_lock = threading.Lock()  # one Version call per channel, across threads
        self._swap_lock = threading.Lock()  # replacing the channel; closing
        self.closed = False
        self.line = _Line(endpoint, methods)
        """The channel calls are made on now (replaced in reconnect backoff)."""
        self._streams: weakref.WeakSet[StreamCall] = weakref.WeakSet()
        self._pool = ConnectionPool(endpoint)

    def check_open(self) -> None:
        if self.closed:
            raise _closed_error(self._owner, self._url)

    def _usable(self, line: _Line) -> _Line:
        """The line to call on, for a ``line`` that is not READY (the hot path skips this).

        Raises at once when the endpoint takes no connection. When it does and ``line`` is in
        reconnect backoff, a fresh line replaces it (once, whichever thread comes first).
        """
        problem = _unreachable(self._endpoint, _probe_budget(self._timeout))
        if problem is not None:
            raise RuntimeUnavailableError(self._url, problem)
        if line.state(False) == _CORE_BACKING_OFF:
            with self._swap_lock:
                self.check_open()
                if self.line is line:
                    self.line = _Line(self._endpoint, self._methods)
                    line.close()  # calls waiting on it are cancelled: they go on on the new one
                line = self.line
        return line

    def call(self, method: str, request: Message, response: type[_R]) -> tuple[_R, _Line]:
        """Call ``method``; its answer and the line that gave it."""
        deadline = time.monotonic() + self._timeout
        line = self.line
        while True:
            self.check_open()
            if line.state(False) != _CORE_READY:
                line = self._usable(line)
            try:
                result = self._invoke(line, method, request, max(0.0, deadline - time.monotonic()))
            except ValueError:  # gRPC's "Cannot invoke RPC on closed channel!"
                if not line.retired:
                    raise
                self.check_open()
                line = self.line  # replaced between the state check and the call
                continue
            except grpc.RpcError as e:
                if line.retired and not self.closed and e.code() is grpc.StatusCode.CANCELLED:
                    line = self.line  # replaced while this call waited on it
                    continue
                took = time.monotonic() - deadline + self._timeout
                raise self._status_failure(method, e.code(), e.details() or "", took) from e
            return _answer(self._url, method, result, response), line

    def pod_calls(self, requests: Sequence[tuple[str, Message]]) -> list[bytes]:
        """Each request's answer bytes, the calls made together on a connection of the pool
        (``http2``, docs/architecture.md §7 rule 6): the filtered list calls of one pod or one
        ID, whose cost must be the pod's. Failures are mapped as ``call``'s are."""
        self.check_open()
        wire = [(method, request.SerializeToString()) for method, request in requests]
        began = time.monotonic()
        try:
            answers = self._pool.call_all(wire, self._timeout)
        except OSError as failure:
            raise RuntimeUnavailableError(self._url, _os_reason(failure)) from None
        except CallFailedError as failure:
            raise self._failed(failure, time.monotonic() - began) from failure
        for (method, _), messages in zip(requests, answers, strict=True):
            if len(messages) != 1:
                raise RuntimeProtocolError(
                    self._url, f"its {method} answer is {len(messages)} messages, not one"
                )
        return [messages[0] for messages in answers]

    def _failed(self, failure: CallFailedError, took: float) -> CRIError:
        """The podcache error of a failed ``pod_calls`` call, ``took`` seconds after it began."""
        if isinstance(failure, WireViolationError):
            return RuntimeProtocolError(
                self._url, f"its {failure.method} answer broke HTTP/2 or gRPC: {failure.details}"
            )
        if failure.code is grpc.StatusCode.CANCELLED and self.closed:
            return CRIError(
                self._url,
                f"{failure.method} was cancelled after {took:.3g} s: {self._owner} closed",
            )
        return self._status_failure(failure.method, failure.code, failure.details, took)

    def _status_failure(
        self, method: str, code: grpc.StatusCode | None, details: str, took: float | None = None
    ) -> CRIError:
        """The podcache error of a call of either client that ended with ``code``: mapped by
        ``failures``, a deadline after one probe of the endpoint (``diagnosis``), saying how
        long the call really took (``took`` seconds) when it is known."""
        error = _status_error(self._endpoint, method, code, details)
        if error is None:
            probe = _probe(self._endpoint, _probe_budget(self._timeout))
            error = _deadline_error(self._url, method, self._timeout, probe, took)
        return error

    def version(self) -> RuntimeVersion:
        """The runtime's Version answer: asked once per channel, then remembered.

        A channel in reconnect backoff is replaced first (see ``_usable``): the new one asks
        again, so a restarted runtime's answer is fresh.
        """
        line = self.line
        version = line.version
        if version is None or line.state(False) == _CORE_BACKING_OFF:
            with self._version_lock:
                line = self.line
                version = line.version
                if version is None or line.state(False) == _CORE_BACKING_OFF:
                    answer, line = self.call(
                        "Version", pb.VersionRequest(version=CRI_VERSION), pb.VersionResponse
                    )
                    version = line.version = _version_from(self._url, answer)
        return version

    def backing_off(self) -> bool:
        """Whether the channel is in reconnect backoff (read from any thread)."""
        return bool(self.line.state(False) == _CORE_BACKING_OFF)

    def container_events(self) -> ContainerEventStream:
        """The GetContainerEvents stream, on a connection of its own (``http2``: grpcio's
        streaming costs several times the CPU per event). ``close()`` cancels it."""
        self.check_open()

        def start() -> StreamCall:
            self.check_open()
            try:
                connection = Connection(self._endpoint, self._timeout)
                call = connection.stream(_EVENTS_METHOD, _EVENTS_REQUEST)
            except OSError as failure:
                raise RuntimeUnavailableError(self._url, _os_reason(failure)) from None
            except CallFailedError as failure:
                raise error(failure.code, failure.details) from None
            with self._swap_lock:
                closed = self.closed
                self._streams.add(call)
            if closed:
                call.cancel()
            return call

        def error(code: grpc.StatusCode | None, details: str) -> CRIError:
            return _events_error(self._endpoint, self.closed, code, details)

        return ContainerEventStream(self._url, start, error, CONFIRM_SECONDS)

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled. Idempotent."""
        with self._swap_lock:
            if self.closed:
                return
            self.closed = True
            streams = list(self._streams)
        self.line.close()
        self._pool.close()
        for call in streams:
            call.cancel()
