"""Watch iterators over a cache's change log, and the refresher that runs while one is open.

``PodWatch`` (threads) and ``AsyncPodWatch`` (asyncio) are what ``RuntimeCache.watch`` and
``AsyncRuntimeCache.watch`` return; every decision is the change log's (``changes``), these
only open a cursor, wait for publishes and hand out what the log gives. A watch opens on its
first read: without ``since`` it first makes sure the cache holds a snapshot (a refresh when
it is older than the period; the getter's error is raised), then starts from that snapshot.

While at least one watch is open its cache refreshes itself every period (at least
``WATCH_MIN_PERIOD`` apart), in a daemon thread or a task; when the last one closes, the
refresher stops and the cache goes back to refreshing on demand. A refresh that fails is
counted in the cache's stats and retried a period later; watchers keep what they have.

A watch left unclosed (a ``break`` out of a ``for`` loop) is closed when it is garbage
collected: the finaliser only marks its cursor closed (no lock: it may run in any thread, even
one holding the cache's lock), and the log forgets closed cursors at its next publish or the
refresher's next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from podcache.cache.changes import ChangeLog, Cursor, PodChange
from podcache.errors import ResyncRequiredError

if TYPE_CHECKING:
    from podcache.cache.aio import AsyncRuntimeCache
    from podcache.cache.threaded import RuntimeCache

__all__ = ["WATCH_MIN_PERIOD", "AsyncPodWatch", "PodWatch", "next_refresh"]

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
    """Refreshes ``cache`` every period in a daemon thread while watches are open."""

    def __init__(self, cache: RuntimeCache) -> None:
        self._cache = cache
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
        cache = self._cache
        while not stop.is_set():
            if not cache._watched():
                return
            delay = next_refresh(cache.cache_period, _age(cache._clock(), cache.cache_time))
            if delay == 0:
                # A failure is counted in the cache's stats and retried a period later.
                with contextlib.suppress(Exception):
                    cache.force_update_if_older(cache._clock())
                delay = max(cache.cache_period, WATCH_MIN_PERIOD)
            stop.wait(delay)


class PodWatch(Iterator[PodChange]):
    """The changes of a ``RuntimeCache``, in order, as an iterator (see ``RuntimeCache.watch``).

    ``next_batch(timeout)`` returns every change available (whole revisions), waiting at most
    ``timeout`` seconds for the first ([] then). ``revision``: the revision the changes read so
    far bring a consumer to. ``close()`` (or ``with``) ends it; iterating then stops.
    """

    def __init__(self, cache: RuntimeCache, since: int | None) -> None:
        _check_since(since)
        self._cache = cache
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
            batch = list(self._buffer)
            self._buffer.clear()
            return batch
        if self._closed:
            return []
        cache = self._cache
        cursor = self._handle.cursor or self._open()
        if cursor is None:
            return []  # closed while it opened
        deadline = None if timeout is None else time.monotonic() + timeout
        with cache._changed:
            while True:
                batch = self._read(cache._core.changes, cursor)
                if batch or self._closed:
                    return batch
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return []
                cache._changed.wait(remaining)

    def read_nowait(self) -> list[PodChange]:
        """The changes not yet returned, without waiting ([] when there are none, before the
        first read has opened the watch, and once it is closed). ResyncRequiredError as
        ``next_batch``."""
        if self._buffer or self._closed or self._handle.cursor is None:
            batch = list(self._buffer)
            self._buffer.clear()
            return batch
        with self._cache._lock:
            return self._read(self._cache._core.changes, self._handle.cursor)

    def _read(self, log: ChangeLog, cursor: Cursor) -> list[PodChange]:
        try:
            batch = log.read(cursor)
        except ResyncRequiredError:
            self._closed = True
            self._cache._watch_closed()
            raise
        if batch:
            self._revision = batch[-1].revision
        return batch

    def _open(self) -> Cursor | None:
        cache = self._cache
        if self._since is None:
            cache.get_pods()
        with cache._lock:
            if self._closed:
                return None
            cursor = cache._core.changes.open(self._since)
            self._handle.cursor = cursor
            self._revision = cursor.revision
            cache._watch_opened()
        return cursor

    def close(self) -> None:
        """End the watch; a thread waiting in it returns (idempotent)."""
        cache = self._cache
        with cache._changed:
            self._closed = True
            self._buffer.clear()
            cursor = self._handle.cursor
            if cursor is not None:
                cache._core.changes.close(cursor)
                cache._watch_closed()
            cache._changed.notify_all()


# -- asyncio -----------------------------------------------------------------------------------


class TaskRefresher:
    """Refreshes ``cache`` every period in a task while watches are open."""

    def __init__(self, cache: AsyncRuntimeCache) -> None:
        self._cache = cache
        self._task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        """Start the task unless it runs (in the running loop)."""
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
        task = self._task
        self.stop()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        cache = self._cache
        while cache._watched():
            delay = next_refresh(cache.cache_period, _age(cache._clock(), cache.cache_time))
            if delay == 0:
                with contextlib.suppress(Exception):  # counted in stats; retried
                    await cache.force_update_if_older(cache._clock())
                delay = max(cache.cache_period, WATCH_MIN_PERIOD)
            await asyncio.sleep(delay)


class AsyncPodWatch(AsyncIterator[PodChange]):
    """The changes of an ``AsyncRuntimeCache``, in order, as an async iterator: the twin of
    ``PodWatch`` (``await next_batch(timeout)``, ``revision``, ``close()`` / ``async with``)."""

    def __init__(self, cache: AsyncRuntimeCache, since: int | None) -> None:
        _check_since(since)
        self._cache = cache
        self._since = since
        self._handle = _Handle()
        self._buffer: deque[PodChange] = deque()
        self._closed = False
        self._revision = since
        weakref.finalize(self, _abandon, self._handle)

    @property
    def revision(self) -> int | None:
        """As ``PodWatch.revision``."""
        return self._revision

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
            batch = list(self._buffer)
            self._buffer.clear()
            return batch
        if self._closed:
            return []
        cache = self._cache
        cursor = self._handle.cursor or await self._open()
        if cursor is None:
            return []  # closed while it opened
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            batch = self._read(cache._core.changes, cursor)
            if batch or self._closed:
                return batch
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return []
            try:
                # asyncio.timeout, not wait_for: no task of its own per wait (a thousand
                # watchers wake on one publish).
                async with asyncio.timeout(remaining):
                    await cache._changed_event().wait()
            except TimeoutError:
                return []

    def read_nowait(self) -> list[PodChange]:
        """As ``PodWatch.read_nowait``: never suspends, so a callback may read a watch between
        two publishes (``serve.watchstream``'s broadcast does)."""
        cursor = self._handle.cursor
        if self._buffer or self._closed or cursor is None:
            batch = list(self._buffer)
            self._buffer.clear()
            return batch
        return self._read(self._cache._core.changes, cursor)

    def _read(self, log: ChangeLog, cursor: Cursor) -> list[PodChange]:
        try:
            batch = log.read(cursor)
        except ResyncRequiredError:
            self._closed = True
            self._cache._watch_closed()
            raise
        if batch:
            self._revision = batch[-1].revision
        return batch

    async def _open(self) -> Cursor | None:
        cache = self._cache
        if self._since is None:
            await cache.get_pods()
        if self._closed:
            return None
        cursor = cache._core.changes.open(self._since)
        self._handle.cursor = cursor
        self._revision = cursor.revision
        cache._watch_opened()
        return cursor

    def close(self) -> None:
        """End the watch; a task waiting in it returns (idempotent)."""
        self._closed = True
        self._buffer.clear()
        cursor = self._handle.cursor
        cache = self._cache
        if cursor is not None:
            cache._core.changes.close(cursor)
            cache._watch_closed()
        cache._wake_watchers()


def _age(now: float, cache_time: float | None) -> float | None:
    return None if cache_time is None else now - cache_time
