"""RuntimeWatch: times and records the runtime calls the cache makes; no cache logic, no HTTP.

It times every call and reports how it ended (the refresh histogram), and remembers, for the
last few PodLists it returned, the clock reading taken just before the call began: the
snapshot's time as the API reports it. That reading comes after the cache's own (the cache
reads its clock, then starts the call), so it is never earlier than the data's true lower bound
and never later than the runtime's answer. It holds no cache logic and no HTTP.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from podcache.cache import AsyncPodGetter
from podcache.model import PodList

__all__ = ["RuntimeWatch"]

_REMEMBERED = 8


class RuntimeWatch:
    """Wrap ``getter``; ``on_call(seconds, ok)`` hears of every call when it ends."""

    def __init__(
        self,
        getter: AsyncPodGetter,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_call: Callable[[float, bool], None] | None = None,
    ) -> None:
        self._getter = getter
        self._clock = clock
        self.on_call = on_call
        self.latest: PodList | None = None
        """What the last successful call returned (the cache's snapshot: it keeps each)."""
        self.last_error: BaseException | None = None
        """What the last failed call raised (/readyz names it while the snapshot is stale)."""
        self._started: OrderedDict[int, tuple[PodList, float]] = OrderedDict()

    async def get_pods(self, all: bool) -> PodList:
        """The inner getter's answer, timed and remembered."""
        started = self._clock()
        try:
            pods = await self._getter.get_pods(all)
        except BaseException as exc:
            self.last_error = exc
            self._report(started, ok=False)
            raise
        if isinstance(pods, PodList):
            self.latest = pods
            # Keep a reference with the time: an id() is unique only while its object lives.
            self._started[id(pods)] = (pods, started)
            while len(self._started) > _REMEMBERED:
                self._started.popitem(last=False)
        self._report(started, ok=True)
        return pods

    def container_events(self) -> Any:
        """The inner getter's event stream (the cache subscribes only if the getter has one)."""
        return self._getter.container_events()  # type: ignore[attr-defined]

    def fetched_at(self, pods: PodList) -> float | None:
        """The clock reading just before the call that returned ``pods`` (this very object)."""
        entry = self._started.get(id(pods))
        if entry is None or entry[0] is not pods:
            return None
        return entry[1]

    def _report(self, started: float, *, ok: bool) -> None:
        if self.on_call is not None:
            self.on_call(max(self._clock() - started, 0.0), ok)
