"""Pods that just left (issue 23 §2): ``cache.find(ip=..., at=...)`` over 10,000 departed pods,
and the memory they hold.

    .venv/bin/python benchmarks/bench_departed.py [--quick] [--json]

1. Lookup: a ``RuntimeCache`` (over a fake: the lookup reads no runtime, its snapshot is
   fresh) whose 10,000 departed pods hold 2,000 IPs, each reused five times (pods of 3
   containers, as a node's). The median and p99 of ``find(ip=, at=)`` for random IPs at
   random times within the history, against a hit of ``get_pods()`` plus
   ``by_container_id`` in the same run (the baseline: the cheapest lookup a caller has).
   Every answer is checked against a scan of the history (a wrong answer fails the run).
   Target: median at most 10 us.
2. Memory: ``tracemalloc`` over building the departed pods: the bytes the departed index
   holds per pod (its entries, lists and records), and with the pods themselves.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
import tracemalloc
from typing import Any

from podcache import Container, ContainerID, ContainerState, FakeRuntime, Pod, RuntimeCache
from podcache.cache.changes import ChangeType, PodChange
from podcache.cache.departed import Departed

DEPARTED = 10_000
IPS = 2_000
TARGET_MEDIAN_US = 10.0
START = 1_700_000_000.0


def make_pod(n: int) -> Pod:
    ip = f"10.{(n % IPS) // 250}.{(n % IPS) % 250}.{1 + n % 7}"
    return Pod(
        id=f"{n:08x}-0000-4000-8000-000000000000",
        name=f"pod-{n}",
        namespace="default",
        created_at=int((START + n) * 1e9),
        ips=(ip,),
        containers=[
            Container(
                id=ContainerID("containerd", f"{n:056x}{i:08x}"),
                name=f"c{i}",
                image="registry.example/app:1",
                state=ContainerState.EXITED,
            )
            for i in range(3)
        ],
    )


def history(count: int) -> list[tuple[Pod, float]]:
    """Pod n is created at START + n and leaves at START + n + 0.5 (IPs reused by later pods)."""
    return [(make_pod(n), START + n + 0.5) for n in range(count)]


def filled(departed: Departed, pods: list[tuple[Pod, float]]) -> None:
    for pod, left in pods:
        departed.record([PodChange(ChangeType.DELETED, pod, 1)], left)


def memory(count: int) -> dict[str, float]:
    pods_only = tracemalloc_bytes(lambda: history(count))
    departed = Departed(departed_for=1e12, departed_max=count)
    made = history(count)
    index = tracemalloc_bytes(lambda: filled(departed, made))
    return {
        "departed_pods": count,
        "index_bytes_per_pod": index / count,
        "pod_bytes_per_pod": pods_only / count,
        "total_bytes_per_pod": (index + pods_only) / count,
    }


def tracemalloc_bytes(build: Any) -> int:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return after - before


def lookups(count: int, rounds: int) -> dict[str, Any]:
    made = history(count)
    now = START + count + 10.0
    cache = RuntimeCache(
        FakeRuntime([make_pod(count + 1)]),
        1e9,
        departed_for=1e12,
        departed_max=count,
        wall_clock=lambda: now,
    )
    cache.get_pods()
    filled(cache._departed, made)  # as the hook records them, without 10,000 publishes
    rng = random.Random(7)
    probes = [rng.uniform(START, START + count) for _ in range(rounds)]
    ips = [make_pod(rng.randrange(count)).ips[0] for _ in range(rounds)]
    wrong = 0
    for ip, at in zip(ips[:200], probes[:200], strict=True):
        expected = [p for p, left in made if ip in p.ips and p.created_at / 1e9 <= at < left]
        found = cache.find(ip=ip, at=at)
        wrong += (found.pod if found else None) != (expected[-1] if expected else None)
    times: list[float] = []
    for ip, at in zip(ips, probes, strict=True):
        begin = time.perf_counter_ns()
        cache.find(ip=ip, at=at)
        times.append((time.perf_counter_ns() - begin) / 1000)
    hit_id = make_pod(count + 1).containers[0].id.id
    baseline: list[float] = []
    for _ in range(rounds):
        begin = time.perf_counter_ns()
        cache.get_pods().by_container_id(hit_id)
        baseline.append((time.perf_counter_ns() - begin) / 1000)
    times.sort()
    return {
        "departed_pods": count,
        "reuses_per_ip": count // IPS,
        "find_ip_at_median_us": statistics.median(times),
        "find_ip_at_p99_us": times[int(len(times) * 0.99)],
        "baseline_get_pods_by_container_id_median_us": statistics.median(baseline),
        "wrong_answers": wrong,
        "target_median_us": TARGET_MEDIAN_US,
        "pass": statistics.median(times) <= TARGET_MEDIAN_US and wrong == 0,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rounds = 5_000 if args.quick else 50_000
    result = {"lookup": lookups(DEPARTED, rounds), "memory": memory(DEPARTED)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        look, mem = result["lookup"], result["memory"]
        print(
            f"find(ip=, at=) over {DEPARTED:,} departed pods ({look['reuses_per_ip']} per IP): "
            f"median {look['find_ip_at_median_us']:.2f} us, p99 {look['find_ip_at_p99_us']:.2f}"
            f" us (target <= {TARGET_MEDIAN_US} us: {'PASS' if look['pass'] else 'FAIL'}); "
            f"get_pods + by_container_id {look['baseline_get_pods_by_container_id_median_us']:.2f}"
            f" us; wrong answers {look['wrong_answers']}"
        )
        print(
            f"memory per departed pod: index {mem['index_bytes_per_pod']:.0f} B, the pod "
            f"itself {mem['pod_bytes_per_pod']:.0f} B, total {mem['total_bytes_per_pod']:.0f} B"
        )
    return 0 if result["lookup"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
