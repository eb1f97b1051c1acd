"""The CRI socket's listening sockets: each connection relayed to gRPC on a private socket and
tracked by its HTTP/2 frame headers (docs/architecture.md §10 rule 6).

gRPC admits connections up to a bound and then refuses the next, and closes a connection only
when it is idle past its bound; it cannot close the oldest idle connection to admit a new one,
nor one that completed no call. Here podcache accepts, and gRPC sees one connection per client
on a socket in a directory only podcache's user can enter. Rules:

1. **At most ``max_connections``.** At the bound, the connection idle longest (no call open)
   is closed to admit the new one; with none idle, the new one is closed.
2. **A connection must use its first seconds.** One with no call completed and none open
   ``handshake_seconds`` after it was accepted is closed.
3. **No connection keeps another's call out.** Past ``fair_calls`` calls open over all
   connections (set below gRPC's own bound, so the calls already on their way still fit), a
   call opened on a connection closes the busiest connection, the one with the most calls
   open, when that one holds more than the opening one: its calls end (CANCELLED at its
   client) and the new call is answered. So clients that open many calls, on however many
   connections, can hold gRPC's bound only against each other.
4. **Bytes are relayed as they come**, both ways, each write awaited: a client that does not
   read stops its own connection's relay, and no other.
5. **Frames are read by their 9-byte headers only** (the client's 24-byte preface first), never
   their payloads (no HPACK): a client's HEADERS on a stream it never used opens a call; the
   server's END_STREAM on it completes it; a RST_STREAM either way ends it.

Deliberately not here: HTTP/2 itself (gRPC's, behind the relay), what a call is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable

from podcache.cri.wire import frames

__all__ = ["Relay"]

_PREFACE = len(frames.PREFACE)
"""Bytes of the client's connection preface (RFC 9113 §3.4), before its first frame."""
_HEAD = frames.HEAD_BYTES
_HEADERS, _DATA, _RST_STREAM = frames.HEADERS, frames.DATA, frames.RST_STREAM
_END_STREAM = frames.END_STREAM
_CHUNK = 32 * 1024
"""Bytes read at once from either side, and written ahead of a side that does not read: a
connection holds at most about 4 times this in podcache's memory (two directions, a chunk and
a write buffer each), 128 KiB; 1,024 stalled connections 128 MiB at most."""


class _Frames:
    """Frame headers read out of one direction's bytes, chunk by chunk (rule 4)."""

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
        task: asyncio.Task[None] | None,
        on_change: Callable[[_Connection, int], None],
    ) -> None:
        self.open: set[int] = set()
        self.completed = 0
        self.idle_since = accepted
        self.last_stream = 0
        self.task = task
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
        """End the connection: its calls stop counting now, the relay's task ends it."""
        self.release()
        if self.task is not None:
            self.task.cancel()


class Relay:
    """Accepts on listening sockets and relays each connection to ``target`` (rules above)."""

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
        server = await asyncio.start_unix_server(self._accepted, sock=listening, limit=_CHUNK)
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

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._admit():
            writer.close()
            return
        connection = _Connection(time.monotonic(), asyncio.current_task(), self._counted)
        self._connections[connection] = None
        timer = asyncio.get_running_loop().call_later(self._handshake, self._judge, connection)
        upstream: asyncio.StreamWriter | None = None
        try:
            up_reader, upstream = await asyncio.open_unix_connection(self._target, limit=_CHUNK)
            client = _Frames(_PREFACE, connection.client_frame)
            server = _Frames(0, connection.server_frame)
            await _either(_pump(reader, upstream, client), _pump(up_reader, writer, server))
        except (OSError, asyncio.CancelledError):
            pass  # a side went away, or the connection was closed (rules 1, 2)
        finally:
            timer.cancel()
            connection.release()
            self._connections.pop(connection, None)
            for side in (writer, upstream):
                if side is not None:
                    side.transport.abort()

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

    async def aclose(self) -> None:
        """Stop accepting, close every connection."""
        await self.stop_accepting()
        for connection in list(self._connections):
            connection.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frames: _Frames
) -> None:
    writer.transport.set_write_buffer_limits(high=_CHUNK)
    while data := await reader.read(_CHUNK):
        frames.feed(data)
        writer.write(data)
        await writer.drain()


async def _either(*pumps: object) -> None:
    """Run both directions until either ends (its side closed); the other is cancelled."""
    tasks = [asyncio.ensure_future(pump) for pump in pumps]  # type: ignore[call-overload]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.exception()  # retrieved: a side's error ends the connection as its close does
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
