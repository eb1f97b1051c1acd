"""The relist scheduling both cache drivers share, without I/O: what to start after a full
listing or a relist of one pod ended, after a timer fired, and after the event subscription
said something (docs/architecture.md §3, §7).

Each step asks the freshness core, keeps the departed keys and the subscription up to date,
runs the driver's publish step, and returns a ``Start``, which the driver only carries out.

Rules:

1. A step reads the clocks once each and asks the core in the order the core's invariants
   name (the outcome, then ``arm``, then ``pod_arm``); the driver arms and starts only after
   the step returned (the thread driver releases its lock first).
2. The thread driver calls every step under its lock; the asyncio driver on its loop, with no
   await inside a step. Nothing here blocks or waits.
3. Departed keys are settled only from a successful call, and only after its snapshot was
   published (the publish hooks see the keys a publish took first).

Deliberately not here: calling the getter, threads, tasks, timers, and the hit path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, TypeVar

from podcache.cache.core import FreshnessCore, Refresh
from podcache.cache.departed import Departed
from podcache.cache.events import Signal, Step, Subscription
from podcache.cache.podrelists import PodRelist
from podcache.cache.publishing import Hooks, Publication
from podcache.cache.shared import event_pod, event_time, gone_unseen
from podcache.model import Pod, PodList

__all__ = ["Scheduling", "Start"]

S = TypeVar("S")


class Start(NamedTuple, Generic[S]):
    """What a driver starts after a step: a full listing, relists of one pod, the refresh
    timer's and the relist timer's delays (None: arm nothing), and ``wake``: the subscriber
    may ask the runtime for events again now (the runtime answered)."""

    full: Refresh[S] | None = None
    relists: Sequence[PodRelist] = ()
    delay: float | None = None
    pod_delay: float | None = None
    wake: bool = False


class Scheduling(Generic[S]):
    """The steps of one cache (see the module rules). ``published``: the driver's publish step
    (hit path, watches), run after each outcome the core stores, after the hooks;
    ``relists_pods``: the getter relists one pod (else every event asks for a full listing)."""

    def __init__(
        self,
        core: FreshnessCore[S],
        departed: Departed,
        clock: Callable[[], float],
        wall: Callable[[], float],
        published: Callable[[], None],
        *,
        relists_pods: bool,
    ) -> None:
        self._core = core
        self._departed = departed
        self._clock = clock
        self._wall = wall
        self._published = published
        self._relists_pods = relists_pods
        self.subscription: Subscription | None = None
        """The event subscription, once the driver made one."""
        self.hooks = Hooks()
        """The cache's publish hooks, the departed keys' first, so later hooks find them."""
        self.hooks.add(self.record_departures)

    def record_departures(self, publication: Publication) -> None:
        """The cache's own publish hook: the keys the publish took from pods are released now."""
        self._departed.record(publication.changes, self._wall())

    def listed(
        self, refresh: Refresh[S], pods: PodList | None, error: BaseException | None
    ) -> Start[S]:
        """A full listing ended (``pods``, or ``error``): store it, and what now."""
        now = self._clock()
        queued = self._core.complete(refresh, pods, error, now)
        delay = self._core.arm(now)
        self._publish()
        listed = self._core.snapshot[0]
        if pods is not None and listed is not None:  # what events reported and it no longer lists
            self._departed.settle(None, listed, refresh.started_wall, self._wall())
        subscription = self.subscription
        wake = subscription is not None and subscription.refresh_done(error is None)
        return Start(full=queued, delay=delay, wake=wake)

    def relisted(self, relist: PodRelist, pod: Pod | None, error: BaseException | None) -> Start[S]:
        """A relist of one pod ended (``pod``, None when it is gone, or ``error``): store it, and
        what now (``relists``: those the core asks for next, in order)."""
        now = self._clock()
        following, full = self._core.pod_complete(relist, pod, error, now)
        delay = self._core.arm(now)
        pod_delay = self._core.pod_arm(now)
        self._publish()
        if error is None:  # what events reported of the pod and it no longer holds left
            self._departed.settle(relist.uid, pod, relist.started_wall, self._wall())
        return Start(full=full, relists=following, delay=delay, pod_delay=pod_delay)

    def _publish(self) -> None:
        """The hooks with what the core stored, if anything, then the driver's publish step
        (docs/architecture.md §3 rule 10)."""
        published = self._core.take_published()
        if published is not None:
            self.hooks.run(published)
        self._published()

    def fired(self) -> Start[S]:
        """The refresh timer ended: the refresh its time came for, and when to look again."""
        refresh, again = self._core.fire(self._clock())
        return Start(full=refresh, delay=again)

    def pods_fired(self) -> Start[S]:
        """The relist timer ended: the relists the budget lets start, and when to look again."""
        relists, again = self._core.pod_fire(self._clock())
        return Start(relists=relists, pod_delay=again)

    def event(self, event: object) -> tuple[Step, Start[S]]:
        """One event of the subscription: its pod relisted when the getter can and the event
        names one, else a full listing asked for (``signal``)."""
        self._departed.observe(event, self._core.snapshot[0], self._wall())
        if not self._relists_pods:
            return self.signal(Signal.EVENT)
        subscription = self.subscription
        assert subscription is not None
        step = subscription.on(Signal.EVENT)
        if step is not Step.REFRESH:
            return step, Start()
        now = self._clock()
        uid = event_pod(event, self._core.snapshot[0])
        happened = event_time(event, self._wall())
        relists, full, scheduled = self._core.on_event(uid, now, happened, gone_unseen(event))
        if scheduled is not None:
            subscription.counted_refresh(scheduled)
        start = Start(full, relists, self._core.arm(now), self._core.pod_arm(now))
        return step, start

    def signal(self, signal: Signal, cause: str | None = None) -> tuple[Step, Start[S]]:
        """Tell the subscription what happened (``cause``: what failed), and the refresh it
        asks for."""
        subscription = self.subscription
        assert subscription is not None
        step = subscription.on(signal, cause)
        if step is not Step.REFRESH:
            return step, Start()
        now = self._clock()
        refresh, scheduled = self._core.hint(now)
        delay = self._core.arm(now)  # one waiting for the event budget
        subscription.counted_refresh(scheduled)
        return step, Start(full=refresh, delay=delay)
