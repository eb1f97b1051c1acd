"""Event faults against the cache's freshness rules, over real gRPC to the simulated runtime.

Seeded random sequences of pod changes (create, stop, remove, crash-loop turns, churn steps)
run while the simulator drops, duplicates, reorders, delays and cuts container events, and
replays old ones to a new subscriber the way containerd 2.x does. The cache (events on, 60 s
period, a fake clock that moves only when told) is read after every change. Three rules are
checked, whichever way the cache refreshes (whole node or one pod):

- **never backward** (docs/architecture.md §3 rule 2; per pod, docs/architecture.md §7
  rule 1): the runtime never brings a sandbox or a container back once it stopped running
  (IDs are never reused; a crash-loop turn starts a new container), so an item a read showed
  and a later read no longer showed must never show again;
- **never older than the period** (docs/architecture.md §3 rule 1; a lost event costs at
  most the period, docs/architecture.md §7 rule 3): after the clock moves one period on, the
  next read holds every change made before the move (by causality: nothing changes in
  between, so it equals a fresh full listing);
- **quiescence plus one period**: with the faults off and the changes done, one period later
  the cache equals a fresh full listing (per pod, by UID).

The seed is printed on failure (``PODCACHE_FAULT_SEED`` replays one).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import pytest

from podcache import Pod, PodList, RuntimeCache
from podcache.cri import CRIRuntime
from podcache.sim import PodShape, SimRuntime
from tests.unit.cache.drivers import FakeClock

PERIOD = 60.0
STEPS = 40
WAIT = 30.0
FAULTS: dict[str, dict[str, float | int]] = {
    "drop": {"event_drop_rate": 0.4},
    "duplicate": {"event_duplicate_rate": 0.5},
    "reorder": {"event_reorder_rate": 0.5},
    "delay": {"event_delay": 0.02},
    "cut": {"event_cut_after": 7},
    "replay": {"event_replay": 25},
    "all": {
        "event_drop_rate": 0.2,
        "event_duplicate_rate": 0.2,
        "event_reorder_rate": 0.3,
        "event_delay": 0.005,
        "event_cut_after": 15,
        "event_replay": 10,
    },
}
"""The event faults of each case, as ``Faults`` attributes."""


def seeds() -> list[int]:
    chosen = os.environ.get("PODCACHE_FAULT_SEED")
    return [int(chosen)] if chosen else [1, 2]


def eventually(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout} s"
        time.sleep(0.005)


def by_uid(pods: PodList) -> dict[str, Pod]:
    return {pod.id: pod for pod in pods}


def item_ids(pods: PodList) -> set[str]:
    return {c.id.id for pod in pods for c in (*pod.containers, *pod.sandboxes)}


@dataclass
class NeverBackward:
    """The oracle: an item (sandbox or container ID) a read showed, then did not, never shows
    again. Feed it every snapshot in the order reads returned them (one lock: the reader
    thread and the test's own reads share it, so the order is the order of the reads)."""

    shown: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, pods: PodList) -> None:
        now = item_ids(pods)
        revived = now & self.gone
        assert not revived, (
            f"read {self.reads}: {len(revived)} items came back after they were gone, "
            f"e.g. {sorted(revived)[:3]}"
        )
        self.gone |= self.shown - now
        self.shown = now
        self.reads += 1


class Reader:
    """Reads the cache every 0.5 ms on a thread, so the oracle sees (nearly) every snapshot
    published; the first failure is kept for the test to raise."""

    def __init__(self, cache: RuntimeCache, oracle: NeverBackward) -> None:
        self._cache = cache
        self._oracle = oracle
        self._stop = threading.Event()
        self.failure: AssertionError | None = None
        self._thread = threading.Thread(target=self._run, name="oracle-reader", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.0005):
            try:
                read_and_check(self._cache, self._oracle)
            except AssertionError as exc:
                self.failure = exc
                return

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.failure is not None:
            raise self.failure


def test_the_oracle_fails_on_a_snapshot_that_goes_backward() -> None:
    with SimRuntime(6, seed=4) as sim, CRIRuntime(sim.endpoint) as runtime:
        older = runtime.get_pods(False)
        sim.population.remove_pod(older[0].id)
        newer = runtime.get_pods(False)
        oracle = NeverBackward()
        oracle.observe(older)
        oracle.observe(newer)
        with pytest.raises(AssertionError, match="came back after they were gone"):
            oracle.observe(older)


class Changes:
    """Random pod changes drawn from one seed; the crash-looping pods are tracked."""

    def __init__(self, sim: SimRuntime, rng: random.Random) -> None:
        self._sim = sim
        self._rng = rng
        self._looping: list[str] = []

    def one(self) -> str:
        population = self._sim.population
        kind = self._rng.choice(("create", "stop", "remove", "crash", "crash", "churn"))
        uids = population.pod_uids()
        if kind == "create" or not uids:
            uid, _ = population.create_pod(PodShape.RUNNING)
            self._looping.append(uid)
        elif kind == "stop":
            population.stop_pod(self._rng.choice(uids))
        elif kind == "remove":
            uid = self._rng.choice(uids)
            population.remove_pod(uid)
        elif kind == "crash":
            return self._crash()
        else:
            self._sim.churn_step(1)
        return kind

    def _crash(self) -> str:
        for uid in list(self._looping):
            try:
                self._sim.population.crash_container(uid)
                return "crash"
            except (KeyError, ValueError):  # removed or stopped since: no longer looping
                self._looping.remove(uid)
        uid, _ = self._sim.population.create_pod(PodShape.RUNNING)
        self._looping.append(uid)
        return "create"


def set_faults(sim: SimRuntime, settings: Mapping[str, float | int]) -> None:
    for name, value in settings.items():
        setattr(sim.faults, name, value)


def clear_faults(sim: SimRuntime) -> None:
    faults = sim.faults
    faults.event_drop_rate = faults.event_duplicate_rate = faults.event_reorder_rate = 0.0
    faults.event_delay = 0.0
    faults.event_cut_after = None
    faults.event_replay = 0


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(25, seed=9) as runtime, runtime.pause_churn():
        yield runtime


def read_and_check(cache: RuntimeCache, oracle: NeverBackward) -> PodList:
    with oracle.lock:
        pods = cache.get_pods()
        oracle.observe(pods)
    return pods


def one_period_later(
    sim: SimRuntime, cache: RuntimeCache, clock: FakeClock, oracle: NeverBackward
) -> None:
    """Move the clock a period on; the next read holds everything made before the move."""
    with CRIRuntime(sim.endpoint) as fresh:
        truth = by_uid(fresh.get_pods(False))
    clock.advance(PERIOD + 0.001)
    seen = by_uid(read_and_check(cache, oracle))
    assert seen == truth, "a read one period after the changes is older than the period"


def run_sequence(sim: SimRuntime, settings: Mapping[str, float | int], seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    oracle = NeverBackward()
    changes = Changes(sim, rng)
    with (
        CRIRuntime(sim.endpoint) as runtime,
        RuntimeCache(runtime, PERIOD, clock=clock, events=True) as cache,
    ):
        read_and_check(cache, oracle)
        eventually(lambda: cache.stats().events_state == "subscribed", "subscribed")
        sim.wait_for_event_subscribers(1)
        set_faults(sim, settings)
        with Reader(cache, oracle):
            for step in range(STEPS):
                changes.one()
                read_and_check(cache, oracle)
                if rng.random() < 0.2:
                    time.sleep(rng.random() * 0.05)  # let events in before the next change
                if step % 13 == 12:
                    one_period_later(sim, cache, clock, oracle)
            clear_faults(sim)
            time.sleep(0.3)  # events still on their way may land meanwhile
            one_period_later(sim, cache, clock, oracle)


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("fault", list(FAULTS))
def test_event_faults_never_take_the_cache_backward_nor_past_the_period(
    sim: SimRuntime, fault: str, seed: int
) -> None:
    try:
        run_sequence(sim, FAULTS[fault], seed)
    except AssertionError as exc:
        raise AssertionError(
            f"fault {fault!r}, seed {seed} (PODCACHE_FAULT_SEED={seed}): {exc}"
        ) from exc
