"""Keeping an idle server's snapshot within its period: one reader that never goes away
(docs/architecture.md §5, "The age, and an idle server").

What it deliberately is not: a second way to refresh. It calls ``get_pods``, the readers'
method, and the cache's rules decide (a failure is the readers' too, and counted so). No HTTP,
no metrics of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from podcache.cache import AsyncRuntimeCache

__all__ = ["KEEP_MIN", "Keeper", "keep_fresh", "next_read"]

KEEP_MIN = 0.1
"""Least seconds between two of the keeper's reads (a refresh-ahead as long as the period)."""
_PAST = 0.001
"""How far past the refresh-ahead point the keeper reads: a hit exactly at it is plain."""


def next_read(fresh_for: float, age: float | None) -> float:
    """Seconds until a snapshot ``age`` old (None: none yet) reaches ``fresh_for``, the
    refresh-ahead point; 0 when it has."""
    if age is None or age >= fresh_for:
        return 0.0
    return fresh_for - age + _PAST


async def keep_fresh(
    cache: AsyncRuntimeCache, fresh_for: float, wait: float, clock: Callable[[], float]
) -> None:
    """Read ``cache`` each time its snapshot reaches ``fresh_for`` (its period less the
    refresh-ahead), waiting at most ``wait`` for a refresh; forever (cancel the task to stop).
    After a read, the next is at least ``max(fresh_for, KEEP_MIN)`` later: the refresh it
    started is then done, or failed, and a failing runtime is asked once per that."""
    while True:
        cache_time = cache.cache_time
        delay = next_read(fresh_for, None if cache_time is None else clock() - cache_time)
        if delay > 0:
            await asyncio.sleep(delay)
            continue  # a reader may have refreshed meanwhile: look again
        with contextlib.suppress(Exception):  # the readers' failure too, counted as theirs
            await cache.get_pods(timeout=wait)
        await asyncio.sleep(max(fresh_for, KEEP_MIN))


class Keeper:
    """The keeper of one cache: ``start`` starts ``keep_fresh`` as a task unless it runs or
    the cache has no period (every answer is then fetched for its request); ``stop`` ends
    it."""

    def __init__(
        self,
        cache: AsyncRuntimeCache,
        refresh_ahead: float,
        wait: float,
        clock: Callable[[], float],
    ) -> None:
        self._cache = cache
        self._refresh_ahead = refresh_ahead
        self._wait = wait
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Start the keeper, unless it runs or the period is 0."""
        period = self._cache.cache_period
        if self._task is not None or period == 0:
            return
        fresh_for = max(period - self._refresh_ahead, 0.0)
        self._task = asyncio.get_running_loop().create_task(
            keep_fresh(self._cache, fresh_for, self._wait, self._clock), name="podcache-keeper"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
