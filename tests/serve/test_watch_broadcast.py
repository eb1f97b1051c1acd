"""The watch broadcast against the per-stream path: identical bytes for random changes and
filters (in process, and over real sockets), and each hand-over to the per-stream path (no
sink, a watcher too far behind, bookmarks, the unsent bound, shutdown).

Two ``WatchStreams`` over one cache, one with the broadcast (the default) and one without,
see the same publishes: a stream's bytes must not depend on which path carried them.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import AsyncRuntimeCache, FakeRuntime, Pod
from podcache.serve.query import LabelSelector
from podcache.serve.response import Response
from podcache.serve.watchstream import WatchRequest, WatchStreams
from podcache.watchjson import bookmark_line
from tests.serve.test_http1 import Served, serving
from tests.serve.test_watch_stream import Stream

# -- a small world of pods and filters -----------------------------------------------------------

UIDS = [f"u{n}" for n in range(8)]
NAMESPACES = ["a", "b"]
APPS = ["web", "db", None]

PodSpec = tuple[str, str | None, int]  # namespace, app label, version
World = Mapping[str, PodSpec]  # uid -> spec

worlds = st.dictionaries(
    st.sampled_from(UIDS),
    st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(APPS), st.integers(0, 2)),
    max_size=len(UIDS),
)
FilterSpec = tuple[str | None, str | None]  # namespace, label selector
filters = st.tuples(
    st.sampled_from([None, *NAMESPACES]), st.sampled_from([None, "app=web", "app", "app=db"])
)


def pod(uid: str, spec: PodSpec) -> Pod:
    namespace, app, version = spec
    labels = {} if app is None else {"app": app}
    return Pod(
        id=uid,
        name=f"{uid}-v{version}",
        namespace=namespace,
        created_at=int(uid[1:]),
        labels=labels,
    )


def pods_of(world: World) -> list[Pod]:
    return [pod(uid, spec) for uid, spec in sorted(world.items())]


def request(spec: FilterSpec, since: int | None) -> WatchRequest:
    namespace, label = spec
    selectors = () if label is None else (LabelSelector.parse(label),)
    return WatchRequest("/pods", since, namespace, selectors)


def random_world(rng: random.Random) -> World:
    chosen = rng.sample(UIDS, rng.randint(0, len(UIDS)))
    return {uid: (rng.choice(NAMESPACES), rng.choice(APPS), rng.randint(0, 2)) for uid in chosen}


# -- in process: a collecting sink stands for the HTTP server ------------------------------------


class FakeConnection:
    """What ``http1`` does with a stream, in memory: attaches a sink that records what the
    broadcast writes, and drains the iterator into the same record, as chunks."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.ended = False

    def sink(self, chunk: bytes) -> bool:
        if chunk:
            self.chunks.append(chunk)
        return True

    async def drain(self, stream: Any) -> None:
        attach = getattr(stream, "attach", None)
        if attach is not None:
            attach(self.sink)
        try:
            async for chunk in stream:
                self.sink(chunk)
        finally:  # as http1: the iterator is closed however its stream ends
            self.ended = True
            await stream.aclose()

    def ends_with_bookmark(self, revision: int) -> bool:
        return bool(self.chunks) and self.chunks[-1].endswith(bookmark_line(revision))

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in b"".join(self.chunks).splitlines()]


async def settle(connections: list[FakeConnection], revision: int) -> None:
    """Until every stream has its chunk for ``revision`` (each batch ends with a bookmark,
    filtered out or not)."""
    for _ in range(10_000):
        if all(c.ends_with_bookmark(revision) for c in connections):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"the streams never reached revision {revision}")


async def publish(fake: FakeRuntime, cache: AsyncRuntimeCache, world: World) -> int:
    fake.set_pods(pods_of(world))
    await cache.force_update_if_older(time.monotonic())
    pods = await cache.get_pods()
    return pods.revision


async def side_by_side(
    first: World,
    steps: list[World],
    specs: list[tuple[FilterSpec, bool]],
    *,
    settled: bool,
) -> tuple[list[FakeConnection], list[FakeConnection], WatchStreams]:
    """Streams opened alike on both paths, then ``steps`` published (each one read by every
    stream before the next when ``settled``, else in bursts of two)."""
    fake = FakeRuntime(pods_of(first))
    cache = AsyncRuntimeCache(fake, 1e9)
    revision = (await cache.get_pods()).revision
    broadcast = WatchStreams(cache, bookmark_interval=1e6)
    per_stream = WatchStreams(cache, bookmark_interval=1e6, broadcast=False)
    sides: tuple[list[FakeConnection], list[FakeConnection]] = ([], [])
    tasks = []
    for streams, connections in zip((broadcast, per_stream), sides, strict=True):
        for spec, with_since in specs:
            response = await streams.open(request(spec, revision if with_since else None))
            assert isinstance(response, Response) and response.stream is not None
            connection = FakeConnection()
            connections.append(connection)
            tasks.append(asyncio.create_task(connection.drain(response.stream)))
    everyone = [*sides[0], *sides[1]]
    await settle(everyone, revision)
    for n, world in enumerate(steps):
        revision = await publish(fake, cache, world)
        if settled or n % 2 == 1 or n == len(steps) - 1:
            await settle(everyone, revision)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await cache.aclose()
    return sides[0], sides[1], broadcast


@settings(max_examples=60, deadline=None)
@given(
    first=worlds,
    steps=st.lists(worlds, min_size=1, max_size=8),
    specs=st.lists(st.tuples(filters, st.booleans()), min_size=1, max_size=4),
)
def test_broadcast_and_per_stream_send_identical_bytes(
    first: World, steps: list[World], specs: list[tuple[FilterSpec, bool]]
) -> None:
    with_broadcast, alone, streams = asyncio.run(side_by_side(first, steps, specs, settled=True))
    for one, other in zip(with_broadcast, alone, strict=True):
        assert one.chunks == other.chunks
    changed = any(a != b for a, b in zip([first, *steps], steps, strict=False))
    assert (streams.counters.broadcast_writes > 0) == changed  # the broadcast carried them


@settings(max_examples=30, deadline=None)
@given(
    first=worlds,
    steps=st.lists(worlds, min_size=2, max_size=8),
    specs=st.lists(st.tuples(filters, st.booleans()), min_size=1, max_size=3),
)
def test_in_bursts_the_lines_are_the_same_and_bookmarks_fall_on_revisions(
    first: World, steps: list[World], specs: list[tuple[FilterSpec, bool]]
) -> None:
    """Publishes faster than the streams are read: a stream may send two revisions in one
    chunk with one bookmark, on either path; the change lines are the same, in order."""
    with_broadcast, alone, _ = asyncio.run(side_by_side(first, steps, specs, settled=False))
    for one, other in zip(with_broadcast, alone, strict=True):
        lines, reference = one.lines(), other.lines()
        assert [x for x in lines if x["type"] != "BOOKMARK"] == [
            x for x in reference if x["type"] != "BOOKMARK"
        ]
        assert lines[-1] == reference[-1] and lines[-1]["type"] == "BOOKMARK"
        marks = [x["revision"] for x in lines if x["type"] == "BOOKMARK"]
        assert marks == sorted(marks)


def test_a_stream_without_a_sink_is_woken_for_each_publish_and_bookmark() -> None:
    """An iterator drained by a server that does not attach (ASGI, a test) gets everything
    by the per-stream path."""

    async def scenario() -> tuple[list[dict[str, Any]], WatchStreams]:
        fake = FakeRuntime(pods_of({"u1": ("a", "web", 0)}))
        cache = AsyncRuntimeCache(fake, 1e9)
        await cache.get_pods()
        streams = WatchStreams(cache, bookmark_interval=0.3)
        response = await streams.open(request((None, None), None))
        assert response.stream is not None
        seen: list[bytes] = [await anext(response.stream), await anext(response.stream)]
        stream = response.stream

        async def read() -> bytes:
            return await anext(stream)

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.01)  # parked
        await publish(fake, cache, {"u1": ("a", "web", 1)})
        seen.append(await asyncio.wait_for(reader, 5))
        seen.append(await asyncio.wait_for(anext(response.stream), 5))  # a lone bookmark
        await response.stream.aclose()  # type: ignore[attr-defined]
        await cache.aclose()
        return [json.loads(line) for line in b"".join(seen).splitlines()], streams

    lines, streams = asyncio.run(scenario())
    assert [(x["type"], x["revision"]) for x in lines] == [
        ("ADDED", 1),
        ("BOOKMARK", 1),
        ("MODIFIED", 2),
        ("BOOKMARK", 2),
        ("BOOKMARK", 2),
    ]
    assert streams.counters.broadcast_writes == 0 and streams.counters.open == 0


def test_a_parked_stream_too_far_behind_gets_the_error_line_and_others_go_on() -> None:
    """One publish of more than max_lag changes: the broadcast hands the error to the
    stream (ERROR line, the end), follows on itself, and later streams are served by it."""

    async def scenario() -> tuple[FakeConnection, FakeConnection, WatchStreams]:
        fake = FakeRuntime(pods_of({"u1": ("a", None, 0)}))
        cache = AsyncRuntimeCache(fake, 1e9, max_lag=2)
        await cache.get_pods()
        streams = WatchStreams(cache, bookmark_interval=1e6)
        lagging = FakeConnection()
        response = await streams.open(request((None, None), None))
        drained = asyncio.create_task(lagging.drain(response.stream))
        await settle([lagging], 1)
        big = {uid: ("b", "web", 1) for uid in UIDS}  # 8 changes in one revision
        await publish(fake, cache, big)
        await asyncio.wait_for(drained, 5)
        later = FakeConnection()
        response = await streams.open(request((None, None), None))
        task = asyncio.create_task(later.drain(response.stream))
        await settle([later], 2)
        writes = streams.counters.broadcast_writes
        revision = await publish(fake, cache, {**big, "u1": ("a", "db", 2)})
        await settle([later], revision)
        assert streams.counters.broadcast_writes == writes + 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cache.aclose()
        return lagging, later, streams

    lagging, later, streams = asyncio.run(scenario())
    last = lagging.lines()[-1]
    assert last["type"] == "ERROR" and last["code"] == 410 and "max_lag 2" in last["message"]
    assert lagging.ended
    assert later.lines()[-2]["type"] == "MODIFIED"
    assert streams.counters.cut_off == 1 and streams.counters.resyncs == 1


def test_the_broadcast_writes_lone_bookmarks_and_its_watch_closes_with_the_last_stream() -> None:
    async def scenario() -> tuple[FakeConnection, WatchStreams, int]:
        fake = FakeRuntime(pods_of({}))
        cache = AsyncRuntimeCache(fake, 1e9)
        await cache.get_pods()
        streams = WatchStreams(cache, bookmark_interval=0.05)
        connection = FakeConnection()
        response = await streams.open(request((None, None), 0))
        task = asyncio.create_task(connection.drain(response.stream))
        await asyncio.sleep(0.4)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
        cursors = len(cache._core.changes.cursors)
        await cache.aclose()
        return connection, streams, cursors

    connection, streams, cursors = asyncio.run(scenario())
    marks = connection.lines()
    assert 4 <= len(marks) <= 10 and all(x == {"type": "BOOKMARK", "revision": 0} for x in marks)
    assert streams.counters.broadcast_writes >= 3  # all but the first and maybe one woken
    assert cursors == 0  # the broadcast's own watch closed too


# -- over real sockets -------------------------------------------------------------------------


@contextmanager
def two_paths(
    fake: FakeRuntime,
) -> Iterator[tuple[Served, AsyncRuntimeCache, WatchStreams, list[WatchRequest]]]:
    """One cache; ``/b/N`` opens the Nth request of the list with the broadcast, ``/p/N``
    without."""
    cache = AsyncRuntimeCache(fake, 1e9)
    wanted: list[WatchRequest] = []
    paths: dict[str, WatchStreams] = {}

    async def respond(method: str, path: str, query: str, headers: Any) -> Response:
        _, which, number = path.split("/")
        return await paths[which].open(wanted[int(number)])

    with serving(respond) as served:

        async def build() -> WatchStreams:
            await cache.get_pods()
            paths["b"] = WatchStreams(cache, bookmark_interval=1e6)
            paths["p"] = WatchStreams(cache, bookmark_interval=1e6, broadcast=False)
            return paths["b"]

        streams = served.loop.run(build())
        yield served, cache, streams, wanted
        served.loop.run(cache.aclose())


def read_to(stream: Stream, revision: int) -> list[bytes]:
    """Chunks up to the one ending with a bookmark at ``revision``."""
    chunks = [stream.chunk()]
    while not chunks[-1].endswith(bookmark_line(revision)):
        chunks.append(stream.chunk())
    return chunks


def test_over_sockets_both_paths_send_the_same_chunks() -> None:
    rng = random.Random(14)
    fake = FakeRuntime(pods_of(random_world(rng)))
    with two_paths(fake) as (served, cache, streams, wanted):
        revision = served.loop.run(cache.get_pods()).revision
        pairs = []
        for n in range(40):  # 40 streams a side, random filters, with and without since
            spec = (rng.choice([None, *NAMESPACES]), rng.choice([None, "app=web", "app"]))
            wanted.append(request(spec, revision if rng.random() < 0.5 else None))
            pairs.append((Stream(served.port, f"/b/{n}"), Stream(served.port, f"/p/{n}")))
        received: list[tuple[list[bytes], list[bytes]]] = [
            (read_to(b, revision), read_to(p, revision)) for b, p in pairs
        ]
        for _ in range(15):
            fake.set_pods(pods_of(random_world(rng)))
            before = revision
            revision = served.loop.run(publish_now(cache))
            if revision == before:
                continue
            for (b, p), (from_b, from_p) in zip(pairs, received, strict=True):
                from_b.extend(read_to(b, revision))
                from_p.extend(read_to(p, revision))
        for (b, p), (from_b, from_p) in zip(pairs, received, strict=True):
            assert from_b == from_p
            b.close()
            p.close()
        assert streams.counters.broadcast_writes > 0


async def publish_now(cache: AsyncRuntimeCache) -> int:
    await cache.force_update_if_older(time.monotonic())
    return (await cache.get_pods()).revision


def test_a_non_reading_client_is_cut_off_by_the_broadcast_write() -> None:
    big = {uid: ("a", "web", 0) for uid in UIDS}
    fake = FakeRuntime(pods_of(big))
    with two_paths(fake) as (served, cache, streams, wanted):
        wanted.append(request((None, None), served.loop.run(cache.get_pods()).revision))
        streams.max_unsent = 4096
        stream = Stream(served.port, "/b/0", rcvbuf=4096)
        for version in range(1, 400):
            fake.set_pods(pods_of({uid: ("a", "web", version) for uid in UIDS}))
            served.loop.run(publish_now(cache))
            if streams.counters.cut_off:
                break
        assert streams.counters.cut_off == 1 and streams.counters.broadcast_writes > 0
        deadline = time.monotonic() + 5
        while streams.counters.open:
            assert time.monotonic() < deadline, "the cut-off stream is still open"
            time.sleep(0.02)
        stream.close()


def test_shutdown_ends_parked_streams_with_the_last_chunk() -> None:
    fake = FakeRuntime(pods_of({"u1": ("a", "web", 0)}))
    with two_paths(fake) as (served, cache, streams, wanted):
        wanted.append(request((None, None), None))
        opened = [Stream(served.port, "/b/0") for _ in range(20)]
        for stream in opened:
            read_to(stream, 1)
        fake.set_pods(pods_of({"u1": ("a", "web", 1)}))
        served.loop.run(publish_now(cache))
        for stream in opened:
            read_to(stream, 2)
        assert streams.counters.broadcast_writes == 20
        served.loop.run(served.http.shutdown(2.0))
        for stream in opened:
            while not stream.ended:
                stream.chunk()
            stream.close()
        assert streams.counters.open == 0


def test_a_stream_dropped_unclosed_leaves_no_cursor() -> None:
    """An answer dropped before it was sent (its connection lost) is never iterated nor
    closed: once collected, it keeps no cursor in the log (the broadcast holds none: the
    publish hook tells it of publishes)."""

    async def scenario() -> tuple[int, int]:
        fake = FakeRuntime(pods_of({"u1": ("a", "web", 0)}))
        cache = AsyncRuntimeCache(fake, 1e9)
        await cache.get_pods()
        streams = WatchStreams(cache)
        response = await streams.open(request((None, None), None))
        await asyncio.sleep(0.01)
        assert len(cache._core.changes.cursors) == 1  # the stream's own
        del response
        gc.collect()
        await publish(fake, cache, {"u1": ("a", "web", 1)})
        await asyncio.sleep(0.01)
        left = cache._core.changes.prune()
        await cache.aclose()
        return left, streams.counters.open

    assert asyncio.run(scenario()) == (0, 0)
