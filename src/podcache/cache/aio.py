"""AsyncRuntimeCache: the freshness core driven by asyncio, the twin of ``RuntimeCache``.

Same decisions (the shared core), same method names; only the waiting differs. Each refresh
runs in its own task, so a caller that times out or is cancelled never cancels the refresh
others share. Bound to the event loop it is first used on; not for use from several threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Coroutine, Sequence
from datetime import datetime
from typing import Any, Protocol, Self, cast

from podcache.cache.core import Refresh
from podcache.cache.departed import (
    Found,
    epoch_seconds,
    lookup_key,
)
from podcache.cache.driving import Driving
from podcache.cache.events import Signal, Step, Subscription
from podcache.cache.pids import PodProcess, alookup_pod, async_probe
from podcache.cache.podrelists import PodRelist
from podcache.cache.scheduling import Start
from podcache.cache.shared import (
    Events,
    PodGetter,
    check_timeout,
    endpoint_name,
    events_wanted,
    offers_pod,
)
from podcache.cache.watching import AsyncPodWatch, AsyncWatchHost, TaskRefresher
from podcache.model import PodList

__all__ = ["AsyncPodGetter", "AsyncRuntimeCache"]


class AsyncPodGetter(Protocol):
    """An asyncio pod lister such as ``podcache.cri.AsyncCRIRuntime``."""

    async def get_pods(self, all: bool) -> PodList: ...


def _is_coroutine_function(getter: object, name: str) -> bool:
    """Whether ``getter``'s method ``name`` is a coroutine function (False when it has none)."""
    return inspect.iscoroutinefunction(getattr(getter, name, None))


class AsyncRuntimeCache(Driving[asyncio.Future[None], AsyncPodGetter | PodGetter]):
    """A bounded-staleness cache of ``await getter.get_pods(all)`` for asyncio (``all=False``,
    the default: the kubelet's running view; ``all=True``: NotReady sandboxes and exited
    containers too, a relist of one pod and a PID's probe asking the same).

    A getter whose ``get_pods`` is a plain function is run in a worker thread, so the event
    loop never blocks on the runtime.

    ``events=`` as ``RuntimeCache``'s, the subscription a background task (from construction
    inside a running loop, else from the first call that is not a hit). End it with ``await
    close()`` or ``async with``.
    """

    _refresher: TaskRefresher
    _pod_timer: asyncio.TimerHandle | None = None
    """The timer for relists of one pod waiting for their budget, while armed."""

    def _new_signal(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    def _init_driver(self, getter: AsyncPodGetter | PodGetter, count_hits: bool) -> None:
        """The driver's own parts (``Driving``)."""
        self._is_async = inspect.iscoroutinefunction(getter.get_pods)
        self._init_loop_parts(count_hits)
        self._refresher, self._watch_host = self._watch_parts()
        self._probe = async_probe(getter, self._all)  # pod_of_pid's way to ask about one container
        self._pod_is_async = offers_pod(getter) and _is_coroutine_function(getter, "get_pod")

    def _init_loop_parts(self, count_hits: bool) -> None:
        """What lives on the loop: the refresh timer, the event set at every publish, the
        refresh tasks; and the hits, counted only with ``count_hits``."""
        self._guard = contextlib.nullcontext()  # nothing to lock: everything runs on the loop
        self._timer: asyncio.TimerHandle | None = None
        self._changed: asyncio.Event | None = None  # set (and replaced) at every publish
        self._tasks: set[asyncio.Task[None]] = set()
        self._fast_hits, self._count_hits = 0, count_hits

    def _init_events(self, events: Events, getter: AsyncPodGetter | PodGetter) -> None:
        """The event subscription's parts, and its task when events are wanted (now inside a
        running loop, else at the first miss)."""
        self._subscription: Subscription | None = None
        self._subscriber: asyncio.Task[None] | None = None
        self._stream: Any = None
        self._wake: asyncio.Event | None = None
        self._closed = False
        if events_wanted(events, getter):
            self._subscription = Subscription(endpoint_name(getter), self._clock)
            self._steps.subscription = self._subscription
            with contextlib.suppress(RuntimeError):  # no running loop: the first miss starts it
                asyncio.get_running_loop()
                self._start_subscriber()

    def _watch_parts(self) -> tuple[TaskRefresher, AsyncWatchHost]:
        """The watches' refresher and host: what ``cache.watching`` may reach of this cache."""
        refresher = TaskRefresher(self._refresh_host(self.force_update_if_older))
        host = AsyncWatchHost(
            self._core.changes,
            self._changed_event,
            self._wake_watchers,
            self.get_pods,
            self._watch_opened,
            self._watch_closed,
        )
        return refresher, host

    # -- public API --------------------------------------------------------------------------
    async def get_pods(self, *, timeout: float | None = None) -> PodList:
        """Pods fetched at most ``cache_period`` before this call; refreshes when older.

        Raises the getter's exception unchanged when the refresh fails, and ``TimeoutError``
        when ``timeout`` seconds pass first. Cancelling the caller never cancels the refresh.
        """
        current = self._core.snapshot
        if self._clock() <= current[2]:
            if self._count_hits:
                self._fast_hits += 1
            return current[0]  # type: ignore[return-value]  # fresh_until is -inf until filled
        pods, refresh = self._plan(timeout)
        if pods is not None:
            return pods
        assert refresh is not None
        await self._wait(refresh, timeout)
        return self._outcome(refresh)

    def _plan(
        self, timeout: float | None, need: float | None = None
    ) -> tuple[PodList | None, Refresh[asyncio.Future[None]] | None]:
        """``FreshnessCore.plan`` for a miss (``need``: a forced caller's), its timer armed
        and the refresh it starts spawned; the subscriber starts here when it could not at
        construction."""
        check_timeout(timeout)
        if self._subscription is not None and self._subscriber is None:
            self._start_subscriber()
        now = self._clock()
        pods, refresh, start = self._core.plan(now, need)
        self._arm(self._core.arm(now))
        if refresh is not None and start:
            self._spawn(refresh)
        return pods, refresh

    def _outcome(self, refresh: Refresh[asyncio.Future[None]]) -> PodList:
        """What the refresh a reader waited for gives it: its pods; when it failed, the last
        pods if young enough (stale-if-error), else its error."""
        if refresh.error is not None:
            stale = self._core.stale_fallback(self._clock())
            if stale is not None:
                return stale
            raise refresh.error
        assert refresh.pods is not None
        return refresh.pods

    def get_pods_nowait(self) -> PodList | None:
        """As ``RuntimeCache.get_pods_nowait`` (None: await ``get_pods``)."""
        current = self._core.snapshot
        if self._clock() <= current[2]:
            if self._count_hits:
                self._fast_hits += 1
            return current[0]  # None only before the first fill, when fresh_until is -inf
        return None

    async def force_update_if_older(
        self, min_expected_cache_time: float, *, timeout: float | None = None
    ) -> None:
        """Refresh unless the cache holds pods fetched at or after ``min_expected_cache_time``."""
        _, refresh = self._plan(timeout, min_expected_cache_time)
        if refresh is None:
            return
        await self._wait(refresh, timeout)
        if refresh.error is not None:
            raise refresh.error

    async def pod_of_pid(
        self, pid: int, *, proc_root: str = "/proc", timeout: float | None = None
    ) -> PodProcess | None:
        """The twin of ``RuntimeCache.pod_of_pid``."""
        found = await alookup_pod(
            self,
            self._clock,
            pid,
            proc_root=proc_root,
            timeout=timeout,
            probe=self._probe,
            unknown=self._unknown,
        )
        return found.process

    async def find(
        self,
        *,
        container_id: str | None = None,
        uid: str | None = None,
        ip: str | None = None,
        at: float | datetime | None = None,
        timeout: float | None = None,
    ) -> Found | None:
        """The twin of ``RuntimeCache.find``."""
        key = lookup_key(container_id, uid, ip)
        moment = epoch_seconds(at)
        pods = await self.get_pods(timeout=timeout)
        return self._departed.find(pods, key, moment, self._wall())

    def _hits(self) -> int:
        return self._fast_hits

    def watch(self, since: int | None = None) -> AsyncPodWatch:
        """The twin of ``RuntimeCache.watch``: an async iterator of ``PodChange``."""
        return AsyncPodWatch(self._watch_host, since)

    async def close(self) -> None:
        """End the event subscription and wait for it, then for refreshes still running or
        waiting for their time (rate limit) that a reader asked for; one only events asked
        for is dropped (``FreshnessCore.events_closed``). Idempotent; the cache still serves
        readers afterwards, by its period. Also stops the watch refresher."""
        self._closed = True
        if self._subscription is not None:
            self._subscription.on(Signal.CLOSE)
            dropped = self._core.events_closed()
            if dropped is not None:
                dropped.signal.set_result(None)  # nobody waits for it (core)
        if self._wake is not None:
            self._wake.set()
        await self._close_stream(self._stream)
        subscriber = self._subscriber
        if subscriber is not None and subscriber is not asyncio.current_task():
            subscriber.cancel()
            await asyncio.gather(subscriber, return_exceptions=True)
        await self._refresher.wait_stopped()
        await self._drained()
        if self._timer is not None:  # nothing left for it to start
            self._timer.cancel()
            self._timer = None
        if self._pod_timer is not None:  # no relist waits for it any more
            self._pod_timer.cancel()
            self._pod_timer = None

    async def _drained(self) -> None:
        """Once no refresh runs and none waits for its timer (refreshes started meanwhile
        waited for too)."""
        while True:
            queued = self._core.queued
            if self._timer is not None and queued is not None:
                await asyncio.shield(queued.signal)
            elif self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            else:
                return

    async def aclose(self) -> None:
        """``close()``: end the subscription, wait for refreshes still running or waiting."""
        await self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ---------------------------------------------------------------------------
    def _changed_event(self) -> asyncio.Event:
        event = self._changed
        if event is None:
            event = self._changed = asyncio.Event()
        return event

    def _wake_watchers(self) -> None:
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    async def _wait(self, refresh: Refresh[asyncio.Future[None]], timeout: float | None) -> None:
        # shield: a caller's timeout or cancellation ends its wait, never the shared refresh.
        try:
            await asyncio.wait_for(asyncio.shield(refresh.signal), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"runtime cache refresh did not complete within {timeout} s "
                "(it continues in the background)"
            ) from None

    def _arm(self, delay: float | None) -> None:
        """After ``delay`` seconds, ask the core whether the queued refresh may start."""
        if delay is not None:
            self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._start(self._steps.fired())

    def _start(self, start: Start[asyncio.Future[None]]) -> None:
        """Arm the timers and start the refreshes a step asked for."""
        self._arm(start.delay)
        self._arm_pods(start.pod_delay)
        self._spawn_pods(start.relists)
        if start.full is not None:
            self._spawn(start.full)

    def _spawn(self, refresh: Refresh[asyncio.Future[None]]) -> None:
        self._task(self._run(refresh), "podcache-refresh")

    def _task(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` as a task ``close()`` waits for."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, refresh: Refresh[asyncio.Future[None]]) -> None:
        """As ``RuntimeCache._run``."""
        pods: PodList | None = None
        error: BaseException | None = None
        refresh.started_wall = self._wall()  # §7 rule 4: events before it need no relist
        try:
            if self._is_async:
                getter = cast(AsyncPodGetter, self._getter)
                result: PodList = await cast(Awaitable[PodList], getter.get_pods(self._all))
            else:
                result = await asyncio.to_thread(cast(PodGetter, self._getter).get_pods, self._all)
            pods = result if isinstance(result, PodList) else PodList(result)
        except (Exception, asyncio.CancelledError) as exc:
            error = exc
        start = self._steps.listed(refresh, pods, error)
        if start.wake and self._wake:
            self._wake.set()  # the runtime is back: ask it for events again now
        # The outcome lives on the Refresh; the future only wakes waiters (never an exception
        # on it, so an abandoned refresh logs no "exception was never retrieved").
        refresh.signal.set_result(None)
        self._start(start)

    def _published(self) -> None:
        """After the core stored a snapshot and the hooks ran (no await in between, so no
        caller runs before the hooks): the watches."""
        self._wake_watchers()

    # -- relists of one pod (docs/architecture.md §7) ----------------------------------------
    def _spawn_pods(self, relists: Sequence[PodRelist]) -> None:
        for relist in relists:
            self._task(self._run_pod(relist), "podcache-pod-relist")

    def _arm_pods(self, delay: float | None) -> None:
        """After ``delay`` seconds, ask the core which waiting relists the budget lets start."""
        if delay is not None:
            self._pod_timer = asyncio.get_running_loop().call_later(delay, self._fire_pods)

    def _fire_pods(self) -> None:
        self._pod_timer = None
        self._start(self._steps.pods_fired())

    async def _run_pod(self, relist: PodRelist) -> None:
        """Relist one pod, store what came back, start what the core asks for next."""
        pod = None
        error: BaseException | None = None
        getter: Any = self._getter
        relist.started_wall = self._wall()
        try:
            if self._pod_is_async:
                pod = await getter.get_pod(relist.uid, self._all)
            else:
                pod = await asyncio.to_thread(getter.get_pod, relist.uid, self._all)
        except (Exception, asyncio.CancelledError) as exc:
            error = exc
        self._start(self._steps.relisted(relist, pod, error))

    # -- the event subscription (task) ---------------------------------------------------------
    def _start_subscriber(self) -> None:
        if self._closed:
            return
        self._wake = asyncio.Event()
        self._subscriber = asyncio.get_running_loop().create_task(
            self._subscribe_forever(), name="podcache-events"
        )

    async def _subscribe_forever(self) -> None:
        """Open a stream, read it until it fails, wait as told, again; until ``close()``."""
        assert self._subscription is not None and self._wake is not None
        while not self._closed:
            step = await self._subscribe_once()
            if step is Step.STOP or self._closed:
                return
            delay = self._subscription.delay(step)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()

    async def _subscribe_once(self) -> Step:
        """One stream, from opening to its end: the step the subscription asks for then."""
        stream: Any = None
        try:
            stream = self._stream = self._getter.container_events()  # type: ignore[union-attr]
            if inspect.iscoroutinefunction(stream.open):
                await stream.open()
                step = self._signal(Signal.OPENED)
                async for event in stream:
                    step = self._event(event)
                    if step is Step.STOP:
                        return step
            else:  # a thread-side stream (a plain getter): each read in a worker thread
                await asyncio.to_thread(stream.open)
                step = self._signal(Signal.OPENED)
                while (event := await asyncio.to_thread(next, stream, None)) is not None:
                    step = self._event(event)
                    if step is Step.STOP:
                        return step
            return self._stream_ended(self._closed)
        except Exception as exc:
            return self._stream_failed(stream, exc, self._closed)
        finally:
            self._stream = None
            await self._close_stream(stream)

    @staticmethod
    async def _close_stream(stream: Any) -> None:
        if stream is None:
            return
        if inspect.iscoroutinefunction(getattr(stream, "aclose", None)):
            await stream.aclose()
        else:
            stream.close()
