"""HTTP/1.1 over asyncio transports for one responder coroutine; no routing, no sockets of its own.

``HTTPServer`` holds what all connections share (the responder, the timeouts, a coarse clock,
the ``Date`` header, the open connections); ``HTTPConnection`` is the ``asyncio.Protocol`` of
one connection. ``server`` binds the sockets and hands ``HTTPServer.connection`` to
``loop.create_server``; ``App.respond`` (routing, checks, bodies) is the responder.

Theory of operation. Bytes go to httptools' (llhttp's) parser. When a request head is complete
and nothing is ahead of it, it is answered at once, inside the parser's callback: the
responder's first step runs inline, and a cache hit never suspends, so most requests cost no
task and no queue. A request that arrives while another is being answered (pipelining), or
while writing is paused, waits in the connection's queue; requests are answered one at a time,
in order. A responder that does suspend (a cache refresh) is finished in a task, which answers
and then carries on with the queue. A response is one ``bytes`` head (status line and headers)
and the body, handed to the transport together: a large body is never copied in user space.
Two small memos spare the common case work: a connection keeps the last request's decoded
target and headers (a client polling the same URL on a keep-alive connection is not decoded
again), and the server keeps this second's encoded response heads (answers with the same
headers, e.g. the same age in the same millisecond, share one).

What the server answers itself (a ``_Refusal``: malformed, too large, has a body, wrong
version, too slow) is JSON from ``response.error_body``, queued in order like a request, and
ends the connection: after it the connection half-closes and discards input for a moment, so
input still in flight cannot reset the connection before the client has read the answer.
Reading stops while ``MAX_PIPELINE`` requests wait or while the transport's write buffer is
over its high-water mark: a client that sends without reading holds bounded memory. One timer
for all connections checks the timeouts once a second; no timer is set per request.

It deliberately supports only what a read-only JSON API needs: no request bodies (refused,
never read), no upgrades (answered as plain HTTP/1.1, then closed), no chunked responses, no
HTTP/2. Targets must be ASCII (llhttp refuses raw non-ASCII bytes: 400).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import unquote_to_bytes

import httptools

from podcache.serve.response import JSON, Response, error_body

__all__ = [
    "HEAD_TIMEOUT",
    "IDLE_TIMEOUT",
    "LINGER_TIMEOUT",
    "MAX_HEAD",
    "MAX_HEADER_FIELDS",
    "MAX_PIPELINE",
    "MAX_TARGET",
    "HTTPConnection",
    "HTTPServer",
    "Responder",
]

log = logging.getLogger("podcache.serve")

Responder = Callable[[str, str, str, Iterable[tuple[str, str]]], Coroutine[Any, Any, Response]]
"""``respond(method, path, query, headers)``, i.e. ``App.respond``: answers every request."""

HEAD_TIMEOUT = 10.0
"""Seconds from the start of a request's target to the blank line ending its head: a slowloris
client is cut off (408). The few bytes of the method before it count as idle time."""
IDLE_TIMEOUT = 75.0
"""Seconds a connection may stay idle after its last answer, or after it opened (nginx's
default, longer than most client pools keep one, so the client usually closes first); also
how long a client may leave an answer unread before the connection is dropped."""
LINGER_TIMEOUT = 2.0
"""Seconds to keep discarding input after the server ended a connection, waiting for the
client to close; the client's close usually ends it sooner."""
MAX_HEAD = 64 * 1024
"""Most bytes of header field names and values, and of a head still arriving; more: 431. The
application's limits are lower (query.py): this one caps memory before a head reaches it."""
MAX_TARGET = 16 * 1024
"""Most bytes of a request target; more: 414 (the application refuses paths and queries over
2,048 characters itself)."""
MAX_HEADER_FIELDS = 256
"""Most request header fields collected; more: 431 (the application refuses over 64)."""
MAX_PIPELINE = 16
"""Requests waiting on one connection before it stops reading (one read of at most 8 KiB
already parsed may add more)."""

_FEED_STEP = 8 * 1024  # a larger read is parsed in steps, so a full queue stops parsing early
_LINGER_BYTES = 1024 * 1024  # most input discarded after the end before the connection is reset
_SLASH, _QUESTION, _HASH, _PERCENT = b"/?#%"  # int membership in bytes is ~10x a bytes one
_HEADS_KEPT = 256  # encoded response heads kept for reuse within a second
_INTERNAL_ERROR = "internal server error (logged by the server)"
_NO_BODY = frozenset({204, 304})  # statuses whose answers have no body (RFC 9110 6.4.1)
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}

_EAGER_TASKS = sys.version_info >= (3, 12)

if sys.version_info >= (3, 12):

    def _start_task(
        loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        return asyncio.Task(coroutine, loop=loop, eager_start=True)

else:

    def _start_task(
        loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        return loop.create_task(coroutine)  # not used on 3.11 but by the tests of 3.12's path


_Request = tuple[str, str, str, list[tuple[str, str]], bool, bool]
"""A request waiting in the queue: method, path, query, headers, keep_alive, http10."""


class _Stop(Exception):  # noqa: N818 -- ends parsing on purpose, not an error
    """Raised from a parser callback: this connection parses nothing more."""


class _Refusal:
    """An answer the server gives itself (a JSON error), after which the connection ends."""

    __slots__ = ("message", "status")

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


class HTTPServer:
    """What the connections share: responder, timeouts, a coarse clock, and the open connections.

    ``start()`` (in the running loop) starts the one timer that refreshes ``now`` and the
    ``Date`` header and enforces every connection's timeouts; ``shutdown()`` closes idle
    connections, lets busy ones finish their requests, and resets what is left after ``grace``.
    """

    def __init__(
        self,
        respond: Responder,
        *,
        head_timeout: float = HEAD_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        linger_timeout: float = LINGER_TIMEOUT,
    ) -> None:
        self.respond = respond
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.linger_timeout = linger_timeout
        self.connections: set[HTTPConnection] = set()
        self.closing = False
        self.now = 0.0
        """The loop's clock at the last tick: timestamps on the hot path cost no clock call."""
        self.tail = "server: podcache\r\n"
        """The last header lines of every response: ``date`` (this second) and ``server``."""
        self.heads: dict[tuple[Any, ...], bytes] = {}
        """Encoded response heads of this second, by status, length and header lines."""
        # Ticks: each wall-clock second, or four per shortest timeout when one is shorter.
        self._interval = min(1.0, head_timeout / 4, idle_timeout / 4, linger_timeout / 4)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._idle: asyncio.Event | None = None

    def start(self) -> None:
        """Start the clock; call in the loop that will serve."""
        self._loop = asyncio.get_running_loop()
        self._tick()

    def connection(self) -> HTTPConnection:
        """A protocol for one new connection: the factory for ``loop.create_server``."""
        assert self._loop is not None, "HTTPServer.start() first"
        return HTTPConnection(self, self._loop)

    async def shutdown(self, grace: float) -> None:
        """Close idle connections now and busy ones after their queued requests; reset any still
        open after ``grace`` seconds. Call once the listener stopped accepting."""
        self.closing = True
        self._idle = asyncio.Event()
        for connection in list(self.connections):
            connection.shutdown()
        if self.connections:
            try:
                await asyncio.wait_for(self._idle.wait(), grace)
            except TimeoutError:
                log.warning(
                    "%d connection(s) still open %g s after stopping: reset", len(self), grace
                )
                for connection in list(self.connections):
                    connection.abort()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __len__(self) -> int:
        return len(self.connections)

    def forget(self, connection: HTTPConnection) -> None:
        """``connection`` is closed."""
        self.connections.discard(connection)
        if not self.connections and self._idle is not None:
            self._idle.set()

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        self.now = now = loop.time()
        wall = time.time()
        self.tail = f"date: {formatdate(wall, usegmt=True)}\r\nserver: podcache\r\n"
        self.heads = {}
        for connection in list(self.connections):
            try:
                connection.check(now)
            except Exception:
                log.exception("HTTP connection failed; reset")
                connection.abort()
        # The next tick just after the next wall-clock second (so ``date`` is right), or sooner.
        self._timer = loop.call_later(min(self._interval, 1.0005 - wall % 1.0), self._tick)


class HTTPConnection(asyncio.Protocol):
    """One client connection: parses requests, answers them in order, enforces the limits.

    An exception escaping the protocol is logged and the connection reset: the client never
    sees a traceback.
    """

    def __init__(self, server: HTTPServer, loop: asyncio.AbstractEventLoop) -> None:
        self._server = server
        self._loop = loop
        self._respond = server.respond
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._queue: deque[_Request | _Refusal] = deque()
        # The head being parsed.
        self._url = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._in_head = False
        self._head_bytes = 0  # received while the head is incomplete (counted per read)
        self._field_bytes = 0  # of the complete header fields' names and values
        # The previous request's raw target and fields, and the parts decoded from them.
        self._last: tuple[bytes, list[tuple[bytes, bytes]], tuple[str, str, list[Any]]] | None
        self._last = None
        self._head_started: float | None = None
        # The connection.
        self._parsing = True  # False once the connection is ending: input is discarded
        self._stopping = False  # a parser callback raised _Stop on purpose
        self._unparsed = b""  # input held back while MAX_PIPELINE requests wait
        self._busy = False  # a task is finishing an answer
        self._task: asyncio.Task[None] | None = None
        self._write_paused = False
        self._read_paused = False
        self._eof = False
        self._closed = False
        self._linger_since: float | None = None
        self._discarded = 0
        self._last_active = server.now
        self._stalled_size = -1

    @property
    def queued(self) -> int:
        """Requests parsed and waiting for their turn."""
        return len(self._queue)

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._server.connections.add(self)
        if self._server.closing:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._parsing:
            self._discard(len(data))
            return
        try:
            if self._unparsed:  # reading was paused with a read under way
                self._unparsed += data
                return
            if len(data) > _FEED_STEP:
                self._feed(data)
            else:
                self._parse(data)
            if self._queue:
                if not self._busy:
                    self._serve()
                elif len(self._queue) >= MAX_PIPELINE:
                    self._update_reading()
        except Exception:
            log.exception("HTTP connection failed; reset")
            self.abort()

    def eof_received(self) -> bool:
        self._eof = True
        # True: answer what was asked before the client half-closed, then close. False (nothing
        # left to answer, or the server already ended the connection): close now.
        return self._linger_since is None and bool(self._busy or self._queue or self._unparsed)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._stalled_size = -1
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._last_active = self._server.now
        try:
            self._serve()
        except Exception:
            log.exception("HTTP connection failed; reset")
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._queue.clear()
        self._server.forget(self)
        if self._task is not None:
            # Only this request's wait ends: App shields the cache refresh it may wait for.
            self._task.cancel()

    # -- httptools callbacks -------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self._in_head = True
        self._url += url
        if len(self._url) > MAX_TARGET:
            self._refuse(414, f"request target is longer than {MAX_TARGET} bytes")
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        fields = self._fields
        self._field_bytes += len(name) + len(value)
        if self._field_bytes > MAX_HEAD:
            self._refuse(431, f"request head is larger than {MAX_HEAD} bytes")
            raise _Stop
        if len(fields) >= MAX_HEADER_FIELDS:
            self._refuse(431, f"more than {MAX_HEADER_FIELDS} request header fields")
            raise _Stop
        fields.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_started = None
        self._head_bytes = 0
        self._field_bytes = 0
        parser = self._parser
        http10 = False
        version = parser.get_http_version()
        if version != "1.1":
            if version != "1.0":
                self._refuse(505, f"HTTP/{version} is not supported: speak HTTP/1.1")
                raise _Stop
            http10 = True
        method = parser.get_method().decode()  # one of llhttp's method names: ASCII
        ends = not parser.should_keep_alive() or parser.should_upgrade()  # upgrades: answer, end
        url, fields = self._url, self._fields
        self._url = b""
        self._fields = []
        last = self._last
        if last is not None and url == last[0] and fields == last[1]:
            # The same target and header lines as the previous request (clients polling on a
            # keep-alive connection): the same decoded parts, and no body, as then.
            path, query, headers = last[2]
        else:
            headers = []
            for name, value in fields:
                lower = name.lower()
                if lower == b"content-length":
                    if value.strip(b" \t0"):  # llhttp checked it is digits: not all zeros
                        ends = self._has_body(method)
                elif lower == b"transfer-encoding":
                    ends = self._has_body(method)
                headers.append((lower.decode("latin-1"), value.rstrip(b" \t").decode("latin-1")))
            target = _split_target(url)
            if target is None:
                self._refuse(400, f"request target {url[:64]!r} is neither a path nor a URL")
                raise _Stop
            path, query = target
            self._last = (url, fields, (path, query, headers))
        keep_alive = not ends
        request = (method, path, query, headers, keep_alive, http10)
        if self._queue or self._busy or self._write_paused:
            self._queue.append(request)
        else:
            self._answer(request)
        if ends or not self._parsing:  # this request ends the connection, or its answer did
            self._parsing = False
            self._stopping = True
            raise _Stop

    def _has_body(self, method: str) -> bool:
        if method in ("GET", "HEAD"):
            self._refuse(413, "request bodies are not accepted (GET and HEAD take none)")
            raise _Stop
        return True  # other methods: the application answers 405; the body is never read

    # -- parsing -------------------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        """Parse ``data``, in ``_FEED_STEP`` steps when larger; hold back what is left once
        ``MAX_PIPELINE`` requests wait."""
        size = len(data)
        if size <= _FEED_STEP:
            self._parse(data)
            return
        view = memoryview(data)
        for offset in range(0, size, _FEED_STEP):
            if len(self._queue) >= MAX_PIPELINE:
                self._unparsed = data[offset:]
                self._update_reading()
                return
            self._parse(view[offset : offset + _FEED_STEP])
            if not self._parsing:
                return

    def _parse(self, piece: bytes | memoryview) -> None:
        try:
            self._parser.feed_data(piece)
        except httptools.HttpParserCallbackError:
            if not self._stopping:
                raise  # a bug in a callback: data_received logs it
        except httptools.HttpParserUpgrade:
            pass  # not reached: the upgrade request ended parsing in on_headers_complete
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed request: {exc}")
        if self._in_head and self._parsing:
            # Counted per piece: a head is refused somewhere between MAX_HEAD - _FEED_STEP and
            # MAX_HEAD bytes, far above what the application accepts anyway.
            self._head_bytes += len(piece)
            if self._head_bytes > MAX_HEAD:  # a long target was refused already, in on_url
                self._refuse(431, f"request head is larger than {MAX_HEAD} bytes")
            elif self._head_started is None:
                self._head_started = self._server.now

    def _refuse(self, status: int, message: str) -> None:
        """Queue the server's own JSON answer and stop parsing: the connection ends after it."""
        self._queue.append(_Refusal(status, message))
        self._parsing = False
        self._stopping = True
        self._in_head = False
        self._head_started = None
        self._unparsed = b""

    # -- answering -----------------------------------------------------------------------------
    def _answer(self, request: _Request) -> None:
        """Answer now if the responder does not suspend, else finish the answer in a task."""
        if _EAGER_TASKS:
            # Python 3.12+: the first step runs at once, in a task (asyncio.timeout, which
            # wait_for uses there, needs one); a task that finished costs no scheduling.
            task = _start_task(self._loop, self._complete(request))
            if not task.done():
                self._busy = True
                self._task = task
            return
        # Python 3.11: the first step by hand, outside any task (nothing on the responder's
        # path needs one there); only a responder that suspends gets a task.
        method, path, query, headers, keep_alive, http10 = request
        coroutine = self._respond(method, path, query, headers)
        try:
            waiting_for = coroutine.send(None)
        except StopIteration as done:
            self._send(done.value, method == "HEAD", keep_alive, http10)
            return
        except Exception:
            log.exception("the responder failed on %s %.200s", method, path)
            self._refuse(500, _INTERNAL_ERROR)
            return
        self._busy = True
        self._task = self._loop.create_task(self._finish(coroutine, waiting_for, request))

    async def _complete(self, request: _Request) -> None:
        """The whole answer in a task started eagerly (Python 3.12+)."""
        method, path, query, headers, _, _ = request
        try:
            response: Response | None = await self._respond(method, path, query, headers)
        except Exception:
            log.exception("the responder failed on %s %.200s", method, path)
            response = None
        self._deliver(request, response)

    async def _finish(
        self, coroutine: Coroutine[Any, Any, Response], waiting_for: Any, request: _Request
    ) -> None:
        """The rest of an answer whose first step suspended (Python 3.11)."""
        try:
            response: Response | None = await _resume(coroutine, waiting_for)
        except Exception:
            log.exception("the responder failed on %s %.200s", request[0], request[1])
            response = None
        self._deliver(request, response)

    def _deliver(self, request: _Request, response: Response | None) -> None:
        """Send ``response`` (None: the responder failed); if the answer waited in a task, go
        on with the queue."""
        waited = self._busy
        self._task = None
        self._busy = False
        if self._closed:
            return
        try:
            if response is None:
                self._send_refusal(_Refusal(500, _INTERNAL_ERROR))
            else:
                self._send(response, request[0] == "HEAD", request[4], request[5])
                if waited:
                    self._serve()
        except Exception:
            log.exception("HTTP connection failed; reset")
            self.abort()

    def _serve(self) -> None:
        """Answer queued requests in order until one must wait, writing pauses, or none is left;
        then parse the input held back while the queue was full."""
        queue = self._queue
        while not self._closed:
            while queue and not self._busy and not self._write_paused:
                item = queue.popleft()
                if type(item) is _Refusal:
                    self._send_refusal(item)
                    return
                self._answer(cast(_Request, item))
            if queue or self._busy or self._write_paused or not self._unparsed or self._closed:
                break
            held, self._unparsed = self._unparsed, b""
            self._feed(held)
        if self._closed:
            return
        self._update_reading()
        if self._eof and not (self._busy or queue or self._unparsed) and self._transport:
            self._transport.close()

    def _send(self, response: Response, head_only: bool, keep_alive: bool, http10: bool) -> None:
        transport = self._transport
        assert transport is not None
        if self._linger_since is not None or transport.is_closing():
            return  # the connection ended (shutdown, a timeout): nothing more is sent
        status = response.status
        body = response.body
        if self._server.closing and not self._queue:
            keep_alive = False
        # Answers given in the same second with the same headers (the age changes once a
        # millisecond) share one encoded head: the server's heads are cleared every tick.
        heads = self._server.heads
        key = (status, len(body), keep_alive, http10, *response.headers)
        head = heads.get(key)
        if head is None:
            if len(heads) >= _HEADS_KEPT:
                heads.clear()
            head = heads[key] = self._head(response, keep_alive, http10)
        if head_only or status in _NO_BODY or status < 200:
            transport.write(head)
        else:
            # One writev, the body never copied. For a 1.2 KB body, write(head + body) measured
            # the same CPU per answer (3.7-4.6 us against 4.0-4.2 us), so one path serves all.
            transport.writelines((head, body))
        self._last_active = self._server.now
        if not keep_alive:
            self._end()

    def _head(self, response: Response, keep_alive: bool, http10: bool) -> bytes:
        """The status line and header lines of ``response``, and the blank line."""
        status = response.status
        headers = response.headers
        fields = "\r\n".join(map(": ".join, headers)) + "\r\n" if headers else ""
        # No content-length on 1xx, 204 and 304 (RFC 9110 8.6): they have no body.
        no_body = status in _NO_BODY or status < 200
        length = "" if no_body else f"content-length: {len(response.body)}\r\n"
        if not keep_alive:
            connection = "connection: close\r\n"
        elif http10:
            connection = "connection: keep-alive\r\n"
        else:
            connection = ""
        line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n"
        # UTF-8, not latin-1: the same bytes for the ASCII the application sends, and faster.
        return f"{line}{fields}{length}{connection}{self._server.tail}\r\n".encode()

    def _send_refusal(self, refusal: _Refusal) -> None:
        transport = self._transport
        assert transport is not None
        self._queue.clear()
        if self._linger_since is not None or transport.is_closing():
            return
        status = refusal.status
        body = error_body(status, refusal.message)
        head = (
            f"{_STATUS_LINES.get(status) or f'HTTP/1.1 {status} '}"
            f"content-type: {JSON}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
            f"{self._server.tail}\r\n"
        )
        transport.write(head.encode() + body)
        self._end()

    # -- ending and timeouts -------------------------------------------------------------------
    def _end(self) -> None:
        """End the connection after the last answer: half-close, then discard input until the
        client closes (or ``linger_timeout``), so that input still in flight (a body, pipelined
        requests) cannot turn into a TCP reset that destroys the answer before it is read."""
        transport = self._transport
        self._parsing = False
        self._unparsed = b""
        if transport is None or self._closed or transport.is_closing():
            return
        if self._eof or not transport.can_write_eof():
            transport.close()
            return
        if self._linger_since is None:
            self._linger_since = self._server.now
            transport.write_eof()
            self._update_reading()

    def _discard(self, size: int) -> None:
        self._discarded += size
        if self._discarded > _LINGER_BYTES:
            self.abort()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closed or transport.is_closing():
            return
        pause = self._parsing and (
            self._write_paused or bool(self._unparsed) or len(self._queue) >= MAX_PIPELINE
        )
        if pause != self._read_paused:
            self._read_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def check(self, now: float) -> None:
        """Enforce the timeouts (the server's timer calls this every tick)."""
        transport = self._transport
        if transport is None or self._closed:
            return
        server = self._server
        if self._linger_since is not None:
            if now - self._linger_since >= server.linger_timeout:
                self.abort()
        elif self._head_started is not None:
            if now - self._head_started >= server.head_timeout:
                self._refuse(408, f"the request head took longer than {server.head_timeout:g} s")
                if not self._busy:
                    self._serve()
        elif self._write_paused:
            size = transport.get_write_buffer_size()
            if size != self._stalled_size:  # the client reads, slowly
                self._stalled_size = size
                self._last_active = now
            elif now - self._last_active >= server.idle_timeout:
                self.abort()
        elif not (self._busy or self._queue) and now - self._last_active >= server.idle_timeout:
            transport.close()

    def shutdown(self) -> None:
        """The server stops: close now if idle, else after answering the requests queued."""
        self._parsing = False
        self._unparsed = b""
        if not (self._busy or self._queue) and self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Reset the connection now."""
        if self._transport is not None and not self._closed:
            self._transport.abort()


async def _resume(coroutine: Coroutine[Any, Any, Response], waiting_for: Any) -> Response:
    """Finish ``coroutine``, started outside any task and now suspended on ``waiting_for``,
    in the current task: the steps asyncio.Task would take (a future the coroutine yielded is
    awaited here, then the coroutine resumes and reads the future's outcome itself)."""
    while True:
        error: BaseException | None = None
        if waiting_for is None:
            await asyncio.sleep(0)  # a bare yield: give the loop one turn
        else:
            waiting_for._asyncio_future_blocking = False  # as Task.__step does before waiting
            try:
                await waiting_for
            except asyncio.CancelledError as exc:
                if not waiting_for.cancelled():
                    error = exc  # this task was cancelled, not the future: pass it on
            except Exception:
                if not waiting_for.done():
                    raise
                # else the future failed: the coroutine gets the error from its result()
        try:
            waiting_for = coroutine.send(None) if error is None else coroutine.throw(error)
        except StopIteration as done:
            response: Response = done.value
            return response


def _split_target(url: bytes) -> tuple[str, str] | None:
    """``(path, query)`` of a request target, the path percent-decoded as UTF-8 (bytes that are
    not UTF-8 become U+FFFD, which the application refuses) and the query left encoded;
    ``"*"`` stays ``"*"``; None when the target is neither a path nor an absolute URL."""
    if url and url[0] == _SLASH:
        if _QUESTION in url:
            raw_path, _, raw_query = url.partition(b"?")
            if _HASH in raw_query:
                raw_query = raw_query.partition(b"#")[0]
        else:
            raw_path, raw_query = url, b""
            if _HASH in raw_path:
                raw_path = raw_path.partition(b"#")[0]
    elif url == b"*":
        return "*", ""
    elif b"://" in url:
        try:
            parsed = httptools.parse_url(url)
        except httptools.HttpParserInvalidURLError:
            return None
        raw_path, raw_query = parsed.path or b"/", parsed.query or b""
    else:
        return None
    if _PERCENT in raw_path:
        raw_path = unquote_to_bytes(raw_path)
    return raw_path.decode("utf-8", "replace"), raw_query.decode("utf-8", "replace")
