"""Watch iterators over a cache's change log, and the refresher that runs while one is open.

Every decision is the change log's (docs/architecture.md §8); ``PodWatch`` and ``AsyncPodWatch``
only open a cursor on their first read, wait for publishes and hand out what the log gives.
The refresher (§8 rule 6) retries a failed refresh a period later; watchers keep what they
have. An unclosed watch's finaliser only marks its cursor closed (no lock: it may run in any
thread, even one holding the cache's lock); the log forgets it at its next publish or the
refresher's next turn. The drivers are reached only through their hosts (§2).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from podcache.cache.changes import ChangeLog, Cursor, PodChange
from podcache.errors import ResyncRequiredError

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "WATCH_MIN_PERIOD",
    "AsyncPodWatch",
    "AsyncWatchHost",
    "PodWatch",
    "RefreshHost",
    "WatchHost",
    "next_refresh",
]

_Forced = TypeVar("_Forced")  # what a forced refresh returns: None, or an awaitable of it


class WatchHost(NamedTuple):
    """What a ``PodWatch`` uses of its ``RuntimeCache``."""

    log: ChangeLog
    """The cache's change log (read and changed under ``lock``)."""
    lock: threading.Lock
    changed: threading.Condition
    """On ``lock``; notified at every publish."""
    fill: Callable[[], object]
    """Make sure the cache holds a snapshot (``get_pods()``; raises the getter's error)."""
    opened: Callable[[], None]
    """A watch opened (under ``lock``): the refresher runs."""
    closed: Callable[[], None]
    """A watch closed (under ``lock``): the refresher stops with the last one."""


class AsyncWatchHost(NamedTuple):
    """What an ``AsyncPodWatch`` uses of its ``AsyncRuntimeCache`` (one loop: no lock)."""

    log: ChangeLog
    changed: Callable[[], asyncio.Event]
    """The event the next publish sets."""
    wake: Callable[[], None]
    """Wake every waiting watch now."""
    fill: Callable[[], Awaitable[object]]
    opened: Callable[[], None]
    closed: Callable[[], None]


class RefreshHost(NamedTuple, Generic[_Forced]):
    """What a refresher uses of its cache."""

    watched: Callable[[], bool]
    """Whether a watch is still open (forgetting abandoned ones)."""
    clock: Callable[[], float]
    period: float
    cache_time: Callable[[], float | None]
    force: Callable[[float], _Forced]
    """``force_update_if_older(t)``."""


WATCH_MIN_PERIOD = 0.1
"""Shortest time between the refreshes a watch causes (a cache period of 0 included)."""


def next_refresh(period: float, age: float | None) -> float:
    """Seconds until a watched cache of ``period`` whose snapshot is ``age`` old (None: no
    snapshot) needs its next refresh; 0 means now."""
    period = max(period, WATCH_MIN_PERIOD)
    if age is None or age >= period:
        return 0.0
    return period - age


class _Handle:
    """The cursor of one watch, reachable from its finaliser without the watch itself."""

    __slots__ = ("cursor",)

    def __init__(self) -> None:
        self.cursor: Cursor | None = None


def _abandon(handle: _Handle) -> None:
    cursor = handle.cursor
    if cursor is not None:
        cursor.open = False  # one attribute store: safe from any thread, under any lock


def _check_since(since: int | None) -> None:
    if since is not None and (isinstance(since, bool) or not isinstance(since, int)):
        raise TypeError(f"since must be an int revision or None, not {since!r}")


# -- threads -----------------------------------------------------------------------------------


class ThreadRefresher:
    """Refreshes its cache (``host``) every period in a daemon thread while watches are open."""

    def __init__(self, host: RefreshHost[None]) -> None:
        self._host = host
        self._stop: threading.Event | None = None

    def ensure(self) -> None:
        """Start the thread unless it runs (call under the cache's lock)."""
        if self._stop is None:
            self._stop = stop = threading.Event()
            threading.Thread(
                target=self._loop, args=(stop,), name="podcache-watch-refresh", daemon=True
            ).start()

    def stop(self) -> None:
        """Stop the thread at its next turn (call under the cache's lock)."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    def _loop(self, stop: threading.Event) -> None:
        host = self._host
        while not stop.is_set():
            if not host.watched():
                return
            delay = next_refresh(host.period, _age(host.clock(), host.cache_time()))
            if delay == 0:
                # A failure is counted in the cache's stats and retried a period later.
                with contextlib.suppress(Exception):
                    host.force(host.clock())
                delay = max(host.period, WATCH_MIN_PERIOD)
            stop.wait(delay)


_Host = TypeVar("_Host", WatchHost, AsyncWatchHost)


class _Watch(Generic[_Host]):
    """What both watches hold and do alike: their host, the handle of their cursor, the
    changes read and not yet handed out, whether they are closed, the revision reached; and
    the read of the log that keeps the revision (or closes the watch on a resync)."""

    def __init__(self, host: _Host, since: int | None) -> None:
        _check_since(since)
        self._host: _Host = host
        self._since = since
        self._handle = _Handle()
        self._buffer: deque[PodChange] = deque()
        self._closed = False
        self._revision = since
        weakref.finalize(self, _abandon, self._handle)

    @property
    def revision(self) -> int | None:
        """The revision reached by the changes returned so far (None before the first read of
        a watch opened without ``since``)."""
        return self._revision

    def _take_buffered(self) -> list[PodChange]:
        """The changes read and not yet handed out, handed out now."""
        batch = list(self._buffer)
        self._buffer.clear()
        return batch

    def _open_cursor(self) -> Cursor | None:
        """After the fill (under the thread host's lock): the watch's cursor, None when it was
        closed meanwhile."""
        if self._closed:
            return None
        host = self._host
        cursor = host.log.open(self._since)
        self._handle.cursor = cursor
        self._revision = cursor.revision
        host.opened()
        return cursor

    def _close_cursor(self) -> None:
        """Mark the watch closed and give its cursor back (under the thread host's lock)."""
        self._closed = True
        self._buffer.clear()
        cursor = self._handle.cursor
        if cursor is not None:
            self._host.log.close(cursor)
            self._host.closed()

    def _read(self, log: ChangeLog, cursor: Cursor) -> list[PodChange]:
        try:
            batch = log.read(cursor)
        except ResyncRequiredError:
            self._closed = True
            self._host.closed()
            raise
        if batch:
            self._revision = batch[-1].revision
        return batch


class PodWatch(_Watch[WatchHost], Iterator[PodChange]):
    """The changes of a ``RuntimeCache``, in order, as an iterator (see ``RuntimeCache.watch``).

    ``next_batch(timeout)`` returns every change available (whole revisions), waiting at most
    ``timeout`` seconds for the first ([] then). ``revision``: the revision the changes read so
    far bring a consumer to. ``close()`` (or ``with``) ends it; iterating then stops.
    """

    def __iter__(self) -> PodWatch:
        return self

    def __next__(self) -> PodChange:
        while not self._buffer:
            if self._closed:
                raise StopIteration
            self._buffer.extend(self.next_batch())
        return self._buffer.popleft()

    def __enter__(self) -> PodWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_batch(self, timeout: float | None = None) -> list[PodChange]:
        """The changes not yet returned, waiting at most ``timeout`` seconds for one.

        Raises the getter's error when opening needs a refresh that fails, and
        ResyncRequiredError when ``since`` is out of the history or the watcher fell more than
        ``max_lag`` changes behind (the watch is then closed).
        """
        if self._buffer:
            return self._take_buffered()
        if self._closed:
            return []
        cursor = self._handle.cursor or self._open()
        if cursor is None:
            return []  # closed while it opened
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._host.changed:
            return self._wait(cursor, deadline)

    def _wait(self, cursor: Cursor, deadline: float | None) -> list[PodChange]:
        """Under the host's lock: the changes past ``cursor`` once there are some, waiting for
        publishes until ``deadline`` (``time.monotonic``; None: no end); [] when it passed or
        the watch was closed."""
        host = self._host
        while True:
            batch = self._read(host.log, cursor)
            if batch or self._closed:
                return batch
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            host.changed.wait(remaining)

    def read_nowait(self) -> list[PodChange]:
        """The changes not yet returned, without waiting ([] when there are none, before the
        first read has opened the watch, and once it is closed). ResyncRequiredError as
        ``next_batch``."""
        if self._buffer or self._closed or self._handle.cursor is None:
            return self._take_buffered()
        with self._host.lock:
            return self._read(self._host.log, self._handle.cursor)

    def _open(self) -> Cursor | None:
        host = self._host
        if self._since is None:
            host.fill()
        with host.lock:
            return self._open_cursor()

    def close(self) -> None:
        """End the watch; a thread waiting in it returns (idempotent)."""
        with self._host.changed:
            self._close_cursor()
            self._host.changed.notify_all()


# -- asyncio -----------------------------------------------------------------------------------


class TaskRefresher:
    """Refreshes its cache (``host``) every period in a task while watches are open."""

    def __init__(self, host: RefreshHost[Awaitable[None]]) -> None:
        self._host = host
        self._task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        """Start the task unless it runs (in the running loop)."""
        import asyncio  # noqa: PLC0415 -- asyncio only where used: the CLI's threads skip it

        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="podcache-watch-refresh"
            )

    def stop(self) -> None:
        """Cancel the task (a shared refresh it waits for carries on)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def wait_stopped(self) -> None:
        """Stop, and wait until the task has ended."""
        import asyncio  # noqa: PLC0415 -- asyncio only where used: the CLI's threads skip it

        task = self._task
        self.stop()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        import asyncio  # noqa: PLC0415 -- asyncio only where used: the CLI's threads skip it

        host = self._host
        while host.watched():
            delay = next_refresh(host.period, _age(host.clock(), host.cache_time()))
            if delay == 0:
                with contextlib.suppress(Exception):  # counted in stats; retried
                    await host.force(host.clock())
                delay = max(host.period, WATCH_MIN_PERIOD)
            await asyncio.sleep(delay)


class AsyncPodWatch(_Watch[AsyncWatchHost], AsyncIterator[PodChange]):
    """The changes of an ``AsyncRuntimeCache``, in order, as an async iterator: the twin of
    ``PodWatch`` (``await next_batch(timeout)``, ``revision``, ``close()`` / ``async with``)."""

    def __aiter__(self) -> AsyncPodWatch:
        return self

    async def __anext__(self) -> PodChange:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._buffer.extend(await self.next_batch())
        return self._buffer.popleft()

    async def __aenter__(self) -> AsyncPodWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """``close()``, for ``contextlib.aclosing`` and async-generator habits."""
        self.close()

    @property
    def opened(self) -> bool:
        """Whether the first read has opened the watch."""
        return self._handle.cursor is not None

    async def next_batch(self, timeout: float | None = None) -> list[PodChange]:
        """As ``PodWatch.next_batch``; cancelling the caller never cancels a refresh."""
        if self._buffer:
            return self._take_buffered()
        if self._closed:
            return []
        cursor = self._handle.cursor or await self._open()
        if cursor is None:
            return []  # closed while it opened
        import asyncio  # noqa: PLC0415 -- asyncio only where used: the CLI's threads skip it

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        return await self._wait(cursor, loop, deadline)

    async def _wait(
        self, cursor: Cursor, loop: asyncio.AbstractEventLoop, deadline: float | None
    ) -> list[PodChange]:
        """The changes past ``cursor`` once there are some, waiting for publishes until
        ``deadline`` (``loop.time()``; None: no end); [] when it passed or the watch was
        closed."""
        import asyncio  # noqa: PLC0415 -- asyncio only where used: the CLI's threads skip it

        host = self._host
        while True:
            batch = self._read(host.log, cursor)
            if batch or self._closed:
                return batch
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return []
            try:
                # asyncio.timeout, not wait_for: no task of its own per wait (a thousand
                # watchers wake on one publish).
                async with asyncio.timeout(remaining):
                    await host.changed().wait()
            except TimeoutError:
                return []

    def read_nowait(self) -> list[PodChange]:
        """As ``PodWatch.read_nowait``: never suspends, so a callback may read a watch between
        two publishes (``serve.watchstream``'s broadcast does)."""
        cursor = self._handle.cursor
        if self._buffer or self._closed or cursor is None:
            return self._take_buffered()
        return self._read(self._host.log, cursor)

    async def _open(self) -> Cursor | None:
        host = self._host
        if self._since is None:
            await host.fill()
        return self._open_cursor()

    def close(self) -> None:
        """End the watch; a task waiting in it returns (idempotent)."""
        self._close_cursor()
        self._host.wake()


def _age(now: float, cache_time: float | None) -> float | None:
    return None if cache_time is None else now - cache_time
