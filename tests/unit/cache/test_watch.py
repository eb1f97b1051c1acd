"""watch(): revisions, the first batch, resyncs, the refresher, abandoned and slow watchers.

The stateful test (test_watch_stateful.py) checks the changes themselves against a model;
these check one behaviour each, for both drivers where the behaviour is shared, and the
threads' concurrency claims with real threads.
"""

from __future__ import annotations

import asyncio
import gc
import pickle
import threading
import time
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podcache import (
    AsyncFakeRuntime,
    AsyncRuntimeCache,
    ChangeType,
    Container,
    ContainerState,
    FakeRuntime,
    Pod,
    PodcacheError,
    PodList,
    ResyncRequiredError,
    RuntimeCache,
)
from podcache.cache.changes import (
    HISTORY_CAP,
    ChangeLog,
    Tracker,
    diff,
    moved,
    replay,
    visible,
)
from tests.unit.cache.conftest import MakeDriver
from tests.unit.cache.drivers import FakeClock, make_pod


class Boom(Exception):
    """The runtime failed."""


def test_revision_counts_distinct_snapshots(make: MakeDriver, clock: FakeClock) -> None:
    d = make(1.0)
    d.fake.set_pods([make_pod(1)])
    first = d.get()
    assert first.revision == 1
    clock.advance(2)
    d.fake.set_pods([make_pod(1)])  # equal pods, another object: a new snapshot, same revision
    second = d.get()
    assert second is not first and second.revision == 1
    clock.advance(2)
    d.fake.set_pods([make_pod(1), make_pod(2)])
    assert d.get().revision == 2


def test_an_empty_first_snapshot_is_revision_0(make: MakeDriver) -> None:
    d = make(1.0)
    assert d.get().revision == 0


def test_watch_without_since_starts_with_the_snapshot(make: MakeDriver) -> None:
    d = make(1.0)
    d.fake.set_pods([make_pod(1), make_pod(2)])
    batch = d.watch().read()
    assert {(c.type, c.pod.id, c.revision) for c in batch} == {
        (ChangeType.ADDED, "uid-1", 1),
        (ChangeType.ADDED, "uid-2", 1),
    }


def test_watch_without_since_raises_the_getters_error(make: MakeDriver) -> None:
    d = make(1.0)
    d.fake.error = Boom()
    with pytest.raises(Boom):
        d.watch().read()


def test_since_the_current_revision_yields_nothing_until_a_change(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(1.0)
    d.fake.set_pods([make_pod(1)])
    d.get()
    w = d.watch(since=1)
    assert w.read() == []
    d.fake.set_pods([])
    clock.advance(2)
    d.get()
    assert [(c.type, c.pod.id, c.revision) for c in w.read()] == [(ChangeType.DELETED, "uid-1", 2)]


@pytest.mark.parametrize("since", [-1, 5])
def test_since_out_of_range_requires_a_resync(make: MakeDriver, since: int) -> None:
    d = make(1.0)
    d.fake.set_pods([make_pod(1)])
    d.get()
    with pytest.raises(ResyncRequiredError) as caught:
        d.watch(since=since).read()
    assert isinstance(caught.value, PodcacheError)
    assert caught.value.since == since and caught.value.revision == 1
    assert f"revision {since}" in str(caught.value)
    assert pickle.loads(pickle.dumps(caught.value)).args == caught.value.args


def test_since_must_be_an_int(make: MakeDriver) -> None:
    d = make(1.0)
    with pytest.raises(TypeError, match="since"):
        d.watch(since="3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="since"):
        d.watch(since=True)


@pytest.mark.parametrize(("option", "value"), [("history", -1), ("max_lag", 0)])
def test_bounds_are_checked(make: MakeDriver, option: str, value: int) -> None:
    with pytest.raises(ValueError, match=option):
        make(1.0, **{option: value})


def test_a_slow_watcher_resyncs_past_max_lag_and_a_fast_one_is_not_held(
    make: MakeDriver, clock: FakeClock
) -> None:
    d = make(1.0, max_lag=3)
    d.get()
    slow, fast = d.watch(since=0), d.watch(since=0)
    assert slow.read() == fast.read() == []
    for n in range(1, 5):  # four changes: one more than max_lag
        d.fake.set_pods([make_pod(n)] if n % 2 else [])
        clock.advance(2)
        d.get()
        assert len(fast.read()) == 1
    with pytest.raises(ResyncRequiredError, match="max_lag 3"):
        slow.read()
    assert slow.read() == []  # closed


def test_history_and_backlog_are_bounded() -> None:
    """However many changes, the log holds at most max(history, cap, max_lag) of them, with a
    watcher that never reads."""
    log = ChangeLog(history=10, history_age=1e9, max_lag=50)
    log.publish(PodList(), 0.0)
    never_reads = log.open(0)
    for n in range(HISTORY_CAP + 500):
        log.publish(PodList([make_pod(n)]), float(n))
        assert len(log) <= HISTORY_CAP
    assert log.oldest > 0
    with pytest.raises(ResyncRequiredError):
        log.read(never_reads)


def test_history_keeps_count_and_age() -> None:
    log = ChangeLog(history=3, history_age=10.0)
    for n in range(20):
        log.publish(PodList([make_pod(n)]), 0.0)
    assert len(log) == 20 * 2 - 1  # all young: nothing dropped (the first is one ADDED)
    log.publish(PodList(), 100.0)
    assert len(log) == 3  # all old now: the last three kept
    assert log.oldest == log.revision - 2  # revision 20's two changes and 21's one


def test_diff_gives_deletions_then_additions() -> None:
    pods = [make_pod(n) for n in range(3)]
    old = PodList(pods)
    assert diff(old, PodList(pods), 2) == []
    changed = PodList([pods[0], make_pod(7), pods[2]])
    assert [(c.type, c.pod.id) for c in diff(old, changed, 2)] == [
        (ChangeType.DELETED, "uid-1"),
        (ChangeType.ADDED, "uid-7"),
    ]


def test_podlist_revision_is_kept_by_pickle_and_ignored_by_equality() -> None:
    pods = PodList([make_pod(1)], revision=7)
    assert pods.revision == 7
    assert pickle.loads(pickle.dumps(pods)).revision == 7
    assert pods == PodList([make_pod(1)]) and PodList().revision == 0


# -- threads -----------------------------------------------------------------------------------


def _refresher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "podcache-watch-refresh"]


def _wait_for(predicate: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_open_watch_keeps_the_cache_fresh_and_closing_stops_it() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 0.05)
    before = set(_refresher_threads())
    with cache.watch() as watch:
        assert len(watch.next_batch(1)) == 1
        fake.set_pods([make_pod(2)])  # nobody calls get_pods: the refresher must notice
        changes = watch.next_batch(5)
        assert {(c.type, c.pod.id) for c in changes} == {
            (ChangeType.DELETED, "uid-1"),
            (ChangeType.ADDED, "uid-2"),
        }
    _wait_for(lambda: set(_refresher_threads()) <= before)
    calls = fake.calls
    time.sleep(0.3)
    assert fake.calls == calls  # back to refreshing on demand


def test_a_refresh_error_is_retried_and_the_watch_goes_on() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 0.05)
    with cache.watch() as watch:
        watch.next_batch(1)
        fake.error = Boom()
        _wait_for(lambda: cache.stats().errors >= 2)
        fake.error = None
        fake.set_pods([])
        assert [c.type for c in watch.next_batch(5)] == [ChangeType.DELETED]


def test_an_abandoned_watch_stops_the_refresher() -> None:
    fake = FakeRuntime([make_pod(1)])
    cache = RuntimeCache(fake, 0.05)
    before = set(_refresher_threads())
    for change in cache.watch():
        assert change.pod.id == "uid-1"
        break  # the iterator is dropped unclosed
    gc.collect()
    _wait_for(lambda: set(_refresher_threads()) <= before)
    assert not cache._core.changes.cursors


def test_close_from_another_thread_ends_a_blocked_iteration() -> None:
    cache = RuntimeCache(FakeRuntime([make_pod(1)]), 10.0)
    watch = cache.watch()
    got: list[str] = []

    def consume() -> None:
        got.extend(change.pod.id for change in watch)

    consumer = threading.Thread(target=consume)
    consumer.start()
    _wait_for(lambda: got == ["uid-1"])
    watch.close()
    consumer.join(5)
    assert not consumer.is_alive()


def test_many_threads_see_every_change_in_order() -> None:
    """Eight consumers read while the cache is refreshed from another thread: each rebuilds
    the same states, in the same order."""
    fake = FakeRuntime()
    clock = FakeClock()
    cache = RuntimeCache(fake, 1e9, clock=clock)
    cache.get_pods()
    watches = [cache.watch(since=0) for _ in range(8)]
    seen: list[list[tuple[str, str, int]]] = [[] for _ in watches]

    def consume(i: int) -> None:
        for change in watches[i]:
            seen[i].append((change.type, change.pod.id, change.revision))
            if len(seen[i]) == 1 + 199 * 2:  # one ADDED, then a DELETED and an ADDED each
                return

    consumers = [threading.Thread(target=consume, args=(i,)) for i in range(8)]
    for t in consumers:
        t.start()
    for n in range(1, 201):
        fake.set_pods([make_pod(n)])
        clock.advance(1)
        cache.force_update_if_older(clock())
    for t in consumers:
        t.join(10)
    assert all(s == seen[0] for s in seen)
    assert [r for _, _, r in seen[0]] == sorted(r for _, _, r in seen[0])
    assert len(seen[0]) == 1 + 199 * 2


# -- filtered streams --------------------------------------------------------------------------

_labelled = st.lists(
    st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "c"]), st.integers(0, 2)),
    max_size=6,
)


def _pods_of(spec: list[tuple[int, str, int]]) -> PodList:
    """One pod per distinct number, with label app=<letter> and a container state."""
    pods = {}
    for n, app, state in spec:
        pod = make_pod(n)
        pods[pod.id] = Pod(
            id=pod.id,
            name=pod.name,
            namespace=pod.namespace,
            created_at=pod.created_at,
            containers=[
                Container(id=pod.containers[0].id, state=list(ContainerState)[state]),
            ],
            labels={"app": app},
        )
    return PodList(pods.values())


@given(st.lists(_labelled, min_size=1, max_size=8), st.sampled_from(["a", "b", "c"]))
def test_a_filtered_stream_rebuilds_the_filtered_states(
    states: list[list[tuple[int, str, int]]], app: str
) -> None:
    def shown(pod: Pod) -> bool:
        return pod.label("app") == app

    previous: PodList | None = None
    rebuilt: dict[str, Pod] = {}
    for revision, spec in enumerate(states, 1):
        current = _pods_of(spec)
        changes = [visible(c, shown) for c in diff(previous, current, revision)]
        replay(rebuilt, [c for c in changes if c is not None])
        assert rebuilt == {pod.id: pod for pod in current if shown(pod)}
        previous = current


# -- the tracker against the plain diff --------------------------------------------------------

_step = st.lists(
    st.tuples(
        st.integers(0, 6),  # which UID
        st.sampled_from(["keep", "copy", "change"]),  # the same object, an equal one, another
    ),
    max_size=8,
)


@given(st.lists(_step, min_size=1, max_size=10))
def test_the_tracker_gives_the_changes_of_the_plain_diff(
    steps: list[list[tuple[int, str]]],
) -> None:
    """Snapshots that reuse objects, copy them, change them, and list a UID twice (which
    sends the tracker to its fallback): the same changes as ``diff``, the same state."""
    tracker = Tracker()
    previous: PodList | None = None
    objects: dict[int, Pod] = {}
    for revision, step in enumerate(steps, 1):
        pods = []
        for n, how in step:
            pod = objects.get(n)
            if pod is None or how == "change":
                pod = make_pod(n, containers=revision % 3)
            elif how == "copy":
                pod = msgspec.structs.replace(pod)  # equal, another object
            objects[n] = pod
            pods.append(pod)
        current = PodList(pods)
        got = tracker.update(current, revision)
        want = diff(previous, current, revision)
        assert sorted(map(repr, got)) == sorted(map(repr, want))
        assert tracker.state == {pod.id: pod for pod in reversed(pods)}  # the first wins
        previous = current


@given(
    st.integers(0, 120),
    st.lists(st.integers(0, 119), max_size=30),
    st.integers(0, 20),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_moved_finds_arrivals_and_departures_in_any_order(
    size: int, dropped: list[int], added: int, in_order: bool, rng: Any
) -> None:
    """Past SMALL pods the tuples are split by bisection: exact whether or not they are in the
    getters' order (newest first), which only makes it fast."""
    old = [make_pod(n) for n in range(size)]
    gone = {n for n in dropped if n < size}
    new = [pod for n, pod in enumerate(old) if n not in gone]
    new += [make_pod(1000 + n) for n in range(added)]
    for pods in (old, new):
        if in_order:
            pods.sort(key=lambda pod: (-pod.created_at, pod.id))
        else:
            rng.shuffle(pods)
    arrivals, departures = moved(tuple(old), tuple(new))
    assert {id(p) for p in arrivals} == {id(p) for p in new} - {id(p) for p in old}
    assert {id(p) for p in departures} == {id(p) for p in old} - {id(p) for p in new}
    assert len(arrivals) == added and len(departures) == len(gone)


def test_many_tasks_see_every_change_in_order() -> None:
    """A hundred asyncio watchers while the cache is refreshed: the same changes, in order."""

    async def scenario() -> list[list[tuple[str, str, int]]]:
        fake = AsyncFakeRuntime()
        clock = FakeClock()
        cache = AsyncRuntimeCache(fake, 1e9, clock=clock)
        await cache.get_pods()
        seen: list[list[tuple[str, str, int]]] = [[] for _ in range(100)]

        async def consume(i: int) -> None:
            async with cache.watch(since=0) as watch:
                async for change in watch:
                    seen[i].append((change.type, change.pod.id, change.revision))
                    if len(seen[i]) == 1 + 49 * 2:
                        return

        consumers = [asyncio.create_task(consume(i)) for i in range(100)]
        await asyncio.sleep(0)
        for n in range(1, 51):
            fake.set_pods([make_pod(n)])
            clock.advance(1)
            await cache.force_update_if_older(clock())
            if n % 7 == 0:
                await asyncio.sleep(0)  # some consumers fall behind, then catch up
        await asyncio.wait_for(asyncio.gather(*consumers), 10)
        await cache.aclose()
        return seen

    seen = asyncio.run(scenario())
    assert all(s == seen[0] for s in seen)
    assert [r for _, _, r in seen[0]] == sorted(r for _, _, r in seen[0])
