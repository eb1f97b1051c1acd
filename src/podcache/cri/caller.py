"""The sync caller: calls on one sync channel with their deadline, channel replacement, errors.

Holds ``SyncCaller``, which ``CRIRuntime`` and ``AsyncCRIRuntime``'s list calls
(``listcalls._ListCaller``) each hold one of and delegate to: the current ``_Line`` and its
replacement when the runtime is back but the channel is in reconnect backoff, each call made
with the remaining deadline (straight to gRPC on a READY channel: the hot path), its failures
mapped (``failures``), a deadline followed by one probe (``diagnosis``), the Version asked
once per channel, a node's list calls streamed when the runtime streams lists (asked once per
channel, ``listing``), the GetContainerEvents stream, and closing. How a call is made is handed
in (``invoke``): blocking, or a gRPC future a task can cancel. Deliberately not here: what the
calls are for (the getters' requests and conversions) and reading the answers.
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
    MAX_RECEIVE_MESSAGE_BYTES,
    _Line,
    _Methods,
)
from podcache.cri.diagnosis import _os_reason, _probe, _probe_budget, _unreachable
from podcache.cri.endpoint import Endpoint
from podcache.cri.eventstream import CONFIRM_SECONDS, ContainerEventStream
from podcache.cri.eventwire import EventFields, EventWireError, status_fields
from podcache.cri.failures import (
    _answer,
    _calling,
    _closed_error,
    _deadline_error,
    _events_error,
    _status_error,
)
from podcache.cri.h2core import CallFailedError, WireViolationError
from podcache.cri.h2pool import ConnectionPool
from podcache.cri.http2 import Connection, StreamCall
from podcache.cri.liststream import (
    MAX_STREAMED_MESSAGE_BYTES,
    STREAM_METHODS,
    STREAMED,
    ListStreamTooLongError,
    StreamedAnswer,
    collect,
    over_limit_reason,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import CRI_VERSION
from podcache.cri.values import RuntimeVersion, _version_from
from podcache.cri.wire.methods import request
from podcache.errors import CRIError, RuntimeProtocolError, RuntimeUnavailableError

__all__ = ["Invoke", "SyncCaller"]

_EVENTS_CALL = request(_EVENTS_METHOD)

_R = TypeVar("_R")

Invoke = Callable[[_Line, str, Message, float], object]
"""``invoke(line, method, request, timeout)``: one call of ``method`` on ``line``, blocking
until its answer; raises gRPC's errors."""


def _blocking(line: _Line, method: str, request: Message, timeout: float) -> object:
    """``Invoke`` as ``CRIRuntime`` makes its calls: gRPC's blocking call; a streaming list
    call read to its end (``liststream.collect``)."""
    stream = line.streams.get(method)
    if stream is not None:
        return collect(stream(request, timeout=timeout, wait_for_ready=True), method)
    return line.rpcs[method](request, timeout=timeout, wait_for_ready=True)


class _NotStreamedError(Exception):
    """A streaming list call answered UNIMPLEMENTED on ``line`` (for ``SyncCaller.listing``)."""

    def __init__(self, line: _Line) -> None:
        super().__init__(line)
        self.line = line


def _is_over_limit(code: grpc.StatusCode | None, details: str) -> bool:
    """Whether a call failed because its answer was over the receive limit (grpcio's and the
    own HTTP/2 client's details alike: "received message larger than max (N vs. M)")."""
    return code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details.lower()


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

    def _usable(self, line: _Line, method: str) -> _Line:
        """The line to call on, for a ``line`` that is not READY (the hot path skips this).

        Raises at once when the endpoint takes no connection. When it does and ``line`` is in
        reconnect backoff, a fresh line replaces it (once, whichever thread comes first).
        """
        problem = _unreachable(self._endpoint, _probe_budget(self._timeout))
        if problem is not None:
            raise RuntimeUnavailableError(self._url, _calling(method, problem))
        if line.state(False) == _CORE_BACKING_OFF:
            with self._swap_lock:
                self.check_open()
                if self.line is line:
                    self.line = _Line(self._endpoint, self._methods)
                    line.close()  # calls waiting on it are cancelled: they go on on the new one
                line = self.line
        return line

    def call(
        self, method: str, request: Message, response: type[_R], *, deadline: float | None = None
    ) -> tuple[_R, _Line]:
        """Call ``method``; its answer and the line that gave it. ``deadline`` (monotonic
        seconds): when the call must end, by default ``timeout`` from now."""
        if deadline is None:
            deadline = time.monotonic() + self._timeout
        line = self.line
        while True:
            self.check_open()
            if line.state(False) != _CORE_READY:
                line = self._usable(line, method)
            try:
                result = self._invoke(line, method, request, max(0.0, deadline - time.monotonic()))
            except ValueError:  # gRPC's "Cannot invoke RPC on closed channel!"
                if not line.retired:
                    raise
                self.check_open()
                line = self.line  # replaced between the state check and the call
                continue
            except ListStreamTooLongError as too_long:
                raise CRIError(self._url, too_long.reason()) from None
            except grpc.RpcError as e:
                if self._replaced(line, e):
                    line = self.line  # replaced while this call waited on it
                    continue
                took = time.monotonic() - deadline + self._timeout
                raise self._rpc_failure(line, method, e, took) from e
            return _answer(self._url, method, result, response), line

    def _replaced(self, line: _Line, error: grpc.RpcError) -> bool:
        """Whether ``error`` is the cancel of a call on ``line`` because the line was replaced
        (not closed by its owner): the call goes on on the new line."""
        return line.retired and not self.closed and error.code() is grpc.StatusCode.CANCELLED

    def _rpc_failure(
        self, line: _Line, method: str, error: grpc.RpcError, took: float
    ) -> Exception:
        """What a call of ``method`` on ``line`` that failed with ``error`` after ``took``
        seconds raises."""
        code = error.code()
        if code is grpc.StatusCode.UNIMPLEMENTED and method in STREAM_METHODS:
            return _NotStreamedError(line)
        if code is grpc.StatusCode.CANCELLED and self.closed:
            why = f"{method} was cancelled after {took:.3g} s: {self._owner} closed"
            return CRIError(self._url, why)
        return self._status_failure(method, code, error.details() or "", took)

    def listing(
        self, method: str, request: Message, response: type[_R]
    ) -> tuple[_R | StreamedAnswer, _Line]:
        """A node's list call (``ListPodSandbox``, ``ListContainers``): its streaming twin
        (``liststream.STREAMED``) while the runtime may stream lists, else ``method``, asked
        once per channel (docs/architecture.md §4, list streaming rule 1). A streamed answer
        comes back as a ``StreamedAnswer``.
        """
        deadline = time.monotonic() + self._timeout
        line = self.line
        if line.streaming is not False:
            twin, _, twin_request = STREAMED[method]
            try:
                answer, line = self.call(
                    twin, twin_request(request), StreamedAnswer, deadline=deadline
                )
            except _NotStreamedError as refused:
                refused.line.streaming = False
            else:
                line.streaming = True
                return answer, line
        return self.call(method, request, response, deadline=deadline)

    @property
    def list_streaming(self) -> bool | None:
        """Whether the runtime streams lists, as the current channel learnt it (None: not
        asked yet on it)."""
        return self.line.streaming

    def pod_calls(self, requests: Sequence[tuple[str, Message]]) -> list[bytes]:
        """Each request's answer bytes, the calls made together on a connection of the pool
        (``http2``, docs/architecture.md §7 rule 6): the filtered list calls of one pod or one
        ID, whose cost must be the pod's. Failures are mapped as ``call``'s are."""
        self.check_open()
        wire = [(method, request.SerializeToString()) for method, request in requests]
        began = time.monotonic()
        methods = " and ".join(dict.fromkeys(method for method, _ in requests))
        try:
            answers = self._pool.call_all(wire, self._timeout)
        except OSError as failure:
            raise RuntimeUnavailableError(
                self._url, _calling(methods, _os_reason(failure))
            ) from None
        except CallFailedError as failure:
            raise self._failed(failure, methods, time.monotonic() - began) from failure
        for (method, _), messages in zip(requests, answers, strict=True):
            if len(messages) != 1:
                raise RuntimeProtocolError(
                    self._url, f"its {method} answer is {len(messages)} messages, not one"
                )
        return [messages[0] for messages in answers]

    def statuses(self, sandbox_ids: Sequence[str]) -> list[EventFields | CRIError]:
        """Each sandbox's PodSandboxStatus fields (``eventwire``), or the error its call ended
        with; the calls made together on a connection of the pool (``http2``). A failure of
        the connection is every call's."""
        self.check_open()
        wire = [request("PodSandboxStatus", s) for s in sandbox_ids]
        began = time.monotonic()
        try:
            outcomes = self._pool.call_each(wire, self._timeout)
        except OSError as failure:
            reason = _calling("PodSandboxStatus", _os_reason(failure))
            return [RuntimeUnavailableError(self._url, reason)] * len(wire)
        except CallFailedError as failure:
            return [self._failed(failure, "PodSandboxStatus", time.monotonic() - began)] * len(wire)
        took = time.monotonic() - began
        return [self._status_outcome(outcome, took) for outcome in outcomes]

    def _status_outcome(
        self, outcome: list[bytes] | CallFailedError, took: float
    ) -> EventFields | CRIError:
        """One status call's fields, or its error (its own status, or an answer that is not
        one ``PodSandboxStatusResponse``)."""
        if isinstance(outcome, CallFailedError):
            return self._failed(outcome, "PodSandboxStatus", took)
        if len(outcome) != 1:
            return RuntimeProtocolError(
                self._url, f"its PodSandboxStatus answer is {len(outcome)} messages, not one"
            )
        try:
            return status_fields(outcome[0])
        except EventWireError as error:
            return RuntimeProtocolError(self._url, f"its PodSandboxStatus answer: {error}")

    def _failed(self, failure: CallFailedError, methods: str, took: float) -> CRIError:
        """The podcache error of a failed ``pod_calls`` call of ``methods`` (named when the
        connection failed before one call could be told from the other), ``took`` seconds
        after it began."""
        method = failure.method or methods
        if isinstance(failure, WireViolationError):
            return RuntimeProtocolError(
                self._url, f"its {method} answer broke HTTP/2 or gRPC: {failure.details}"
            )
        if failure.code is grpc.StatusCode.CANCELLED and self.closed:
            return CRIError(
                self._url,
                f"{method} was cancelled after {took:.3g} s: {self._owner} closed",
            )
        return self._status_failure(method, failure.code, failure.details, took)

    def _status_failure(
        self, method: str, code: grpc.StatusCode | None, details: str, took: float | None = None
    ) -> CRIError:
        """The podcache error of a call of either client that ended with ``code``: mapped by
        ``failures``, a deadline after one probe of the endpoint (``diagnosis``), saying how
        long the call really took (``took`` seconds) when it is known; a list answer over the
        receive limit says whether the runtime streams lists (``liststream``)."""
        if (method in STREAMED or method in STREAM_METHODS) and _is_over_limit(code, details):
            limit = (
                MAX_STREAMED_MESSAGE_BYTES
                if method in STREAM_METHODS
                else MAX_RECEIVE_MESSAGE_BYTES
            )
            reason = over_limit_reason(method, details, limit, self.line.streaming)
            return CRIError(self._url, reason)
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
        """The GetContainerEvents stream, on a connection of its own (``http2``;
        docs/architecture.md §7 rule 6). ``close()`` cancels it."""
        self.check_open()

        def start() -> StreamCall:
            self.check_open()
            try:
                connection = Connection(self._endpoint, self._timeout)
                call = connection.stream(*_EVENTS_CALL)
            except OSError as failure:
                reason = _calling(_EVENTS_METHOD, _os_reason(failure))
                raise RuntimeUnavailableError(self._url, reason) from None
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
