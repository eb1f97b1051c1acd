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
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from podcache.cri.channels import _CORE_BACKING_OFF, _CORE_READY, _METHODS, _Line, _Methods
from podcache.cri.diagnosis import _probe, _probe_budget, _unreachable
from podcache.cri.endpoint import Endpoint
from podcache.cri.eventstream import CONFIRM_SECONDS, ContainerEventStream
from podcache.cri.failures import (
    _answer,
    _closed_error,
    _deadline_error,
    _events_error,
    _rpc_error,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import CRI_VERSION
from podcache.cri.values import RuntimeVersion, _version_from
from podcache.errors import CRIError, RuntimeUnavailableError

__all__ = ["Invoke", "SyncCaller"]

_NOT_CONNECTED = "no connection for GetContainerEvents within {:g} s"

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
                error = _rpc_error(self._endpoint, method, e)
                if error is None:
                    probe = _probe(self._endpoint, _probe_budget(self._timeout))
                    error = _deadline_error(self._url, method, self._timeout, probe)
                raise error from e
            return _answer(self._url, method, result, response), line

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
        """The GetContainerEvents stream on this caller's channel (``CRIRuntime``'s)."""
        self.check_open()
        holder: list[_Line] = []

        def start() -> Any:
            self.check_open()
            line = self.line
            if line.state(False) != _CORE_READY:
                line = self._connected(self._usable(line))
            holder.append(line)
            return line.events(pb.GetEventsRequest(), wait_for_ready=False)

        def error(code: grpc.StatusCode | None, details: str) -> CRIError:
            return _events_error(self._endpoint, bool(holder) and holder[-1].retired, code, details)

        return ContainerEventStream(self._url, start, error, CONFIRM_SECONDS)

    def _connected(self, line: _Line) -> _Line:
        """``line`` once READY (a stream must not be taken for open while it is connecting);
        ``RuntimeUnavailableError`` when it fails to connect or takes longer than the timeout."""
        deadline = time.monotonic() + self._timeout
        while (state := line.state(True)) != _CORE_READY:
            if state == _CORE_BACKING_OFF or time.monotonic() > deadline:
                problem = _unreachable(self._endpoint, _probe_budget(self._timeout))
                raise RuntimeUnavailableError(
                    self._url, problem or _NOT_CONNECTED.format(self._timeout)
                )
            time.sleep(0.002)
        return line

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled. Idempotent."""
        with self._swap_lock:
            if self.closed:
                return
            self.closed = True
        self.line.close()
