"""``GET /pods?watch=1``: the cache's changes as an NDJSON stream; no routing, no sockets.

The application routes a watch request here (``WatchRequest``, after the token check and the
parameters); ``WatchStreams.open`` opens the cache's watch before anything is sent, so a
``since`` out of the history is a plain 410 (and a runtime that fails the first listing a
503), then answers 200 with a ``Response`` whose ``stream`` the HTTP server writes chunk by
chunk (``transfer-encoding: chunked``). The lines are ``podcache.watchjson``'s: each change,
``BOOKMARK`` lines, and a last ``ERROR`` line (410) when the watcher must list again.

Rules of a stream:

* opened without ``since``: an ``ADDED`` line for every pod (filtered), then a bookmark at the
  snapshot's revision, then the changes; opened with ``since=r``: a bookmark at ``r`` first,
  then exactly the changes after ``r``;
* a bookmark at least every ``bookmark_interval`` seconds (15 by default), with the revision
  every line so far brings the client to; lines are written a whole revision at a time, so a
  bookmark always stands at a revision boundary;
* ``namespace`` and ``label`` filter as in ``/pods``; a pod that enters the filtered view is
  ``ADDED``, one that leaves it ``DELETED`` (``changes.visible``);
* bounds: a watcher more than ``max_lag`` changes behind (the cache's) gets the ``ERROR`` line
  and the end; one whose client leaves more than ``max_unsent`` bytes unread (beyond the
  first chunk, which holds every pod of the node when the stream opens without ``since``)
  is reset by the server; both count as cut off. Streams are connections: the server's
  connection cap, idle rules and shutdown (SIGTERM: each stream ends cleanly, with its last
  chunk) apply.

Each change is encoded once for every watcher that sends it (a small memo by identity).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import NamedTuple, cast

from podcache.cache import AsyncPodWatch, AsyncRuntimeCache
from podcache.cache.changes import PodChange, visible
from podcache.errors import PodcacheError, ResyncRequiredError
from podcache.model import Pod
from podcache.serve.query import LabelSelector
from podcache.serve.response import JSON, Response, error_body
from podcache.watchjson import CONTENT_TYPE, bookmark_line, change_line, error_line

__all__ = [
    "BOOKMARK_INTERVAL",
    "LINE_MEMO",
    "MAX_UNSENT",
    "WatchCounters",
    "WatchRequest",
    "WatchStreams",
]

BOOKMARK_INTERVAL = 15.0
"""Most seconds between two bookmarks of one stream."""
MAX_UNSENT = 4 * 1024 * 1024
"""Most bytes a stream's client may leave unread before the server resets it."""
LINE_MEMO = 4096
"""Most encoded change lines kept (then the memo starts over)."""

_RETRY = [("retry-after", "1")]


class WatchRequest(NamedTuple):
    """A checked ``GET /pods?watch=1``: where to start and which pods to show."""

    route: str
    since: int | None
    namespace: str | None
    selectors: tuple[LabelSelector, ...]

    def shows(self, pod: Pod) -> bool:
        """Whether the filters let ``pod`` through."""
        if self.namespace is not None and pod.namespace != self.namespace:
            return False
        labels = cast(tuple[tuple[str, str], ...], pod.labels)
        return all(selector.matches(labels) for selector in self.selectors)


@dataclass
class WatchCounters:
    """What the metrics report about streams: open now, change lines sent, 410s (before or
    during a stream), streams cut off (too far behind, or too much left unread)."""

    open: int = 0
    changes_sent: int = 0
    resyncs: int = 0
    cut_off: int = 0


class _Stream:
    """One stream's chunks: an async iterator the HTTP server drains and closes."""

    def __init__(
        self,
        streams: WatchStreams,
        watch: AsyncPodWatch,
        request: WatchRequest,
        first: list[bytes],
    ) -> None:
        self._streams = streams
        self._watch = watch
        self._request = request
        self._pending = first
        self._done = False
        self._counted = True
        streams.counters.open += 1

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if self._pending:
            chunk = b"".join(self._pending)
            self._pending = []
            return chunk
        if self._done:
            await self.aclose()
            raise StopAsyncIteration
        streams = self._streams
        try:
            batch = await self._watch.next_batch(streams.bookmark_interval)
        except ResyncRequiredError as error:
            self._done = True
            streams.counters.resyncs += 1
            streams.counters.cut_off += 1
            return error_line(410, str(error))
        lines = streams.lines(batch, self._request)
        # A bookmark after each batch, or alone when the interval passed without one: either
        # way one at least every interval, each at a revision boundary.
        lines.append(bookmark_line(cast(int, self._watch.revision)))
        return b"".join(lines)

    def cut_off(self) -> None:
        """The server resets this stream: its client left too much unread."""
        self._streams.counters.cut_off += 1

    async def aclose(self) -> None:
        self._done = True
        self._watch.close()
        if self._counted:
            self._counted = False
            self._streams.counters.open -= 1


class WatchStreams:
    """Opens the streams of one application's cache and counts them."""

    def __init__(
        self,
        cache: AsyncRuntimeCache,
        *,
        bookmark_interval: float = BOOKMARK_INTERVAL,
        max_unsent: int = MAX_UNSENT,
        wait: float = 10.0,
    ) -> None:
        if not bookmark_interval > 0:
            raise ValueError(f"bookmark_interval must be > 0 seconds, got {bookmark_interval!r}")
        self._cache = cache
        self.bookmark_interval = bookmark_interval
        self.max_unsent = max_unsent
        self._wait = wait
        self.counters = WatchCounters()
        self._memo: dict[int, tuple[PodChange, bytes]] = {}
        self._first: tuple[int, bytes] | None = None  # the unfiltered first chunk, by revision
        self._listing_size = 0  # bytes of the last unfiltered first chunk built

    def lines(self, batch: list[PodChange], request: WatchRequest) -> list[bytes]:
        """The lines of ``batch`` as ``request`` shows them."""
        filtered = request.namespace is not None or bool(request.selectors)
        memo = self._memo
        lines: list[bytes] = []
        for each in batch:
            change = visible(each, request.shows) if filtered else each
            if change is None:
                continue
            kept = memo.get(id(change))
            if kept is not None and kept[0] is change:
                lines.append(kept[1])
                continue
            line = change_line(change)
            if len(memo) >= LINE_MEMO:
                memo.clear()
            memo[id(change)] = (change, line)
            lines.append(line)
        self.counters.changes_sent += len(lines)
        return lines

    async def open(self, request: WatchRequest) -> Response:
        """The answer to a watch request: 200 and its stream, or the error (410, 503)."""
        headers = [("content-type", CONTENT_TYPE), ("cache-control", "no-store")]
        watch = self._cache.watch(request.since)
        try:
            first = await asyncio.wait_for(watch.next_batch(0), self._wait)
        except ResyncRequiredError as error:
            self.counters.resyncs += 1
            return _error(410, str(error), [])
        except PodcacheError as error:
            watch.close()
            return _error(503, str(error), _RETRY)
        except TimeoutError:
            watch.close()
            message = f"the container runtime did not answer within {self._wait:g} s"
            return _error(503, message, _RETRY)
        revision = cast(int, watch.revision)
        headers.append(("x-podcache-revision", str(revision)))
        lines = self.first_lines(first, request, revision)
        stream: AsyncIterator[bytes] = _Stream(self, watch, request, lines)
        # A chunk is written at once, and one can hold every pod of a large node (megabytes:
        # the first, or a batch in which every pod changed): the bound is on what the client
        # leaves unread beyond two listings.
        bound = self.max_unsent + 2 * self._listing_size
        return Response(200, headers, stream=stream, max_unsent=bound)

    def first_lines(
        self, first: list[PodChange], request: WatchRequest, revision: int
    ) -> list[bytes]:
        """The first chunk's lines, then its bookmark; an unfiltered first batch (every pod)
        is encoded once per revision for every watch opened at it."""
        if first and request.since is None and not request.namespace and not request.selectors:
            cached = self._first
            if cached is None or cached[0] != revision:
                cached = self._first = (revision, b"".join(self.lines(first, request)))
                self._listing_size = len(cached[1])
            else:
                self.counters.changes_sent += len(first)
            return [cached[1], bookmark_line(revision)]
        lines = self.lines(first, request)
        lines.append(bookmark_line(revision))
        return lines


def _error(status: int, message: str, extra_headers: list[tuple[str, str]]) -> Response:
    return Response(status, [("content-type", JSON), *extra_headers], error_body(status, message))
