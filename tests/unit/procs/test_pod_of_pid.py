"""``pod_of_pid`` on both cache twins, over a fake runtime, a fake clock and a fixture ``/proc``:
found, sandboxes, pod-only paths, host processes, vanished processes, containers newer than the
snapshot (one refresh at most) and unknown ones (no refresh when the snapshot is newer than the
process), PID reuse with the memo; and a differential property test of the two twins."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache import (
    AsyncFakeRuntime,
    AsyncRuntimeCache,
    Container,
    ContainerID,
    ContainerState,
    FakeRuntime,
    Pod,
    PodProcess,
    RuntimeCache,
    procs,
)
from podcache.cache import pids
from podcache.cache.pids import OwnerMemo, UnknownIDs, alookup_pod, lookup_pod
from tests.unit.procs.tree import ProcTree, cid, hybrid, uid

UPTIME = 5000.0  # seconds since boot in the fixture tree
TICKS = procs.CLOCK_TICKS


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pod(n: int, *, containers: int = 1) -> Pod:
    return Pod(
        id=uid(n),
        name=f"pod-{n}",
        namespace="ns",
        created_at=n,
        containers=[
            Container(
                id=ContainerID("containerd", cid(n * 100 + i)),
                name=f"c{i}",
                state=ContainerState.RUNNING,
            )
            for i in range(containers)
        ],
        sandboxes=[
            Container(id=ContainerID("containerd", cid(n * 100 + 99)), state=ContainerState.RUNNING)
        ],
    )


class Twin:
    """One synchronous face over either cache: ``lookup`` returns the LookupResult."""

    name = ""
    fake: Any
    clock: Clock

    def lookup(self, pid: int, proc_root: str) -> pids.LookupResult:
        raise NotImplementedError

    def pod_of_pid(self, pid: int, proc_root: str) -> PodProcess | None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Threads(Twin):
    name = "threads"

    def __init__(self, clock: Clock, period: float, memo: OwnerMemo) -> None:
        self.fake = FakeRuntime()
        self.cache = RuntimeCache(self.fake, period, clock=clock)
        self.clock = clock
        self.memo = memo

    def lookup(self, pid: int, proc_root: str) -> pids.LookupResult:
        return lookup_pod(self.cache, self.clock, pid, proc_root=proc_root, memo=self.memo)

    def pod_of_pid(self, pid: int, proc_root: str) -> PodProcess | None:
        return self.cache.pod_of_pid(pid, proc_root=proc_root, timeout=5.0)


class Tasks(Twin):
    name = "asyncio"

    def __init__(self, clock: Clock, period: float, memo: OwnerMemo) -> None:
        self.loop = asyncio.new_event_loop()
        self.fake = AsyncFakeRuntime()
        self.cache = AsyncRuntimeCache(self.fake, period, clock=clock)
        self.clock = clock
        self.memo = memo

    def lookup(self, pid: int, proc_root: str) -> pids.LookupResult:
        return self.loop.run_until_complete(
            alookup_pod(self.cache, self.clock, pid, proc_root=proc_root, memo=self.memo)
        )

    def pod_of_pid(self, pid: int, proc_root: str) -> PodProcess | None:
        return self.loop.run_until_complete(
            self.cache.pod_of_pid(pid, proc_root=proc_root, timeout=5.0)
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.cache.aclose())
        self.loop.close()


TWINS = [Threads, Tasks]


@pytest.fixture(params=TWINS, ids=lambda t: t.name)
def twin(request: pytest.FixtureRequest) -> Iterator[Twin]:
    made: Twin = request.param(Clock(), 10.0, OwnerMemo())
    yield made
    made.close()


@pytest.fixture
def tree(tmp_path: Path) -> ProcTree:
    return ProcTree(tmp_path, uptime=UPTIME)


def started_ago(seconds: float) -> int:
    """Start ticks of a process that started ``seconds`` before the tree's uptime."""
    return int((UPTIME - seconds) * TICKS)


def container_path(p: Pod, i: int = 0) -> list[str]:
    return hybrid(f"/kubepods/burstable/pod{p.id}/{p.containers[i].id.id}")


def test_a_known_container(twin: Twin, tree: ProcTree) -> None:
    p = pod(1, containers=2)
    twin.fake.set_pods([pod(2), p])
    tree.add(10, container_path(p, 1), start_ticks=started_ago(60))
    found = twin.pod_of_pid(10, tree.path)
    assert found == PodProcess(p, p.containers[1], 10)
    assert twin.fake.calls == 1  # the first fill only


def test_a_sandbox_process(twin: Twin, tree: ProcTree) -> None:
    p = pod(1)
    twin.fake.set_pods([p])
    tree.add(11, hybrid(f"/kubepods/pod{p.id}/{p.sandboxes[0].id.id}"), comm="pause")
    assert twin.pod_of_pid(11, tree.path) == PodProcess(p, p.sandboxes[0], 11)


def test_pod_only_path_answers_the_pod_without_a_container(twin: Twin, tree: ProcTree) -> None:
    p = pod(1)
    twin.fake.set_pods([p])
    tree.add(
        12, f"/kubepods.slice/kubepods-pod{p.id.replace('-', '_')}.slice/crio-conmon-{cid(5)}.scope"
    )
    assert twin.pod_of_pid(12, tree.path) == PodProcess(p, None, 12)


def test_a_host_process_asks_the_runtime_nothing(twin: Twin, tree: ProcTree) -> None:
    twin.fake.set_pods([pod(1)])
    tree.add(13, hybrid("/system.slice/sshd.service"))
    result = twin.lookup(13, tree.path)
    assert (result.process, result.outcome, twin.fake.calls) == (None, "not_in_container", 0)


def test_a_vanished_process(twin: Twin, tree: ProcTree) -> None:
    with pytest.raises(ProcessLookupError):
        twin.pod_of_pid(14, tree.path)
    assert twin.fake.calls == 0


def test_a_container_newer_than_the_snapshot_costs_one_refresh(twin: Twin, tree: ProcTree) -> None:
    old, new = pod(1), pod(2)
    twin.fake.set_pods([old])
    tree.add(1, container_path(old), start_ticks=started_ago(100))
    assert twin.pod_of_pid(1, tree.path) is not None  # snapshot at clock 1000
    twin.fake.set_pods([new, old])
    twin.clock.now += 2.0
    tree.set_uptime(UPTIME + 2.0)
    tree.add(2, container_path(new), start_ticks=started_ago(-1.0))  # started 1 s ago
    result = twin.lookup(2, tree.path)
    assert (result.process, result.refreshed) == (PodProcess(new, new.containers[0], 2), True)
    assert twin.fake.calls == 2


def test_unknown_and_older_than_the_snapshot_costs_no_refresh(twin: Twin, tree: ProcTree) -> None:
    twin.fake.set_pods([pod(1)])
    tree.add(3, hybrid(f"/kubepods/pod{uid(9)}/{cid(9)}"), start_ticks=started_ago(30))
    result = twin.lookup(3, tree.path)
    assert (result.process, result.outcome, result.refreshed) == (None, "unknown", False)
    assert twin.fake.calls == 1


def test_unknown_and_newer_refreshes_once_then_never_again(twin: Twin, tree: ProcTree) -> None:
    twin.fake.set_pods([pod(1)])
    tree.add(4, hybrid(f"/kubepods/pod{pod(1).id}/{cid(1)}"), start_ticks=started_ago(50))
    twin.lookup(4, tree.path)  # fills the snapshot at clock 1000
    twin.clock.now += 1.0
    tree.set_uptime(UPTIME + 1.0)
    tree.add(5, hybrid(f"/kubepods/pod{uid(9)}/{cid(9)}"), start_ticks=started_ago(-0.5))
    first = twin.lookup(5, tree.path)
    second = twin.lookup(5, tree.path)
    assert (first.process, first.refreshed, second.process, second.refreshed) == (
        None,
        True,
        None,
        False,
    )
    assert twin.fake.calls == 2


def test_a_pod_uid_that_disagrees_with_the_runtime_is_no_answer(twin: Twin, tree: ProcTree) -> None:
    p = pod(1)
    twin.fake.set_pods([p])
    tree.add(6, hybrid(f"/kubepods/pod{uid(77)}/{p.containers[0].id.id}"))
    assert twin.pod_of_pid(6, tree.path) is None


def test_a_container_above_a_pod_like_subcgroup_is_answered_as_itself(
    twin: Twin, tree: ProcTree
) -> None:
    """A container that made ``.../<its id>/pod<B>/<B's container>`` is still itself."""
    mine, victim = pod(1), pod(2)
    twin.fake.set_pods([mine, victim])
    path = f"/custom/{mine.containers[0].id.id}/pod{victim.id}/{victim.containers[0].id.id}"
    tree.add(7, path)
    assert twin.pod_of_pid(7, tree.path) == PodProcess(mine, mine.containers[0], 7)


def test_memo_skips_the_cgroup_but_never_survives_pid_reuse(
    twin: Twin, tree: ProcTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pod(1), pod(2)
    twin.fake.set_pods([a, b])
    tree.add(8, container_path(a), start_ticks=started_ago(10))
    reads: list[str] = []
    real = procs._reader

    def reader(path: str, limit: int) -> bytes:
        reads.append(Path(path).name)
        return real(path, limit)

    monkeypatch.setattr(procs, "_reader", reader)
    assert twin.pod_of_pid(8, tree.path) == PodProcess(a, a.containers[0], 8)
    assert reads == ["stat", "stat", "cgroup", "stat"]
    reads.clear()
    assert twin.pod_of_pid(8, tree.path) == PodProcess(a, a.containers[0], 8)
    assert reads == ["stat"]  # the memo: identity only
    # PID 8 exits; a new process 8 starts in pod b: a new identity, never a's answer.
    tree.add(8, container_path(b), start_ticks=started_ago(1))
    assert twin.pod_of_pid(8, tree.path) == PodProcess(b, b.containers[0], 8)


def test_memo_is_bounded() -> None:
    memo = OwnerMemo(limit=3)
    owner = procs.CgroupOwner(cid(1), uid(1))
    for pid in range(1, 5):
        memo.put("/proc", procs.ProcessIdentity(pid, 1), owner)
    assert len(memo) == 1  # starts over when full
    memo.put("/proc", procs.ProcessIdentity(9, 1), procs.CgroupOwner(None, uid(1)))
    assert memo.get("/proc", procs.ProcessIdentity(9, 1)) is None  # pod-only: never kept


def test_refresh_time_is_the_start_rounded_up_on_the_cache_clock(tree: ProcTree) -> None:
    tree.add(1, "/", start_ticks=started_ago(2.5))
    identity = procs.read_identity(1, tree.path)
    t = procs.refresh_time(identity, tree.path, now=1000.0)
    assert t == pytest.approx(1000.0 - 2.5 + 1 / TICKS)
    assert t >= 1000.0 - 2.5  # never before the real start


# -- differential: both twins, one drawn history --------------------------------------------

steps = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(1, 6), st.floats(-1.0, 5.0)),  # pod n, age
        st.tuples(st.just("add"), st.integers(1, 6), st.just(0.0)),
        st.tuples(st.just("remove"), st.integers(1, 6), st.just(0.0)),
        st.tuples(st.just("tick"), st.just(0), st.floats(0.0, 3.0)),
        st.tuples(st.just("look"), st.integers(1, 8), st.just(0.0)),
    ),
    max_size=25,
)


class World:
    """The drawn history's state: the fixture tree, the listed pods and both twins' clocks."""

    def __init__(self, root: Path) -> None:
        self.tree = ProcTree(root, uptime=UPTIME)
        self.uptime = UPTIME
        self.clocks = [Clock(), Clock()]
        self.twins: list[Twin] = [
            Threads(self.clocks[0], 2.0, OwnerMemo()),
            Tasks(self.clocks[1], 2.0, OwnerMemo()),
        ]
        self.listed: dict[int, Pod] = {}

    def start(self, n: int, age: float) -> None:
        """A process of pod n's container, started ``age`` seconds ago."""
        start_ticks = int((self.uptime - age) * TICKS)
        self.tree.add(n, container_path(pod(n)), start_ticks=start_ticks)

    def add(self, n: int, _: float) -> None:
        self.listed[n] = pod(n)

    def remove(self, n: int, _: float) -> None:
        self.listed.pop(n, None)

    def tick(self, _: int, seconds: float) -> None:
        self.uptime += seconds
        self.tree.set_uptime(self.uptime)
        for clock in self.clocks:
            clock.now += seconds

    def look(self, n: int, _: float) -> None:
        """Both twins look pid n up: the same answer, the same runtime calls; and an answer
        is always pod n's (the pod its cgroup names), never another's."""
        outcomes = [self._look(t, n) for t in self.twins]
        assert outcomes[0] == outcomes[1]
        found = outcomes[0][0]
        if isinstance(found, PodProcess):
            assert found.pod == pod(n) and found.pid == n

    def _look(self, twin: Twin, n: int) -> tuple[object, ...]:
        twin.fake.set_pods(sorted(self.listed.values(), key=lambda p: p.id))
        try:
            r = twin.lookup(n, self.tree.path)
        except ProcessLookupError:
            return ("gone", twin.fake.calls)
        return (r.process, r.outcome, r.refreshed, twin.fake.calls)

    def close(self) -> None:
        for twin in self.twins:
            twin.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps)
def test_twins_agree_and_never_answer_a_pod_the_runtime_does_not_list(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[str, int, float]]
) -> None:
    world = World(tmp_path_factory.mktemp("proc"))
    try:
        for op, n, value in history:
            getattr(world, op)(n, value)
    finally:
        world.close()


def test_processes_newer_than_a_refresh_in_flight_join_it_first(tree: ProcTree) -> None:
    """A refresh began (clock 1001) after the container was listed but before its process
    started (1001.5): the lookup waits for that refresh, finds the container in it, and asks
    for no second one."""
    import threading

    clock = Clock()
    fake = FakeRuntime([pod(1)])
    cache = RuntimeCache(fake, 10.0, clock=clock)
    cache.get_pods()
    new = pod(2)
    fake.set_pods([new, pod(1)])
    fake.block()
    clock.now = 1001.0
    reader = threading.Thread(target=cache.force_update_if_older, args=(1001.0,))
    reader.start()
    assert fake.wait_for_calls(2)
    clock.now = 1002.0
    tree.set_uptime(UPTIME + 2.0)
    tree.add(20, container_path(new), start_ticks=int((UPTIME + 1.5) * TICKS))
    answers: list[pids.LookupResult] = []
    looker = threading.Thread(
        target=lambda: answers.append(
            lookup_pod(cache, clock, 20, proc_root=tree.path, memo=OwnerMemo())
        )
    )
    looker.start()
    while cache.stats().joins < 1:  # the lookup is waiting for the refresh in flight
        threading.Event().wait(0.001)
    fake.release()
    looker.join(5)
    reader.join(5)
    assert answers and answers[0].process == PodProcess(new, new.containers[0], 20)
    assert fake.calls == 2  # the fill and the refresh in flight: none more


def test_pod_process_is_frozen_and_compared_by_value() -> None:
    import dataclasses

    p = pod(1)
    found = PodProcess(p, p.containers[0], 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.pid = 6  # type: ignore[misc]
    assert found == PodProcess(pod(1), pod(1).containers[0], 5)
    assert hash(found) == hash(PodProcess(pod(1), pod(1).containers[0], 5))
    qualified = p.containers[0].id.qualified  # a repr names the runtime: type://id
    assert repr(found) == f"PodProcess(pid=5, pod={p.id!r}, container='{qualified}')"


def test_unknown_ids_are_remembered_for_a_bounded_time_and_count() -> None:
    """An ID the runtime does not list is remembered ``keep_for`` seconds, and at
    most ``limit`` IDs are (then the memory starts over)."""
    unknown = UnknownIDs(limit=3, keep_for=10.0)
    unknown.add("a", 100.0)
    assert unknown.holds("a", 109.9) and not unknown.holds("a", 110.0)
    assert not unknown.holds("b", 100.0)
    for ident in "bc":
        unknown.add(ident, 100.0)
    assert len(unknown) == 3
    unknown.add("d", 100.0)  # past the limit: starts over
    assert len(unknown) == 1 and unknown.holds("d", 100.0) and not unknown.holds("a", 100.0)
