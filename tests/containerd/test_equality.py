"""After random pod changes made through CRI, the cache equals a fresh full listing: on
containerd 1.7 and 2.1 by events alone (a period far longer than the test), on 1.6 by polling.

A seeded random sequence (the seed is printed, and named on failure; ``PODCACHE_EQUALITY_SEED``
replays one) of kubelet-shaped changes through the test harness: run a pod with one or two
containers, start a container created earlier, stop a container, remove an exited one, stop a
pod, remove a pod, and crash-loop turns (a container that exits at once, waited for, then its
next attempt created and the one before it removed, as the kubelet's garbage collection
does). Every change has returned (and every crash waited for) before the next: at the end
the runtime is quiescent.

Then the reader polls ``get_pods()`` (the hit path) until it equals a fresh full listing made
then. That must happen (within a generous 30 s: causality, not speed); the time it took and
the full listings the cache made over the run are printed and written to the JSON file named
by ``PODCACHE_EQUALITY_RESULTS`` if set, as figures: the target is equality within
100 ms of quiescence, measured, never asserted here (a loaded machine could miss it). Full
listings are counted by a getter that wraps the ``CRIRuntime`` and forwards everything else
(``get_pod`` included, when the runtime offers it, so a per-pod cache uses it; its calls are
counted too).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from podcache import Pod, PodList, RuntimeCache
from podcache.cri import CRIRuntime
from tests.containerd.conftest import EVENT_VERSIONS, Containerd
from tests.containerd.harness import ContainerRecord, CRIHarness, SandboxRecord

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(600)]

EVENTS_PERIOD = 3600.0
"""Far longer than the test: nothing but events and (re)subscriptions can refresh the cache."""
POLLING_PERIOD = 0.5
EQUAL_WITHIN = 30.0
STEPS = 30
CRASH = ("sh", "-c", "exit 3")
RUNNING = 1  # CONTAINER_RUNNING
EXITED = 2  # CONTAINER_EXITED


class CountingGetter:
    """A ``CRIRuntime`` whose full listings (``get_pods``) and pod relists (``get_pod``, when
    the runtime has it) are counted; everything else is the runtime's own."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self._runtime = runtime
        self.full_listings = 0
        self.pod_relists = 0

    def get_pods(self, all: bool) -> PodList:
        self.full_listings += 1
        return self._runtime.get_pods(all)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._runtime, name)
        if name != "get_pod":
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.pod_relists += 1
            return found(*args, **kwargs)

        return counted


def by_uid(pods: PodList) -> dict[str, Pod]:
    return {pod.id: pod for pod in pods}


def chosen_seed() -> int:
    given = os.environ.get("PODCACHE_EQUALITY_SEED")
    return int(given) if given else random.SystemRandom().randrange(2**32)


class Sequence:
    """Random kubelet-shaped changes through CRI; what it made is removed by ``cleanup``."""

    def __init__(self, h: CRIHarness, rng: random.Random) -> None:
        self._h = h
        self._rng = rng
        self.made: list[SandboxRecord] = []
        self.log: list[str] = []

    def _live(self) -> list[SandboxRecord]:
        return [s for s in self.made if not s.removed]

    def _containers(self, state: int) -> list[ContainerRecord]:
        live = {s.id for s in self._live()}
        return [c for c in self._h.live_containers() if c.sandbox_id in live and c.state == state]

    def step(self) -> None:
        moves: list[tuple[str, Callable[[], bool]]] = [
            ("run_pod", self.run_pod),
            ("run_pod", self.run_pod),
            ("crash", self.crash),
            ("crash", self.crash),
            ("stop_container", self.stop_container),
            ("remove_exited", self.remove_exited),
            ("stop_pod", self.stop_pod),
            ("remove_pod", self.remove_pod),
        ]
        name, move = self._rng.choice(moves)
        if not move():
            name, _ = "run_pod", self.run_pod()
        self.log.append(name)

    def run_pod(self) -> bool:
        index = len(self.made)
        sandbox = self._h.run_pod(f"eq-{index}", "equality", labels={"test": "equality"})
        self.made.append(sandbox)
        for number in range(self._rng.randint(1, 2)):
            self._h.create_container(sandbox, f"c{number}", start=self._rng.random() < 0.8)
        return True

    def crash(self) -> bool:
        """One crash-loop turn in a ready pod: attempt N exits, N-1 is garbage-collected."""
        ready = [s for s in self._live() if s.state == 0]
        if not ready:
            return False
        sandbox = self._rng.choice(ready)
        attempts = [c for c in self._h.live_containers() if c.sandbox_id == sandbox.id]
        looped = [c for c in attempts if c.name == "looping"]
        attempt = max((c.attempt for c in looped), default=-1) + 1
        container = self._h.create_container(sandbox, "looping", command=CRASH, attempt=attempt)
        self._h.wait_exited(container)
        for old in looped:
            self._h.remove_container(old)
        return True

    def stop_container(self) -> bool:
        running = self._containers(RUNNING)
        if not running:
            return False
        self._h.stop_container(self._rng.choice(running))
        return True

    def remove_exited(self) -> bool:
        exited = self._containers(EXITED)
        if not exited:
            return False
        self._h.remove_container(self._rng.choice(exited))
        return True

    def stop_pod(self) -> bool:
        ready = [s for s in self._live() if s.state == 0]
        if not ready:
            return False
        self._h.stop_pod(self._rng.choice(ready))
        return True

    def remove_pod(self) -> bool:
        live = self._live()
        if not live:
            return False
        self._h.remove_pod(self._rng.choice(live))
        return True

    def cleanup(self) -> None:
        self._h.remove_all([s.id for s in self.made if not s.removed])


@pytest.fixture
def sequence(cri_harness: CRIHarness) -> Iterator[tuple[Sequence, int]]:
    seed = chosen_seed()
    print(f"\nequality seed: {seed} (PODCACHE_EQUALITY_SEED={seed} replays it)")
    made = Sequence(cri_harness, random.Random(seed))
    try:
        yield made, seed
    finally:
        made.cleanup()


def difference(seen: dict[str, Pod], truth: dict[str, Pod]) -> str:
    """What a snapshot and a listing disagree on, briefly: pods only in one, pods that differ."""
    only_seen = sorted(set(seen) - set(truth))
    only_truth = sorted(set(truth) - set(seen))
    differ = [
        f"{uid}: cache {seen[uid]!r} != runtime {truth[uid]!r}"
        for uid in sorted(set(seen) & set(truth))
        if seen[uid] != truth[uid]
    ]
    return f"only in the cache {only_seen}; only in the runtime {only_truth}; differing {differ}"


def seconds_to_equality(cache: RuntimeCache, fresh: CRIRuntime) -> float:
    """From now (quiescence) until ``get_pods()`` equals a full listing made now by ``fresh``,
    a getter of its own that listed before the changes (warm: a cold one would spend tens of
    milliseconds asking every sandbox's status for its IPs, which the cache asked long ago)."""
    quiet = time.monotonic()
    truth = by_uid(fresh.get_pods(False))
    while (seen := by_uid(cache.get_pods())) != truth:
        assert time.monotonic() - quiet < EQUAL_WITHIN, (
            f"the cache never equalled a full listing made at quiescence ({EQUAL_WITHIN} s): "
            f"{difference(seen, truth)}"
        )
        time.sleep(0.001)
    return time.monotonic() - quiet


def record(figures: dict[str, Any]) -> None:
    print(f"\nequality figures: {json.dumps(figures)}")
    path = os.environ.get("PODCACHE_EQUALITY_RESULTS")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(figures) + "\n")


def run(
    containerd: Containerd, sequence: tuple[Sequence, int], period: float, events: bool
) -> tuple[dict[str, Any], RuntimeCache]:
    made, seed = sequence
    with CRIRuntime(containerd.endpoint) as runtime, CRIRuntime(containerd.endpoint) as fresh:
        fresh.get_pods(False)
        getter = CountingGetter(runtime)
        with RuntimeCache(getter, period, events=events) as cache:
            cache.get_pods()
            deadline = time.monotonic() + EQUAL_WITHIN
            while events and cache.stats().events_state not in ("subscribed", "unsupported"):
                assert time.monotonic() < deadline, "the cache never subscribed"
                time.sleep(0.01)
            try:
                for _ in range(STEPS):
                    made.step()
                    cache.get_pods()
                took = seconds_to_equality(cache, fresh)
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, steps {made.log}: {exc}") from exc
            stats = cache.stats()
    figures = {
        "containerd": containerd.version,
        "seed": seed,
        "steps": made.log,
        "period": period,
        "seconds_to_equality": took,
        "full_listings": getter.full_listings,
        "pod_relists": getter.pod_relists,
        "events_received": stats.events_received,
        "events_state": stats.events_state,
        "resubscriptions": stats.resubscriptions,
    }
    record(figures)
    return figures, cache


@pytest.mark.parametrize("containerd", EVENT_VERSIONS, indirect=True)
def test_after_random_cri_changes_events_alone_bring_the_cache_to_a_full_listing(
    containerd: Containerd, sequence: tuple[Sequence, int]
) -> None:
    figures, _ = run(containerd, sequence, EVENTS_PERIOD, events=True)
    assert figures["events_state"] == "subscribed"
    assert figures["events_received"] > 0


@pytest.mark.parametrize("containerd", ["1.6"], indirect=True)
def test_on_containerd_1_6_the_cache_polls_and_reaches_a_full_listing_unchanged(
    containerd: Containerd, sequence: tuple[Sequence, int]
) -> None:
    figures, _ = run(containerd, sequence, POLLING_PERIOD, events=True)
    assert figures["events_state"] == "unsupported"
    assert figures["events_received"] == 0
    assert figures["pod_relists"] == 0  # no events, so nothing names one pod to relist
    assert figures["full_listings"] >= 1
