"""The answer memo: each published snapshot's view, built off the loop when it is big
(docs/architecture.md §5, item 4); no routing, no HTTP.

Cost: a publish is O(1) on the loop; a build is O(pods it has to encode), in a worker when
that may be more than ``BUILD_OFF_LOOP``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from podcache.cache import AsyncRuntimeCache
from podcache.cache.publishing import Publication
from podcache.model import PodList
from podcache.serve.snapshot import SnapshotView

__all__ = ["BUILD_OFF_LOOP", "RECENT_VIEWS", "Views"]

BUILD_OFF_LOOP = 64
"""A publish that changed more pods than this has its view built in a worker thread (more
would hold the loop over a millisecond); fewer, on first use."""

RECENT_VIEWS = 16
"""Views of past publications kept, so a request that got its pods before newer ones were
published still answers from its own snapshot (and says whether that was stale)."""


class Views:
    """The memo and the recent views of ``cache``'s publications; ``clock`` is the cache's
    (monotonic) clock and ``wall`` the unix clock (a view's wall time is mapped from it)."""

    def __init__(
        self, cache: AsyncRuntimeCache, clock: Callable[[], float], wall: Callable[[], float]
    ) -> None:
        self._cache = cache
        self._clock = clock
        self._wall = wall
        self.memo: SnapshotView | None = None
        """The response memo: the newest snapshot's view and the answers given from it (the
        only thing kept between requests; replaced at each publish)."""
        self.builds: dict[SnapshotView, asyncio.Future[None]] = {}
        """The views being built in a worker thread, and those builds (until done)."""
        self.recent: collections.deque[SnapshotView] = collections.deque(maxlen=RECENT_VIEWS)
        """The views of the last publications, newest last (``view_of``)."""

    def published(self, publication: Publication) -> None:
        """The cache's publish hook (on the loop, before anyone is handed the snapshot): the
        view of the new snapshot becomes the memo; where it is built is docs/architecture.md
        §5 item 4's rule (requests that need it meanwhile wait, ``ready``). So no build of a
        node's pods runs on the loop, however quickly small publishes follow a big one."""
        now = self._clock()
        timestamp = publication.timestamp
        previous = self.memo
        view = SnapshotView(
            publication.pods, timestamp, timestamp + (self._wall() - now), previous=previous
        )
        if previous is not None:
            previous.retire()  # its body and answers go; its pods' JSON lives on in ``view``
        self.memo = view
        self.recent.append(view)
        pending = None if previous is None else self.builds.get(previous)
        if pending is not None or _many_new_pods(publication):
            building = asyncio.ensure_future(_build_after(pending, previous, view))
            self.builds[view] = building
            building.add_done_callback(lambda _: self.builds.pop(view, None))

    async def ready(self, view: SnapshotView) -> None:
        """Wait for ``view``'s build in a worker thread, when one runs."""
        building = self.builds.get(view)
        if building is not None:
            await asyncio.shield(building)

    def building_now(self, view: SnapshotView) -> bool:
        """Whether ``view`` is being built in a worker thread (answers from it then wait)."""
        return view in self.builds

    def view_of(self, pods: PodList) -> SnapshotView:
        """The view of ``pods``, or of a newer snapshot: the memo when it holds them, else the
        view of one of the last publications that does (a request that got its pods before
        newer ones were published answers from its own: its staleness is its own), else the
        memo (newer pods); a view of ``pods`` alone before any publish."""
        memo = self.memo
        if memo is not None:
            if memo.pods is pods:
                return memo
            for view in self.recent:
                if view.pods is pods:
                    return view
            return memo
        now = self._clock()
        fetched = self._cache.cache_time
        fetched = now if fetched is None else fetched
        return SnapshotView(pods, fetched, fetched + (self._wall() - now))

    def latest(self) -> PodList | None:
        """The memo's pods (the metrics' pod counts), None before the first publish."""
        memo = self.memo
        return None if memo is None else memo.pods


def _many_new_pods(publication: Publication) -> bool:
    """Whether a publication's pods may hold more than ``BUILD_OFF_LOOP`` objects no view
    encoded: a publish that changed that many, or a full listing of more pods than that (a
    listing may hand over new objects with the same content, which no change reports). A
    relist of one pod carries every other pod's object over."""
    if len(publication.changes) > BUILD_OFF_LOOP:
        return True
    return publication.relisted is None and len(publication.pods) > BUILD_OFF_LOOP


def _build(view: SnapshotView) -> None:
    view.build(body=True)


async def _build_after(
    pending: asyncio.Future[None] | None, previous: SnapshotView | None, view: SnapshotView
) -> None:
    """Build ``view`` in a worker thread, after ``pending`` (the previous view's build) ended:
    then it takes the pods' JSON that build made."""
    if pending is not None and previous is not None:
        await asyncio.wait([pending])  # its failure is its own requests' to see
        view.inherit(previous)
    await asyncio.to_thread(_build, view)
