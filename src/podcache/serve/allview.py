"""The all view's getter (``?all=1``, docs/architecture.md §5): the runtime's pods with the
NotReady ones, whatever the cache asks; no cache, no HTTP."""

from __future__ import annotations

from typing import Any, cast

from podcache.cache import AsyncPodGetter
from podcache.cache.pids import AsyncPodProbe, async_probe
from podcache.model import Pod, PodList

__all__ = ["AllPods", "AllPodsProbe", "all_pods_getter"]


class AllPods:
    """The all view's getter: ``getter.get_pods(True)`` whatever the cache asks (a cache
    always asks ``False``), and the same event stream."""

    def __init__(self, getter: AsyncPodGetter) -> None:
        self._getter = getter

    async def get_pods(self, all: bool) -> PodList:
        return await self._getter.get_pods(True)

    @property
    def endpoint(self) -> str:
        """The runtime's endpoint (the subscription's log lines name it), and the view's."""
        inner = str(getattr(self._getter, "endpoint", type(self._getter).__name__))
        return f"{inner} (?all=1 view)"

    def container_events(self) -> Any:
        """The runtime's event stream (asked for only when ``getter`` offers one)."""
        return self._getter.container_events()  # type: ignore[attr-defined]


class AllPodsProbe(AllPods):
    """``AllPods`` over a getter that can list one pod (``cache.pids.async_probe``): the all view's
    ``/pids`` lookups ask the runtime about one container too, never the node."""

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        return await cast(AsyncPodProbe, self._getter).get_pod(uid, True)

    async def pod_uid_of(self, ident: str) -> str | None:
        return await cast(AsyncPodProbe, self._getter).pod_uid_of(ident)


def all_pods_getter(getter: AsyncPodGetter) -> AllPods:
    """The all view's getter over ``getter``, a probe when ``getter`` is one."""
    return AllPods(getter) if async_probe(getter) is None else AllPodsProbe(getter)
