"""The CRI socket's listening sockets, each connection relayed to gRPC on a private socket and
tracked by its HTTP/2 frames (docs/architecture.md §10 rules 1 and 6, which say why). Rules:

1. **At most ``max_connections``.** At the bound, the connection idle longest (no call open)
   is closed to admit the new one; with none idle, the new one is closed.
2. **A connection must use its first seconds.** One with no call completed and none open
   ``handshake_seconds`` after it was accepted is closed.
3. **No connection keeps another's call out.** Past ``fair_calls`` calls open over all
   connections, a call opened on a connection closes the busiest one (the most calls open)
   when that one holds more than the opening one (its calls end CANCELLED at its client).
4. **Bytes are relayed as they come**, each read written to the other side at once; while a
   side holds more than ``_CHUNK`` bytes unwritten, the other side is not read. (The C engine
   reads a client's frames but DATA whole, 256 KiB at most a frame or header block, past it
   the connection is closed; rule 6.)
5. **Calls are told by frame headers** (the client's 24-byte preface first): a client's
   HEADERS on a stream it never used opens a call; the server's END_STREAM on it completes
   it; a RST_STREAM either way ends it.
6. **The C engine answers the status calls it holds an answer for** (§10 rule 8), each client
   header block decoded with the client's HPACK table and written again as literals. A
   ``ContainerStatus`` or ``PodSandboxStatus`` is held till its request is whole (4 KiB at
   most; a later header block sends it on first, so gRPC sees the streams in order) and
   answered from what Python put for its key while fresh, else sent to gRPC as it came. An
   answer goes only within the client's windows; a client's credit that gives back answers'
   bytes is not passed to gRPC (whose window is then at most those bytes larger), and gRPC's
   DATA past the client's window waits for the credit with what follows it (gRPC not read
   meanwhile); request bytes gRPC never saw are credited back to the client. Once it answered
   a call on a connection, the relay answers the client's PINGs there itself (gRPC would
   count the probes its answers draw as abuse). The relay's own frames for a client go
   between two of gRPC's; past 192 KiB of them waiting the connection is closed. At most
   16,384 answers, 32 MiB of them, 64 KiB each.

Two engines keep rules 1-5: ``NativeRelay`` (C, ``_relay``) and ``Relay`` (asyncio protocols
on the socket's loop, which passes every byte as it came and answers nothing itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from podcache.cri.wire import frames
from podcache.serve.crisock.calls import NO_TABLE, Answered, RelayTable
from podcache.serve.crisock.statuses import CONTAINER, SANDBOX, StatusKey, StatusMirror

if TYPE_CHECKING:
    from podcache.serve.crisock._relay import Core

__all__ = ["ENGINE", "AnyRelay", "CoreMirror", "NativeRelay", "Relay", "make_relay"]

_PREFACE = len(frames.PREFACE)
"""Bytes of the client's connection preface (RFC 9113 §3.4), before its first frame."""
_HEAD = frames.HEAD_BYTES
_HEADERS, _DATA, _RST_STREAM = frames.HEADERS, frames.DATA, frames.RST_STREAM
_END_STREAM = frames.END_STREAM
_CHUNK = 32 * 1024
"""Bytes read at once from either side, and written ahead of a side that does not read before
the other side's reading stops (rule 4): a connection holds at most about 4 times this
(§10 rule 1)."""


class _Frames:
    """Frame headers read out of one direction's bytes, chunk by chunk (rule 5)."""

    __slots__ = ("_head", "_on_frame", "_skip")

    def __init__(self, skip: int, on_frame: Callable[[int, int, int], None]) -> None:
        self._skip = skip
        self._head = b""
        self._on_frame = on_frame

    def feed(self, data: bytes) -> None:
        at, size = 0, len(data)
        while at < size:
            if self._skip:
                step = min(self._skip, size - at)
                self._skip -= step
                at += step
                continue
            need = _HEAD - len(self._head)
            self._head += data[at : at + need]
            at += min(need, size - at)
            if len(self._head) == _HEAD:
                head, self._head = self._head, b""
                self._skip = int.from_bytes(head[:3], "big")
                stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
                self._on_frame(head[3], head[4], stream)


class _Connection:
    """One client's connection: its calls open, those completed, since when it is idle."""

    def __init__(
        self,
        accepted: float,
        end: Callable[[], None] | None,
        on_change: Callable[[_Connection, int], None],
    ) -> None:
        self.open: set[int] = set()
        self.completed = 0
        self.idle_since = accepted
        self.last_stream = 0
        self.end = end  # closes both its sides (None: nothing to close)
        self.closed = False
        self._on_change = on_change  # told of each call opened (+1) and ended (-1)

    def client_frame(self, kind: int, flags: int, stream: int) -> None:
        if self.closed:
            return  # its calls are no longer counted (rule 3)
        if kind == _HEADERS and stream > self.last_stream:
            self.last_stream = stream
            self.open.add(stream)
            self._on_change(self, 1)
        elif kind == _RST_STREAM:
            self._end(stream, completed=False)

    def server_frame(self, kind: int, flags: int, stream: int) -> None:
        if kind in (_HEADERS, _DATA) and flags & _END_STREAM:
            self._end(stream, completed=True)
        elif kind == _RST_STREAM:
            self._end(stream, completed=False)

    def _end(self, stream: int, *, completed: bool) -> None:
        if stream in self.open:
            self.open.discard(stream)
            self._on_change(self, -1)
            self.completed += completed
            if not self.open:
                self.idle_since = time.monotonic()

    def release(self) -> None:
        """Its calls stop counting (it is closing)."""
        if not self.closed:
            self.closed = True
            self._on_change(self, -len(self.open))
            self.open.clear()

    def close(self) -> None:
        """End the connection: its calls stop counting, both its sides are closed now."""
        self.release()
        if self.end is not None:
            self.end()


class _Side(asyncio.BufferedProtocol):
    """One socket of a relayed connection: what it reads is counted by ``frames`` and written
    to ``peer``'s socket (rule 4)."""

    def __init__(self, frames: _Frames, link: _Link, buffer: memoryview) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None  # None until both sides are connected: not read till then
        self._frames = frames
        self._link = link
        self._buffer = buffer  # the relay's, every side's: each read is copied out at once

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=_CHUNK)
        if self._link.ended:
            self.transport.abort()
        elif self.peer is None:
            self.transport.pause_reading()

    def get_buffer(self, _sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        data = bytes(self._buffer[:nbytes])  # the transport may keep what it cannot send now
        self._frames.feed(data)
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            peer.transport.write(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def eof_received(self) -> bool:
        self._link.end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._link.end()


class _Link:
    """Both sides of one client's connection, ended together: either side closing, the
    connection closed (rules 1-3), or gRPC's socket not reached."""

    def __init__(
        self,
        connection: _Connection,
        timer: asyncio.TimerHandle,
        forget: Callable[[_Connection], None],
        buffer: memoryview,
    ) -> None:
        self._connection = connection
        self._timer = timer
        self._forget = forget  # no longer counted among the relay's connections
        self.ended = False
        self.client = _Side(_Frames(_PREFACE, connection.client_frame), self, buffer)
        self.server = _Side(_Frames(0, connection.server_frame), self, buffer)
        self.opening: asyncio.Task[None] | None = None

    def connect(self) -> None:
        """Both sides are connected: bytes flow both ways from now on."""
        self.server.peer, self.client.peer = self.client, self.server
        for side in (self.client, self.server):
            if side.transport is not None:
                side.transport.resume_reading()

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self._timer.cancel()
        self._connection.release()
        self._forget(self._connection)
        if self.opening is not None:
            self.opening.cancel()
        for side in (self.client, self.server):
            if side.transport is not None:
                side.transport.abort()


class Relay:
    """Accepts on listening sockets and relays each connection to ``target`` (rules above)."""

    mirror: StatusMirror | None = None
    """It answers no call itself: every status call goes to gRPC."""

    def __init__(
        self, target: str, *, max_connections: int, handshake_seconds: float, fair_calls: int
    ) -> None:
        self._target = target
        self._max = max_connections
        self._handshake = handshake_seconds
        self._fair_calls = fair_calls
        self._calls = 0
        self._connections: dict[_Connection, None] = {}  # in the order they came
        self._servers: list[asyncio.AbstractServer] = []
        self._buffer = memoryview(bytearray(_CHUNK))  # every side's reads, on the one loop
        self.evicted = 0
        """Idle connections closed to admit a new one (rule 1)."""
        self.refused = 0
        """Connections closed at once: the bound reached and none idle (rule 1)."""
        self.unused = 0
        """Connections closed for no call in their first seconds (rule 2)."""
        self.busiest = 0
        """Connections closed as the busiest, for another's call (rule 3)."""

    async def serve(self, listening: socket.socket) -> None:
        """Accept on ``listening`` (bound and listening) from now on."""
        loop = asyncio.get_running_loop()
        server = await loop.create_unix_server(self._accepted, sock=listening)
        self._servers.append(server)

    def _admit(self) -> bool:
        if len(self._connections) < self._max:
            return True
        idle = [c for c in self._connections if not c.open]
        if not idle:
            self.refused += 1
            return False
        oldest = min(idle, key=lambda c: c.idle_since)
        del self._connections[oldest]  # its place is the new one's now
        oldest.close()
        self.evicted += 1
        return True

    def _accepted(self) -> asyncio.BaseProtocol:
        """The protocol of a connection accepted: its client's side, or a refusal (rule 1)."""
        if not self._admit():
            return _Refused()
        loop = asyncio.get_running_loop()
        connection = _Connection(time.monotonic(), None, self._counted)
        self._connections[connection] = None
        timer = loop.call_later(self._handshake, self._judge, connection)
        link = _Link(connection, timer, self._forget, self._buffer)
        connection.end = link.end
        link.opening = loop.create_task(self._open(link))
        return link.client

    async def _open(self, link: _Link) -> None:
        """Connect ``link``'s server side to gRPC's socket; not reached, the link ends."""
        try:
            transport, _ = await asyncio.get_running_loop().create_unix_connection(
                lambda: link.server, self._target
            )
        except OSError:
            link.opening = None
            link.end()
            return
        link.opening = None
        if link.ended:
            transport.abort()
        else:
            link.connect()

    def _forget(self, connection: _Connection) -> None:
        self._connections.pop(connection, None)

    def _counted(self, connection: _Connection, change: int) -> None:
        """A connection's calls changed by ``change``; rule 3 when one opened."""
        self._calls += change
        if change > 0 and self._calls > self._fair_calls:
            self._make_room(connection)

    def _make_room(self, opening: _Connection) -> None:
        """Close the busiest connection if it holds more calls than ``opening`` (O(connections),
        and only past ``fair_calls``)."""
        busiest = max(self._connections, key=lambda c: len(c.open))
        if busiest is not opening and len(busiest.open) > len(opening.open):
            self.busiest += 1
            busiest.close()

    @property
    def calls(self) -> int:
        """Calls open over every connection now."""
        return self._calls

    def _judge(self, connection: _Connection) -> None:
        if not connection.completed and not connection.open and connection in self._connections:
            self.unused += 1
            connection.close()

    @property
    def connections(self) -> int:
        """Client connections relayed now."""
        return len(self._connections)

    async def stop_accepting(self) -> None:
        """Accept no more connections (those open go on)."""
        for server in self._servers:
            server.close()

    def table(self) -> RelayTable:
        """It has no table of status answers: every status call goes to gRPC."""
        return NO_TABLE

    async def aclose(self) -> None:
        """Stop accepting, close every connection."""
        await self.stop_accepting()
        for connection in list(self._connections):
            connection.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()


class _Refused(asyncio.Protocol):
    """A connection refused at the bound (rule 1): closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class AnyRelay(Protocol):
    """What the CRI socket asks of a relay, whichever engine keeps the rules."""

    evicted: int
    refused: int
    unused: int
    busiest: int

    @property
    def calls(self) -> int: ...

    @property
    def connections(self) -> int: ...

    @property
    def mirror(self) -> StatusMirror | None:
        """Its table of status answers, given without gRPC (None: it has none)."""
        ...

    def table(self) -> RelayTable:
        """Its table of status answers (``mirror``) now: the calls it answered, what it holds."""
        ...

    async def serve(self, listening: socket.socket) -> None: ...

    async def stop_accepting(self) -> None: ...

    async def aclose(self) -> None: ...


_CORE_METHODS = {CONTAINER: 0, SANDBOX: 1}
"""The core's number of each status method."""


class CoreMirror:
    """The C core's table of status answers as the status store's mirror (``statuses``
    invariant 8). IDs go to it as UTF-8, as clients send them."""

    def __init__(self, core: Core) -> None:
        self._core = core

    def put(self, key: StatusKey, answer: bytes, fresh_until: float) -> bool:
        method = _CORE_METHODS[key.method]
        return self._core.put_status(method, key.ident.encode(), key.verbose, answer, fresh_until)

    def drop(self, ident: str) -> None:
        self._core.drop_status(ident.encode())

    def clear(self) -> None:
        self._core.clear_statuses()


class NativeRelay:
    """The rules above kept by ``_relay.Core`` (C, a thread of its own, no GIL held); its
    counters are read from the core when asked."""

    def __init__(
        self, target: str, *, max_connections: int, handshake_seconds: float, fair_calls: int
    ) -> None:
        from podcache.serve.crisock import _relay  # noqa: PLC0415 -- built only with a C compiler

        self._core = _relay.Core(target, max_connections, handshake_seconds, fair_calls)
        self.mirror = CoreMirror(self._core)
        """Its table of status answers, for the status store (``statuses`` invariant 8)."""

    def table(self) -> RelayTable:
        counts = self._core.status_counts()
        answered = {
            method: Answered(
                counts[method]["answered"],
                counts[method]["seconds"],
                tuple(counts[method]["buckets"]),
            )
            for method in _CORE_METHODS
        }
        return RelayTable(answered, counts["kept"], counts["bytes"])

    def _count(self, name: str) -> int:
        return self._core.counts()[name]

    evicted = property(lambda self: self._count("evicted"))
    refused = property(lambda self: self._count("refused"))
    unused = property(lambda self: self._count("unused"))
    busiest = property(lambda self: self._count("busiest"))
    calls = property(lambda self: self._count("calls"))
    connections = property(lambda self: self._count("connections"))

    async def serve(self, listening: socket.socket) -> None:
        """Accept on ``listening`` (bound and listening) from now on; the core holds its own
        descriptor of it, so ``listening`` is closed here."""
        self._core.listen(listening.fileno())
        listening.close()

    async def stop_accepting(self) -> None:
        self._core.stop_accepting()

    async def aclose(self) -> None:
        """Close every connection; the core's thread ends (awaited in a worker thread)."""
        await asyncio.to_thread(self._core.close)


def _engine() -> str:
    """``c`` where the extension was built, unless ``PODCACHE_CRI_RELAY=python``; ``python``
    otherwise (§10 rule 1)."""
    asked = os.environ.get("PODCACHE_CRI_RELAY", "")
    if asked not in ("", "c", "python"):
        raise ValueError(f"PODCACHE_CRI_RELAY={asked!r}: expected c or python")
    if asked == "python":
        return "python"
    try:
        from podcache.serve.crisock import _relay  # noqa: F401, PLC0415 -- only whether it imports
    except ImportError:
        if asked == "c":
            raise ImportError(
                "PODCACHE_CRI_RELAY=c: podcache.serve.crisock._relay was not built (no C compiler?)"
            ) from None
        return "python"
    return "c"


ENGINE = _engine()
"""The engine this process relays with: ``c`` (``NativeRelay``) or ``python`` (``Relay``)."""


def make_relay(
    target: str, *, max_connections: int, handshake_seconds: float, fair_calls: int
) -> AnyRelay:
    """The relay of ``ENGINE`` to ``target``, under the rules above."""
    kind: type[NativeRelay] | type[Relay] = NativeRelay if ENGINE == "c" else Relay
    return kind(
        target,
        max_connections=max_connections,
        handshake_seconds=handshake_seconds,
        fair_calls=fair_calls,
    )
