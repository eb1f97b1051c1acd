"""``GET /pods?watch=1``: the cache's changes as an NDJSON stream (docs/architecture.md §8
rules 7-9); no routing, no sockets.

``WatchStreams.open`` opens the cache's watch before anything is sent (a ``since`` out of the
history is a plain 410, a failing first listing a 503). The lines are ``podcache.watchjson``'s.
Opened without ``since``: an ``ADDED`` line for every pod shown, then a bookmark at the
snapshot's revision; with ``since=r``: a bookmark at ``r`` first. Lines go a whole revision at
a time, so a bookmark always stands at a revision boundary. ``max_unsent`` counts beyond the
first chunk (every pod of the node when opened without ``since``). Each change is encoded once
for every watcher that sends it (a memo by identity, ``LINE_MEMO``).

THE BROADCAST RULE. The pass writes to a stream exactly when all of these hold, and
otherwise leaves it to the per-stream path:

1. the stream is parked: its iterator is waiting for news, not producing a chunk (one that
   is producing reads the log itself when the server asks for the next, and parks after);
2. it has a sink (else the pass wakes it, and its iterator sends the chunk);
3. its read succeeds (a watcher further behind than ``max_lag`` is woken with the error,
   and its iterator sends the ``ERROR`` line and ends);
4. the read brought changes (an empty read: nothing to send, the stream stays parked).

A paused transport is not skipped: the per-stream path does not wait for the client either;
the sink's ``max_unsent`` bound limits both. What the pass skips is never lost: the changes
stay in the stream's cursor until its own read. A stream read by every pass sends the same
bytes on both paths; one read later sends the same lines with fewer bookmarks
(tests/serve/test_watch_broadcast.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from podcache.cache import AsyncPodWatch, AsyncRuntimeCache
from podcache.cache.changes import PodChange, visible
from podcache.errors import PodcacheError, ResyncRequiredError
from podcache.model import Pod
from podcache.serve.failures import failure_of
from podcache.serve.query import LabelSelector
from podcache.serve.response import JSON, ChunkSink, Response, error_body
from podcache.watchjson import CONTENT_TYPE, bookmark_line, change_line, error_line

__all__ = [
    "BOOKMARK_INTERVAL",
    "CUT_OFF_REASONS",
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

log = logging.getLogger("podcache.serve")

FilterKey = tuple[str | None, tuple[tuple[str, str | None], ...]]
"""What a stream shows, as a value: its namespace, and its label selectors' keys and values."""


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

    def filter_key(self) -> FilterKey:
        """The filters as a value: two requests with equal keys show the same pods."""
        return self.namespace, tuple((each.key, each.value) for each in self.selectors)


CUT_OFF_REASONS = ("lagged", "unread", "budget", "stalled")
"""Why a stream ended early, the server's doing (``podcache_watchers_cut_off_total{reason}``):

- ``lagged``: more than ``max_lag`` changes behind (its last line is the 410 ``ERROR``);
- ``unread``: its client left more than the stream's ``max_unsent`` bytes unread (reset);
- ``budget``: reset to bring all connections' unsent bytes under ``--max-buffered``;
- ``stalled``: unsent bytes that did not drain for ``--idle-timeout`` (reset).

A stream the client closes, or that SIGTERM ends, is not cut off."""


@dataclass
class WatchCounters:
    """What the metrics report about streams: open now, change lines sent, 410s (before or
    during a stream), streams cut off by reason (``CUT_OFF_REASONS``)."""

    open: int = 0
    changes_sent: int = 0
    resyncs: int = 0
    cut_off_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CUT_OFF_REASONS, 0))
    broadcast_writes: int = 0
    """Chunks the broadcast wrote (not a metric: tells the two paths apart in tests)."""

    @property
    def cut_off(self) -> int:
        """Streams cut off, for every reason."""
        return sum(self.cut_off_by.values())

    def count_cut_off(self, reason: str) -> None:
        """One stream cut off for ``reason`` (one of ``CUT_OFF_REASONS``)."""
        if reason not in self.cut_off_by:
            raise ValueError(f"unknown cut-off reason {reason!r}; known: {CUT_OFF_REASONS}")
        self.cut_off_by[reason] += 1


class _Stream:
    """One stream's chunks: an async iterator the HTTP server drains and closes. A server that
    ``attach``es a sink (``response.ChunkSink``) lets the broadcast write to it while the
    iterator waits (``_Broadcast``)."""

    __slots__ = (
        "__weakref__",
        "_counted",
        "_done",
        "_loop",
        "_pending",
        "_streams",
        "error",
        "filter_key",
        "last_sent",
        "request",
        "sink",
        "watch",
    )

    def __init__(
        self,
        streams: WatchStreams,
        watch: AsyncPodWatch,
        request: WatchRequest,
        first: list[bytes],
    ) -> None:
        self._streams = streams
        self._loop = asyncio.get_running_loop()
        self.watch = watch
        self.request = request
        self.filter_key = request.filter_key()
        self._pending = first  # the first chunks, in order
        self._done = False
        # Counted open until closed, or collected unclosed (an answer dropped unsent).
        self._counted = weakref.finalize(self, _uncount, streams.counters)
        self.sink: ChunkSink | None = None
        self.error: ResyncRequiredError | None = None  # found by the broadcast, raised here
        self.last_sent = self._loop.time()
        """When the last chunk was handed out or written: the next bookmark is due
        ``bookmark_interval`` after it."""
        streams.counters.open += 1
        if streams.broadcast is not None:
            streams.broadcast.join(self)

    def attach(self, sink: ChunkSink) -> None:
        """The server writes what ``sink`` is given as this stream's next chunk."""
        self.sink = sink

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if self._pending:
            return self._sent(self._pending.pop(0))
        if self._done:
            await self.aclose()
            raise StopAsyncIteration
        streams = self._streams
        while True:
            try:
                batch = await self._next_batch()
            except ResyncRequiredError as error:
                self._done = True
                streams.counters.resyncs += 1
                streams.counters.count_cut_off("lagged")
                return error_line(410, str(error))
            revision = cast(int, self.watch.revision)
            if batch:
                chunk, count = streams.encode(batch, self.request, revision)
                streams.counters.changes_sent += count
                return self._sent(chunk)
            if self.bookmark_due(self._loop.time()):
                # A bookmark after each batch (in its chunk), or alone when the interval
                # passed without one: either way one at least every interval, each at a
                # revision boundary.
                return self._sent(bookmark_line(revision))

    def bookmark_due(self, now: float) -> bool:
        return now - self.last_sent >= self._streams.bookmark_interval

    def _sent(self, chunk: bytes) -> bytes:
        self.last_sent = self._loop.time()
        return chunk

    async def _next_batch(self) -> list[PodChange]:
        """The changes not yet sent; [] when a bookmark may be due. Waits in the watch (the
        per-stream path), or parked in the broadcast until it hands the stream back."""
        batch = self.watch.read_nowait()
        if batch:
            return batch
        remaining = self.last_sent + self._streams.bookmark_interval - self._loop.time()
        if remaining <= 0:
            return []
        broadcast = self._streams.broadcast
        if broadcast is None:
            return await self.watch.next_batch(remaining)
        await broadcast.park(self)
        error, self.error = self.error, None
        if error is not None:
            raise error
        return self.watch.read_nowait()

    def cut_off(self, reason: str) -> None:
        """The server resets this stream, for ``reason`` (``CUT_OFF_REASONS``)."""
        self._streams.counters.count_cut_off(reason)

    async def aclose(self) -> None:
        self._done = True
        self.sink = None
        self.watch.close()
        if self._counted.detach() is not None:
            self._streams.counters.open -= 1
            if self._streams.broadcast is not None:
                self._streams.broadcast.leave(self)


def _uncount(counters: WatchCounters) -> None:
    counters.open -= 1


_Encoded = tuple[bytes, int]  # a chunk and the change lines in it


class _Broadcast:
    """Writes each publish's chunk to every parked stream in one pass; see the module
    docstring for the rule. The cache's publish hook tells it of publishes (``published``):
    a burst of publishes in one turn of the loop is one pass."""

    def __init__(self, streams: WatchStreams) -> None:
        self._streams = streams
        # Weak: a stream dropped unclosed (its connection lost before the answer was sent)
        # is collected.
        self._members: weakref.WeakSet[_Stream] = weakref.WeakSet()
        self._parked: dict[_Stream, asyncio.Future[None]] = {}
        """Streams whose iterator waits for the broadcast (``park``), and what wakes it."""
        self._pass: asyncio.Handle | None = None  # the pass due after the last publish
        self._timer: asyncio.TimerHandle | None = None  # the next bookmark due
        self._timer_at = math.inf

    def join(self, stream: _Stream) -> None:
        self._members.add(stream)

    def leave(self, stream: _Stream) -> None:
        """A stream closed; with the last one the bookmark timer stops."""
        self._members.discard(stream)
        self._wake(stream)
        if not self._members:
            self._stop()

    def _stop(self) -> None:
        """No stream left: nothing to broadcast, no bookmark due."""
        if self._pass is not None:
            self._pass.cancel()
            self._pass = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf

    def published(self) -> None:
        """The cache published (its hook, on the loop): one pass soon, after the publishes
        of this turn of the loop (the hook's rule: a hook only schedules)."""
        if self._pass is None and self._parked:
            self._pass = asyncio.get_running_loop().call_soon(self._run_pass)

    def _run_pass(self) -> None:
        self._pass = None
        try:
            self.send_batches()
        except Exception:
            log.exception("the watch broadcast failed; each stream sends its own")
            self._wake_all()

    async def park(self, stream: _Stream) -> None:
        """Wait until the broadcast hands ``stream`` back to its iterator."""
        woken = asyncio.get_running_loop().create_future()
        self._parked[stream] = woken
        self._arm(stream.last_sent + self._streams.bookmark_interval)
        try:
            await woken
        finally:
            if self._parked.get(stream) is woken:
                del self._parked[stream]

    def _wake(self, stream: _Stream, error: ResyncRequiredError | None = None) -> None:
        """Hand ``stream`` back to its iterator (with the error its read raised)."""
        woken = self._parked.pop(stream, None)
        if woken is not None and not woken.done():
            stream.error = error
            woken.set_result(None)

    def _wake_all(self) -> None:
        for stream in list(self._parked):
            self._wake(stream)

    def send_batches(self) -> None:
        """The broadcast pass: each parked stream's unread changes, encoded once per range of
        the log and filter, written through its sink; the streams it may not serve are woken."""
        streams = self._streams
        counters = streams.counters
        now = asyncio.get_running_loop().time()
        # Keys hold the id of a batch's first change: the log holds that object for the
        # whole pass (nothing is published during it), so an id names one range of the log.
        encoded: dict[tuple[int, int, FilterKey], _Encoded] = {}
        for stream in list(self._parked):
            sink = stream.sink
            if sink is None:
                self._wake(stream)
                continue
            try:
                batch = stream.watch.read_nowait()
            except ResyncRequiredError as error:
                self._wake(stream, error)
                continue
            if not batch:
                continue
            key = (id(batch[0]), len(batch), stream.filter_key)
            found = encoded.get(key)
            if found is None:
                revision = cast(int, stream.watch.revision)
                found = encoded[key] = streams.encode(batch, stream.request, revision)
            if sink(found[0]):
                counters.changes_sent += found[1]
                counters.broadcast_writes += 1
                stream.last_sent = now

    def _arm(self, when: float) -> None:
        """Make sure the bookmark pass runs at ``when`` at the latest."""
        if when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = when
            self._timer = asyncio.get_running_loop().call_at(when, self.send_bookmarks)

    def send_bookmarks(self) -> None:
        """The bookmark pass: a bookmark to each parked stream due one (written, or the stream
        woken to send it itself); then the timer for the next one due."""
        self._timer, self._timer_at = None, math.inf
        now = asyncio.get_running_loop().time()
        interval = self._streams.bookmark_interval
        lines: dict[int, bytes] = {}
        following = math.inf
        for stream in list(self._parked):
            if not stream.bookmark_due(now):
                following = min(following, stream.last_sent + interval)
                continue
            sink = stream.sink
            if sink is None:
                self._wake(stream)
                continue
            revision = cast(int, stream.watch.revision)
            line = lines.get(revision)
            if line is None:
                line = lines[revision] = bookmark_line(revision)
            if sink(line):
                self._streams.counters.broadcast_writes += 1
                stream.last_sent = now
                following = min(following, now + interval)
        if following < math.inf:
            self._arm(following)


class WatchStreams:
    """Opens the streams of one application's cache and counts them. ``broadcast`` (True by
    default): publishes reach parked streams in one pass (``_Broadcast``); False: every stream
    waits in its own watch (the per-stream path alone, the reference the broadcast is tested
    against)."""

    def __init__(
        self,
        cache: AsyncRuntimeCache,
        *,
        bookmark_interval: float = BOOKMARK_INTERVAL,
        max_unsent: int = MAX_UNSENT,
        wait: float = 10.0,
        broadcast: bool = True,
    ) -> None:
        if not bookmark_interval > 0:
            raise ValueError(f"bookmark_interval must be > 0 seconds, got {bookmark_interval!r}")
        self.cache = cache
        self.bookmark_interval = bookmark_interval
        self.max_unsent = max_unsent
        self._wait = wait
        self.counters = WatchCounters()
        self.broadcast = _Broadcast(self) if broadcast else None
        if self.broadcast is not None:
            broadcast_ = self.broadcast
            cache.on_publish(lambda publication: broadcast_.published())
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
        return lines

    def encode(self, batch: list[PodChange], request: WatchRequest, revision: int) -> _Encoded:
        """The chunk that sends ``batch`` to ``request``'s stream: its lines, then a bookmark
        at ``revision`` (the one they bring the stream to); and how many change lines."""
        lines = self.lines(batch, request)
        count = len(lines)
        lines.append(bookmark_line(revision))
        return b"".join(lines), count

    async def open(self, request: WatchRequest) -> Response:
        """The answer to a watch request: 200 and its stream, or the error (410, 503)."""
        headers = [("content-type", CONTENT_TYPE), ("cache-control", "no-store")]
        watch = self.cache.watch(request.since)
        try:
            first = await asyncio.wait_for(watch.next_batch(0), self._wait)
        except asyncio.CancelledError:  # the connection is gone: its cursor holds no history
            watch.close()
            raise
        except ResyncRequiredError as error:
            self.counters.resyncs += 1
            return _error(410, str(error), [])
        except (PodcacheError, TimeoutError) as exc:  # what the cache raises (§3 rules 3, 8)
            watch.close()
            failure = failure_of(type(exc)).http_error(exc, wait=self._wait)
            return _error(failure.status, failure.message, failure.headers)
        revision = cast(int, watch.revision)
        headers.append(("x-podcache-revision", str(revision)))
        chunks = self.first_chunks(first, request, revision)
        stream: AsyncIterator[bytes] = _Stream(self, watch, request, chunks)
        # A chunk is written at once, and one can hold every pod of a large node (megabytes:
        # the first, or a batch in which every pod changed): the bound is on what the client
        # leaves unread beyond two listings.
        bound = self.max_unsent + 2 * self._listing_size
        return Response(200, headers, stream=stream, max_unsent=bound)

    def first_chunks(
        self, first: list[PodChange], request: WatchRequest, revision: int
    ) -> list[bytes]:
        """The first chunks: the first batch's lines, then its bookmark. An unfiltered first
        batch (every pod) is encoded once per revision for every watch opened at it, and sent
        as a chunk of its own: every stream opened at that revision holds the one object."""
        if first and request.since is None and not request.namespace and not request.selectors:
            cached = self._first
            if cached is None or cached[0] != revision:
                cached = self._first = (revision, b"".join(self.lines(first, request)))
                self._listing_size = len(cached[1])
            self.counters.changes_sent += len(first)
            return [cached[1], bookmark_line(revision)]
        chunk, count = self.encode(first, request, revision)
        self.counters.changes_sent += count
        return [chunk]


def _error(status: int, message: str, extra_headers: list[tuple[str, str]]) -> Response:
    return Response(status, [("content-type", JSON), *extra_headers], error_body(status, message))
