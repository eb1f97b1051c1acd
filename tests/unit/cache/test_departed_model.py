"""Every key a listed pod ever held, over intervals, against ``find(..., at=)``
(docs/architecture.md §3 rule 12).

A hypothesis history runs a node the kubelet's way: pods are created with a sandbox, an IP
and a container; a container exits (a crash) and the next attempt starts with a new ID; exited
attempts are removed; a pod is stopped (StopContainer, StopPodSandbox) and removed. Each step
is listed in both of the kubelet's views (``get_pods(False)``: ready sandboxes and running
containers; ``get_pods(True)``: everything, IPs only on a ready sandbox) and handed to a cache
of each view, on both twins. The reference is built from the listings alone: a key is held by
a pod over each run of listings that list it there, from the pod's ``created_at`` (as it last
listed it) to the first listing that does not (or still, at the end). ``find`` at random times
and by every key (whole, and by a prefix of 4 to 12 characters) must answer as the reference,
the twins alike.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import (
    AsyncFakeRuntime,
    AsyncRuntimeCache,
    Container,
    ContainerID,
    ContainerState,
    FakeRuntime,
    Found,
    Pod,
    RuntimeCache,
)
from podcache.cache.changes import ChangeType, PodChange
from podcache.errors import AmbiguousContainerIDError
from tests.unit.cache.drivers import FakeClock

START = 1_700_000_000.0
IPS = ("10.0.0.1", "10.0.0.2", "fd00::3")


def hexid(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@dataclass
class Attempt:
    id: str
    running: bool = True


@dataclass
class RuntimePod:
    """One pod as the runtime holds it."""

    n: int
    created: float
    ip: str
    ready: bool = True
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def sandbox(self) -> str:
        return hexid("sandbox", self.n)

    def listed(self, all_view: bool) -> Pod | None:
        """The pod as ``get_pods(all_view)`` lists it (None: not at all)."""
        if not all_view and not self.ready:
            return None
        containers = [
            Container(
                id=ContainerID("containerd", a.id),
                name="app",
                state=ContainerState.RUNNING if a.running else ContainerState.EXITED,
            )
            for a in reversed(self.attempts)  # newest first
            if all_view or (a.running and self.ready)
        ]
        sandbox = Container(
            id=ContainerID("containerd", self.sandbox),
            state=ContainerState.RUNNING if self.ready else ContainerState.EXITED,
        )
        return Pod(
            id=f"uid-{self.n}",
            name=f"pod-{self.n}",
            namespace="default",
            created_at=int(self.created * 1e9),
            containers=containers,
            sandboxes=[sandbox],
            ips=(self.ip,) if self.ready else (),
        )


Key = tuple[str, str]


@dataclass
class Held:
    """One run of listings in which ``pod`` listed a key."""

    pod: Pod
    start: float
    end: float | None = None


class Reference:
    """Who held which key when, from the listings handed to a cache (module docstring)."""

    def __init__(self) -> None:
        self.runs: dict[Key, list[Held]] = {}
        self.open: dict[tuple[Key, str], Held] = {}  # (key, uid) -> its run still listed

    def listing(self, pods: list[Pod], now: float) -> None:
        listed: dict[tuple[Key, str], Pod] = {}
        for pod in pods:
            for key in keys_of(pod):
                listed[(key, pod.id)] = pod
        for held_key, held in list(self.open.items()):
            if held_key not in listed:
                held.end = now
                del self.open[held_key]
        for held_key, pod in listed.items():
            run = self.open.get(held_key)
            if run is None:
                run = self.open[held_key] = Held(pod, pod.created_at / 1e9)
                self.runs.setdefault(held_key[0], []).append(run)
            run.pod, run.start = pod, pod.created_at / 1e9  # as it last listed it

    def departed_at(self, uid: str) -> float | None:
        runs = self.runs.get(("uid", uid), [])
        return None if not runs or runs[-1].end is None else runs[-1].end

    def expect(self, key: Key, at: float | None) -> Found | None:
        runs = self.runs.get(key, [])
        if at is None:
            now = [h for h in runs if h.end is None]
            chosen = now or sorted((h for h in runs), key=lambda h: h.end or 0.0)
            if not chosen:
                return None
            held = max(now, key=lambda h: h.start) if now else chosen[-1]
        else:
            holding = [h for h in runs if h.start <= at and (h.end is None or at < h.end)]
            if not holding:
                return None
            held = max(holding, key=lambda h: h.start)
        container = None
        if key[0] == "container_id":
            items = (*held.pod.containers, *held.pod.sandboxes)
            container = next(c for c in items if c.id.id == key[1])
        return Found(held.pod, container, self.departed_at(held.pod.id), held.end)


def keys_of(pod: Pod) -> list[Key]:
    keys: list[Key] = [("uid", pod.id)]
    keys += [("container_id", c.id.id) for c in (*pod.containers, *pod.sandboxes)]
    keys += [("ip", ip) for ip in pod.ips]
    return keys


class Twins:
    """One cache of one view on each twin, fed the same listings at the same wall times."""

    def __init__(self, wall: list[float]) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.fake = FakeRuntime()
        self.afake = AsyncFakeRuntime()

        def now() -> float:
            return wall[0]

        big = {"departed_for": 1e9, "departed_max": 1_000_000, "wall_clock": now}
        self.threads = RuntimeCache(self.fake, 1e9, clock=self.clock, **big)  # type: ignore[arg-type]
        self.tasks = AsyncRuntimeCache(self.afake, 1e9, clock=self.clock, **big)  # type: ignore[arg-type]

    def show(self, pods: list[Pod]) -> None:
        self.fake.set_pods(pods)
        self.afake.set_pods(pods)
        self.clock.advance(1.0)
        self.threads.force_update_if_older(self.clock.now)
        self.loop.run_until_complete(self.tasks.force_update_if_older(self.clock.now))

    def find(self, **kw: object) -> tuple[object, object]:
        """Both twins' answers (an exception's type and matches stand for it)."""
        answers: list[object] = []
        calls: list[Callable[[], Found | None]] = [
            lambda: self.threads.find(**kw),  # type: ignore[arg-type]
            lambda: self.loop.run_until_complete(self.tasks.find(**kw)),  # type: ignore[arg-type]
        ]
        for call in calls:
            try:
                answers.append(call())
            except AmbiguousContainerIDError as exc:
                answers.append(("ambiguous", sorted(exc.matches)))
        return answers[0], answers[1]

    def close(self) -> None:
        self.threads.close()
        self.loop.close()


ACTIONS = ("create", "crash", "restart", "remove_exited", "stop", "remove", "wait")
steps = st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 4)), max_size=30)


def apply(action: str, n: int, node: dict[int, RuntimePod], made: int, now: float) -> int:
    """One step of the kubelet's on the runtime; returns how many pods were ever made."""
    pod = node.get(n)
    if action == "create" and pod is None:
        taken = {p.ip for p in node.values() if p.ready}
        free = [ip for ip in IPS if ip not in taken]
        if free:
            node[n] = RuntimePod(100 * made + n, now - 0.5, free[0])
            node[n].attempts.append(Attempt(hexid("c", 100 * made + n, 0)))
            return made + 1
    elif pod is None:
        return made
    elif action == "crash" and pod.ready and pod.attempts and pod.attempts[-1].running:
        pod.attempts[-1].running = False
    elif action == "restart" and pod.ready and not any(a.running for a in pod.attempts):
        pod.attempts.append(Attempt(hexid("c", pod.n, len(pod.attempts))))
    elif action == "remove_exited":
        pod.attempts = [a for a in pod.attempts if a.running]
    elif action == "stop":  # StopContainer, then StopPodSandbox
        for attempt in pod.attempts:
            attempt.running = False
        pod.ready = False
    elif action == "remove" and not pod.ready:  # RemoveContainer, then RemovePodSandbox
        del node[n]
    return made


@pytest.mark.parametrize("all_view", [False, True], ids=["ready", "all"])
@settings(max_examples=60, deadline=None)
@given(history=steps, probes=st.lists(st.floats(0, 1), min_size=1, max_size=6), data=st.data())
def test_find_answers_every_key_ever_held_as_the_reference_does(
    all_view: bool, history: list[tuple[str, int]], probes: list[float], data: st.DataObject
) -> None:
    check_history(all_view, history, probes, lambda: data.draw(st.integers(4, 12)))


@pytest.mark.parametrize("all_view", [False, True], ids=["ready", "all"])
def test_an_id_held_again_after_it_left_answers_each_holding_at_its_time(all_view: bool) -> None:
    """A container removed, then made again with its ID (the model's restart of a pod whose
    attempts were all removed): asked at a time of its first holding, the first is answered."""
    history = [("create", 0), ("crash", 0), ("remove_exited", 0), ("restart", 0)]
    check_history(all_view, history, [0.25, 0.5, 0.75, 0.95], lambda: 12)


def check_history(
    all_view: bool,
    history: list[tuple[str, int]],
    probes: list[float],
    prefix_length: Callable[[], int],
) -> None:
    """The twins' answers after ``history``, for every key ever held, at each probe time (a
    fraction of the run) and now, equal the reference's."""
    wall = [START]
    twins = Twins(wall)
    reference = Reference()
    node: dict[int, RuntimePod] = {}
    made = 0
    try:
        for action, n in history:
            wall[0] += 1.0
            made = apply(action, n, node, made, wall[0])
            listed = [p for p in (rp.listed(all_view) for rp in node.values()) if p is not None]
            listed.sort(key=lambda p: -p.created_at)
            twins.show(listed)
            reference.listing(listed, wall[0])
        end = wall[0] + 1.0
        for key in list(reference.runs):
            for at in [None, *(START + f * (end - START) for f in probes)]:
                expected = reference.expect(key, at)
                kind, value = key
                got = twins.find(**{kind: value, "at": at})
                assert got[0] == got[1], (key, at)  # the twins agree
                assert got[0] == expected, (key, at)
            if key[0] == "container_id":
                check_prefix(twins, reference, key[1], prefix_length())
    finally:
        twins.close()


def check_prefix(twins: Twins, reference: Reference, ident: str, length: int) -> None:
    """A prefix answers as its whole ID when no other known ID shares it, else is ambiguous."""
    prefix = ident[:length]
    known = sorted({value for kind, value in reference.runs if kind == "container_id"})
    sharing = [other for other in known if other.startswith(prefix)]
    got = twins.find(container_id=prefix)
    assert got[0] == got[1]
    if len(sharing) > 1:
        assert got[0] == ("ambiguous", sharing)
    else:
        assert got[0] == reference.expect(("container_id", ident), None)


def test_a_pod_torn_down_in_the_kubelets_order_keeps_every_container_findable() -> None:
    """The issue's case, in the ready view: the container leaves the listing when it stops,
    before its pod does; both are still found, by whole ID and by crictl's 12 characters."""
    wall = [START]
    twins = Twins(wall)
    pod = RuntimePod(1, START - 5.0, "10.0.0.1")
    pod.attempts = [Attempt(hexid("c", 1, 0), running=False), Attempt(hexid("c", 1, 1))]
    twins.show([p for p in [pod.listed(False)] if p is not None])
    crashed = twins.find(container_id=pod.attempts[0].id)[0]
    assert crashed is None  # never listed by the ready view: nothing to remember
    wall[0] += 1.0
    pod.attempts[1].running = False  # StopContainer
    twins.show([p for p in [pod.listed(False)] if p is not None])
    stopped_at = wall[0]
    exited = twins.find(container_id=pod.attempts[1].id[:12])
    assert exited[0] == exited[1]
    assert isinstance(exited[0], Found)
    assert exited[0].departed_at is None and exited[0].held_until == stopped_at
    wall[0] += 1.0
    pod.ready = False  # StopPodSandbox: the pod leaves the ready view
    twins.show([])
    left = twins.find(container_id=pod.attempts[1].id)[0]
    assert isinstance(left, Found) and left.container is not None
    assert left.container.id.id == pod.attempts[1].id
    assert left.departed_at == wall[0] and left.held_until == stopped_at
    sandbox = twins.find(container_id=pod.sandbox)[0]
    assert isinstance(sandbox, Found) and sandbox.departed_at == wall[0]
    twins.close()


def test_prefixes_are_checked_as_the_snapshots_are() -> None:
    wall = [START]
    twins = Twins(wall)
    twins.show([])
    with pytest.raises(ValueError, match="at least 4"):
        twins.threads.find(container_id="abc")
    assert twins.find(container_id="abcd") == (None, None)
    twins.close()


def test_remembered_keys_are_bounded_in_keys_by_departed_max() -> None:
    wall = [START]
    cache = RuntimeCache(
        FakeRuntime(), 1e9, clock=FakeClock(), departed_max=4, wall_clock=lambda: wall[0]
    )
    pods = [RuntimePod(n, START, IPS[n]) for n in range(2)]
    for n, rp in enumerate(pods):
        rp.attempts.append(Attempt(hexid("c", n, 0)))
    listed = [rp.listed(False) for rp in pods]
    assert None not in listed
    departed = cache._departed
    for pod in listed:
        assert pod is not None
        wall[0] += 1.0
        departed.record([PodChange(ChangeType.DELETED, pod, 1)], wall[0])
    assert len(departed) == 4  # each pod held 4 keys: the second's are the newest 4
    second = listed[1]
    assert second is not None
    for kind, value in keys_of(second):
        if kind == "uid":
            found = cache.find(uid=value)
        elif kind == "ip":
            found = cache.find(ip=value)
        else:
            found = cache.find(container_id=value)
        assert found is not None, (kind, value)
    first = listed[0]
    assert first is not None and cache.find(uid=first.id) is None
    cache.close()
