"""A request's snapshot and its response: read-your-writes, staleness, the age and revision
headers, ETag revalidation; no routing, no memo of its own.

``Reader.snapshot(need)`` is the snapshot a request may be answered from and whether it is
stale for that request (docs/architecture.md §5, item 4); ``Reader.from_answer`` turns an
``Answer`` into the ``Response`` with the snapshot's age.
"""

from __future__ import annotations

from collections.abc import Callable

from podcache.cache import AsyncRuntimeCache
from podcache.errors import PodcacheError
from podcache.serve.failures import failure_of
from podcache.serve.params import FRESH, NEWER_THAN, NEWER_THAN_HEADER
from podcache.serve.query import Query, etag_matches
from podcache.serve.response import JSON, Headers, HTTPError, Response
from podcache.serve.snapshot import Answer, SnapshotView
from podcache.serve.views import Views

__all__ = ["FRESHNESS_HEADER", "STALE", "Reader"]

STALE = ("x-podcache-stale", "true")
FRESHNESS_HEADER = NEWER_THAN_HEADER.name.lower()


class Reader:
    """Snapshots of ``cache`` for requests, each waiting at most ``wait`` seconds; ``clock``
    is the cache's (monotonic) clock and ``wall`` the unix clock, mapped onto it per
    request."""

    def __init__(
        self,
        cache: AsyncRuntimeCache,
        views: Views,
        *,
        clock: Callable[[], float],
        wall: Callable[[], float],
        wait: float,
    ) -> None:
        self.cache = cache
        self.views = views
        self.clock = clock
        self.wall = wall
        self.wait = wait

    def need(self, query: Query, headers: dict[str, str]) -> float | None:
        """The unix time the snapshot must have been read at or after, if the request says."""
        values = query.get("newer_than")  # dict lookups, not Param.first: the full path's
        need = NEWER_THAN.parse(values[0]) if values else None
        header = headers.get(FRESHNESS_HEADER)
        if header is not None:
            stated = NEWER_THAN_HEADER.parse(header)
            need = stated if need is None else max(need, stated)
        values = query.get("fresh")
        if values and FRESH.parse(values[0]):
            now_wall = self.wall()
            need = now_wall if need is None else max(need, now_wall)
        return need

    async def snapshot(self, need: float | None) -> tuple[SnapshotView, bool]:
        """The snapshot a request may be answered from, after any read-your-writes wait, and
        whether it is stale for this request (``stale_for``)."""
        arrival = self.clock()
        cache = self.cache
        try:
            if need is not None:
                now = self.clock()
                # Wall time onto the cache's clock, as of now; a future time counts as now.
                target = min(need - (self.wall() - now), now)
                await cache.force_update_if_older(target, timeout=self.wait)
            pods = await cache.get_pods(timeout=self.wait)
        except (PodcacheError, TimeoutError) as exc:  # what the cache raises (§3 rules 3, 8)
            raise failure_of(type(exc)).http_error(exc, wait=self.wait) from exc
        view = self.views.view_of(pods)
        return view, self.stale_for(view, arrival)

    def stale_for(self, view: SnapshotView, arrival: float) -> bool:
        """Whether ``view`` was older than the period when a request arrived at ``arrival``
        (the cache clock): only ``max_stale`` serves that, standing in for a failed runtime."""
        return arrival - view.monotonic > self.cache.cache_period

    def from_answer(
        self, view: SnapshotView, answer: Answer, headers: dict[str, str], *, stale: bool = False
    ) -> Response:
        """``answer`` completed with the snapshot's age, and ``X-Podcache-Stale`` when it is
        ``stale`` for the request; 304 when If-None-Match names it."""
        age = f"{max(self.clock() - view.monotonic, 0.0):.3f}"
        # Read at answer time: the cache numbers a snapshot as it publishes it, after its view
        # was prepared.
        revision = str(view.pods.revision)
        if answer.status != 200 or not answer.etag:
            response_headers = [
                ("content-type", JSON),
                ("x-podcache-age", age),
                ("x-podcache-revision", revision),
            ]
        else:
            response_headers = [
                ("content-type", JSON),
                ("etag", view.etag),
                ("x-podcache-age", age),
                ("x-podcache-revision", revision),
                ("cache-control", "no-cache"),
            ]
            match = headers.get("if-none-match")
            if match is not None and etag_matches(match, view.etag):
                return Response(
                    304, [*response_headers[1:], STALE] if stale else response_headers[1:]
                )
        if stale:
            response_headers.append(STALE)
        # A list says its revision (a watch goes on from it: since=).
        suffix = f'{age},"revision":{revision}}}' if answer.route == "/pods" else f"{age}}}"
        return Response(answer.status, response_headers, answer.head, suffix=suffix.encode())

    def with_age(self, headers: Headers) -> Headers:
        """``headers`` and ``X-Podcache-Age``, the age of the cache's snapshot, once it has one."""
        cache_time = self.cache.cache_time
        if cache_time is not None:
            headers.append(("x-podcache-age", f"{max(self.clock() - cache_time, 0.0):.3f}"))
        return headers

    def error(self, error: HTTPError) -> Response:
        """``error`` as a JSON response, with the snapshot's age when there is one."""
        headers = self.with_age([("content-type", JSON), *error.headers])
        return Response(error.status, headers, error.body())
