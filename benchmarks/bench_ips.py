"""Pod IPs: ``PodList.by_ip`` against a ``by_container_id`` hit, the cold start's
status calls at 5,000 pods, and status calls over churn against new sandboxes.

    .venv/bin/python benchmarks/bench_ips.py [--quick] [--json]

Every runtime here is ``podcache sim`` in a process of its own (as a real runtime is), on a
unix socket; podcache reads it with ``CRIRuntime`` (and ``AsyncCRIRuntime`` for the cold
start). The simulator counts the calls it receives; ``SIGUSR1`` makes it write them to its
``--stats-file``.

1. Lookup: a 5,000-pod snapshot read from the simulator; ns per ``by_ip(ip)`` of a random
   held IP and per ``by_container_id(id)`` of a random full bare container ID (both hits,
   indexes built first), rounds interleaved, the best round of each. Target: by_ip <= 1.5x.
2. Cold start at 5,000 pods: the first ``get_pods`` (lists, then one PodSandboxStatus per
   READY sandbox, in rounds of ``networks.STATUS_CONCURRENCY``) against the second (the steady
   refresh: no call), each twin; the statuses' share is the difference.
3. Churn: 1,000 pods replaced at ``CHURN`` pods/s for 60 s (quick: 15 s), a refresh every
   ``REFRESH`` s. The READY sandboxes every refresh lists are collected; after the cold start,
   the simulator's PodSandboxStatus count must grow by exactly the new ones seen (target:
   equal), and on a node without churn (a second simulator) by none over the same refreshes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from plumbing import simulator

from podcache import PodList
from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.cri.networks import STATUS_CONCURRENCY

STATUS = "PodSandboxStatus"
CHURN = 5.0
"""Pods replaced per second in the churn run."""
REFRESH = 0.5
"""Seconds between refreshes in the churn run."""


class Sim:
    """A ``podcache sim`` subprocess: its endpoint, and its call counts on demand."""

    def __init__(self, proc: subprocess.Popen[str], endpoint: str, stats: str) -> None:
        self.proc = proc
        self.endpoint = endpoint
        self.stats = stats

    def counts(self) -> dict[str, Any]:
        """The simulator's stats file, written anew on SIGUSR1 (``--stats-file``)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.stats)
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.stats):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("podcache sim wrote no stats file")
            time.sleep(0.01)
        with open(self.stats, encoding="utf-8") as f:
            return dict(json.load(f))

    def status_calls(self) -> int:
        kinds = self.counts()["calls"][STATUS]
        return int(sum(kind["calls"] for kind in kinds.values()))


@contextmanager
def sim_process(pods: int, churn: float = 0.0) -> Iterator[Sim]:
    """``podcache sim --pods N --churn R`` in a subprocess; SIGTERM on the way out."""
    with tempfile.TemporaryDirectory(prefix="bench-ips-") as scratch:
        stats = os.path.join(scratch, "stats.json")
        arguments = ("--pods", str(pods), "--churn", str(churn), "--stats-file", stats)
        with simulator(*arguments) as (endpoint, proc):
            yield Sim(proc, endpoint, stats)


def ready_sandboxes(pods: PodList) -> set[str]:
    """The newest READY sandbox of every pod that has one (the sandboxes status is asked of)."""
    found: set[str] = set()
    for pod in pods:
        for sandbox in pod.sandboxes:
            if sandbox.state.value == "running":
                found.add(sandbox.id.id)
                break
    return found


@dataclass
class Lookup:
    pods: int
    by_ip_ns: float
    by_container_id_ns: float
    ratio: float
    target: float = 1.5


def per_call_ns(pods: PodList, method: str, keys: list[str]) -> float:
    find = getattr(pods, method)
    began = time.perf_counter_ns()
    for key in keys:
        find(key)
    return (time.perf_counter_ns() - began) / len(keys)


def lookup(pods: PodList, rounds: int, n: int) -> Lookup:
    rng = random.Random(23)
    ips = [ip for pod in pods for ip in pod.ips]
    ids = [c.id.id for pod in pods for c in pod.containers]
    ip_keys = [rng.choice(ips) for _ in range(n)]
    id_keys = [rng.choice(ids) for _ in range(n)]
    assert all(pods.by_ip(k) is not None for k in ip_keys[:100])
    assert all(pods.by_container_id(k) is not None for k in id_keys[:100])
    best_ip = best_id = float("inf")
    for _ in range(rounds):
        best_ip = min(best_ip, per_call_ns(pods, "by_ip", ip_keys))
        best_id = min(best_id, per_call_ns(pods, "by_container_id", id_keys))
    return Lookup(len(pods), best_ip, best_id, best_ip / best_id)


@dataclass
class ColdStart:
    twin: str
    pods: int
    statuses: int
    first_s: float
    steady_s: float
    statuses_s: float
    concurrency: int = STATUS_CONCURRENCY


def cold_start_sync(endpoint: str) -> tuple[ColdStart, PodList]:
    with CRIRuntime(endpoint, timeout=30) as runtime:
        runtime.version()
        began = time.perf_counter()
        pods = runtime.get_pods()
        first = time.perf_counter() - began
        began = time.perf_counter()
        runtime.get_pods()
        steady = time.perf_counter() - began
        statuses = runtime.status_calls
    return ColdStart("CRIRuntime", len(pods), statuses, first, steady, first - steady), pods


def cold_start_async(endpoint: str) -> ColdStart:
    import asyncio

    async def run() -> ColdStart:
        async with AsyncCRIRuntime(endpoint, timeout=30) as runtime:
            await runtime.version()
            began = time.perf_counter()
            pods = await runtime.get_pods()
            first = time.perf_counter() - began
            began = time.perf_counter()
            await runtime.get_pods()
            steady = time.perf_counter() - began
            return ColdStart(
                "AsyncCRIRuntime", len(pods), runtime.status_calls, first, steady, first - steady
            )

    return asyncio.run(run())


@dataclass
class Churn:
    pods: int
    seconds: float
    churn_per_s: float
    refreshes: int
    cold_start_calls: int
    new_sandboxes: int
    status_calls_after: int
    steady_status_calls_after: int
    equal: bool


def _refreshes(runtime: CRIRuntime, seconds: float, seen: set[str]) -> int:
    """Refresh every REFRESH s for ``seconds``, adding each listing's READY sandboxes."""
    count = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(REFRESH)
        seen |= ready_sandboxes(runtime.get_pods())
        count += 1
    return count


def churn(seconds: float) -> Churn:
    with sim_process(1000, CHURN) as sim, CRIRuntime(sim.endpoint, timeout=10) as runtime:
        seen = ready_sandboxes(runtime.get_pods())
        cold = sim.status_calls()
        # Churn goes on between the first listing and this count: sandboxes it made are
        # counted as new by the next listing, and only then asked about.
        first = len(seen)
        refreshes = _refreshes(runtime, seconds, seen)
        after = sim.status_calls() - cold
    with sim_process(1000, 0.0) as steady, CRIRuntime(steady.endpoint, timeout=10) as runtime:
        runtime.get_pods()
        steady_cold = steady.status_calls()
        _refreshes(runtime, min(seconds, 10.0), set())
        steady_after = steady.status_calls() - steady_cold
    new = len(seen) - first
    return Churn(1000, seconds, CHURN, refreshes, cold, new, after, steady_after, after == new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with sim_process(5000) as sim:
        sync_cold, pods = cold_start_sync(sim.endpoint)
        async_cold = cold_start_async(sim.endpoint)
    found = lookup(pods, 5 if args.quick else 15, 20_000 if args.quick else 100_000)
    churned = churn(15.0 if args.quick else 60.0)
    churned.equal = churned.status_calls_after == churned.new_sandboxes
    result = {
        "lookup": asdict(found),
        "cold_start": [asdict(sync_cold), asdict(async_cold)],
        "churn": asdict(churned),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(found, [sync_cold, async_cold], churned)
    ok = found.ratio <= found.target and churned.equal and churned.steady_status_calls_after == 0
    return 0 if ok else 1


def _print(found: Lookup, colds: list[ColdStart], churned: Churn) -> None:
    print(f"lookup at {found.pods} pods (best round, ns per hit)")
    print(f"  by_ip            {found.by_ip_ns:8.0f}")
    print(f"  by_container_id  {found.by_container_id_ns:8.0f}")
    print(f"  ratio            {found.ratio:8.2f}  (target <= {found.target})")
    for cold in colds:
        print(
            f"cold start {cold.twin}: {cold.pods} pods, {cold.statuses} status calls "
            f"(rounds of {cold.concurrency}): first get_pods {cold.first_s:.2f} s, steady "
            f"{cold.steady_s * 1000:.0f} ms, statuses {cold.statuses_s:.2f} s"
        )
    print(
        f"churn: {churned.pods} pods, {churned.churn_per_s:g}/s for {churned.seconds:g} s, "
        f"{churned.refreshes} refreshes: {churned.new_sandboxes} new sandboxes, "
        f"{churned.status_calls_after} status calls after the cold start "
        f"({'equal' if churned.equal else 'NOT EQUAL'}); steady node: "
        f"{churned.steady_status_calls_after} calls"
    )


if __name__ == "__main__":
    sys.exit(main())
