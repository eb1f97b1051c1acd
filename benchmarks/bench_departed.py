"""Pods that just left: ``cache.find(ip=..., at=...)`` and a
lookup by crictl's 12-character prefix over 10,000 departed pods (50,000 remembered keys), and
the memory they hold per key.

    .venv/bin/python benchmarks/bench_departed.py [--quick] [--json]

1. Lookup: a ``RuntimeCache`` (over a fake: the lookup reads no runtime, its snapshot is
   fresh) whose 10,000 departed pods hold 2,000 IPs, each reused five times (pods of 3
   containers, as a node's). The median and p99 of ``find(ip=, at=)`` for random IPs at
   random times within the history, against a hit of ``get_pods()`` plus
   ``by_container_id`` in the same run (the baseline: the cheapest lookup a caller has).
   Every answer is checked against a scan of the history (a wrong answer fails the run).
   Target: median at most 10 us. Then ``find(container_id=<12 characters>)`` for random
   departed containers (a bisection of the remembered IDs; checked to name the right pod).
2. Recording: the cost of one departure (5 keys) into an index of 1,000 and of 10,000
   departed pods, interleaved; the ratio shows whether a change walks the remembered keys.
3. Memory: ``tracemalloc`` over building the departed pods: the bytes the index holds per
   remembered key (its ``Holding``, the entries of its tables and the sorted IDs), and the
   pods themselves per key (each departed pod here holds 5 keys: its UID, 3 containers, 1 IP).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
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
KEYS_PER_POD = 5  # its UID, 3 containers, 1 IP
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
                id=ContainerID("containerd", hashlib.sha256(f"{n}/{i}".encode()).hexdigest()),
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
    departed = Departed(departed_for=1e12, departed_max=count * KEYS_PER_POD)
    made = history(count)
    index = tracemalloc_bytes(lambda: filled(departed, made))
    keys = len(departed)
    assert keys == count * KEYS_PER_POD, keys
    return {
        "departed_pods": count,
        "remembered_keys": keys,
        "index_bytes_per_key": index / keys,
        "pod_bytes_per_key": pods_only / keys,
        "total_bytes_per_key": (index + pods_only) / keys,
    }


def recording(rounds: int) -> dict[str, Any]:
    """One departure's cost into a small and a large index, interleaved (min/median/max us)."""
    indexes = {}
    for size in (1_000, DEPARTED):
        departed = Departed(departed_for=1e12, departed_max=size * KEYS_PER_POD)
        filled(departed, history(size))
        indexes[size] = departed
    extra = [make_pod(DEPARTED + 1 + n) for n in range(rounds)]
    times: dict[int, list[float]] = {size: [] for size in indexes}
    for n, pod in enumerate(extra):
        for size, departed in indexes.items():
            change = [PodChange(ChangeType.DELETED, pod, 1)]
            begin = time.perf_counter_ns()
            departed.record(change, START + DEPARTED + n)  # one in, the oldest out
            times[size].append((time.perf_counter_ns() - begin) / 1000)
    result: dict[str, Any] = {}
    for size, each in times.items():
        each.sort()
        result[f"record_{size}_pods_us"] = [each[0], statistics.median(each), each[-1]]
    small, large = (statistics.median(times[size]) for size in indexes)
    result["ratio_10000_to_1000"] = large / small
    return result


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
        departed_max=count * KEYS_PER_POD,
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
    prefixed = [made[rng.randrange(count)][0].containers[1].id.id for _ in range(rounds)]
    for ident in prefixed[:200]:
        found = cache.find(container_id=ident[:12])
        wrong += found is None or found.container is None or found.container.id.id != ident
    by_prefix: list[float] = []
    for ident in prefixed:
        begin = time.perf_counter_ns()
        cache.find(container_id=ident[:12])
        by_prefix.append((time.perf_counter_ns() - begin) / 1000)
    by_prefix.sort()
    return {
        "find_by_12_char_prefix_median_us": statistics.median(by_prefix),
        "find_by_12_char_prefix_p99_us": by_prefix[int(len(by_prefix) * 0.99)],
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
    result = {
        "lookup": lookups(DEPARTED, rounds),
        "recording": recording(rounds // 10),
        "memory": memory(DEPARTED),
    }
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
            f"find(container_id=<12 characters>): median "
            f"{look['find_by_12_char_prefix_median_us']:.2f} us, p99 "
            f"{look['find_by_12_char_prefix_p99_us']:.2f} us"
        )
        rec = result["recording"]
        print(
            "one departure (5 keys), min/median/max us: into 1,000 pods "
            + "/".join(f"{v:.1f}" for v in rec["record_1000_pods_us"])
            + f", into {DEPARTED:,} pods "
            + "/".join(f"{v:.1f}" for v in rec[f"record_{DEPARTED}_pods_us"])
            + f" (ratio of medians {rec['ratio_10000_to_1000']:.2f})"
        )
        print(
            f"memory per remembered key ({mem['remembered_keys']:,} keys): index "
            f"{mem['index_bytes_per_key']:.0f} B, the pods themselves "
            f"{mem['pod_bytes_per_key']:.0f} B, total {mem['total_bytes_per_key']:.0f} B"
        )
    return 0 if result["lookup"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
