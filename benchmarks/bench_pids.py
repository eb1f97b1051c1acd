"""PID -> pod benchmark: ``pod_of_pid`` against a plain read of the process's cgroup file, and
the refreshes 10,000 lookups of new PIDs cause while 20 containers start.

Run: ``.venv/bin/python benchmarks/bench_pids.py [--quick] [--json]``.

1. Known container. A real process (``sleep``) is moved into a real cgroup named like a
   kubelet's (``podcachebench/pod<uid>/<64 hex>``, in the cgroup v1 ``pids`` hierarchy or the v2
   tree; this needs root), so ``/proc/<pid>/cgroup`` is the kernel's own text. Where that is not
   possible a fixture tree on tmpfs stands in (said in the output). Timed side by side, rounds
   interleaved: ``RuntimeCache.pod_of_pid(pid)`` with that container in the snapshot, and
   ``open("/proc/<pid>/cgroup").read()``. The figure per contender is the median over rounds of
   ns per call. Target: median <= 2x the plain read.
2. Burst. A fixture ``/proc`` on tmpfs (its ``uptime`` is the real ``/proc/uptime``, so start
   times and the cache's ``time.monotonic`` clock agree as on a node) and a ``FakeRuntime`` that
   answers in 2 ms. One thread starts 20 containers one after the other (each listed by the
   runtime first, then its 500 processes started over a few ms); 4 threads look up every new PID
   as soon as it exists (10,000 lookups). Runtime calls after the first fill are the refreshes
   the lookups caused. Target: <= 20 (one per container at most). Then the same burst with
   the PIDs handed over in batches every second, as an agent that resolves what it sampled
   now and then: one refresh serves every container started before it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from podcache import Container, ContainerID, ContainerState, FakeRuntime, Pod, RuntimeCache

KNOWN_TARGET = 2.0
BURST_TARGET = 20
CONTAINERS = 20
PIDS_PER_CONTAINER = 500
LOOKUP_THREADS = 4
RUNTIME_LATENCY = 0.002
SAMPLE_EVERY = 1.0
"""Seconds between the sampler's batches in the second burst."""


def container_id(n: int) -> str:
    return f"{n:016x}" * 4


def make_pod(n: int) -> Pod:
    return Pod(
        id=str(uuid.UUID(int=n + 1)),
        name=f"bench-{n}",
        namespace="bench",
        created_at=n,
        containers=[
            Container(
                id=ContainerID("containerd", container_id(n)),
                name="main",
                state=ContainerState.RUNNING,
            )
        ],
    )


# -- 1. a known container ---------------------------------------------------------------------
def _cgroup_root() -> Path | None:
    """A cgroup directory a process can be moved into: v1's pids hierarchy, else v2's root."""
    for candidate in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        if (candidate / "cgroup.procs").exists() and os.access(candidate, os.W_OK):
            return candidate
    return None


@contextlib.contextmanager
def process_in_container(pod: Pod) -> Iterator[tuple[int, str, str]]:
    """``(pid, proc_root, how)``: a real process in a kubelet-like cgroup, or a fixture one."""
    ident = pod.containers[0].id.id
    child = subprocess.Popen(["sleep", "3600"])
    root = _cgroup_root()
    made: list[Path] = []
    try:
        if root is not None:
            try:
                group = root / "podcachebench" / f"pod{pod.id}" / ident
                for directory in (group.parents[1], group.parent, group):
                    if not directory.exists():
                        directory.mkdir()
                        made.append(directory)
                (group / "cgroup.procs").write_text(str(child.pid))
                yield child.pid, "/proc", f"a real process in the cgroup {group}"
                return
            except OSError as exc:
                how = f"a fixture /proc on tmpfs (no writable cgroup: {exc})"
        else:
            how = "a fixture /proc on tmpfs (no writable cgroup hierarchy)"
        with fixture_tree() as tree:
            add_process(tree, child.pid, f"/kubepods/pod{pod.id}/{ident}", start_ticks=1)
            yield child.pid, str(tree), how
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                directory.rmdir()


def _ns_per_call(fn: Callable[[], object], n: int) -> float:
    began = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - began) / n


def measure_known(quick: bool) -> dict[str, object]:
    pod = make_pod(0)
    runtime = FakeRuntime([make_pod(n) for n in range(1, 50)] + [pod])
    cache = RuntimeCache(runtime, 3600.0)
    rounds, calls = (7, 2_000) if quick else (21, 10_000)
    with process_in_container(pod) as (pid, proc_root, how):
        path = f"{proc_root}/{pid}/cgroup"

        def plain_read() -> str:
            with open(path) as f:
                return f.read()

        def lookup() -> object:
            return cache.pod_of_pid(pid, proc_root=proc_root)

        found = cache.pod_of_pid(pid, proc_root=proc_root)
        assert found is not None and found.container == pod.containers[0], found
        contenders = {"pod_of_pid": lookup, "open().read()": plain_read}
        figures: dict[str, list[float]] = {name: [] for name in contenders}
        for fn in contenders.values():
            _ns_per_call(fn, calls // 10)  # warm-up
        for _ in range(rounds):
            for name, fn in contenders.items():
                figures[name].append(_ns_per_call(fn, calls))
        sample = plain_read()
    lookup_ns = statistics.median(figures["pod_of_pid"])
    read_ns = statistics.median(figures["open().read()"])
    return {
        "how": how,
        "cgroup_file_bytes": len(sample),
        "rounds": rounds,
        "calls_per_round": calls,
        "pod_of_pid_ns": round(lookup_ns, 1),
        "plain_read_ns": round(read_ns, 1),
        "ratio": round(lookup_ns / read_ns, 3),
        "target": KNOWN_TARGET,
        "runtime_calls": runtime.calls,
    }


# -- 2. a burst of new containers -------------------------------------------------------------
@contextlib.contextmanager
def fixture_tree() -> Iterator[Path]:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = Path(tempfile.mkdtemp(prefix="podcache-bench-proc-", dir=base))
    try:
        (root / "uptime").symlink_to("/proc/uptime")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def add_process(root: Path, pid: int, cgroup: str, start_ticks: int) -> None:
    directory = root / str(pid)
    directory.mkdir()
    (directory / "cgroup").write_text(f"0::{cgroup}\n")
    middle = "1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0"
    (directory / "stat").write_text(f"{pid} (app) S {middle} {start_ticks} 1000 100 0\n")


def boot_ticks() -> int:
    """Now, in ``/proc/<pid>/stat`` start-time ticks (CLOCK_BOOTTIME)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


class _Burst:
    """20 containers started one after another; each new PID is handed to the lookup threads
    at once, or, with ``sample_every``, in batches by a sampler (an agent that resolves what it
    collected every so often)."""

    def __init__(self, root: Path, quick: bool, sample_every: float | None) -> None:
        self.root = root
        self.gap = 0.01 if quick else 0.05
        self.sample_every = sample_every
        self.runtime = FakeRuntime([make_pod(1000)], latency=RUNTIME_LATENCY)
        self.cache = RuntimeCache(self.runtime, 3600.0)
        self.pending: queue.Queue[int | None] = queue.Queue()
        self.started: list[int] = []
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.results = {"found": 0, "missed": 0}

    def look(self) -> None:
        while (pid := self.pending.get()) is not None:
            found = self.cache.pod_of_pid(pid, proc_root=str(self.root))
            with self.lock:
                self.results["found" if found is not None else "missed"] += 1

    def sample(self) -> None:
        assert self.sample_every is not None
        while not self.done.wait(self.sample_every):
            self._hand_over()
        self._hand_over()

    def _hand_over(self) -> None:
        with self.lock:
            batch, self.started = self.started, []
        for pid in batch:
            self.pending.put(pid)

    def start_containers(self) -> None:
        pid = 100
        pods = list(self.runtime.pods)
        for n in range(CONTAINERS):
            pod = make_pod(n)
            pods.append(pod)
            self.runtime.set_pods(pods)  # listed by the runtime before its processes exist
            ident = pod.containers[0].id.id
            for _ in range(PIDS_PER_CONTAINER):
                pid += 1
                add_process(self.root, pid, f"/kubepods/pod{pod.id}/{ident}", boot_ticks())
                if self.sample_every is None:
                    self.pending.put(pid)
                else:
                    with self.lock:
                        self.started.append(pid)
            time.sleep(self.gap)

    def run(self) -> dict[str, object]:
        self.cache.get_pods()
        filled = self.runtime.calls
        workers = [threading.Thread(target=self.look) for _ in range(LOOKUP_THREADS)]
        sampler = threading.Thread(target=self.sample) if self.sample_every else None
        for thread in [*workers, *([sampler] if sampler else [])]:
            thread.start()
        began = time.monotonic()
        self.start_containers()
        self.done.set()
        if sampler is not None:
            sampler.join()
        for _ in workers:
            self.pending.put(None)
        for worker in workers:
            worker.join()
        return {
            "containers": CONTAINERS,
            "lookups": CONTAINERS * PIDS_PER_CONTAINER,
            "threads": LOOKUP_THREADS,
            "sample_every_s": self.sample_every,
            "runtime_latency_ms": RUNTIME_LATENCY * 1e3,
            "found": self.results["found"],
            "missed": self.results["missed"],
            "refreshes": self.runtime.calls - filled,
            "target": BURST_TARGET,
            "seconds": round(time.monotonic() - began, 2),
        }


def measure_burst(quick: bool, sample_every: float | None = None) -> dict[str, object]:
    with fixture_tree() as root:
        return _Burst(root, quick, sample_every).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    data = {
        "known": measure_known(args.quick),
        "burst": measure_burst(args.quick),
        "burst_sampled": measure_burst(args.quick, SAMPLE_EVERY),
    }
    if args.json:
        print(json.dumps(data))
        return
    known, burst = data["known"], data["burst"]
    print(f"known container ({known['how']}):")
    print(
        f"  pod_of_pid {known['pod_of_pid_ns']:.0f} ns vs open().read() "
        f"{known['plain_read_ns']:.0f} ns: {known['ratio']:.2f}x (target <= {KNOWN_TARGET}x)"
    )
    for key in ("burst", "burst_sampled"):
        burst = data[key]
        how = "at once" if key == "burst" else f"every {burst['sample_every_s']:g} s"
        print(
            f"{key}: {burst['lookups']:,} lookups of new PIDs ({how}) while "
            f"{burst['containers']} containers start: {burst['refreshes']} refreshes (target <= "
            f"{BURST_TARGET}), {burst['found']:,} found, {burst['missed']} missed, "
            f"{burst['seconds']} s"
        )


if __name__ == "__main__":
    main()
