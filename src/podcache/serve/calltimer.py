"""CallTimer: times the runtime calls the cache makes and remembers the last failure; no cache
logic, no HTTP.

It wraps the application's getter: every listing (``get_pods``) and every relist of one pod
(``get_pod``) is timed and reported when it ends (the metrics' histograms and counters), and
the last failure is kept (/readyz names it while the snapshot is stale). What the cache did
with an answer reaches serve through the cache's publish hook, not through here.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any, cast

from podcache.cache import AsyncPodGetter
from podcache.model import Pod, PodList

__all__ = ["CallTimer", "timed"]

OnCall = Callable[[float, bool], None]
"""Hears of one call when it ends: its duration in seconds, and whether it succeeded."""


class CallTimer:
    """Wrap ``getter``; ``on_call`` hears of every listing, ``on_pod_call`` of every relist of
    one pod (``TimedPods``)."""

    def __init__(
        self,
        getter: AsyncPodGetter,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_call: OnCall | None = None,
        on_pod_call: OnCall | None = None,
    ) -> None:
        self._getter = getter
        self._clock = clock
        self.on_call = on_call
        self.on_pod_call = on_pod_call
        self.last_error: BaseException | None = None
        """What the last failed listing raised (/readyz names it while the snapshot is stale)."""

    async def get_pods(self, all: bool) -> PodList:
        """The inner getter's listing, timed."""
        started = self._clock()
        try:
            pods = await self._getter.get_pods(all)
        except BaseException as exc:
            self.last_error = exc
            _report(self.on_call, self._clock, started, ok=False)
            raise
        _report(self.on_call, self._clock, started, ok=True)
        return pods

    @property
    def endpoint(self) -> str:
        """The inner getter's endpoint (the subscription's log lines name it)."""
        return str(getattr(self._getter, "endpoint", type(self._getter).__name__))

    def container_events(self) -> Any:
        """The inner getter's event stream (the cache subscribes only if the getter has one)."""
        return self._getter.container_events()  # type: ignore[attr-defined]


class TimedPods(CallTimer):
    """A ``CallTimer`` over a getter that can relist one pod: ``get_pod`` (the cache's relists
    of one pod, §7) is timed too, and ``pod_uid_of`` (PID lookups) passed on."""

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The inner getter's relist of pod ``uid``, timed."""
        started = self._clock()
        getter = cast(Any, self._getter)
        try:
            pod: Pod | None = await getter.get_pod(uid, all)
        except BaseException:
            _report(self.on_pod_call, self._clock, started, ok=False)
            raise
        _report(self.on_pod_call, self._clock, started, ok=True)
        return pod

    async def pod_uid_of(self, ident: str) -> str | None:
        """The inner getter's answer (not timed: a PID lookup's, not a refresh)."""
        uid: str | None = await cast(Any, self._getter).pod_uid_of(ident)
        return uid


def timed(
    getter: AsyncPodGetter,
    *,
    clock: Callable[[], float] = time.monotonic,
    on_call: OnCall | None = None,
    on_pod_call: OnCall | None = None,
) -> CallTimer:
    """The timer for ``getter``: one that offers ``get_pod`` and ``pod_uid_of`` exactly when
    ``getter`` offers both as coroutines."""
    both = all(
        inspect.iscoroutinefunction(getattr(getter, name, None))
        for name in ("get_pod", "pod_uid_of")
    )
    kind = TimedPods if both else CallTimer
    return kind(getter, clock=clock, on_call=on_call, on_pod_call=on_pod_call)


def _report(
    on_call: OnCall | None, clock: Callable[[], float], started: float, *, ok: bool
) -> None:
    if on_call is not None:
        on_call(max(clock() - started, 0.0), ok)
