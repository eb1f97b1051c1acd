"""A connection's lifecycle: its state, its timeouts, its unsent bytes, and its end.

``Lifecycle`` is the base of ``HTTPConnection``'s parts and holds the only code that changes
the state (``_enter``). Deliberately not here: how requests are parsed, answered or streamed
(``parsing``, ``answering``, ``streaming``), which it calls only through the methods declared
for them below.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import httptools

from podcache.serve.http1.admission import Admission
from podcache.serve.http1.items import _End, _Queued, _Refusal, _Writing
from podcache.serve.http1.limits import _LINGER_BYTES, MAX_PIPELINE
from podcache.serve.http1.states import (
    _OVER,
    _WAITING_FOR_INPUT,
    BLOCKED,
    CLOSED,
    ENDING,
    HEAD,
    IDLE,
    STREAMING,
    State,
    UnlistedTransitionError,
)

if TYPE_CHECKING:
    from podcache.serve.response import Response

__all__ = ["Lifecycle"]

log = logging.getLogger("podcache.serve")


class Lifecycle:
    """A connection's state and everything that ends it; the base of ``HTTPConnection``'s
    parts (``parsing``, ``answering``, ``streaming``), which share its attributes."""

    def __init__(
        self,
        server: Admission[Any],
        loop: asyncio.AbstractEventLoop,
        allowed_hosts: frozenset[str] | None,
    ) -> None:
        self._server = server
        self._loop = loop
        self._allowed_hosts = allowed_hosts  # the listener's Host values (None: any)
        self._respond = server.respond
        self._respond_now = server.respond_now
        self.state = IDLE
        self._since = server.now
        """When the state began, or (``BLOCKED``, ``STREAMING``, ``ENDING``) the last write
        progress: what the tick's timeouts count from."""
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        """None once nothing more is parsed (a refusal, the end of input, shutdown)."""
        self._transport: asyncio.Transport | None = None
        self._high_water = 64 * 1024
        self._queue: deque[_Queued] = deque()
        self._unparsed = b""  # input held back while MAX_PIPELINE requests wait
        self._task: asyncio.Task[None] | None = None  # ANSWERING, STREAMING
        self._writing: _Writing | None = None  # STREAMING, until its end is decided
        self._refused = False  # over max_connections: answered 503, never parsed
        self._eof = False  # the client closed its side (uvloop may report it more than once)
        self._stream_began = False  # the STREAMING task started running (see _end_stream)
        self._unsent = 0  # bytes unsent at the last look (tick or write)
        self._discarded = 0  # input bytes dropped since the connection began ending
        # The head being parsed.
        self._head_began: float | None = None  # server.now at its first byte; None between
        self._url = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0  # received while the head is incomplete (counted per read)
        self._field_bytes = 0  # of the complete header fields' names and values

    @property
    def queued(self) -> int:
        """Requests parsed and waiting for their turn."""
        return len(self._queue)

    def _enter(self, state: State) -> None:
        """The one place the state changes, and only as ``TRANSITIONS`` allows (see the
        package's tables); an unlisted change raises, and the connection is reset."""
        before = self.state
        if state not in before.successors:  # a tuple: identity first, no Enum hashing
            raise UnlistedTransitionError(
                f"HTTP connection: {before.name} -> {state.name} is not in the state table"
            )
        changed = state is not before
        self.state = state
        self._since = self._server.now
        if changed or state is BLOCKED:  # IDLE to IDLE (keep-alive) leaves reading as it was
            self._update_reading()

    if TYPE_CHECKING:  # defined by the parts (parsing, answering, streaming), which call them

        def _next(self) -> None: ...

        def _stop_parsing(self) -> None: ...

        def _feed(self, data: bytes) -> None: ...

        def _start_stream(self, response: Response, keep_alive: bool, http10: bool) -> None: ...

        def _end_stream(self) -> None: ...

        def _head(self, response: Response, keep_alive: bool, http10: bool) -> bytes: ...

    def _guarded(self, step: Callable[[], object]) -> None:
        """Run ``step`` from a callback or a task: a failure is logged and resets the
        connection."""
        try:
            step()
        except Exception:
            log.exception("HTTP connection failed; reset")
            self.abort()

    def _end(self, *, half_close: bool = True) -> None:
        """End the connection after the last answer: half-close, then discard input until the
        client closes, so that input still in flight (a body, pipelined requests) cannot turn
        into a TCP reset that destroys the answer before it is read (``half_close=False``:
        close, for a connection with no answer in flight). ``check`` resets it when the client
        stops reading or does not close (``linger_timeout``)."""
        transport = self._transport
        assert transport is not None
        self._stop_parsing()
        self._queue.clear()
        if self.state in _OVER:
            return
        self._enter(ENDING)
        if transport.is_closing():
            return
        if half_close and not self._eof and transport.can_write_eof():
            transport.write_eof()
        else:
            transport.close()

    def _discard(self, size: int) -> None:
        self._discarded += size
        if self._discarded > _LINGER_BYTES:
            self.abort()

    def unsent_now(self) -> int:
        """The bytes written but not yet sent; fewer than at the last look is write progress."""
        transport = self._transport
        if transport is None or self.state is CLOSED:
            return 0
        size = transport.get_write_buffer_size()
        if size < self._unsent:
            self._since = self._server.now  # the client read some
        self._unsent = size
        return size

    def note_unsent(self) -> None:
        """Look at the unsent bytes (after a write, on a tick): the server's budget counts them."""
        before = self._unsent
        size = self.unsent_now()
        if size != before:
            self._server.note_unsent(self, size)

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.state in _OVER or transport.is_closing():
            return
        pause = (
            self.state is BLOCKED or bool(self._unparsed) or len(self._queue) >= MAX_PIPELINE
        ) and self._parser is not None
        if pause == transport.is_reading():
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def check(self, now: float) -> None:
        """Enforce the current state's timeout (the server's timer calls this every tick)."""
        state = self.state
        server = self._server
        if state is CLOSED:
            return
        self.note_unsent()  # a client reading an answer makes progress
        if state is IDLE:
            if now - self._since >= server.idle_timeout:
                self._end(half_close=False)
        elif state is HEAD:
            self._check_head(now)
        elif state in (BLOCKED, STREAMING, ENDING):
            limit = server.linger_timeout if state is ENDING else server.idle_timeout
            stuck = state is not STREAMING or self._unsent > 0
            if stuck and now - self._since >= limit:
                self.abort(cut_off="stalled")

    def _check_head(self, now: float) -> None:
        """A request head that took longer than the server's head timeout is answered 408,
        and nothing after it is read."""
        began = self._head_began
        timeout = self._server.head_timeout
        if began is not None and now - began >= timeout:
            self._queue.append(_Refusal(408, f"the request head took longer than {timeout:g} s"))
            self._stop_parsing()
            self._next()

    def shutdown(self) -> None:
        """The server stops: close now if idle, else after answering the requests queued (a
        stream ends cleanly at once)."""
        self._stop_parsing()
        if self.state in _WAITING_FOR_INPUT:
            self._end(half_close=False)
        elif self.state is ENDING:
            if self._transport is not None:
                self._transport.close()  # stop waiting for the client to close; sends what is left
        elif self.state is not CLOSED:
            self._queue.append(_End("the server stops"))
            if self.state is STREAMING:
                self._end_stream()

    def abort(self, *, cut_off: str | None = None) -> None:
        """Reset the connection now: nothing more is written or read. ``cut_off``: why, when a
        bound of the server's resets it; a stream being written is told (``cut_off(reason)``)."""
        writing = self._writing
        if writing is not None and cut_off is not None:
            self._writing = None
            _tell_cut_off(writing.chunks, cut_off)
        if self._transport is not None and self.state is not CLOSED:
            self._transport.abort()
            self._enter(CLOSED)


def _tell_cut_off(chunks: AsyncIterator[bytes], reason: str) -> None:
    """Tell a stream that has a ``cut_off(reason)`` it is being reset (the reasons: the package
    docstring's streaming answers)."""
    cut_off = getattr(chunks, "cut_off", None)
    if cut_off is not None:
        cut_off(reason)
