"""What the two cache drivers do alike around their core and steps: ``Driving``, their base.

Each method here runs a step or reads the departed keys inside ``_guard`` (the thread driver's
lock; for the asyncio driver a context that does nothing), then leaves the starting to the
driver's own ``_start``. Not here: waiting, threads, tasks, timers and the hit path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from podcache.cache.changes import HISTORY, MAX_LAG
from podcache.cache.core import CacheStats, CoreReadings, FreshnessCore
from podcache.cache.departed import (
    DEPARTED_BYTES,
    DEPARTED_FOR,
    DEPARTED_MAX,
    Departed,
    Found,
    epoch_seconds,
    lookup_key,
)
from podcache.cache.events import ENDED, Signal, Step, Subscription, cause_of, failure
from podcache.cache.pids import UnknownIDs
from podcache.cache.publishing import PublishHook
from podcache.cache.scheduling import Scheduling, Start
from podcache.cache.shared import Events, check_getter, offers_pod, with_events
from podcache.cache.watching import RefreshHost
from podcache.errors import EventsUnsupportedError
from podcache.model import PodList

__all__ = ["Driving"]

S = TypeVar("S")
G = TypeVar("G")
F = TypeVar("F")


class _Refresher(Protocol):
    def ensure(self) -> None: ...
    def stop(self) -> None: ...


class Driving(CoreReadings[S], Generic[S, G]):
    """The drivers' constructor (the twins': the same arguments) and shared methods, over a
    getter of type ``G``; ``_init_driver`` sets ``_guard``, ``_refresher`` and the rest of a
    driver's own parts."""

    _guard: AbstractContextManager[Any]
    _refresher: _Refresher
    _new_signal: Callable[[], S]
    """What a refresh's waiters wait on (``Refresh.signal``)."""
    _init_driver: Callable[[G, bool], None]
    """The driver's own parts (the getter; count hits or not)."""
    _init_events: Callable[[Events, G], None]
    _published: Callable[[], None]
    _start: Callable[[Start[S]], None]
    """Arm the timers and start the refreshes a step asked for."""
    _hits: Callable[[], int]
    """Hits served without the core so far (counted only with ``stats=True``)."""
    _subscription: Subscription | None

    def __init__(
        self,
        getter: G,
        cache_period: float | timedelta,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_stale: float | timedelta | None = None,
        refresh_ahead: float | timedelta | None = None,
        stats: bool = False,
        history: int = HISTORY,
        max_lag: int = MAX_LAG,
        first_revision: int = 0,
        min_refresh_interval: float | timedelta | None = None,
        events: Events = False,
        departed_for: float = DEPARTED_FOR,
        departed_max: int = DEPARTED_MAX,
        departed_bytes: int = DEPARTED_BYTES,
        wall_clock: Callable[[], float] = time.time,
        all: bool = False,
    ) -> None:
        check_getter(getter)
        self._getter, self._all = getter, bool(all)  # get_pods(all), get_pod(uid, all)
        self._clock, self._wall = clock, wall_clock  # the cache's clock, and the wall clock
        self._core: FreshnessCore[S] = FreshnessCore(
            cache_period,
            self._new_signal,
            refresh_ahead=refresh_ahead,
            max_stale=max_stale,
            history=history,
            max_lag=max_lag,
            first_revision=first_revision,
            min_refresh_interval=min_refresh_interval,
        )
        self._unknown = UnknownIDs()  # IDs pod_of_pid found the runtime does not list
        self._departed = Departed(departed_for, departed_max, departed_bytes)  # §3 rule 12
        self._init_driver(getter, stats)
        self._steps = Scheduling(
            self._core,
            self._departed,
            clock,
            wall_clock,
            self._published,
            relists_pods=offers_pod(getter),  # events relist their pod alone (§7)
        )
        self._init_events(events, getter)

    def find_in(
        self,
        pods: PodList,
        *,
        container_id: str | None = None,
        uid: str | None = None,
        ip: str | None = None,
        at: float | datetime | None = None,
    ) -> Found | None:
        """``find`` against ``pods``, a snapshot this cache handed out, without waiting: serve
        answers its lookups with it from the snapshot the request got."""
        key = lookup_key(container_id, uid, ip)
        moment = epoch_seconds(at)
        with self._guard:
            return self._departed.find(pods, key, moment, self._wall())

    def stats(self) -> CacheStats:
        """Counters and gauges; hits are counted only when built with ``stats=True``."""
        with self._guard:
            now = self._clock()
            return with_events(self._core.stats(now, self._hits()), self._subscription, now)

    def on_publish(self, hook: PublishHook) -> Callable[[], None]:
        """Call ``hook(publication)`` at every snapshot this cache stores from now on (under the
        thread cache's lock; on the asyncio cache's loop), before anyone is handed that
        snapshot; returns what removes the hook. The rule a hook keeps is
        ``podcache.cache.publishing``'s (docs/architecture.md §3 rule 10)."""
        with self._guard:
            return self._steps.hooks.add(hook)

    def _event(self, event: object) -> Step:
        """One event: its pod relisted, or a full listing asked for (``Scheduling.event``)."""
        with self._guard:
            step, start = self._steps.event(event)
        self._start(start)
        return step

    def _signal(self, signal: Signal, cause: str | None = None) -> Step:
        """Tell the subscription what happened (``cause``: what failed); start the refresh
        it asks for."""
        with self._guard:
            step, start = self._steps.signal(signal, cause)
        self._start(start)
        return step

    def _stream_ended(self, closing: bool) -> Step:
        """The stream ended without an error (``closing``: by ``close()``)."""
        return Step.STOP if closing else self._signal(Signal.FAILED, ENDED)

    def _stream_failed(self, stream: object, error: Exception, closing: bool) -> Step:
        """The stream failed with ``error``: "no events" even while closing, else a failure."""
        if isinstance(error, EventsUnsupportedError):
            return self._signal(Signal.UNSUPPORTED, error.reason)
        if closing:
            return Step.STOP
        return self._signal(failure(stream), cause_of(error))

    def _refresh_host(self, force: Callable[[float], F]) -> RefreshHost[F]:
        """What the watches' refresher reaches of this cache (``force``: its
        ``force_update_if_older``)."""
        return RefreshHost(
            self._watched, self._clock, self._core.period, lambda: self.cache_time, force
        )

    def _watch_opened(self) -> None:  # within the guard
        self._refresher.ensure()

    def _watch_closed(self) -> None:  # within the guard
        if not self._core.changes.prune():
            self._refresher.stop()

    def _watched(self) -> bool:
        with self._guard:
            self._watch_closed()
            return bool(self._core.changes.cursors)
