"""Admission and budgets: what all connections share, and the one timer that ticks them.

``Admission``, the base of ``HTTPServer``, knows a connection only as ``Admitted`` (what the
tick and the budget call). Deliberately not here: a connection's own states, parsing and
answers (``connection`` and the modules its class is made of).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from email.utils import formatdate
from typing import Any, Generic, Protocol, TypeVar

from podcache.serve.http1.limits import (
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    LINGER_TIMEOUT,
    MAX_BUFFERED,
    MAX_CONNECTIONS,
    SEND_BUFFER,
)
from podcache.serve.response import Response

__all__ = ["Admission", "Admitted", "RespondNow", "Responder"]

log = logging.getLogger("podcache.serve")

Responder = Callable[[str, str, str, Iterable[tuple[str, str]]], Coroutine[Any, Any, Response]]
"""``respond(method, path, query, headers)``, i.e. ``App.respond``: answers every request."""
RespondNow = Callable[
    [str, str, str, list[tuple[str, str]]], Response | Coroutine[Any, Any, Response]
]
"""``respond_now(method, path, query, headers)``, i.e. ``App.respond_now``: the answer when
it needs no waiting, else the coroutine that gives it (awaited in a task, so the request is
parsed once). A server given no ``respond_now`` answers every request with ``respond``, in a
task."""


class Admitted(Protocol):
    """What admission asks of a connection: its unsent bytes, its timeouts, its end."""

    def unsent_now(self) -> int: ...

    def check(self, now: float) -> None: ...

    def shutdown(self) -> None: ...

    def abort(self, *, cut_off: str | None = None) -> None: ...


C = TypeVar("C", bound=Admitted)


class Admission(Generic[C]):
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
        self.connections: set[C] = set()
        """Every connection not yet lost, those refused for the cap included."""
        self.refused = 0
        """Connections refused for the cap and not yet lost."""
        self.unsent: dict[C, int] = {}
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

    def admit(self, connection: C) -> bool:
        """Count a new connection in; False when it is over ``max_connections``."""
        self.connections.add(connection)
        if len(self.connections) - self.refused <= self.max_connections:
            return True
        self.refused += 1
        return False

    def forget(self, connection: C, *, refused: bool) -> None:
        """``connection`` is closed."""
        self.connections.discard(connection)
        if refused:
            self.refused -= 1
        self.buffered -= self.unsent.pop(connection, 0)
        if not self.connections and self._idle is not None:
            self._idle.set()

    def note_unsent(self, connection: C, size: int) -> None:
        """``connection`` holds ``size`` unsent bytes now; past the budget, reset the biggest."""
        self._record(connection, size)
        if self.buffered > self.max_buffered:
            self._over_budget()

    def _record(self, connection: C, size: int) -> None:
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
