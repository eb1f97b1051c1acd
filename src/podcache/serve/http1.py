"""HTTP/1.1 over asyncio transports for one application; no routing, no sockets of its own.

``HTTPServer`` holds what all connections share (the responder, the limits, a coarse clock,
the ``Date`` header, the open connections); ``HTTPConnection`` is the ``asyncio.Protocol`` of
one connection. ``server`` binds the sockets and hands ``HTTPServer.connection`` to
``loop.create_server``; ``App`` (routing, checks, bodies) is the responder.

Theory of operation. Bytes go to httptools' (llhttp's) parser; each complete request head joins
the connection's queue, and requests are answered one at a time, in order. An answer comes
from ``respond_now`` when it needs no waiting (a cache hit: no task, no suspension), else from
the coroutine ``respond_now`` returned instead (or ``respond``'s, when it returned None) run in
an asyncio task; the queue waits meanwhile. A response is one
``bytes`` head (status line and headers) and the body, handed to the transport together: a
large body is never copied in user space. What the server answers itself (a ``_Refusal``:
malformed, too large, has a body, wrong version, too slow, a bad or foreign Host) is JSON from
``response.error_body``, queued in order like a request, and ends the connection.

Every connection is in exactly one state, ``HTTPConnection.state``; ``_enter`` is the only
code that changes it, and the tables below are the whole machine.

====================  ===============================================  ========================
state                 what is happening                                the server's tick
====================  ===============================================  ========================
``IDLE``              between requests: nothing queued or answering    ``idle_timeout`` since
                                                                       it began: ``ENDING``
``HEAD``              a request head is arriving; nothing to answer    ``head_timeout`` since
                                                                       its target began: 408
``ANSWERING``         a task computes the answer to the oldest         none: the responder
                      request; later ones wait in the queue            bounds its own wait
``BLOCKED``           the unsent answers passed the transport's        no write progress for
                      high-water mark: no answer is started, no input  ``idle_timeout``: reset
                      read, until it drains to the low-water mark
``STREAMING``         a streaming answer is being written, chunk by    unsent bytes stuck for
                      chunk, by its task                               ``idle_timeout``: reset
``ENDING``            the last answer is written (or the connection    no write progress for
                      timed out idle): half-closed or closing, input   ``linger_timeout``: reset
                      discarded until the client closes
``CLOSED``            the transport is gone                            none
====================  ===============================================  ========================

========================================  =====================  ==========================
event                                     in state               next state
========================================  =====================  ==========================
a request target begins to arrive         ``IDLE``               ``HEAD``
a head completes (queued)                 ``IDLE``, ``HEAD``     ``_next()`` decides
a head completes (queued)                 any other              unchanged: it waits
``_next()``: unsent over the high-water   any open               ``BLOCKED``
``_next()``: a request, ``respond_now``   any open               its answer written; loop
answers it
``_next()``: a request it cannot answer   any open               ``ANSWERING``
``_next()``: a streaming answer           any open               ``STREAMING``
``_next()``: a refusal, an answer that    any open               ``ENDING``
closes, the end of input (client EOF),
the server's shutdown
``_next()``: nothing queued               any open               ``HEAD`` if a head is
                                                                 arriving, else ``IDLE``
the answering task finishes               ``ANSWERING``          answer written; ``_next()``
the stream ends (or is cut off cleanly)   ``STREAMING``          ``_next()``
``resume_writing``                        ``BLOCKED``            ``_next()``
client EOF                                ``IDLE``, ``HEAD``     closed (``CLOSED``)
client EOF                                others                 an end marker is queued;
                                                                 a stream ends cleanly
client EOF again (uvloop repeats it)      any                    unchanged
``shutdown()``                            ``IDLE``, ``HEAD``     ``ENDING``
``shutdown()``                            others                 an end marker is queued;
                                                                 a stream ends cleanly
a stream starts with an end marker        ``ANSWERING``          ``STREAMING``, its end
queued (EOF or shutdown came while its                           decided: head, last chunk,
answer was prepared)                                             ``ENDING``
over the byte budget, or a stream's own   any open               reset (``CLOSED``)
bound
``connection_lost``                       any                    ``CLOSED``
========================================  =====================  ==========================

Bounds. Reading stops while ``MAX_PIPELINE`` requests wait or in ``BLOCKED``: a client that
sends without reading holds bounded memory. ``max_connections`` connections at most: the
next one is answered 503 (JSON) and closed. ``max_buffered`` bytes of unsent answers in all
connections together: past it, the connections holding the most unsent bytes are reset first
until the total is back under it. ``send_buffer`` (``SO_SNDBUF``) bounds the kernel's share
of each connection's unsent bytes. A request needs exactly one Host header (else 400); a
server given ``allowed_hosts`` answers any other Host 421. One timer for all connections
ticks once a second; no timer is set per request.

Streaming answers (for long-lived feeds such as a watch), the API a responder plugs into:

- return ``Response(status, headers, stream=chunks, max_unsent=N)`` from ``respond`` (or
  ``respond_now``), where ``chunks`` is an async iterator of ``bytes`` (an async generator);
  the server sends the head with ``transfer-encoding: chunked`` (no content-length), then
  each non-empty chunk as it comes, then the last chunk; to HTTP/1.0 it sends the chunks bare
  and ends the body by closing. HEAD gets the head only; the iterator is closed unread.
- Chunks are written as they come, without waiting for the client: ``max_unsent`` (default
  ``response.STREAM_MAX_UNSENT``) bounds what the client may leave unread; a chunk that leaves
  more resets the connection. The stream's unsent bytes count against ``max_buffered`` like
  any others, and the stream holds one of ``max_connections``. A quiet stream is not idle
  (send a heartbeat chunk if the client needs one); unsent bytes that do not drain for
  ``idle_timeout`` reset it.
- The stream runs in its own task (state ``STREAMING``); requests pipelined behind it wait
  for its end. Its iterator is closed (``aclose``, so a generator's ``finally`` runs) when it
  ends, when it is cut off, when the connection is lost, and on the server's shutdown
  (SIGTERM), which ends the chunked body cleanly (the last chunk) and closes the connection.
  The client's close or half-close ends it the same way, in every state: one that came while
  the answer was still being prepared ends the stream as soon as it begins (a stream never
  ends by itself, so an end left queued behind it would never be reached), and an answer
  whose connection was lost meanwhile has its iterator closed unwritten. The end of a stream
  whose task has not yet run is decided by a flag its task reads first, never by cancelling
  it: a task cancelled before it runs skips its body, ``finally`` included.
- A reset by one of the server's bounds tells an iterator that has ``cut_off(reason)`` why:
  ``unread`` (past ``max_unsent``), ``budget`` (``max_buffered``), ``stalled`` (unsent bytes
  stuck for ``idle_timeout``).
- An exception from the iterator is logged and resets the connection (the body cannot be
  turned into an error answer once its head is sent).
- A stream may also be written between its iterator's yields: when the iterator has an
  ``attach`` method, the server calls it with ``send_chunk`` (``response.ChunkSink``), which
  writes a chunk at once under the same framing, bound and cut-off as the iterator's; it
  writes nothing (False) once the stream's end is decided (its iterator ended, shutdown,
  client EOF, a reset).

It deliberately supports only what a read-only JSON API needs: no request bodies (refused,
never read), no upgrades (answered as plain HTTP/1.1, then closed), no HTTP/2. Targets must be
ASCII (llhttp refuses raw non-ASCII bytes: 400).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, NamedTuple, NoReturn, cast
from urllib.parse import unquote_to_bytes

import httptools

from podcache.serve.response import JSON, Response, error_body

__all__ = [
    "HEAD_TIMEOUT",
    "IDLE_TIMEOUT",
    "LINGER_TIMEOUT",
    "MAX_BUFFERED",
    "MAX_CONNECTIONS",
    "MAX_HEAD",
    "MAX_HEADER_FIELDS",
    "MAX_PIPELINE",
    "MAX_TARGET",
    "SEND_BUFFER",
    "HTTPConnection",
    "HTTPServer",
    "RespondNow",
    "Responder",
    "State",
]

log = logging.getLogger("podcache.serve")

Responder = Callable[[str, str, str, Iterable[tuple[str, str]]], Coroutine[Any, Any, Response]]
"""``respond(method, path, query, headers)``, i.e. ``App.respond``: answers every request."""
RespondNow = Callable[
    [str, str, str, list[tuple[str, str]]], Response | Coroutine[Any, Any, Response] | None
]
"""``respond_now(method, path, query, headers)``, i.e. ``App.respond_now``: the answer when
it needs no waiting, else the coroutine that gives it (awaited in a task, so the request is
parsed once), or None (then ``respond`` answers, in a task)."""

HEAD_TIMEOUT = 10.0
"""Seconds from the start of a request's target to the blank line ending its head: a slowloris
client is cut off (408). The few bytes of the method before it count as idle time."""
IDLE_TIMEOUT = 75.0
"""Seconds a connection may stay idle after its last answer, or after it opened (nginx's
default, longer than most client pools keep one, so the client usually closes first); also
how long unsent answers may sit without the client reading any of them before the connection
is reset."""
LINGER_TIMEOUT = 2.0
"""Seconds a connection that ends may go without write progress (the client reading the last
answer) or, once everything is sent, without the client closing: then it is reset."""
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
MAX_CONNECTIONS = 1024
"""Most open connections (``--max-connections``); the next one gets a 503 and is closed."""
MAX_BUFFERED = 256 * 1024 * 1024
"""Most unsent answer bytes in all connections together (``--max-buffered``); past it the
connections holding the most are reset first."""
SEND_BUFFER = 128 * 1024
"""``SO_SNDBUF`` of every connection: the kernel's share of its unsent bytes (Linux doubles
it). Without it the kernel grows the buffer of a client that does not read up to
``tcp_wmem``'s maximum (4 MiB), so 2,000 such clients pinned the kernel's whole TCP memory
(``tcp_mem``) outside any budget of ours; with it they pin at most 256 KiB each."""

_FEED_STEP = 8 * 1024  # a larger read is parsed in steps, so a full queue stops parsing early
_LINGER_BYTES = 1024 * 1024  # most input discarded after the end before the connection is reset
_REFUSING = 256  # most connections refused for the cap still being answered, beyond the cap
_SLASH, _QUESTION, _HASH, _PERCENT = b"/?#%"  # int membership in bytes is ~10x a bytes one
_INTERNAL_ERROR = "internal server error (logged by the server)"
_NO_BODY = frozenset({204, 304})  # statuses whose answers have no body (RFC 9110 6.4.1)
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
_LAST_CHUNK = b"0\r\n\r\n"
_CLOSING: set[asyncio.Task[None]] = set()  # streams of HEAD answers being closed


class State(enum.Enum):
    """A connection's state: see the module's tables."""

    IDLE = "idle"
    HEAD = "head"
    ANSWERING = "answering"
    BLOCKED = "blocked"
    STREAMING = "streaming"
    ENDING = "ending"
    CLOSED = "closed"


IDLE, HEAD, ANSWERING, BLOCKED = State.IDLE, State.HEAD, State.ANSWERING, State.BLOCKED
STREAMING, ENDING, CLOSED = State.STREAMING, State.ENDING, State.CLOSED
# Tuples, not sets: membership compares identity first, while hashing an Enum member runs
# Python code (measured: 4 set lookups were ~3% of a cache-hit answer).
_WAITING_FOR_INPUT = (IDLE, HEAD)  # a completed head is answered at once
_OVER = (ENDING, CLOSED)  # nothing more is answered


class _Request(NamedTuple):
    """A request waiting in the queue."""

    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    keep_alive: bool
    http10: bool


class _Refusal(NamedTuple):
    """An answer the server gives itself (a JSON error), after which the connection ends."""

    status: int
    message: str


class _Writing(NamedTuple):
    """The stream a ``STREAMING`` connection writes: its chunks, their bound, their framing."""

    chunks: AsyncIterator[bytes]
    max_unsent: int
    chunked: bool


class _End(NamedTuple):
    """Queued after the last request to answer: the client's EOF, or the server's shutdown."""

    reason: str


_Queued = _Request | _Refusal | _End


class _Stop(Exception):  # noqa: N818 -- ends parsing on purpose, not an error
    """Raised from a parser callback: this connection parses nothing more."""


class HTTPServer:
    """What the connections share: responder, limits, a coarse clock, and the open connections.

    ``start()`` (in the running loop) starts the one timer that refreshes ``now`` and the
    ``Date`` header, enforces every connection's timeouts and the byte budget; ``shutdown()``
    closes idle connections, lets busy ones finish their requests, and resets what is left
    after ``grace``. ``allowed_hosts``: the Host values served (lower case), None for any.
    """

    def __init__(
        self,
        respond: Responder,
        *,
        respond_now: RespondNow | None = None,
        head_timeout: float = HEAD_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        linger_timeout: float = LINGER_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_buffered: int = MAX_BUFFERED,
        send_buffer: int = SEND_BUFFER,
        allowed_hosts: frozenset[str] | None = None,
    ) -> None:
        self.respond = respond
        self.respond_now = respond_now
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.linger_timeout = linger_timeout
        self.max_connections = max_connections
        self.max_buffered = max_buffered
        self.send_buffer = send_buffer
        self.allowed_hosts = allowed_hosts
        self.connections: set[HTTPConnection] = set()
        """Every connection not yet lost, those refused for the cap included."""
        self.refused = 0
        """Connections refused for the cap and not yet lost."""
        self.unsent: dict[HTTPConnection, int] = {}
        """Unsent answer bytes by connection, as last seen (connections with none are left
        out); their sum is ``buffered``."""
        self.buffered = 0
        self.dropped = 0
        """Connections reset for the byte budget since the last tick (logged there, once)."""
        self.closing = False
        self.now = 0.0
        """The loop's clock at the last tick: timestamps on the hot path cost no clock call."""
        self.tail = "server: podcache\r\n"
        """The last header lines of every response: ``date`` (this second) and ``server``."""
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
        return HTTPConnection(self, self._loop, self.allowed_hosts)

    def listener(self, allowed_hosts: frozenset[str] | None) -> Callable[[], HTTPConnection]:
        """The protocol factory of one listener of several, serving ``allowed_hosts`` (None:
        any) instead of the server's: each listener has its own names (``--listen`` given more
        than once); the bounds stay the server's, for all of them together."""

        def connection() -> HTTPConnection:
            assert self._loop is not None, "HTTPServer.start() first"
            return HTTPConnection(self, self._loop, allowed_hosts)

        return connection

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

    def admit(self, connection: HTTPConnection) -> bool:
        """Count a new connection in; False when it is over ``max_connections``."""
        self.connections.add(connection)
        if len(self.connections) - self.refused <= self.max_connections:
            return True
        self.refused += 1
        return False

    def forget(self, connection: HTTPConnection, *, refused: bool) -> None:
        """``connection`` is closed."""
        self.connections.discard(connection)
        if refused:
            self.refused -= 1
        self.buffered -= self.unsent.pop(connection, 0)
        if not self.connections and self._idle is not None:
            self._idle.set()

    def note_unsent(self, connection: HTTPConnection, size: int) -> None:
        """``connection`` holds ``size`` unsent bytes now; past the budget, reset the biggest."""
        self._record(connection, size)
        if self.buffered > self.max_buffered:
            self._over_budget()

    def _record(self, connection: HTTPConnection, size: int) -> None:
        self.buffered += size - self.unsent.pop(connection, 0)
        if size:
            self.unsent[connection] = size

    def _over_budget(self) -> None:
        """Reset the connections holding the most unsent bytes until the total fits."""
        for connection in list(self.unsent):
            self._record(connection, connection.unsent_now())  # drained since: not counted
        for connection in sorted(self.unsent, key=self.unsent.__getitem__, reverse=True):
            if self.buffered <= self.max_buffered:
                break
            self.dropped += 1
            self.buffered -= self.unsent.pop(connection, 0)
            connection.abort(cut_off="budget")

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        self.now = now = loop.time()
        wall = time.time()
        self.tail = f"date: {formatdate(wall, usegmt=True)}\r\nserver: podcache\r\n"
        if self.dropped:
            log.warning(
                "%d connection(s) reset: unsent answers over the budget of %d bytes "
                "(--max-buffered); the clients holding the most unread bytes go first",
                self.dropped,
                self.max_buffered,
            )
            self.dropped = 0
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

    def __init__(
        self,
        server: HTTPServer,
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
        """The one place the state changes (see the module's tables)."""
        changed = state is not self.state
        self.state = state
        self._since = self._server.now
        if changed or state is BLOCKED:  # IDLE to IDLE (keep-alive) leaves reading as it was
            self._update_reading()

    # -- asyncio.Protocol ----------------------------------------------------------------------
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

    # -- httptools callbacks -------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        if self._head_began is None:  # the state becomes HEAD once this read is parsed
            self._head_began = self._server.now
        self._url += url
        if len(self._url) > MAX_TARGET:
            self._stop(414, f"request target is longer than {MAX_TARGET} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        fields = self._fields
        self._field_bytes += len(name) + len(value)
        if self._field_bytes > MAX_HEAD:
            self._stop(431, f"request head is larger than {MAX_HEAD} bytes")
        if len(fields) >= MAX_HEADER_FIELDS:
            self._stop(431, f"more than {MAX_HEADER_FIELDS} request header fields")
        fields.append((name, value))

    def on_headers_complete(self) -> None:
        self._head_began = None
        self._head_bytes = 0
        self._field_bytes = 0
        parser = self._parser
        assert parser is not None
        http10 = False
        version = parser.get_http_version()
        if version != "1.1":
            if version == "0.9":  # a request line without a version: malformed, not a version
                self._stop(400, "request line has no HTTP version: speak HTTP/1.1")
            if version != "1.0":
                self._stop(505, f"HTTP/{version} is not supported: speak HTTP/1.1")
            http10 = True
        method = parser.get_method().decode()  # one of llhttp's method names: ASCII
        ends = not parser.should_keep_alive() or parser.should_upgrade()  # upgrades: answer, end
        url, fields = self._url, self._fields
        self._url = b""
        self._fields = []
        headers, has_body = self._decode_fields(fields)
        if has_body:
            if method in ("GET", "HEAD"):
                self._stop(413, "request bodies are not accepted (GET and HEAD take none)")
            ends = True  # other methods: the application answers 405; the body is never read
        target = _split_target(url)
        if target is None:
            self._stop(400, f"request target {url[:64]!r} is neither a path nor a URL")
        path, query = target
        self._queue.append(_Request(method, path, query, headers, not ends, http10))
        if ends:  # this request ends the connection: nothing after it is read
            self._stop_parsing()
            raise _Stop

    def _decode_fields(
        self, fields: list[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[str, str]], bool]:
        """Header fields as (lower-case name, value) str pairs, and whether a body follows.

        Refuses (from the parser's callback) a request without a Host header or with more
        than one (400, RFC 9112 3.2), and, when the server names the hosts it serves, a Host
        that is not one of them (421): a web page that reached a loopback listener through
        DNS rebinding sends its own name there, never the listener's.
        """
        headers = []
        has_body = False
        host: str | None = None
        hosts = 0
        for name, value in fields:
            lower = name.lower()
            text = value.rstrip(b" \t").decode("latin-1")
            if lower == b"host":
                host = text
                hosts += 1
            elif lower == b"content-length":
                has_body = has_body or bool(value.strip(b" \t0"))  # llhttp checked: digits
            elif lower == b"transfer-encoding":
                has_body = True
            headers.append((lower.decode("latin-1"), text))
        if host is None or hosts > 1:
            self._stop(400, "no Host header" if host is None else "more than one Host header")
        allowed = self._allowed_hosts
        if allowed is not None and host.lower() not in allowed:
            self._stop(
                421,
                f"Host {host[:100]!r} does not name this server: without a token it serves "
                "only its own addresses and the names given with --allow-host",
            )
        return headers, has_body

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
                return
            self._parse(view[offset : offset + _FEED_STEP])
            if self._parser is None:
                return

    def _parse(self, piece: bytes | memoryview) -> None:
        parser = self._parser
        assert parser is not None
        try:
            parser.feed_data(piece)
        except httptools.HttpParserCallbackError:
            if self._parser is not None:
                raise  # a bug in a callback, not a _Stop: data_received logs it
        except httptools.HttpParserUpgrade:
            pass  # not reached: the upgrade request ended parsing in on_headers_complete
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed request: {exc}")
        if self._head_began is not None and self._parser is not None:
            # Counted per piece: a head is refused somewhere between MAX_HEAD - _FEED_STEP and
            # MAX_HEAD bytes, far above what the application accepts anyway.
            self._head_bytes += len(piece)
            if self._head_bytes > MAX_HEAD:  # a long target was refused already, in on_url
                self._refuse(431, f"request head is larger than {MAX_HEAD} bytes")

    def _refuse(self, status: int, message: str) -> None:
        """Queue the server's own JSON answer and stop parsing: the connection ends after it."""
        self._queue.append(_Refusal(status, message))
        self._stop_parsing()

    def _stop(self, status: int, message: str) -> NoReturn:
        """``_refuse`` from a parser callback: raises ``_Stop`` to end the parser's run."""
        self._refuse(status, message)
        raise _Stop

    def _stop_parsing(self) -> None:
        self._parser = None
        self._head_began = None
        self._unparsed = b""

    # -- answering -----------------------------------------------------------------------------
    def _next(self) -> None:
        """Answer what is queued, in order, until an answer must wait; then enter the state
        that waits (the only place that chooses the state after an answer)."""
        queue = self._queue
        while self.state not in _OVER:
            if self._unsent > self._high_water:  # as of the last write (note_unsent)
                self._enter(BLOCKED)
                return
            if not queue:
                if not self._unparsed:
                    self._enter(IDLE if self._head_began is None else HEAD)
                    return
                held, self._unparsed = self._unparsed, b""
                self._feed(held)
                continue
            item = queue.popleft()
            if type(item) is _Request:
                if not self._answer(item):
                    return  # ANSWERING or STREAMING
            elif type(item) is _Refusal:
                self._send_refusal(item)
            else:
                self._end()

    def _answer(self, request: _Request) -> bool:
        """Answer ``request`` now if ``respond_now`` can; else start a task for it. True when
        the answer was written."""
        answer = None
        if self._respond_now is not None:
            try:
                answer = self._respond_now(
                    request.method, request.path, request.query, request.headers
                )
            except Exception:
                log.exception("the responder failed on %s %.200s", request.method, request.path)
                self._send_refusal(_Refusal(500, _INTERNAL_ERROR))
                return True
        if type(answer) is Response:
            return self._send(request, answer)
        waiting = cast(Coroutine[Any, Any, Response] | None, answer)
        self._task = self._loop.create_task(self._complete(request, waiting))
        self._enter(ANSWERING)
        return False

    async def _complete(
        self, request: _Request, waiting: Coroutine[Any, Any, Response] | None
    ) -> None:
        """The answer that had to wait (``waiting``, else ``respond``'s), in its task; then
        the queue goes on."""
        try:
            if waiting is None:
                waiting = self._respond(
                    request.method, request.path, request.query, request.headers
                )
            response = await waiting
        except Exception:
            log.exception("the responder failed on %s %.200s", request.method, request.path)
            self._task = None
            self._guarded(lambda: self._send_refusal(_Refusal(500, _INTERNAL_ERROR)))
            return
        self._task = None
        if self.state is ANSWERING:
            self._guarded(lambda: self._deliver(request, response))
        elif response.stream is not None:  # the connection ended meanwhile: never written
            await _close_iterator(response.stream)

    def _deliver(self, request: _Request, response: Response) -> None:
        """Write the answer that waited; unless it is a stream, go on with the queue."""
        if self._send(request, response):
            self._next()

    def _guarded(self, step: Callable[[], object]) -> None:
        """Run ``step`` from a callback or a task: a failure is logged and resets the
        connection."""
        try:
            step()
        except Exception:
            log.exception("HTTP connection failed; reset")
            self.abort()

    def _send(self, request: _Request, response: Response) -> bool:
        """Write ``response`` to ``request``; True unless it is a stream (then STREAMING)."""
        transport = self._transport
        assert transport is not None
        keep_alive = request.keep_alive
        if self._server.closing and not any(type(item) is _Request for item in self._queue):
            keep_alive = False
        status = response.status
        head_only = request.method == "HEAD" or status in _NO_BODY or status < 200
        if response.stream is not None:
            if not head_only:
                self._start_stream(response, keep_alive, request.http10)
                return False
            closing = self._loop.create_task(_close_iterator(response.stream))  # never iterated
            _CLOSING.add(closing)  # a reference until it is done (the loop keeps a weak one)
            closing.add_done_callback(_CLOSING.discard)
        head = self._head(response, keep_alive, request.http10)
        if head_only:
            transport.write(head)
        elif response.suffix:
            transport.writelines((head, response.body, response.suffix))
        else:
            # One writev, the body never copied. For a 1.2 KB body, write(head + body) measured
            # the same CPU per answer (3.7-4.6 us against 4.0-4.2 us), so one path serves all.
            transport.writelines((head, response.body))
        if transport.get_write_buffer_size() != self._unsent:  # else nothing to note
            self.note_unsent()
        if not keep_alive:
            self._end()
        return True

    def _head(self, response: Response, keep_alive: bool, http10: bool) -> bytes:
        """The status line and header lines of ``response``, and the blank line."""
        status = response.status
        headers = response.headers
        fields = "\r\n".join(map(": ".join, headers)) + "\r\n" if headers else ""
        # No content-length on 1xx, 204 and 304 (RFC 9110 8.6): they have no body.
        if status in _NO_BODY or status < 200:
            length = ""
        elif response.stream is not None:  # HTTP/1.0: no chunks, the close ends the body
            length = "" if http10 else "transfer-encoding: chunked\r\n"
        else:
            length = f"content-length: {len(response.body) + len(response.suffix)}\r\n"
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
        self._stop_parsing()
        if self.state in _OVER:
            return
        status = refusal.status
        body = error_body(status, refusal.message)
        head = (
            f"{_STATUS_LINES.get(status) or f'HTTP/1.1 {status} '}"
            f"content-type: {JSON}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
            f"{self._server.tail}\r\n"
        )
        transport.write(head.encode() + body)
        self.note_unsent()
        self._end()

    # -- streams -------------------------------------------------------------------------------
    def _start_stream(self, response: Response, keep_alive: bool, http10: bool) -> None:
        transport = self._transport
        assert transport is not None and response.stream is not None
        if http10:
            keep_alive = False  # HTTP/1.0 has no chunked coding: the body ends with the close
        transport.write(self._head(response, keep_alive, http10))
        chunks = response.stream
        self._writing = _Writing(chunks, response.max_unsent, not http10)
        self._stream_began = False
        self._task = self._loop.create_task(self._stream(chunks, keep_alive, chunked=not http10))
        self._enter(STREAMING)
        if any(type(item) is _End for item in self._queue):
            # The client's EOF (or the server's shutdown) came while the answer was being
            # prepared: the stream it began ends at once, cleanly (its head, then its end).
            self._end_stream()
            return
        attach = getattr(chunks, "attach", None)
        if attach is not None:  # a stream that writes chunks itself between its yields
            attach(self.send_chunk)

    def _end_stream(self) -> None:
        """Decide the stream's end: nothing more is written, and its task ends it (closes its
        iterator, writes its last chunk and closes the connection). A task cancelled before it
        first ran would never run its body, so one that has not begun is left to see the end
        decided when it does."""
        self._writing = None
        if self._task is not None and self._stream_began:
            self._task.cancel()

    def send_chunk(self, chunk: bytes) -> bool:
        """Write ``chunk`` as the stream's next chunk (``response.ChunkSink``); reset the
        connection when it leaves more than the stream's ``max_unsent`` unread. False when
        nothing was written: no stream is being written (it ended, its end was decided, or
        the connection is gone), or this chunk cut it off."""
        writing = self._writing
        transport = self._transport
        if writing is None or self.state is not STREAMING or transport is None:
            return False
        if not chunk:
            return True
        if writing.chunked:
            transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
        else:
            transport.write(chunk)
        self.note_unsent()
        if self._unsent > writing.max_unsent:
            log.warning("a stream's client left over %d bytes unread: reset", writing.max_unsent)
            self.abort(cut_off="unread")
            return False
        return True

    async def _stream(
        self, chunks: AsyncIterator[bytes], keep_alive: bool, *, chunked: bool
    ) -> None:
        """Write each chunk as it comes; end the body cleanly when the iterator ends or this
        task is cancelled by the server's shutdown; reset past the stream's ``max_unsent``."""
        transport = self._transport
        assert transport is not None
        self._stream_began = True
        try:
            if self._writing is None:  # its end was decided before this task first ran
                keep_alive = False
            else:
                async for chunk in chunks:
                    if not self.send_chunk(chunk):  # cut off (then CLOSED), or its end decided
                        keep_alive = False
                        break
        except asyncio.CancelledError:
            keep_alive = False  # shutdown (or the connection is gone): end cleanly, then close
        except Exception:
            log.exception("a streaming answer failed; reset")
            self.abort()
            return
        finally:
            self._writing = None
            await _close_iterator(chunks)
        self._task = None
        if self.state is STREAMING:
            if chunked:
                transport.write(_LAST_CHUNK)
            self.note_unsent()
            self._guarded(self._end if not keep_alive else self._next)

    # -- ending, bounds and timeouts -----------------------------------------------------------
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
            began = self._head_began
            if began is not None and now - began >= server.head_timeout:
                self._queue.append(
                    _Refusal(408, f"the request head took longer than {server.head_timeout:g} s")
                )
                self._stop_parsing()
                self._next()
        elif state in (BLOCKED, STREAMING, ENDING):
            limit = server.linger_timeout if state is ENDING else server.idle_timeout
            stuck = state is not STREAMING or self._unsent > 0
            if stuck and now - self._since >= limit:
                self.abort(cut_off="stalled")

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
    """Tell a stream that has a ``cut_off(reason)`` (a watch counts them) it is being reset:
    ``unread`` (past its ``max_unsent``), ``budget`` (``max_buffered``), ``stalled`` (unsent
    bytes stuck for ``idle_timeout``)."""
    cut_off = getattr(chunks, "cut_off", None)
    if cut_off is not None:
        cut_off(reason)


async def _close_iterator(chunks: AsyncIterator[bytes]) -> None:
    """Close an async generator (or any iterator with ``aclose``); its failure is logged."""
    close = getattr(chunks, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:
        log.exception("closing a streaming answer failed")


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
