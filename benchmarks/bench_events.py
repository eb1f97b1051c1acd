"""Event-driven freshness on real containerd 1.7: latency, idle cost, restart recovery, bursts.

    .venv/bin/python benchmarks/bench_events.py [--quick] [--json]

Brings up a private containerd 1.7 with ``scripts/containerd-up`` (``CONTAINERD_VERSION=1.7``,
directory ``$BENCH_CONTAINERD_DIR``, default /tmp/podcache-bench-containerd), makes 110 pods
through CRI the way the kubelet does (``tests/containerd/harness.py``), and measures, with a
``RuntimeCache(CRIRuntime, period, events=True)``:

1. Latency, StartContainer returning -> the container in ``get_pods()``, and StopContainer
   returning -> the container out of the running view, over >= 50 trials (30 s period, so
   nothing but an event can explain a change). The reader polls the cache's hit path every
   0.2 ms: the figures include up to that much polling delay.
2. Idle node: list calls (each ``get_pods`` is ListPodSandbox + ListContainers) of a cache with
   events and a 60 s period against a 2 s polling cache, both read 10 times a second in the
   same window, after warm-up. Freshness: the events cache sees changes when they happen; the
   polling one up to 2 s late.
3. Runtime restart: SIGKILL containerd, start it again; from the moment CRI answers again: the
   stream back (the cache subscribed again), and a container started then visible in the cache;
   resubscriptions counted per restart.
4. Burst: 25 pods (sandbox, container, start) made by 25 threads at once; refreshes and events
   per burst, and the most runtime calls ever in flight at once (the getter is wrapped to
   count); queued refreshes are one slot in the core, sampled every 0.5 ms.

Needs root and Linux (containerd); tears the instance down at the end unless it was running
before. Prints a JSON object with ``--json``, else a readable summary.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from podcache import Pod, PodList, RuntimeCache  # noqa: E402 -- after sys.path names the repository
from podcache.cri import CRIRuntime  # noqa: E402 -- after sys.path names the repository
from tests.containerd.conftest import Containerd  # noqa: E402 -- after sys.path names the repository
from tests.containerd.harness import CRIHarness, SandboxRecord  # noqa: E402 -- after sys.path names the repository

PODS = 110
LATENCY_PERIOD = 30.0
IDLE_EVENTS_PERIOD = 60.0
IDLE_POLLING_PERIOD = 2.0
BURST = 25
POLL = 0.0002
CGROUP_PARENT = "podcachebench"
"""The pods' cgroup parent: containerd-down clears it, so it is this benchmark's own."""


def log(message: str) -> None:
    print(f"bench_events: {message}", file=sys.stderr, flush=True)


class CountingGetter:
    """A runtime getter that counts ``get_pods`` calls and the most in flight at once."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self.runtime = runtime
        self.calls = 0
        self.pod_calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return self.runtime.endpoint

    def container_events(self) -> Any:
        return self.runtime.container_events()

    def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The runtime's relist of one pod (counted apart: a cache relists the pod an event
        names, §7), so a cache over this getter behaves as one over the runtime."""
        with self._lock:
            self.pod_calls += 1
        return self.runtime.get_pod(uid, all)

    def pod_uid_of(self, ident: str) -> str | None:
        return self.runtime.pod_uid_of(ident)

    def get_pods(self, all: bool) -> PodList:
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return self.runtime.get_pods(all)
        finally:
            with self._lock:
                self.in_flight -= 1


def wait_until(check: Callable[[], bool], timeout: float, poll: float = POLL) -> float:
    """Seconds until ``check()`` held (TimeoutError after ``timeout``)."""
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"condition not reached in {timeout} s")
        time.sleep(poll)
    return time.perf_counter() - started


def seconds_until(check: Callable[[], bool], timeout: float) -> float | None:
    """``wait_until``, but None instead of an error after ``timeout``."""
    try:
        return wait_until(check, timeout, 0.001)
    except TimeoutError:
        return None


def timed_in_background(check: Callable[[], bool], timeout: float) -> Callable[[], float | None]:
    """Start timing ``check`` on a thread now; call the result to join it and get the seconds."""
    result: list[float | None] = []
    thread = threading.Thread(target=lambda: result.append(seconds_until(check, timeout)))
    thread.start()

    def seconds() -> float | None:
        thread.join()
        return result[0]

    return seconds


def running(cache: RuntimeCache) -> set[str]:
    return {c.id.id for pod in cache.get_pods() for c in pod.containers}


def shows(cache: RuntimeCache, container_id: str, present: bool = True) -> Callable[[], bool]:
    """A check: the container is (or, with ``present=False``, is not) in the running view."""
    return lambda: (container_id in running(cache)) == present


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1e3 for v in values]
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": max(ms),
        "min_ms": min(ms),
    }


def subscribed_cache(getter: CountingGetter, period: float) -> RuntimeCache:
    cache = RuntimeCache(getter, period, events=True, stats=True)
    cache.get_pods()
    wait_until(lambda: cache.stats().events_state == "subscribed", 10, 0.005)
    wait_until(lambda: not cache.stats().in_flight, 10, 0.005)
    return cache


# -- 1. latency --------------------------------------------------------------------------------
def measure_latency(h: CRIHarness, endpoint: str, pods: list[SandboxRecord], trials: int) -> Any:
    starts: list[float] = []
    stops: list[float] = []
    with CRIRuntime(endpoint) as runtime:
        getter = CountingGetter(runtime)
        with subscribed_cache(getter, LATENCY_PERIOD) as cache:
            for trial in range(trials):
                sandbox = pods[trial % len(pods)]
                container = h.create_container(sandbox, f"probe-{trial}", start=False)
                wait_until(lambda: not cache.stats().in_flight, 10, 0.001)
                h.start_container(container)
                starts.append(wait_until(shows(cache, container.id), 10))
                wait_until(lambda: not cache.stats().in_flight, 10, 0.001)
                h.stop_container(container)
                stops.append(wait_until(shows(cache, container.id, present=False), 10))
                h.remove_container(container)
            stats = cache.stats()
    return {
        "start": summary_ms(starts),
        "stop": summary_ms(stops),
        "period": LATENCY_PERIOD,
        "events_received": stats.events_received,
        "refreshes": stats.refreshes,
    }


# -- 2. idle node ------------------------------------------------------------------------------
def measure_idle(endpoint: str, seconds: float) -> Any:
    with CRIRuntime(endpoint) as events_runtime, CRIRuntime(endpoint) as polling_runtime:
        events_getter = CountingGetter(events_runtime)
        polling_getter = CountingGetter(polling_runtime)
        events_cache = subscribed_cache(events_getter, IDLE_EVENTS_PERIOD)
        polling_cache = RuntimeCache(polling_getter, IDLE_POLLING_PERIOD)
        polling_cache.get_pods()
        base_events, base_polling = events_getter.calls, polling_getter.calls
        stop = time.monotonic() + seconds
        reads = 0
        while time.monotonic() < stop:
            events_cache.get_pods()
            polling_cache.get_pods()
            reads += 1
            time.sleep(0.1)
        events_calls = events_getter.calls - base_events
        polling_calls = polling_getter.calls - base_polling
        events_cache.close()
    return {
        "seconds": seconds,
        "reads_each": reads,
        "events_period": IDLE_EVENTS_PERIOD,
        "polling_period": IDLE_POLLING_PERIOD,
        "events_calls": events_calls,
        "polling_calls": polling_calls,
        "events_calls_per_hour": events_calls * 3600 / seconds,
        "polling_calls_per_hour": polling_calls * 3600 / seconds,
        "ratio": polling_calls / max(events_calls, 1),
    }


def resubscribed(cache: RuntimeCache, before: int) -> Callable[[], bool]:
    return lambda: cache.stats().resubscriptions > before


# -- 3. restart --------------------------------------------------------------------------------
class Recorder(logging.Handler):
    """Keeps podcache.cache's log lines (the subscription's failures) with their time."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.started = time.perf_counter()

    def emit(self, record: logging.LogRecord) -> None:
        if "not reachable" not in record.getMessage():  # the knocks while nothing listens
            self.lines.append(f"{time.perf_counter() - self.started:.3f} {record.getMessage()}")


def measure_restart(
    h: CRIHarness, ctrd: Containerd, pods: list[SandboxRecord], restarts: int
) -> Any:
    rows = []
    with CRIRuntime(ctrd.endpoint) as runtime:
        getter = CountingGetter(runtime)
        with subscribed_cache(getter, LATENCY_PERIOD) as cache:
            for index in range(restarts):
                before = cache.stats().resubscriptions
                recorder = Recorder()
                logger = logging.getLogger("podcache.cache")
                logger.setLevel(logging.DEBUG)
                logger.addHandler(recorder)
                ctrd.kill()
                wait_until(lambda: cache.stats().events_state == "reconnecting", 10, 0.001)
                time.sleep(1.0)  # an outage of several failed attempts
                ctrd.start()
                back = time.perf_counter()
                stream_back = timed_in_background(resubscribed(cache, before), 10)
                sandbox = pods[index % len(pods)]
                container = h.create_container(sandbox, f"after-restart-{index}")  # at once
                wait_until(shows(cache, container.id), 10)
                visible = time.perf_counter() - back
                time.sleep(2.5)  # a stream dropped again soon after would count now
                rows.append(
                    {
                        "stream_back_s": stream_back(),
                        "change_visible_s": visible,
                        "resubscriptions_added": cache.stats().resubscriptions - before,
                        "log": recorder.lines[:20],
                    }
                )
                logger.removeHandler(recorder)
                h.remove_container(container)
    return {"restarts": rows}


# -- 4. burst ----------------------------------------------------------------------------------
class QueueSampler:
    """Samples, every 0.5 ms until stopped, whether the cache has a refresh queued."""

    def __init__(self, cache: RuntimeCache) -> None:
        self.cache = cache
        self.max_queued = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            queued = 1 if self.cache._core.queued is not None else 0
            self.max_queued = max(self.max_queued, queued)
            time.sleep(0.0005)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.max_queued


def one_burst(h: CRIHarness, cache: RuntimeCache, getter: CountingGetter, burst: int) -> Any:
    """BURST pods made by BURST threads at once; what it cost the cache."""
    wait_until(lambda: not cache.stats().in_flight, 10, 0.001)
    getter.max_in_flight = 0
    before = cache.stats()
    made: list[SandboxRecord] = []
    lock = threading.Lock()

    def make(i: int) -> None:
        sandbox = h.run_pod(f"burst-{burst}-{i}", "burst")
        h.create_container(sandbox, "app")
        with lock:
            made.append(sandbox)

    sampler = QueueSampler(cache)
    threads = [threading.Thread(target=make, args=(i,)) for i in range(BURST)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sandbox_ids = {s.id for s in made}
    ids = {c.id for c in h.live_containers() if c.sandbox_id in sandbox_ids}
    wait_until(lambda: ids <= running(cache), 10)
    visible = time.perf_counter() - started
    wait_until(lambda: not cache.stats().in_flight, 10, 0.001)
    max_queued = sampler.stop()
    after = cache.stats()
    h.remove_all(sorted(sandbox_ids))
    return {
        "pods": BURST,
        "seconds_all_visible": visible,
        "events": after.events_received - before.events_received,
        "refreshes": after.refreshes - before.refreshes,
        "event_refreshes": after.event_refreshes - before.event_refreshes,
        "max_in_flight": getter.max_in_flight,
        "max_queued_sampled": max_queued,
    }


def measure_burst(h: CRIHarness, endpoint: str, bursts: int) -> Any:
    with CRIRuntime(endpoint) as runtime:
        getter = CountingGetter(runtime)
        with subscribed_cache(getter, LATENCY_PERIOD) as cache:
            rows = [one_burst(h, cache, getter, burst) for burst in range(bursts)]
    return {"bursts": rows}


# -- the instance ------------------------------------------------------------------------------
def containerd_up(directory: Path) -> tuple[Containerd, bool]:
    """containerd 1.7 in ``directory`` (started, or reused); whether it was running before."""
    ctrd = Containerd(directory, "unix://" + str(directory / "containerd.sock"), "1.7")
    reused = ctrd.alive()
    env = dict(os.environ, CONTAINERD_TEST_DIR=str(directory), CONTAINERD_VERSION="1.7")
    env["PODCACHE_PYTHON"] = sys.executable
    done = subprocess.run(
        [str(ROOT / "scripts" / "containerd-up")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/containerd-up failed ({done.returncode}): {done.stderr[-2000:]}")
    ctrd.endpoint = done.stdout.strip().splitlines()[-1]
    return ctrd, reused


def containerd_down(directory: Path) -> None:
    env = dict(os.environ, CONTAINERD_TEST_DIR=str(directory), CONTAINERD_VERSION="1.7")
    env["PODCACHE_PYTHON"] = sys.executable
    env["CONTAINERD_TEST_CGROUP_PARENT"] = CGROUP_PARENT
    subprocess.run(
        [str(ROOT / "scripts" / "containerd-down")],
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials, shorter idle window")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        raise SystemExit("bench_events needs root on Linux (it runs containerd)")
    directory = Path(os.environ.get("BENCH_CONTAINERD_DIR", "/tmp/podcache-bench-containerd"))
    trials = 50 if args.quick else 100
    idle_seconds = 65.0 if args.quick else 130.0
    restarts = 2 if args.quick else 3
    bursts = 1 if args.quick else 3
    ctrd, reused = containerd_up(directory)
    result: dict[str, Any] = {"pods": PODS, "containerd": "1.7", "quick": args.quick}
    try:
        with CRIHarness(ctrd.socket_path, cgroup_parent=CGROUP_PARENT) as h:
            h.remove_all()
            t = time.perf_counter()
            pods = []
            for i in range(PODS):
                sandbox = h.run_pod(f"bench-{i}", "bench")
                h.create_container(sandbox, "app")
                pods.append(sandbox)
            log(f"{PODS} pods made in {time.perf_counter() - t:.1f} s")
            result["latency"] = measure_latency(h, ctrd.endpoint, pods, trials)
            log(f"latency: {result['latency']}")
            result["idle"] = measure_idle(ctrd.endpoint, idle_seconds)
            log(f"idle: {result['idle']}")
            result["restart"] = measure_restart(h, ctrd, pods, restarts)
            log(f"restart: {result['restart']}")
            result["burst"] = measure_burst(h, ctrd.endpoint, bursts)
            log(f"burst: {result['burst']}")
            h.remove_all()
    finally:
        ctrd.close()
        if not reused:
            containerd_down(directory)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
