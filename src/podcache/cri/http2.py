"""podcache's own HTTP/2 client for the gRPC calls a pod change makes (docs/architecture.md §7
rule 6: the event stream, the filtered list calls of one pod, a listing's PodSandboxStatus
calls made together by ``call_each``, each call's failure its own): the pooled driver of the
connection core (``h2core``, whose rules hold here too).

Rules:

- **One thread per connection.** The ``ConnectionPool`` (``h2pool``) lends its idle
  connections to the threads that relist pods, and an event stream owns a connection of its
  own. ``StreamCall.cancel()`` is the one call another thread may make; ``ConnectionPool
  .close()`` cancels every connection it has lent the same way.
- **Deadlines.** A unary call's every read and write is under its deadline; the connect and
  the preface's write under the connect timeout; a stream's reads wait without a deadline.
- **Outcomes.** A call's status other than OK, and every failure of the connection, is a
  ``CallFailedError`` with a ``grpc.StatusCode``; a ``WireViolationError`` closes the
  connection.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence

import grpc

from podcache.cri import h2core
from podcache.cri.diagnosis import _connect as _connected
from podcache.cri.endpoint import Endpoint
from podcache.cri.h2core import CallFailedError, Stream, WireViolationError, preface, status_code
from podcache.cri.wire.grpcwire import DEADLINE_EXCEEDED, OK
from podcache.cri.wire.headers import authority

__all__ = ["Connection", "StreamCall"]


def _connect(endpoint: Endpoint, timeout: float | None) -> socket.socket:
    """A connected socket to the runtime (``diagnosis``'s connect; OSError when it takes
    none), without Nagle's delay on TCP: a call's frames go out in one write."""
    sock = _connected(endpoint, timeout)
    if endpoint.address is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class Connection(h2core.Connection):
    """One HTTP/2 connection to the runtime, for one thread at a time (see the module rules).

    ``connect_timeout``: seconds the connect and the preface's write may take (None: no limit
    to the connect, ``SEND_TIMEOUT`` to the write). OSError when the runtime takes none.
    """

    def __init__(self, endpoint: Endpoint, connect_timeout: float | None) -> None:
        super().__init__(_connect(endpoint, connect_timeout), authority(endpoint.address))
        if connect_timeout is not None:
            self._deadline = time.monotonic() + connect_timeout
        try:
            self._send(preface())
        except CallFailedError:
            self._sock.close()
            raise
        self._deadline = None

    def call_all(self, requests: Sequence[tuple[str, bytes]], deadline: float) -> list[list[bytes]]:
        """Each request's answer messages, in order (``call_each``); ``CallFailedError`` for the
        first call that failed."""
        answers: list[list[bytes]] = []
        for outcome in self.call_each(requests, deadline):
            if isinstance(outcome, CallFailedError):
                raise outcome
            answers.append(outcome)
        return answers

    def call_each(
        self, requests: Sequence[tuple[str, bytes]], deadline: float
    ) -> list[list[bytes] | CallFailedError]:
        """Each request's answer messages, or the failure its own call ended with (a status
        other than OK, a reset stream), in order; the requests are sent together, in one write
        (as many at once as the runtime allows). A failure of the connection (or the deadline)
        is every call's: it raises ``CallFailedError``. Every read and write, control frames
        included, ends by ``deadline``."""
        outcomes: list[list[bytes] | CallFailedError] = []
        self._deadline = deadline
        batch = max(1, min(len(requests), self._peer_max_streams))
        try:
            for first in range(0, len(requests), batch):
                ids = self._send_calls(requests[first : first + batch], bytearray())
                outcomes.extend(_outcome(stream) for stream in self._finish(ids))
        finally:
            self._deadline = None
        return outcomes

    def stream(self, method: str, body: bytes) -> StreamCall:
        """Start a server-streaming call; its answers are read through the ``StreamCall``."""
        (stream_id,) = self._send_calls([(method, body)], bytearray(), unary=False)
        return StreamCall(self, self._streams[stream_id])

    def read_stream(self, state: Stream, deadline: float | None) -> None:
        """Read one frame for the stream call of ``state`` (any stream's frames are taken as
        they come); ``deadline`` bounds the read only (its writes have ``SEND_TIMEOUT``)."""
        self._method = state.method
        self._take(self._next_frame(deadline))


def _outcome(stream: Stream) -> list[bytes] | CallFailedError:
    """An ended call's answer messages, or its failure."""
    assert stream.status is not None
    code, details = stream.status
    if code == OK:
        return list(stream.messages)
    return CallFailedError(code, details, stream.method)


class StreamCall:
    """A server-streaming call on a connection of its own (the event stream's)."""

    def __init__(self, connection: Connection, state: Stream) -> None:
        self._connection = connection
        self._state = state

    def confirm(self, seconds: float) -> tuple[grpc.StatusCode, str] | None:
        """Read for up to ``seconds`` (keeping any message); the call's final status if it
        ended meanwhile, else None. A lost connection is its status too; a runtime that broke
        HTTP/2 raises its ``WireViolationError``."""
        deadline = time.monotonic() + seconds
        state = self._state
        try:
            while state.status is None:
                self._connection.read_stream(state, deadline)
        except WireViolationError:
            raise
        except CallFailedError as failure:
            if failure.number == DEADLINE_EXCEEDED:
                return None
            return failure.code, failure.details
        code, details = state.status
        return status_code(code), details

    def has_message(self) -> bool:
        """Whether a message was received and not yet taken."""
        return bool(self._state.messages)

    def next_message(self) -> bytes | None:
        """The next message, waiting as long as it takes; None when the call ended with OK.
        ``CallFailedError`` when it ended otherwise, or the connection did."""
        state = self._state
        while not state.messages:
            if state.status is not None:
                code, details = state.status
                if code == OK:
                    return None
                raise CallFailedError(code, details, state.method)
            self._connection.read_stream(state, None)
        return state.messages.popleft()

    def cancel(self) -> None:
        """End the call from any thread (the reading thread then sees CANCELLED)."""
        self._connection.cancel()

    def close(self) -> None:
        """Close the connection (the reading thread, once done with it)."""
        self._connection.close()
