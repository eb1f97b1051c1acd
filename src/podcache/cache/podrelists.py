"""Relists of one pod: which to start, which to drop, and how a pod enters a snapshot; no I/O.

The freshness core owns one ``PodRelists`` and asks it, under the driver's mutual exclusion,
what an event for a pod starts and what a finished relist does (docs/architecture.md §7
rules 1-5). The rules, from the inside:

Invariants
----------
1. For each pod at most one relist is in flight and at most one more is pending (queued
   behind it, or waiting for a slot and the budget); at most ``MAX_IN_FLIGHT`` are in flight
   in all.
2. Every call (a relist of one pod, a full listing) gets a *start number* when it begins
   (``start``): calls begin under the driver's mutual exclusion, so the numbers are their true
   order, also when the clock did not move between two starts. ``fetched[uid]`` is the start
   number of the relist that brought the snapshot's data for a pod relisted after the last
   full listing began, with that data; a pod not in it came with the last full listing. A
   relist that began before its pod's data was fetched is dropped: a pod's data never goes
   back in time.
3. A full listing keeps every pod relisted after it began (``merge``); entries from before it
   are forgotten. Between full listings ``fetched`` holds the pods the snapshot holds, plus
   pods a relist found gone that a full listing in flight began before, plus at most
   ``GONE_KEPT`` more, the oldest forgotten first. A pending pod whose last event came before
   the listing began is no longer pending: the listing holds its change.
4. An event that happened (``happened``: the runtime's ``created_at``, wall clock seconds)
   before the call that fetched its pod's data began, or before the relist in flight for it
   began (each call's ``started_wall``, read by the driver just before it calls the runtime),
   needs no relist (docs/architecture.md §7 rule 4). An event without a time counts as
   happening when it arrived.
5. More than ``MAX_PENDING`` pods pending is a storm: the pending ones are forgotten and one
   full listing is asked for instead (the relists in flight finish).
6. **The budget** (§7 rule 7). A ledger, ``budget_at``, never moves backward; a relist begins
   only at or after it, and then moves it to ``now + (1 + EVENT_BUDGET) * charged``,
   ``charged`` being the last relist's duration (its estimate of this one); when it ends after
   taking ``d > charged`` the ledger moves on by ``(1 + EVENT_BUDGET) * (d - charged)``, failed
   relists too. So for any two relists begun at ``s_j <= s_k``, ``s_k - s_j >= (1 +
   EVENT_BUDGET) *`` the durations of the relists begun in between (those still in flight
   counted at their charge). While a relist has been in flight for any time on the clock,
   none begins. Pods waiting for the budget are coalesced (one entry each, in the order their
   first event came); a pod whose relist ends with one more pending goes to the back. Every
   pending pod is relisted by a call that begins after its last event (its own relist, or a
   full listing: invariants 3 and 5): the end of a relist starts the next, and while pods wait
   with none running the driver's timer is armed for ``budget_at`` (``arm``, ``fire``).

Costs: an event is O(1); a finished relist O(log n) to find the pod's place, plus one copy of
the tuple of pointers (C speed: no pod is read); a full listing O(relisted + pending) on top of
its own O(n). Nothing here walks the pods per change.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from dataclasses import dataclass, field

from podcache.cache.changes import getter_order
from podcache.model import Pod, PodList, derive

__all__ = [
    "EVENT_BUDGET",
    "GONE_KEPT",
    "MAX_IN_FLIGHT",
    "MAX_PENDING",
    "PodRelist",
    "PodRelists",
    "merge",
    "replace_pod",
]

EVENT_BUDGET = 9.0
"""Work that only events ask for waits this many times its last duration (invariant 6 here,
``cache.core`` invariant 6 for full listings): it uses at most 1 / (1 + EVENT_BUDGET) of the
time, a tenth."""
MAX_IN_FLIGHT = 8
"""Most relists of single pods in flight at once, over all pods."""
MAX_PENDING = 256
"""Most pods waiting for a relist (behind their own or for a slot) before one full listing is
asked for instead (invariant 5)."""
GONE_KEPT = 1_024
"""Pods a relist found gone whose ``fetched`` entry is kept beyond those a full listing in
flight needs (invariant 3)."""

_SHARE = 1.0 + EVENT_BUDGET
"""A relist of duration ``d`` moves the ledger by ``_SHARE * d`` (invariant 6)."""
_NEVER = -math.inf


@dataclass(slots=True, eq=False)
class PodRelist:
    """One ``get_pod(uid)`` call: for which pod, when it began (the core's clock), its start
    number (invariant 2) and the duration the budget charged for it as it began (invariant 6)."""

    uid: str
    started_at: float
    order: int
    charged: float = 0.0
    started_wall: float = -math.inf
    """The wall clock just before the call (set by the driver; -inf until then)."""


@dataclass(slots=True)
class PodRelists:
    """The relists of single pods: in flight, pending, and the data they brought (invariant 2)."""

    inflight: dict[str, PodRelist] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)
    """Pods with a relist in flight that began too early for a later event: one more each,
    with the start numbers given when their last event came (``starts``: a call with a higher
    number began after it)."""
    waiting: dict[str, int] = field(default_factory=dict)
    """Pods with nothing in flight waiting for a slot or the budget, oldest first (a dict:
    ordered, O(1)), with the start numbers given when their last event came."""
    fetched: dict[str, tuple[int, Pod | None, float]] = field(default_factory=dict)
    """UID -> (the start number of the relist that fetched its data, the pod or None when the
    relist found it gone, the wall clock when that relist began), for pods relisted after the
    last full listing began."""
    gone: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """The pods of ``fetched`` a relist found gone, oldest first, with that relist's start
    number (invariant 3's bound)."""
    listed: int = -1
    """The start number of the last full listing stored."""
    listed_wall: float = -math.inf
    """When the last full listing stored began (the wall clock, read by its driver)."""
    starts: int = 0
    """Start numbers given so far."""
    max_in_flight: int = MAX_IN_FLIGHT
    max_pending: int = MAX_PENDING
    budget_at: float = _NEVER
    """The ledger (invariant 6): no relist begins before this clock reading."""
    last_duration: float = 0.0
    """The last relist's duration: what the next one is charged as it begins."""
    timer_at: float = _NEVER
    """When the driver's timer for the budget ends (``arm``), ``-inf`` when none is armed."""
    storm: bool = False
    """Set by ``hint`` when invariant 5 forgot the pending pods (the caller asks for a full
    listing, then clears it)."""
    completed: int = 0
    covered: int = 0
    """Events whose change a call made after it already held (invariant 4)."""
    dropped: int = 0
    failed: int = 0
    storms: int = 0

    def pending(self) -> int:
        """Pods waiting for a relist (queued behind their own, or for a slot or the budget)."""
        return len(self.queued) + len(self.waiting)

    def hint(self, uid: str, now: float, happened: float | None = None) -> list[PodRelist]:
        """An event for pod ``uid`` at ``now`` (the core's clock) that happened at wall time
        ``happened`` (None: unknown): the relists to start now (invariants 1, 4 and 6; the
        pods waiting longest go first)."""
        if happened is not None and happened < self.data_started(uid):
            self.covered += 1
            return []
        running = self.inflight.get(uid)
        if running is not None:
            if happened is not None and happened < running.started_wall:
                self.covered += 1
            elif running.started_at <= now:
                self.queued[uid] = self.starts
        else:
            self.waiting[uid] = self.starts  # a pod already waiting keeps its place
        if self.pending() > self.max_pending:
            self.queued.clear()
            self.waiting.clear()
            self.storm = True
            self.storms += 1
            return []
        return self.start_due(now)

    def finish(self, relist: PodRelist, now: float) -> list[PodRelist]:
        """``relist`` ended at ``now`` (its outcome recorded by the caller): charge its
        duration (invariant 6), send its pod's pending relist, if any, to the back of the
        waiting ones, and return the relists to start now."""
        del self.inflight[relist.uid]
        took = max(now - relist.started_at, 0.0)
        self.last_duration = took
        if took > relist.charged:
            self.budget_at += _SHARE * (took - relist.charged)
        mark = self.queued.pop(relist.uid, None)
        if mark is not None:
            self.waiting[relist.uid] = mark
        return self.start_due(now)

    def start_due(self, now: float) -> list[PodRelist]:
        """Begin the waiting relists that a slot and the budget allow at ``now``, oldest first."""
        started: list[PodRelist] = []
        waiting = self.waiting
        while waiting and len(self.inflight) < self.max_in_flight and self._may_begin(now):
            uid = next(iter(waiting))
            del waiting[uid]
            started.append(self._begin(uid, now))
        return started

    def arm(self, now: float) -> float | None:
        """Seconds after which the driver must call ``fire``, when pods wait for the budget
        with a slot free and no timer is armed for that time or sooner; else None."""
        if not self.waiting or len(self.inflight) >= self.max_in_flight or self._running(now):
            return None  # none waits for a timer: the end of a relist in flight starts them
        due = self.budget_at
        if self.timer_at != _NEVER and self.timer_at <= due:
            return None
        self.timer_at = due
        return max(due - now, 0.0)

    def fire(self, now: float) -> tuple[list[PodRelist], float | None]:
        """The driver's timer ended at ``now``: ``(relists to start now, seconds to arm
        again)`` (a timer on another clock may end early: it is armed again for the rest)."""
        self.timer_at = _NEVER
        started = self.start_due(now)
        return started, self.arm(now)

    def forget_pending(self) -> None:
        """The events ended (the cache closed its subscription): forget the pods waiting, which
        would otherwise start at the budget's pace after it; the relists in flight finish."""
        self.queued.clear()
        self.waiting.clear()

    def start(self) -> int:
        """The next start number (invariant 2): every call takes one as it begins."""
        self.starts += 1
        return self.starts

    def data_started(self, uid: str) -> float:
        """When (wall clock) the call that fetched the snapshot's data for pod ``uid`` began."""
        entry = self.fetched.get(uid)
        return self.listed_wall if entry is None else entry[2]

    def fetched_by(self, uid: str) -> int:
        """The start number of the call that fetched the snapshot's data for pod ``uid``."""
        entry = self.fetched.get(uid)
        return self.listed if entry is None else entry[0]

    def keeps(self, relist: PodRelist) -> bool:
        """Whether ``relist``'s data may replace its pod's (invariant 2); counts a drop."""
        if relist.order < self.fetched_by(relist.uid):
            self.dropped += 1
            return False
        return True

    def record(self, relist: PodRelist, pod: Pod | None, listing: float = math.inf) -> None:
        """``relist``'s data entered the snapshot; ``listing``: the start number of the full
        listing in flight (inf: none), which keeps the gone pods' entries it needs. O(1)
        amortised (invariant 3)."""
        uid = relist.uid
        self.fetched[uid] = (relist.order, pod, relist.started_wall)
        self.completed += 1
        gone = self.gone
        gone.pop(uid, None)
        if pod is None:
            gone[uid] = relist.order
        while len(gone) > GONE_KEPT:
            oldest, order = next(iter(gone.items()))
            if order > listing:
                break  # the listing in flight began before it: merge must remove that pod
            del gone[oldest], self.fetched[oldest]

    def after_listing(self, order: int, started_wall: float) -> dict[str, Pod | None]:
        """A full listing with start number ``order``, begun at wall time ``started_wall``,
        is being stored: the pods it must keep from relists that began after it (invariant
        3); the others are forgotten, and so are the pending pods whose last event came
        before it began (it holds their changes)."""
        self.listed = order
        self.listed_wall = started_wall
        kept = {uid: entry for uid, entry in self.fetched.items() if entry[0] > order}
        self.fetched = kept
        self.waiting = _marked_since(self.waiting, order)
        self.queued = _marked_since(self.queued, order)
        self.gone = OrderedDict((uid, n) for uid, n in self.gone.items() if uid in kept)
        return {uid: entry[1] for uid, entry in kept.items()}

    def _running(self, now: float) -> bool:
        """Whether a relist has been in flight since before ``now``: it is charged at least
        ``_SHARE`` times that as it ends, so nothing may begin before then (O(in flight))."""
        return any(relist.started_at < now for relist in self.inflight.values())

    def _may_begin(self, now: float) -> bool:
        """Whether the budget lets a relist begin at ``now`` (invariant 6)."""
        return now >= self.budget_at and not self._running(now)

    def _begin(self, uid: str, now: float) -> PodRelist:
        charged = self.last_duration
        self.budget_at = max(self.budget_at, now) + _SHARE * charged
        relist = self.inflight[uid] = PodRelist(uid, now, self.start(), charged)
        return relist


def _marked_since(marks: dict[str, int], order: int) -> dict[str, int]:
    """The pods of ``marks`` whose last event came at or after start number ``order`` (a
    listing with that number began before it), in their order."""
    if not marks:
        return marks
    return {uid: mark for uid, mark in marks.items() if mark >= order}


def _place(pods: tuple[Pod, ...], pod: Pod) -> int:
    """Where ``pod`` (this very object) is in ``pods``: by bisection in the getters' order,
    else (a getter with another order) by a scan in C."""
    at = bisect.bisect_left(pods, getter_order(pod), key=getter_order)
    while at < len(pods) and getter_order(pods[at]) == getter_order(pod):
        if pods[at] is pod:
            return at
        at += 1
    return pods.index(pod)


def _spliced(items: tuple[Pod, ...], start: int, end: int, pod: Pod) -> tuple[Pod, ...]:
    """``items`` with ``items[start:end]`` replaced by ``pod``. Concatenation copies each part's
    pointers in C; unpacking into a tuple display goes through a list first."""
    return items[:start] + (pod,) + items[end:]  # noqa: RUF005 -- concatenation is faster here


def replace_pod(pods: PodList, was: Pod | None, pod: Pod | None) -> PodList:
    """``pods`` with ``was`` (one of its pods, or None) replaced by ``pod`` (or None: removed),
    ``pod`` placed in the getters' order; the lookup tables already built are carried over,
    updated for the one pod (``model.derive``). One copy of the tuple of pointers."""
    items = pods.pods
    if was is None:
        assert pod is not None
        at = bisect.bisect_left(items, getter_order(pod), key=getter_order)
        return derive(pods, _spliced(items, at, at, pod), was, pod)
    gone = _place(items, was)
    if pod is None:
        return derive(pods, items[:gone] + items[gone + 1 :], was, pod)
    if getter_order(pod) == getter_order(was):  # a pod changed in place (the usual event)
        return derive(pods, _spliced(items, gone, gone + 1, pod), was, pod)
    rest = items[:gone] + items[gone + 1 :]
    at = bisect.bisect_left(rest, getter_order(pod), key=getter_order)
    return derive(pods, _spliced(rest, at, at, pod), was, pod)


def merge(listing: PodList, kept: dict[str, Pod | None]) -> PodList:
    """A full listing with the pods relisted after it began (``PodRelists.after_listing``) in
    place of its own: O(len(kept)) lookups and copies on top of the listing."""
    merged = listing
    for uid, pod in kept.items():
        was = merged.by_uid(uid)
        if was is pod or (was is not None and pod is not None and was == pod):
            continue
        merged = replace_pod(merged, was, pod)
    return merged
