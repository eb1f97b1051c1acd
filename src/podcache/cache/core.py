"""The freshness core: every decision the runtime cache makes, and no I/O, threads or clock.

It keeps docs/architecture.md §3 rules 1-9, stated from the inside as the invariants below; the
drivers (``threaded.RuntimeCache``, ``aio.AsyncRuntimeCache``) only read the clock, call the
getter and wait, asking this core what to do and reporting back what happened.

A caller's need is met by the snapshot (a hit), else by the refresh in flight if it began late
enough (a join), else by the next refresh, queued and shared by every caller in that position,
which starts as soon as the one in flight ends, whatever its outcome. A refresh is *forced*
when a ``force_update_if_older`` caller needs it (started for one, or queued with one waiting).
One that only forced callers need stays queued until ``min_refresh_interval`` after the last
forced start: the driver's timer starts it then (``fire``), or the end of the one in flight at
or after that time. A ``get_pods`` caller that needs it, or a routine start while it waits,
starts it at once. Either way it begins after every waiting caller arrived. One that only the
runtime's events need (``hint``) waits for the event budget (§7) instead.

Invariants
----------
1. At most one refresh is in flight; at most one more is queued (behind it, or until its time).
2. The snapshot's timestamp never moves backward (an equal timestamp replaces).
3. A failed refresh changes no state but the stats; every caller that joined it gets the error.
4. Every caller of one refresh gets the same ``PodList`` object.
5. A refresh runs to completion even if all its callers stopped waiting (timeout, cancel).
6. A refresh only forced callers need begins at least ``min_refresh_interval`` after the last
   forced refresh began; one only hints need begins at least ``EVENT_BUDGET`` times the last
   successful listing's duration after that listing ended (clock readings). A queued refresh
   always has a way to start (a refresh in flight, or the driver's timer armed for its time).
7. Every snapshot stored is first published to the change log (``changes``), which numbers it
   with its revision: callers and watchers see the same numbered PodList. Its ``Publication``
   waits in ``published`` for the driver, which hands it to the publish hooks before it wakes
   anyone (``cache.publishing``).
8. Relists of one pod (``pod_hint``, ``pod_complete``; their rules are ``cache.podrelists``')
   replace that pod and keep the snapshot's timestamp (§3 rule 11). A failed one, or a storm
   of them, asks for a full listing as an event does (``hint``). Pods waiting for their budget
   (``podrelists`` invariant 6) always have a way to start (a relist in flight whose end starts
   them, or the driver's timer, ``pod_arm`` and ``pod_fire``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from podcache.cache.changes import HISTORY, HISTORY_AGE, MAX_LAG, ChangeLog
from podcache.cache.podrelists import EVENT_BUDGET, PodRelist, PodRelists, merge, replace_pod
from podcache.cache.publishing import Publication
from podcache.model import Pod, PodList

__all__ = [
    "EVENT_BUDGET",
    "NEVER",
    "CacheStats",
    "CoreReadings",
    "FreshnessCore",
    "Refresh",
    "Snapshot",
    "fresh_until",
    "period_seconds",
]

S = TypeVar("S")
"""The driver's completion signal: a ``threading.Event`` or an ``asyncio.Future``."""

NEVER = -math.inf
"""Timestamp of the empty cache: older than any need."""

Snapshot = tuple[PodList | None, float, float]
"""``(pods, timestamp, fresh_until)``, one immutable object so a hit is one attribute read.

``fresh_until`` is the last clock reading at which the snapshot is served without waking the
refresh machinery: the period (minus the refresh-ahead margin, when on) after the timestamp,
or ``-inf`` when the period is 0 (docs/architecture.md §3 rule 1).
"""


def fresh_until(timestamp: float, fresh_for: float) -> float:
    """The largest float ``t`` with ``t - timestamp <= fresh_for``, computed in floats.

    Float subtraction rounds monotonically, so ``now <= fresh_until(ts, p)`` holds exactly when
    ``now - ts <= p`` does: the hit path compares once instead of subtracting, and can never
    disagree with the core's own ``now - timestamp <= period`` by a rounding.
    """
    if NEVER in (timestamp, fresh_for):
        return NEVER
    until = timestamp + fresh_for
    if math.isinf(until):
        return until
    while until - timestamp > fresh_for:
        until = math.nextafter(until, NEVER)
    while (above := math.nextafter(until, math.inf)) - timestamp <= fresh_for:
        until = above
    return until


def period_seconds(value: float | timedelta, what: str) -> float:
    """A duration as float seconds; negative, NaN or non-numeric values are a ValueError."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{what} must be seconds (int or float) or a timedelta, not {value!r}")
    seconds = float(seconds)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{what} must be >= 0 seconds, got {value!r}")
    return seconds


class Refresh(Generic[S]):
    """One getter call: when it started, who waits for it, and how it ended."""

    __slots__ = (
        "error",
        "forced",
        "hinted",
        "order",
        "pods",
        "routine",
        "signal",
        "started_at",
        "started_wall",
    )

    def __init__(self, signal: S) -> None:
        self.signal = signal
        self.started_at: float | None = None
        self.order = 0
        """Its start number (``podrelists`` invariant 2), given when it begins."""
        self.started_wall = -math.inf
        """The wall clock just before the getter call (set by the driver)."""
        self.pods: PodList | None = None
        self.error: BaseException | None = None
        # Who needs it: a force_update_if_older caller (forced), a get_pods caller (routine),
        # the runtime's events (hinted).
        self.forced = False
        self.routine = False
        self.hinted = False

    def need(self, forced: bool) -> None:
        """One more caller needs this refresh."""
        if forced:
            self.forced = True
        else:
            self.routine = True

    @property
    def deferrable(self) -> bool:
        """No reader needs it: a rate limit applies (the forced one, or the event budget)."""
        return not self.routine


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters and gauges of one cache (opt-in: hits are counted only with ``stats=True``)."""

    hits: int
    misses: int
    refreshes: int
    errors: int
    joins: int
    stale_served: int
    last_refresh_duration: float | None
    age: float | None
    in_flight: bool
    events_state: str = "off"
    """The event subscription: off, subscribing, subscribed, reconnecting or unsupported."""
    events_received: int = 0
    """Container events received from the runtime."""
    event_refreshes: int = 0
    """Refreshes that events (and (re)subscriptions) started or queued."""
    resubscriptions: int = 0
    """Successful event subscriptions after the first (one per runtime restart)."""
    event_stream_failures: int = 0
    """Failed attempts of the event subscription, each counted: streams that could not be
    opened, failed or ended; the runtime unreachable, or without events."""
    pod_relists: int = 0
    """Relists of one pod (events, §7) whose data entered the snapshot or confirmed it."""
    pod_relists_dropped: int = 0
    """Relists of one pod that began before the snapshot's data for that pod was fetched."""
    pod_relist_errors: int = 0
    """Relists of one pod that failed (each asked for a full listing)."""
    pod_events_covered: int = 0
    """Events for a pod whose change a call made after it already held (§7 rule 4)."""
    pod_relist_storms: int = 0
    """Times more pods were pending than ``podrelists.MAX_PENDING`` (one full listing each)."""
    last_event_age: float | None = None
    """Seconds since the last container event was received (None: none yet, or events off)."""


def _period_and_ahead(
    cache_period: float | timedelta, refresh_ahead: float | timedelta | None
) -> tuple[float, float]:
    """The period and the refresh-ahead margin in seconds (0 when None); a margin longer than
    the period is a ValueError."""
    period = period_seconds(cache_period, "cache_period")
    ahead = 0.0 if refresh_ahead is None else period_seconds(refresh_ahead, "refresh_ahead")
    if ahead > period:
        raise ValueError(f"refresh_ahead ({ahead} s) must not exceed cache_period ({period} s)")
    return period, ahead


class FreshnessCore(Generic[S]):
    """State and decisions of one runtime cache; drivers call it under their own mutual exclusion.

    ``new_signal`` makes the driver's completion signal for each new refresh.
    """

    def __init__(
        self,
        cache_period: float | timedelta,
        new_signal: Callable[[], S],
        *,
        refresh_ahead: float | timedelta | None = None,
        max_stale: float | timedelta | None = None,
        history: int = HISTORY,
        history_age: float = HISTORY_AGE,
        max_lag: int = MAX_LAG,
        first_revision: int = 0,
        min_refresh_interval: float | timedelta | None = None,
    ) -> None:
        """Validate the durations and bounds (clear ValueError / TypeError naming the
        argument); ``history``, ``history_age`` and ``max_lag`` go to the change log."""
        period, ahead = _period_and_ahead(cache_period, refresh_ahead)
        self.period = period
        self.max_stale = None if max_stale is None else period_seconds(max_stale, "max_stale")
        interval = 0.0 if min_refresh_interval is None else min_refresh_interval
        self.min_refresh_interval = period_seconds(interval, "min_refresh_interval")
        self.last_forced_start = NEVER
        # The last successful listing: when it ended and how long it took (the event budget).
        self.last_listing_end = NEVER
        self.last_listing_duration = 0.0
        # When the driver's pending timer for the queued refresh ends, NEVER when none is
        # (see ``arm`` and ``fire``).
        self.timer_at = NEVER
        # Snapshots younger than this are served without looking at anything else.
        self.refresh_ahead = ahead
        self.fresh_for = NEVER if period == 0 else max(period - ahead, 0.0)
        self.snapshot: Snapshot = (None, NEVER, NEVER)
        self.changes = ChangeLog(
            history=history,
            history_age=history_age,
            max_lag=max_lag,
            first_revision=first_revision,
        )
        self.inflight: Refresh[S] | None = None
        self.queued: Refresh[S] | None = None
        self.pod_relists = PodRelists()
        self.published: Publication | None = None
        """The last snapshot stored, until the driver takes it for the hooks (invariant 7)."""
        self._new_signal = new_signal
        self.hits = 0
        self.misses = 0
        self.refreshes = 0
        self.errors = 0
        self.joins = 0
        self.stale_served = 0
        self.last_duration: float | None = None

    # -- needs ---------------------------------------------------------------------------
    def accepts(self, timestamp: float, now: float, min_time: float | None) -> bool:
        """Does data fetched from ``timestamp`` on meet a caller's need? ``min_time`` None is a
        ``get_pods`` caller at ``now`` (rule 1; the drivers' hit check agrees by ``fresh_until``),
        else ``force_update_if_older(min_time)`` (rule 4)."""
        if min_time is None:
            return self.period != 0 and now - timestamp <= self.period
        return timestamp >= min_time

    # -- decisions -----------------------------------------------------------------------
    def plan(
        self, now: float, min_time: float | None = None
    ) -> tuple[PodList | None, Refresh[S] | None, bool]:
        """What a caller does at ``now`` (need as in ``accepts``): ``(pods, refresh, start)``.

        * ``(pods, None, False)``: a hit, serve ``pods``.
        * ``(pods, refresh, True)``: a hit, and (a ``get_pods`` caller with refresh-ahead on and
          the snapshot past ``fresh_for``) start ``refresh`` in the background.
        * ``(None, refresh, True)``: start ``refresh`` (its ``started_at`` is ``now``), wait.
        * ``(None, refresh, False)``: wait for ``refresh`` (in flight, or queued behind it or,
          rate-limited, until its time: the driver then arms a timer, see ``arm``).
        """
        pods, timestamp, until = self.snapshot
        if pods is not None and self.accepts(timestamp, now, min_time):
            self.hits += 1
            ahead = min_time is None and self.refresh_ahead and self.inflight is None
            if ahead and now > until:
                return pods, self._refresh_ahead(now), True
            return pods, None, False
        self.misses += 1
        inflight = self.inflight
        if inflight is None:
            return self._start_or_defer(now, min_time is not None)
        return None, self._behind(inflight, now, min_time), False

    def _refresh_ahead(self, now: float) -> Refresh[S]:
        """The refresh begun at ``now`` while readers keep the current pods: a deferred forced
        refresh, if one waits, is the one started (its callers ride)."""
        refresh = self.queued or self._new_refresh()
        self.queued = None
        refresh.need(forced=False)
        return self._begin(refresh, now)

    def _behind(self, inflight: Refresh[S], now: float, min_time: float | None) -> Refresh[S]:
        """The refresh a caller who needs newer pods waits for while ``inflight`` runs: that
        one when it meets the need (a join), else the one queued behind it."""
        assert inflight.started_at is not None
        if self.accepts(inflight.started_at, now, min_time):
            self.joins += 1
            return inflight
        queued = self.queued
        if queued is None:
            queued = self.queued = self._new_refresh()
        return self._join(queued, min_time is not None)

    def complete(
        self, refresh: Refresh[S], pods: PodList | None, error: BaseException | None, now: float
    ) -> Refresh[S] | None:
        """Record how ``refresh`` ended; return the queued refresh the driver must start now."""
        assert refresh is self.inflight and refresh.started_at is not None
        self.last_duration = max(now - refresh.started_at, 0.0)
        if error is None:
            assert pods is not None
            self.refreshes += 1
            self.last_listing_end = now
            self.last_listing_duration = self.last_duration
            if refresh.started_at >= self.snapshot[1]:
                kept = self.pod_relists.after_listing(refresh.order, refresh.started_wall)
                pods, changes = self.changes.publish(merge(pods, kept) if kept else pods, now)
                until = fresh_until(refresh.started_at, self.fresh_for)
                self.snapshot = (pods, refresh.started_at, until)
                self.published = Publication(
                    pods, pods.revision, tuple(changes), refresh.started_at
                )
            refresh.pods = pods
        else:
            refresh.error = error
            self.errors += 1
        self.inflight = None
        return self._start_queued(now)

    def arm(self, now: float) -> float | None:
        """Seconds after which the driver must call ``fire``, when a queued refresh waits for
        its time with nothing in flight and no timer armed for that time or sooner; else None
        (arm nothing: a timer set for a later time, if any, finds nothing to start)."""
        queued = self.queued
        if queued is None or self.inflight is not None:
            return None
        due = self.due(queued)
        if self.timer_at != NEVER and self.timer_at <= due:
            return None
        self.timer_at = due
        return max(due - now, 0.0)

    def fire(self, now: float) -> tuple[Refresh[S] | None, float | None]:
        """The driver's timer ended at ``now``: ``(refresh to start now, seconds to arm again)``.

        A timer may end early on a clock other than the one it was armed with (a test's fake
        clock): it is then armed again for the rest.
        """
        self.timer_at = NEVER
        if self.inflight is not None:
            return None, None  # ``complete`` starts the queued refresh when it is due
        started = self._start_queued(now)
        return started, self.arm(now)

    def forced_due(self) -> float:
        """The earliest clock reading at which a forced refresh may begin."""
        return self.last_forced_start + self.min_refresh_interval

    def hinted_due(self) -> float:
        """The earliest clock reading at which a refresh only events need may begin."""
        return self.last_listing_end + EVENT_BUDGET * self.last_listing_duration

    def due(self, refresh: Refresh[S]) -> float:
        """The earliest clock reading at which ``refresh`` may begin (invariant 6): at once for
        a reader; else the earliest that one of its needs allows (a forced caller's rate limit,
        the event budget of a hint)."""
        if refresh.routine:
            return NEVER
        due = math.inf
        if refresh.forced:
            due = self.forced_due()
        if refresh.hinted:
            due = min(due, self.hinted_due())
        return due

    def stale_fallback(self, now: float) -> PodList | None:
        """With ``max_stale``, the last good pods if at most ``period + max_stale`` old."""
        pods, timestamp, _ = self.snapshot
        if self.max_stale is None or pods is None:
            return None
        if now - timestamp > self.period + self.max_stale:
            return None
        self.stale_served += 1
        return pods

    def stats(self, now: float, fast_hits: int) -> CacheStats:
        """A copy of the counters at ``now``; ``fast_hits`` are the driver's lock-free hits."""
        _, timestamp, _ = self.snapshot
        return CacheStats(
            hits=self.hits + fast_hits,
            misses=self.misses,
            refreshes=self.refreshes,
            errors=self.errors,
            joins=self.joins,
            stale_served=self.stale_served,
            last_refresh_duration=self.last_duration,
            age=None if timestamp == NEVER else now - timestamp,
            in_flight=self.inflight is not None,
            pod_relists=self.pod_relists.completed,
            pod_relists_dropped=self.pod_relists.dropped,
            pod_relist_errors=self.pod_relists.failed,
            pod_relist_storms=self.pod_relists.storms,
            pod_events_covered=self.pod_relists.covered,
        )

    @property
    def cache_time(self) -> float | None:
        """Timestamp of the current snapshot, None when never filled."""
        timestamp = self.snapshot[1]
        return None if timestamp == NEVER else timestamp

    def hint(self, now: float) -> tuple[Refresh[S] | None, bool]:
        """The runtime reported a change at ``now``: make sure a refresh starting after it runs.

        Returns ``(refresh, scheduled)``: ``refresh`` is one the driver must start in the
        background now (None: nothing to start); ``scheduled`` is True when this hint added a
        refresh (started one, or queued one behind the refresh in flight). A refresh in flight
        that started strictly after ``now`` already covers the change; a queued one will start
        after it. An empty cache with nothing in flight or queued needs nothing: its first
        reader fetches. A refresh only hints need waits for the event budget (``hinted_due``):
        queued, with the driver's timer armed (``arm``), when its time has not come; a queued
        refresh a hint joins begins at the earlier of its callers' time and the budget's.
        Readers' counters (misses, joins) are not touched.
        """
        inflight, queued = self.inflight, self.queued
        if inflight is not None:
            assert inflight.started_at is not None
            if inflight.started_at > now:
                return None, False
            if queued is not None:
                queued.hinted = True  # it starts after now, when the flight ends or it is due
                return None, False
            self.queued = self._new_refresh()
            self.queued.hinted = True
            return None, True
        scheduled = queued is None
        if queued is None:
            if self.snapshot[0] is None or self.snapshot[1] > now:
                return None, False
            queued = self.queued = self._new_refresh()
        queued.hinted = True
        return self._start_queued(now), scheduled

    def take_published(self) -> Publication | None:
        """The publication stored since the last call, for the driver's hooks (invariant 7)."""
        published, self.published = self.published, None
        return published

    # -- relists of one pod (invariant 8) -------------------------------------------------
    def pod_hint(
        self, uid: str, now: float, happened: float | None = None
    ) -> tuple[list[PodRelist], Refresh[S] | None]:
        """An event for pod ``uid`` at ``now``, that happened at wall time ``happened`` (None:
        unknown): ``(relists to start, full refresh to start)``.

        An empty cache needs nothing (its first reader lists the node). A storm (more pods
        pending than ``podrelists.MAX_PENDING``) asks for a full listing instead, as an event
        without a pod does (``hint``: the driver arms its timer after). The relists started
        are those the budget lets begin now, the pods waiting longest first (``pod_arm``
        says when the others may)."""
        if self.snapshot[0] is None:
            return [], None
        relists = self.pod_relists
        started = relists.hint(uid, now, happened)
        if relists.storm:
            relists.storm = False
            return started, self.hint(now)[0]
        return started, None

    def on_event(
        self, uid: str | None, now: float, happened: float | None, gone_unseen: bool
    ) -> tuple[list[PodRelist], Refresh[S] | None, bool | None]:
        """An event at ``now``: for pod ``uid`` (None: it names no pod the snapshot lists),
        that happened at wall time ``happened``; ``gone_unseen``: it reports the removal of
        something no pod of the snapshot holds (nothing to do). Returns ``(relists to start,
        full refresh to start, whether a full refresh was scheduled: None when none was asked
        for)``: the pod's relist (``pod_hint``), else a full listing (``hint``)."""
        if uid is not None:
            relists, full = self.pod_hint(uid, now, happened)
            return relists, full, None
        if gone_unseen:
            return [], None, None
        full, scheduled = self.hint(now)
        return [], full, scheduled

    def pod_complete(
        self, relist: PodRelist, pod: Pod | None, error: BaseException | None, now: float
    ) -> tuple[list[PodRelist], Refresh[S] | None]:
        """Record how ``relist`` ended: its pod enters the snapshot (``published`` is set) unless
        its data is older than the snapshot's for that pod; a failure asks for a full listing.
        Returns ``(relists to start now, full refresh to start)``."""
        relists = self.pod_relists
        full: Refresh[S] | None = None
        if error is not None:
            relists.failed += 1
            full = self.hint(now)[0]
        elif relists.keeps(relist):
            self._store_pod(relist, pod, now)
        return relists.finish(relist, now), full

    def pod_arm(self, now: float) -> float | None:
        """Seconds after which the driver must call ``pod_fire``: pods wait for the relists'
        budget with a slot free and no timer is armed for that time; else None."""
        return self.pod_relists.arm(now)

    def events_closed(self) -> Refresh[S] | None:
        """The event subscription was closed: the relists not begun are forgotten (hints, left
        to the period as every change after the close is), and so is a queued refresh that
        only hints asked for (no reader waits for it; it would wait for the event budget, ten
        times the last listing). That refresh is returned: the driver releases its signal."""
        self.pod_relists.forget_pending()
        queued = self.queued
        if queued is None or queued.forced or queued.routine:
            return None
        self.queued = None
        self.timer_at = NEVER
        return queued

    def pod_fire(self, now: float) -> tuple[list[PodRelist], float | None]:
        """The driver's relist timer ended at ``now``: ``(relists to start, seconds to arm
        again)``."""
        return self.pod_relists.fire(now)

    def _store_pod(self, relist: PodRelist, pod: Pod | None, now: float) -> None:
        current, timestamp, until = self.snapshot
        assert current is not None
        relists = self.pod_relists
        listing = math.inf if self.inflight is None else self.inflight.order
        was = self.changes.state_of(relist.uid)  # O(1); no table of the snapshot built
        if was is not None and pod is not None and was == pod:
            relists.record(relist, was, listing)  # unchanged: the same object stays
            return
        if was is None and pod is None:
            relists.record(relist, None, listing)
            return
        pods, changes = self.changes.publish_pod(replace_pod(current, was, pod), was, pod, now)
        self.snapshot = (pods, timestamp, until)
        relists.record(relist, pod, listing)
        self.published = Publication(pods, pods.revision, tuple(changes), timestamp, relist.uid)

    # -- internals -----------------------------------------------------------------------
    def _new_refresh(self) -> Refresh[S]:
        return Refresh(self._new_signal())

    def _join(self, refresh: Refresh[S], forced: bool) -> Refresh[S]:
        refresh.need(forced)
        self.joins += 1
        return refresh

    def _start_or_defer(
        self, now: float, forced: bool
    ) -> tuple[PodList | None, Refresh[S] | None, bool]:
        """Nothing in flight: start a refresh now, unless the rate limit defers a forced one."""
        queued = self.queued
        if queued is None:
            if not (forced and now < self.forced_due()):
                refresh = self._new_refresh()
                refresh.need(forced)
                return None, self._begin(refresh, now), True
            queued = self.queued = self._new_refresh()
        self._join(queued, forced)
        if now < self.due(queued):
            return None, queued, False
        # Its time has come, or a routine caller starts it: the waiting callers ride along.
        self.queued = None
        return None, self._begin(queued, now), True

    def _start_queued(self, now: float) -> Refresh[S] | None:
        """Begin the queued refresh, unless it is forced only and its time has not come."""
        queued = self.queued
        if queued is None or now < self.due(queued):
            return None
        self.queued = None
        return self._begin(queued, now)

    def _begin(self, refresh: Refresh[S], now: float) -> Refresh[S]:
        refresh.started_at = now
        refresh.order = self.pod_relists.start()
        if refresh.forced:
            self.last_forced_start = now
        self.inflight = refresh
        return refresh


class CoreReadings(Generic[S]):
    """What both drivers answer straight from their core, without a lock: a base class."""

    _core: FreshnessCore[S]

    @property
    def cache_time(self) -> float | None:
        """Clock reading taken just before the fetch that produced the cached pods."""
        return self._core.cache_time

    @property
    def cache_period(self) -> float:
        """The period in seconds."""
        return self._core.period
