"""PID -> pod benchmark: ``pod_of_pid`` against a plain read of the process's cgroup file, and
the refreshes 10,000 lookups of new PIDs cause while 20 containers start.

Run: ``.venv/bin/python benchmarks/bench_pids.py [--quick] [--json]``.

1. Known container. A real process (``sleep``) is moved into a real cgroup named like a
   kubelet's (``podcachebench/pod<uid>/<64 hex>``, in the cgroup v1 ``pids`` hierarchy or the v2
   tree; this needs root), so ``/proc/<pid>/cgroup`` is the kernel's own text. Where that is not
   possible a fixture tree on tmpfs stands in (said in the output). Timed side by side, rounds
   interleaved: ``RuntimeCache.pod_of_pid(pid)`` with that container in the snapshot, and
   ``open("/proc/<pid>/cgroup").read()``. The figure per contender is the median over rounds of
   ns per call. Target (issue 15): median <= 2x the plain read.
2. Burst. A fixture ``/proc`` on tmpfs (its ``uptime`` is the real ``/proc/uptime``, so start
   times and the cache's ``time.monotonic`` clock agree as on a node) and a ``FakeRuntime`` that
   answers in 2 ms. One thread starts 20 containers one after the other (each listed by the
   runtime first, then its 500 processes started over a few ms); 4 threads look up every new PID
   as soon as it exists (10,000 lookups). Runtime calls after the first fill are the refreshes
   the lookups caused. Target: <= 20 (one per container at most).
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


def measure_burst(quick: bool) -> dict[str, object]:
    per_container = PIDS_PER_CONTAINER
    runtime = FakeRuntime([make_pod(1000)], latency=RUNTIME_LATENCY)
    cache = RuntimeCache(runtime, 3600.0)
    cache.get_pods()
    filled = runtime.calls
    pending: queue.Queue[int | None] = queue.Queue()
    results = {"found": 0, "missed": 0}
    lock = threading.Lock()
    with fixture_tree() as root:

        def look() -> None:
            while (pid := pending.get()) is not None:
                found = cache.pod_of_pid(pid, proc_root=str(root))
                with lock:
                    results["found" if found is not None else "missed"] += 1

        workers = [threading.Thread(target=look) for _ in range(LOOKUP_THREADS)]
        for worker in workers:
            worker.start()
        began = time.monotonic()
        pid = 100
        pods = list(runtime.pods)
        for n in range(CONTAINERS):
            pod = make_pod(n)
            pods.append(pod)
            runtime.set_pods(pods)  # listed by the runtime before its processes exist
            ident = pod.containers[0].id.id
            for _ in range(per_container):
                pid += 1
                add_process(root, pid, f"/kubepods/pod{pod.id}/{ident}", boot_ticks())
                pending.put(pid)
            time.sleep(0.01 if quick else 0.05)
        for _ in workers:
            pending.put(None)
        for worker in workers:
            worker.join()
        seconds = time.monotonic() - began
    return {
        "containers": CONTAINERS,
        "lookups": CONTAINERS * per_container,
        "threads": LOOKUP_THREADS,
        "runtime_latency_ms": RUNTIME_LATENCY * 1e3,
        "found": results["found"],
        "missed": results["missed"],
        "refreshes": runtime.calls - filled,
        "target": BURST_TARGET,
        "seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    data = {"known": measure_known(args.quick), "burst": measure_burst(args.quick)}
    if args.json:
        print(json.dumps(data))
        return
    known, burst = data["known"], data["burst"]
    print(f"known container ({known['how']}):")
    print(
        f"  pod_of_pid {known['pod_of_pid_ns']:.0f} ns vs open().read() "
        f"{known['plain_read_ns']:.0f} ns: {known['ratio']:.2f}x (target <= {KNOWN_TARGET}x)"
    )
    print(
        f"burst: {burst['lookups']:,} lookups of new PIDs while {burst['containers']} containers "
        f"start: {burst['refreshes']} refreshes (target <= {BURST_TARGET}), "
        f"{burst['found']:,} found, {burst['missed']} missed, {burst['seconds']} s"
    )


if __name__ == "__main__":
    main()
