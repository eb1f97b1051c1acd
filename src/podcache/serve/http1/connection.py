"""``HTTPConnection``, the ``asyncio.Protocol`` of one client connection, and ``HTTPServer``.

The protocol's callbacks hand work to the parts the class is made of (``parsing``,
``answering``, ``streaming``, on ``lifecycle``). Deliberately not here: what each part does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import cast

from podcache.serve.http1.admission import Admission
from podcache.serve.http1.answering import Answering
from podcache.serve.http1.items import _End, _Refusal
from podcache.serve.http1.limits import _REFUSING
from podcache.serve.http1.parsing import Parsing
from podcache.serve.http1.states import (
    _OVER,
    _WAITING_FOR_INPUT,
    BLOCKED,
    CLOSED,
    ENDING,
    HEAD,
    IDLE,
    STREAMING,
)
from podcache.serve.http1.streaming import Streaming

__all__ = ["HTTPConnection", "HTTPServer"]

log = logging.getLogger("podcache.serve")


class HTTPServer(Admission["HTTPConnection"]):
    """What the connections share (``Admission``), and the factory of their protocols."""

    def connection(self) -> HTTPConnection:
        """A protocol for one new connection: the factory for ``loop.create_server``."""
        assert self._loop is not None, "HTTPServer.start() first"
        return HTTPConnection(self, self._loop, self.allowed_hosts)

    def listener(self, allowed_hosts: frozenset[str] | None) -> Callable[[], HTTPConnection]:
        """The protocol factory of one listener of several, serving ``allowed_hosts`` (None:
        any) instead of the server's: each listener has its own names (``--listen`` given more
        than once); the bounds stay the server's, for all of them together."""

        def connection() -> HTTPConnection:
            assert self._loop is not None, "HTTPServer.start() first"
            return HTTPConnection(self, self._loop, allowed_hosts)

        return connection


class HTTPConnection(Parsing, Answering, Streaming, asyncio.Protocol):
    """One client connection: parses requests, answers them in order, enforces the limits.

    An exception escaping the protocol is logged and the connection reset: the client never
    sees a traceback.
    """

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport = cast(asyncio.Transport, transport)  # uvloop's: no subclass
        self._high_water = transport.get_write_buffer_limits()[1]
        server = self._server
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, server.send_buffer)
        if server.closing:
            self._parser = None
            self._enter(ENDING)
            transport.close()
            return
        if not server.admit(self):
            self._refuse_over_capacity()

    def _refuse_over_capacity(self) -> None:
        """Over ``max_connections``: a 503, then end (reset at once when even the refusals are
        over their bound)."""
        self._refused = True
        server = self._server
        if server.refused > _REFUSING:
            self.abort()
            return
        self._queue.append(
            _Refusal(503, f"the server has {server.max_connections} connections: try again")
        )
        self._next()

    def data_received(self, data: bytes) -> None:
        if self._parser is None:
            self._discard(len(data))
            return
        try:
            if self._unparsed:  # reading was paused with a read under way
                self._unparsed += data
                return
            self._feed(data)
            if self.state in _WAITING_FOR_INPUT:
                if self._queue:
                    self._next()
                elif self.state is IDLE and self._head_began is not None:
                    self._enter(HEAD)
            else:
                self._update_reading()
        except Exception:
            log.exception("HTTP connection failed; reset")
            self.abort()

    def eof_received(self) -> bool:
        # False closes the transport now: nothing left to answer, or the server already ended
        # the connection. True: answer what was asked before the client half-closed, then close.
        if self.state in _OVER:
            return False
        if self._eof:  # told again (uvloop does when reading resumes): decided the first time
            return True
        self._eof = True
        if self._unparsed:  # held back while the queue was full: the client sends no more
            held, self._unparsed = self._unparsed, b""
            self._parse(held)
        if not self._queue and self.state in _WAITING_FOR_INPUT:
            return False
        self._stop_parsing()
        self._queue.append(_End("the client closed its side"))
        if self.state in _WAITING_FOR_INPUT:
            self._guarded(self._next)
        elif self.state is STREAMING:
            # A stream (a watch) never ends by itself: the client's close ends it, cleanly.
            self._end_stream()
        return True

    def pause_writing(self) -> None:
        self.note_unsent()

    def resume_writing(self) -> None:
        self.note_unsent()
        if self.state is BLOCKED:
            self._guarded(self._next)

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(CLOSED)
        self._queue.clear()
        self._unparsed = b""
        self._server.forget(self, refused=self._refused)
        if self._writing is not None:
            self._end_stream()
        elif self._task is not None:
            # Only this request's wait ends: App shields the cache refresh it may wait for.
            self._task.cancel()
