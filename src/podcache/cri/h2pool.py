"""The pool of podcache's own HTTP/2 connections (``http2``) that the filtered list calls of one
pod and the status calls of a listing are made on: idle connections lent to one thread at a
time, the one retry of a call on a connection the runtime closed while idle, and closing,
which ends every call in flight.

Deliberately not here: the connection itself (``http2``), its framing and its bounds (``h2core``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from podcache.cri.endpoint import Endpoint
from podcache.cri.h2core import CallFailedError
from podcache.cri.http2 import Connection
from podcache.cri.wire.grpcwire import UNAVAILABLE

__all__ = ["MAX_IDLE", "ConnectionPool"]

MAX_IDLE = 8
"""Idle connections a pool keeps (one per relist worker: ``podrelists.MAX_IN_FLIGHT``)."""

_Outcomes = TypeVar("_Outcomes")


class ConnectionPool:
    """Connections lent to one thread at a time, the idle ones kept (at most ``MAX_IDLE``).

    ``close()`` closes the idle ones and cancels the lent ones: a call in flight on one ends
    at once (CANCELLED), whatever it waits for.
    """

    def __init__(self, endpoint: Endpoint, max_idle: int = MAX_IDLE) -> None:
        self._endpoint = endpoint
        self._max_idle = max_idle
        self._idle: list[Connection] = []
        self._lent: set[Connection] = set()
        self._lock = threading.Lock()
        self._closed = False

    def call_all(self, requests: Sequence[tuple[str, bytes]], timeout: float) -> list[list[bytes]]:
        """``Connection.call_all`` on a lent connection (``_made``)."""
        return self._made(Connection.call_all, requests, timeout)

    def call_each(
        self, requests: Sequence[tuple[str, bytes]], timeout: float
    ) -> list[list[bytes] | CallFailedError]:
        """``Connection.call_each`` on a lent connection (``_made``)."""
        return self._made(Connection.call_each, requests, timeout)

    def _made(
        self,
        calls: Callable[[Connection, Sequence[tuple[str, bytes]], float], _Outcomes],
        requests: Sequence[tuple[str, bytes]],
        timeout: float,
    ) -> _Outcomes:
        """``calls`` on a lent connection; made once more on a fresh one when a reused
        connection failed before any answer arrived (the runtime closed it idle). OSError when
        the runtime takes no connection."""
        deadline = time.monotonic() + timeout
        connection, reused = self._lend(timeout)
        try:
            answers = calls(connection, requests, deadline)
        except CallFailedError as failure:
            self._drop(connection)
            if not reused or connection.answered() or failure.number != UNAVAILABLE:
                raise
            connection = self._fresh(max(0.001, deadline - time.monotonic()))
            try:
                answers = calls(connection, requests, deadline)
            except CallFailedError:
                self._drop(connection)
                raise
        except BaseException:
            self._drop(connection)
            raise
        self._return(connection)
        return answers

    def _lend(self, timeout: float) -> tuple[Connection, bool]:
        with self._lock:
            if self._idle:
                connection = self._idle.pop()
                self._lent.add(connection)
                return connection, True
        return self._fresh(timeout), False

    def _fresh(self, timeout: float) -> Connection:
        """A new connection, lent (cancelled at once if the pool was closed meanwhile)."""
        connection = Connection(self._endpoint, timeout)
        with self._lock:
            self._lent.add(connection)
            closed = self._closed
        if closed:
            connection.cancel()
        return connection

    def _drop(self, connection: Connection) -> None:
        with self._lock:
            self._lent.discard(connection)
        connection.close()

    def _return(self, connection: Connection) -> None:
        with self._lock:
            self._lent.discard(connection)
            if connection.broken is None and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close the idle connections and cancel the lent ones (their calls end CANCELLED at
        once; each is closed by the thread it is lent to)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            lent = list(self._lent)
        for connection in idle:
            connection.close()
        for connection in lent:
            connection.cancel()
