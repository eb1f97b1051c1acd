"""RuntimeCache: the freshness core driven by threads. It waits; the core decides.

Hits take no lock (docs/architecture.md §3 rule 7); misses take a short lock to ask the core,
never across the getter call. A caller without a timeout runs the getter in its own thread;
with one the getter runs in a daemon thread, so the caller can stop waiting (rule 8).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Generic, NamedTuple, Protocol, Self, TypeVar, overload

from podcache.cache.core import Refresh, Snapshot
from podcache.cache.departed import (
    Found,
    epoch_seconds,
    lookup_key,
)
from podcache.cache.driving import Driving
from podcache.cache.events import Signal, Step, Subscription
from podcache.cache.pids import PodProcess, lookup_pod, sync_probe
from podcache.cache.podrelists import PodRelist
from podcache.cache.scheduling import Start
from podcache.cache.shared import (
    Events,
    EventStream,
    PodGetter,
    check_timeout,
    endpoint_name,
    events_wanted,
)
from podcache.cache.watching import PodWatch, ThreadRefresher, WatchHost
from podcache.model import PodList

__all__ = ["POD_WORKER_IDLE", "GetPods", "PodGetter", "RuntimeCache"]

POD_WORKER_IDLE = 10.0
"""Seconds a relist worker waits for the next relist before it ends (a quiet node keeps no
thread for them)."""


class GetPods(Protocol):
    """The signature of ``RuntimeCache.get_pods``: what callers may pass, what mypy checks."""

    def __call__(self, *, timeout: float | None = None) -> PodList: ...


F = TypeVar("F")


class PerInstance(Generic[F]):
    """A method whose body each instance sets in ``__init__``; the class holds its docs and type.

    A non-data descriptor: attribute lookup finds the instance's own function first, so the
    descriptor costs a call nothing. Read on the class it is itself (``help()`` shows the
    docstring); read on an instance that never set it, it fails naming the attribute. mypy types
    ``instance.name`` as ``F`` and checks what ``__init__`` assigns against ``F``.
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self._name = "?"

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = f"{owner.__name__}.{name}"

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, instance: object, owner: type[Any]) -> F: ...
    def __get__(self, instance: object, owner: type[Any]) -> Self | F:
        if instance is None:
            return self
        raise AttributeError(f"{self._name} is set by __init__, which did not run")


class HitPath(NamedTuple):
    """The lock-free ``get_pods`` of one cache, and the functions that share its cells.

    Its shape is measured (benchmarks/bench_hit.py): a closure reading two cells (pods, then
    ``fresh_until``), compared with the clock, and a positional-or-keyword ``timeout`` (cheaper
    to fill than a keyword-only one) while its declared type, ``GetPods``, keeps it
    keyword-only.
    """

    get_pods: GetPods
    publish: Callable[[Snapshot], None]
    """Make a new snapshot the one hits serve (called under the cache's lock)."""
    read_hits: Callable[[], int]
    """Hits served so far (counted only when built with ``count_hits``)."""
    get_pods_nowait: Callable[[], PodList | None]
    """The hit alone: the pods a hit serves now, else None (never the slow path)."""


_UNFILLED = PodList()
"""What the hit path's pods cell holds before the first fill: never served, since ``until`` is
then ``-inf`` (the cell holds a ``PodList`` so the hit needs no cast or None check)."""


def make_hit_path(
    clock: Callable[[], float],
    snapshot: Snapshot,
    slow: Callable[[float | None], PodList],
    count_hits: bool,
) -> HitPath:
    """The lock-free ``get_pods`` as a closure (docs/architecture.md §3 rule 7: pods stored
    before ``fresh_until``, read after it), with its ``publish`` and hit-count reader."""
    pods = _UNFILLED if snapshot[0] is None else snapshot[0]
    until = snapshot[2]
    hits = 0

    def get_pods(timeout: float | None = None) -> PodList:
        if clock() <= until:
            return pods
        return slow(timeout)

    def get_pods_counted(timeout: float | None = None) -> PodList:
        nonlocal hits
        if clock() <= until:
            hits += 1  # exact under the GIL (no call between load and store)
            return pods
        return slow(timeout)

    def publish(new: Snapshot) -> None:
        nonlocal pods, until
        pods = _UNFILLED if new[0] is None else new[0]
        until = new[2]

    def read_hits() -> int:
        return hits

    def get_pods_nowait() -> PodList | None:
        nonlocal hits
        if clock() <= until:
            if count_hits:
                hits += 1
            return pods
        return None

    get = get_pods_counted if count_hits else get_pods
    return HitPath(get, publish, read_hits, get_pods_nowait)


def _timer(delay: float | None, fire: Callable[[], None], name: str) -> None:
    """Call ``fire`` in a daemon timer thread after ``delay`` seconds (None: never)."""
    if delay is not None:
        timer = threading.Timer(delay, fire)
        timer.name = name
        timer.daemon = True
        timer.start()


class RuntimeCache(Driving[threading.Event, PodGetter]):
    """A bounded-staleness cache of ``getter.get_pods(all)`` for threads (``all=False``, the
    default: the kubelet's running view; ``all=True``: NotReady sandboxes and exited
    containers too, a relist of one pod and a PID's probe asking the same).

    ``get_pods`` returns pods fetched at most ``cache_period`` before the call (strictly
    greater is expired); ``force_update_if_older(t)`` makes sure the cache holds pods fetched
    from ``t`` on. One getter call at most is in flight; callers that need the same refresh
    share it and receive the same immutable ``PodList`` (docs/architecture.md §3).

    ``events="auto"`` (or True; ``"on"``: the getter must offer them, else a TypeError;
    default ``False``, ``"off"``): when the getter offers ``container_events()``, a
    background thread keeps a subscription to the runtime's container events, and every
    event starts a background refresh (coalesced; §7). End it with ``close()`` or a ``with``
    block; a cache without events needs neither.
    """

    _new_signal = threading.Event

    def _init_driver(self, getter: PodGetter, count_hits: bool) -> None:
        """The lock, the watches' parts, the hit path, the PID probe and the relist workers."""
        self._lock = self._guard = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified at every publish
        self._refresher, self._watch_host = self._watch_parts()
        self._init_hit_path(count_hits)
        self._probe = sync_probe(getter, self._all)  # pod_of_pid's way to ask about one container
        self._init_pod_relists()

    def _init_hit_path(self, count_hits: bool) -> None:
        """The lock-free ``get_pods`` and the functions sharing its cells (``make_hit_path``).
        Counting hits is opt-in so the default hit path stays one read, one clock call."""
        hit_path = make_hit_path(self._clock, self._core.snapshot, self._get_slow, count_hits)
        self.get_pods = hit_path.get_pods
        self._publish = hit_path.publish
        self._hits = hit_path.read_hits
        self._nowait = hit_path.get_pods_nowait

    def _init_events(self, events: Events, getter: PodGetter) -> None:
        """The event subscription's parts, and its thread when events are wanted."""
        self._subscription: Subscription | None = None
        self._stream: EventStream | None = None
        self._closing = threading.Event()
        self._wake = threading.Event()
        self._subscriber: threading.Thread | None = None
        if events_wanted(events, getter):
            self._subscribe(getter, self._clock)

    def _init_pod_relists(self) -> None:
        """The relists of one pod (§7): their job queue and the relist workers' counts."""
        self._pod_jobs: queue.SimpleQueue[PodRelist] = queue.SimpleQueue()
        self._pool_lock = threading.Lock()  # the workers' counts (never held with _lock)
        self._pod_workers = 0
        self._pod_busy = 0

    def _watch_parts(self) -> tuple[ThreadRefresher, WatchHost]:
        """The watches' refresher and host: what ``cache.watching`` may reach of this cache."""
        refresher = ThreadRefresher(self._refresh_host(self.force_update_if_older))
        host = WatchHost(
            self._core.changes,
            self._lock,
            self._changed,
            self._fill,
            self._watch_opened,
            self._watch_closed,
        )
        return refresher, host

    def _subscribe(self, getter: PodGetter, clock: Callable[[], float]) -> None:
        """Start the event subscription's thread (``events=True`` over a getter with events)."""
        self._subscription = Subscription(endpoint_name(getter), clock)
        self._steps.subscription = self._subscription
        self._subscriber = threading.Thread(
            target=self._subscribe_forever, name="podcache-events", daemon=True
        )
        self._subscriber.start()

    # -- public API --------------------------------------------------------------------------
    get_pods: PerInstance[GetPods] = PerInstance(
        """Pods fetched at most ``cache_period`` before this call; refreshes when older.

        ``get_pods(*, timeout=None) -> PodList``. Raises the getter's exception unchanged when
        the refresh fails, and ``TimeoutError`` when ``timeout`` seconds pass first (the refresh
        then carries on for others). Each instance's is the closure ``make_hit_path`` builds.
        """
    )

    def get_pods_nowait(self) -> PodList | None:
        """The pods ``get_pods`` would return at once, without waiting or starting a refresh;
        None when it would have to. A snapshot returned counts as a hit, as in ``get_pods``."""
        return self._nowait()

    def force_update_if_older(
        self, min_expected_cache_time: float, *, timeout: float | None = None
    ) -> None:
        """Refresh unless the cache holds pods fetched at or after ``min_expected_cache_time``."""
        _, refresh, start = self._plan(timeout, min_expected_cache_time)
        if refresh is not None:
            self._await(refresh, start, timeout)
            if refresh.error is not None:
                raise refresh.error

    def pod_of_pid(
        self, pid: int, *, proc_root: str = "/proc", timeout: float | None = None
    ) -> PodProcess | None:
        """The pod and container of process ``pid`` (``podcache.procs``), None when it is in no
        container the runtime lists; ProcessLookupError when there is no such process.

        When the container is not in the snapshot and the snapshot predates the process, the
        cache asks the runtime about that container alone when the getter offers ``get_pod``
        and ``pod_uid_of`` (the CRI getters do; an ID the runtime does not list is remembered
        for ``pids.UNKNOWN_FOR`` seconds), else it refreshes (at most once) and looks again
        (docs/architecture.md §9 rules 6-7: the process's start goes onto the cache's clock,
        exact for the default ``time.monotonic``; a custom clock is taken to count real
        seconds).
        """
        return lookup_pod(
            self,
            self._clock,
            pid,
            proc_root=proc_root,
            timeout=timeout,
            probe=self._probe,
            unknown=self._unknown,
        ).process

    def find(
        self,
        *,
        container_id: str | None = None,
        uid: str | None = None,
        ip: str | None = None,
        at: float | datetime | None = None,
        timeout: float | None = None,
    ) -> Found | None:
        """The pod holding one key (a container or sandbox ID, ``type://id``, bare, or a unique
        prefix of at least 4 characters; a UID; an IP): from the current snapshot (as
        ``get_pods`` returns it) first, then from the keys listed pods stopped holding in the
        last ``departed_for`` seconds (a pod that left, a container that exited or was
        removed; at most ``departed_max`` keys). ``at`` (epoch seconds or an aware datetime):
        the pod that held the key at that moment (its holding runs from its sandbox's creation
        to ``Found.held_until``). None when nobody did; AmbiguousContainerIDError for a prefix
        of several listed or remembered IDs (docs/architecture.md §3 rule 12)."""
        key = lookup_key(container_id, uid, ip)
        moment = epoch_seconds(at)
        pods = self.get_pods(timeout=timeout)
        with self._lock:
            return self._departed.find(pods, key, moment, self._wall())

    def close(self, timeout: float = 5.0) -> None:
        """End the event subscription (waiting at most ``timeout`` s for its thread) and stop the
        watch refresher. Idempotent; the cache still serves readers afterwards, by its period."""
        self._closing.set()
        self._wake.set()
        with self._lock:
            stream = self._stream
            if self._subscription is not None:
                self._subscription.on(Signal.CLOSE)
                dropped = self._core.events_closed()
                if dropped is not None:
                    dropped.signal.set()  # nobody waits for it (core)
            self._refresher.stop()  # open watches go on, refreshed by readers only
        if stream is not None:
            stream.close()
        if self._subscriber is not None and self._subscriber is not threading.current_thread():
            self._subscriber.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def watch(self, since: int | None = None) -> PodWatch:
        """The pods' changes as they are published: an iterator of ``PodChange``.

        ``since`` None: an ``ADDED`` for every pod of the current snapshot (refreshed first if
        older than the period), at its revision, then every change after it. ``since=r``:
        exactly the changes after revision ``r``. ``ResyncRequiredError`` when ``r`` is older
        than the history kept (``history=``) or newer than the cache's revision, or when the
        watcher falls more than ``max_lag`` changes behind: list again, watch from the list's
        revision. While a watch is open the cache refreshes itself every period.
        """
        return PodWatch(self._watch_host, since)

    def _fill(self) -> PodList:
        """``get_pods()``, a watch's ``WatchHost.fill`` (``get_pods`` is set after the hosts)."""
        return self.get_pods()

    # -- internals ---------------------------------------------------------------------------
    def _plan(
        self, timeout: float | None, need: float | None = None
    ) -> tuple[PodList | None, Refresh[threading.Event] | None, bool]:
        """``FreshnessCore.plan`` for a miss (``need``: a forced caller's), its timer armed."""
        check_timeout(timeout)
        with self._lock:
            now = self._clock()
            plan = self._core.plan(now, need)
            delay = self._core.arm(now)
        self._arm(delay)
        return plan

    def _get_slow(self, timeout: float | None) -> PodList:
        pods, refresh, start = self._plan(timeout)
        if pods is not None:
            if refresh is not None:  # refresh-ahead: readers keep the current pods meanwhile
                self._spawn(refresh)
            return pods
        assert refresh is not None
        self._await(refresh, start, timeout)
        if refresh.error is not None:
            if self._core.max_stale is not None:  # stale-if-error: the last pods, if young enough
                with self._lock:
                    stale = self._core.stale_fallback(self._clock())
                if stale is not None:
                    return stale
            raise refresh.error
        assert refresh.pods is not None
        return refresh.pods

    def _await(self, refresh: Refresh[threading.Event], start: bool, timeout: float | None) -> None:
        """Run ``refresh`` if ``start``, then wait for it to end, at most ``timeout`` seconds."""
        if start:
            if timeout is None:
                self._run(refresh)
            else:
                self._spawn(refresh)
        if not refresh.signal.wait(timeout):
            raise TimeoutError(
                f"runtime cache refresh did not complete within {timeout} s "
                "(it continues in the background)"
            )

    def _spawn(self, refresh: Refresh[threading.Event]) -> None:
        threading.Thread(
            target=self._run, args=(refresh,), name="podcache-refresh", daemon=True
        ).start()

    def _arm(self, delay: float | None) -> None:
        """After ``delay`` seconds, ask the core whether the queued refresh may start."""
        _timer(delay, self._fire, "podcache-refresh-timer")

    def _fire(self) -> None:
        with self._lock:
            start = self._steps.fired()
        self._arm(start.delay)
        if start.full is not None:
            self._run(start.full)

    def _run(self, refresh: Refresh[threading.Event]) -> None:
        """Call the getter for ``refresh``, record the outcome, start any queued refresh."""
        pods: PodList | None = None
        error: BaseException | None = None
        refresh.started_wall = self._wall()  # §7 rule 4: events before it need no relist
        try:
            pods = self._getter.get_pods(self._all)
            if not isinstance(pods, PodList):
                pods = PodList(pods)
        except BaseException as exc:  # every outcome must reach the waiters, even ^C
            error = exc
        with self._lock:
            start = self._steps.listed(refresh, pods, error)
        if start.wake:
            self._wake.set()  # the runtime is back: ask it for events again now
        refresh.signal.set()
        self._start(start)
        if error is not None and not isinstance(error, Exception):
            raise error

    def _start(self, start: Start[threading.Event]) -> None:
        """Arm the timers and start the refreshes a step asked for (outside the lock)."""
        self._arm(start.delay)
        self._arm_pods(start.pod_delay)
        self._spawn_pods(start.relists)
        if start.full is not None:
            self._spawn(start.full)

    def _published(self) -> None:
        """Under the lock, after the core stored a snapshot and the hooks ran: the hit path and
        the watches."""
        self._publish(self._core.snapshot)
        self._changed.notify_all()

    # -- relists of one pod (docs/architecture.md §7) ----------------------------------------
    def _spawn_pods(self, relists: Sequence[PodRelist]) -> None:
        """Hand each of ``relists`` to a relist worker, starting one when none is free (at most
        ``podrelists.MAX_IN_FLIGHT`` run: the core never has more relists in flight)."""
        for relist in relists:
            self._pod_jobs.put(relist)
            with self._pool_lock:
                if self._pod_workers - self._pod_busy >= self._pod_jobs.qsize():
                    continue
                self._pod_workers += 1
            thread = threading.Thread(
                target=self._pod_worker, name="podcache-pod-relist", daemon=True
            )
            thread.start()

    def _arm_pods(self, delay: float | None) -> None:
        """After ``delay`` seconds, ask the core which waiting relists the budget lets start."""
        _timer(delay, self._fire_pods, "podcache-relist-timer")

    def _fire_pods(self) -> None:
        with self._lock:
            start = self._steps.pods_fired()
        self._start(start)

    def _pod_worker(self) -> None:
        """Run relists as they come, and the one each asks for next in the slot it frees;
        end after ``POD_WORKER_IDLE`` seconds without one. A worker leaves the count in the
        same locked step as it sees the queue empty, so a relist queued meanwhile always
        finds a worker or starts one."""
        counted = True
        try:
            while True:
                try:
                    relist: PodRelist | None = self._pod_jobs.get(timeout=POD_WORKER_IDLE)
                except queue.Empty:
                    with self._pool_lock:
                        if self._pod_jobs.empty():
                            self._pod_workers -= 1
                            counted = False
                            return
                    continue
                with self._pool_lock:
                    self._pod_busy += 1
                try:
                    while relist is not None:
                        relist = self._run_pod(relist)
                finally:
                    with self._pool_lock:
                        self._pod_busy -= 1
        finally:
            if counted:  # ended by an exception (^C in a relist)
                with self._pool_lock:
                    self._pod_workers -= 1

    def _run_pod(self, relist: PodRelist) -> PodRelist | None:
        """Relist one pod, store what came back, start what the core asks for next (a full
        listing in a thread of its own); returns the relist to run next in this slot."""
        pod = None
        error: BaseException | None = None
        relist.started_wall = self._wall()
        try:
            pod = self._getter.get_pod(relist.uid, self._all)  # type: ignore[attr-defined]
        except BaseException as exc:  # a failure asks for a full listing, even ^C
            error = exc
        with self._lock:
            start = self._steps.relisted(relist, pod, error)
        following = start.relists
        self._start(start._replace(relists=following[1:]))
        if error is not None and not isinstance(error, Exception):
            raise error
        return following[0] if following else None

    # -- the event subscription (thread) -------------------------------------------------------
    def _subscribe_forever(self) -> None:
        """Open a stream, read it until it fails, wait as told, again; until ``close()``."""
        assert self._subscription is not None
        while not self._closing.is_set():
            step = self._subscribe_once()
            if step is Step.STOP or self._closing.is_set():
                return
            with self._lock:
                delay = self._subscription.delay(step)
            self._wake.wait(delay)
            self._wake.clear()

    def _subscribe_once(self) -> Step:
        """One stream, from opening to its end: the step the subscription asks for then."""
        stream: Any = None
        try:
            stream = self._getter.container_events()  # type: ignore[attr-defined]
            with self._lock:
                self._stream = stream
            if self._closing.is_set():
                return Step.STOP
            stream.open()
            step = self._signal(Signal.OPENED)
            for event in stream:
                step = self._event(event)
                if step is Step.STOP:
                    return step
            return self._stream_ended(self._closing.is_set())
        except Exception as exc:
            return self._stream_failed(stream, exc, self._closing.is_set())
        finally:
            with self._lock:
                self._stream = None
            if stream is not None:
                stream.close()
