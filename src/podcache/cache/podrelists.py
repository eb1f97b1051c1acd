"""Relists of one pod: which to start, which to drop, and how a pod enters a snapshot; no I/O.

The freshness core owns one ``PodRelists`` and asks it, under the driver's mutual exclusion,
what an event for a pod starts and what a finished relist does (docs/architecture.md §7
rules 1-5). The rules, from the inside:

Invariants
----------
1. For each pod at most one relist is in flight and at most one more is pending (queued
   behind it, or waiting for a slot); at most ``MAX_IN_FLIGHT`` are in flight in all.
2. Every call (a relist of one pod, a full listing) gets a *start number* when it begins
   (``start``): calls begin under the driver's mutual exclusion, so the numbers are their true
   order, also when the clock did not move between two starts. ``fetched[uid]`` is the start
   number of the relist that brought the snapshot's data for a pod relisted after the last
   full listing began, with that data; a pod not in it came with the last full listing. A
   relist that began before its pod's data was fetched is dropped: a pod's data never goes
   back in time.
3. A full listing keeps every pod relisted after it began (``merge``): the relist's data is
   newer than the listing's for that pod. Entries from before it are forgotten. Between full
   listings (none may run for hours when nobody reads) ``fetched`` holds the pods the snapshot
   holds, plus pods a relist found gone: of those, the entries a full listing in flight
   began before (it must not bring them back), and at most ``GONE_KEPT`` more, the oldest
   forgotten first (a forgotten one only stops covering its pod's late events, invariant 4).
4. An event that says when it happened (``happened``: the runtime's ``created_at``, wall
   clock seconds) before the call that fetched its pod's data began, or before the relist in
   flight for it began (each call's ``started_wall``, read by the driver just before it calls
   the runtime), needs no relist: that call's listing already holds the change (a runtime
   reports a change after making it). An event without a time counts as happening when it
   arrived. So a burst of
   events for one pod costs one relist, and old events a runtime replays to a new
   subscriber (containerd 2.x keeps them 5 minutes) cost none after the listing that
   (re)subscribing makes. A runtime that lies about its events' times only delays its own
   changes, by at most the period.
5. More than ``MAX_PENDING`` pods pending is a storm: the pending ones are forgotten and one
   full listing is asked for instead (the relists in flight finish).

Costs: an event is O(1); a finished relist O(log n) to find the pod's place, plus one copy of
the tuple of pointers (C speed: no pod is read); a full listing O(relisted) on top of its own
O(n). Nothing here walks the pods per change.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from dataclasses import dataclass, field

from podcache.model import Pod, PodList, derive

__all__ = [
    "GONE_KEPT",
    "MAX_IN_FLIGHT",
    "MAX_PENDING",
    "PodRelist",
    "PodRelists",
    "merge",
    "replace_pod",
]

MAX_IN_FLIGHT = 8
"""Most relists of single pods in flight at once, over all pods."""
MAX_PENDING = 256
"""Most pods waiting for a relist (behind their own or for a slot) before one full listing is
asked for instead (invariant 4)."""
GONE_KEPT = 1_024
"""Pods a relist found gone whose ``fetched`` entry is kept beyond those a full listing in
flight needs (invariant 3)."""


@dataclass(slots=True, eq=False)
class PodRelist:
    """One ``get_pod(uid)`` call: for which pod, when it began (the core's clock) and its start
    number (invariant 2)."""

    uid: str
    started_at: float
    order: int
    started_wall: float = -math.inf
    """The wall clock just before the call (set by the driver; -inf until then)."""


@dataclass(slots=True)
class PodRelists:
    """The relists of single pods: in flight, pending, and the data they brought (invariant 2)."""

    inflight: dict[str, PodRelist] = field(default_factory=dict)
    queued: set[str] = field(default_factory=set)
    """Pods with a relist in flight that began too early for a later event: one more each."""
    waiting: dict[str, None] = field(default_factory=dict)
    """Pods with nothing in flight waiting for a slot, oldest first (a dict: ordered, O(1))."""
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
    storm: bool = False
    """Set by ``hint`` when invariant 4 forgot the pending pods (the caller asks for a full
    listing, then clears it)."""
    completed: int = 0
    covered: int = 0
    """Events whose change a call made after it already held (invariant 4)."""
    dropped: int = 0
    failed: int = 0
    storms: int = 0

    def pending(self) -> int:
        """Pods waiting for a relist (queued behind their own, or for a slot)."""
        return len(self.queued) + len(self.waiting)

    def hint(self, uid: str, now: float, happened: float | None = None) -> PodRelist | None:
        """An event for pod ``uid`` at ``now`` (the core's clock) that happened at wall time
        ``happened`` (None: unknown): the relist to start now, if any (invariants 1 and 4)."""
        if happened is not None and happened < self.data_started(uid):
            self.covered += 1
            return None
        running = self.inflight.get(uid)
        if running is not None:
            if happened is not None and happened < running.started_wall:
                self.covered += 1
            elif running.started_at <= now:
                self.queued.add(uid)
        elif uid not in self.waiting:
            if len(self.inflight) < self.max_in_flight:
                return self._begin(uid, now)
            self.waiting[uid] = None
        if self.pending() > self.max_pending:
            self.queued.clear()
            self.waiting.clear()
            self.storm = True
            self.storms += 1
        return None

    def finish(self, relist: PodRelist, now: float) -> PodRelist | None:
        """``relist`` ended (its outcome recorded by the caller): the next relist to start in
        the slot it frees, if any: its own pod's queued one first, else the oldest waiting."""
        del self.inflight[relist.uid]
        if relist.uid in self.queued:
            self.queued.discard(relist.uid)
            return self._begin(relist.uid, now)
        if self.waiting:
            uid = next(iter(self.waiting))
            del self.waiting[uid]
            return self._begin(uid, now)
        return None

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
        3); the others are forgotten."""
        self.listed = order
        self.listed_wall = started_wall
        kept = {uid: entry for uid, entry in self.fetched.items() if entry[0] > order}
        self.fetched = kept
        self.gone = OrderedDict((uid, n) for uid, n in self.gone.items() if uid in kept)
        return {uid: entry[1] for uid, entry in kept.items()}

    def _begin(self, uid: str, now: float) -> PodRelist:
        relist = self.inflight[uid] = PodRelist(uid, now, self.start())
        return relist


def _order(pod: Pod) -> tuple[int, str]:
    """A runtime getter's order: newest first, ties by UID."""
    return (-pod.created_at, pod.id)


def _place(pods: tuple[Pod, ...], pod: Pod) -> int:
    """Where ``pod`` (this very object) is in ``pods``: by bisection in the getters' order,
    else (a getter with another order) by a scan in C."""
    at = bisect.bisect_left(pods, _order(pod), key=_order)
    while at < len(pods) and _order(pods[at]) == _order(pod):
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
        at = bisect.bisect_left(items, _order(pod), key=_order)
        return derive(pods, _spliced(items, at, at, pod), was, pod)
    gone = _place(items, was)
    if pod is None:
        return derive(pods, items[:gone] + items[gone + 1 :], was, pod)
    if _order(pod) == _order(was):  # a pod changed in place (the usual event)
        return derive(pods, _spliced(items, gone, gone + 1, pod), was, pod)
    rest = items[:gone] + items[gone + 1 :]
    at = bisect.bisect_left(rest, _order(pod), key=_order)
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
