"""CRI calls saved: a lookup-heavy agent over real gRPC, with the cache and without it.

    .venv/bin/python benchmarks/bench_calls_saved.py [--quick] [--json]

A simulated runtime (``podcache sim``: 110 pods, in a process of its own, as a real runtime is)
serves CRI on a unix socket. The workload: 10,000 lookups per second for 10 s (quick: 3 s), each
``cache.get_pods().by_container_id(id)`` of a random known container or sandbox ID, through a
``RuntimeCache`` with a 2 s period over ``CRIRuntime``. The getter is wrapped to count runtime
calls (each ``get_pods`` is two RPCs, ListPodSandbox and ListContainers).

The baseline, one ``runtime.get_pods(False)`` per lookup, cannot keep up with that rate, so it
is not run for the whole workload: its achievable lookup rate is measured for a short time (half
before the cached run and half after, so drift cancels), and the runtime calls it would need are
extrapolated (one per lookup: rate x duration), with the time they would take at that rate.
Holds no target; ``benchmarks/run`` draws it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from plumbing import simulator

from podcache import PodList, RuntimeCache
from podcache.cri import CRIRuntime

PODS = 110
RATE = 10_000
"""Lookups per second the workload asks for."""
PERIOD = 2.0
"""Cache period, seconds."""


class CountingGetter:
    """Wraps a runtime getter and counts its ``get_pods`` calls."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self.runtime = runtime
        self.calls = 0

    def get_pods(self, all: bool) -> PodList:
        self.calls += 1
        return self.runtime.get_pods(all)


@contextmanager
def sim_process(pods: int) -> Iterator[str]:
    """``podcache sim --pods N`` in a subprocess; yields its endpoint; SIGTERM on the way out."""
    with simulator("--pods", str(pods)) as (endpoint, _):
        yield endpoint


@dataclass
class Result:
    """The cached workload and the extrapolated no-cache baseline."""

    pods: int
    ids: int
    rate: int
    seconds: float
    period: float
    cached_lookups: int
    cached_elapsed: float
    cached_rate: float
    cached_not_found: int
    cached_calls: int
    cached_rpcs: int
    ideal_calls: int
    lookup_p50_us: float
    lookup_p99_us: float
    lookup_max_us: float
    baseline_seconds: float
    baseline_lookups: int
    baseline_rate: float
    baseline_calls_needed: int
    baseline_seconds_needed: float
    calls_ratio: float
    calls_saved: float


def cached_workload(
    cache: RuntimeCache, ids: list[str], seconds: float, rng: random.Random
) -> tuple[int, float, int, list[int]]:
    """RATE lookups per second for ``seconds`` (late lookups catch up): count, time, misses, ns."""
    clock, sleep = time.perf_counter, time.sleep
    ticks = time.perf_counter_ns
    total = int(RATE * seconds)
    samples: list[int] = []
    not_found = done = 0
    began = clock()
    while done < total:
        due = min(total, int((clock() - began) * RATE))
        while done < due:
            wanted = ids[rng.randrange(len(ids))]
            start = ticks()
            found = cache.get_pods().by_container_id(wanted)
            samples.append(ticks() - start)
            not_found += found is None
            done += 1
        sleep(0.001)
    return done, clock() - began, not_found, samples


def uncached_rate(runtime: CRIRuntime, ids: list[str], seconds: float, rng: random.Random) -> int:
    """Lookups done in ``seconds`` with one runtime call each, back to back."""
    clock = time.perf_counter
    done = 0
    began = clock()
    while clock() - began < seconds:
        runtime.get_pods(False).by_container_id(ids[rng.randrange(len(ids))])
        done += 1
    return done


def measure(quick: bool = False) -> Result:
    """The cached workload between two halves of the baseline's rate measurement."""
    seconds, baseline_seconds = (3.0, 1.0) if quick else (10.0, 4.0)
    rng = random.Random(7)
    with sim_process(PODS) as endpoint, CRIRuntime(endpoint) as runtime:
        for _ in range(20):  # warm-up: connection, Version, conversion memo
            pods = runtime.get_pods(False)
        ids = [c.id.id for pod in pods for c in (*pod.containers, *pod.sandboxes)]
        baseline_lookups = uncached_rate(runtime, ids, baseline_seconds / 2, rng)
        counting = CountingGetter(runtime)
        cache = RuntimeCache(counting, PERIOD)
        lookups, elapsed, not_found, samples = cached_workload(cache, ids, seconds, rng)
        baseline_lookups += uncached_rate(runtime, ids, baseline_seconds / 2, rng)
    samples.sort()
    baseline_rate = baseline_lookups / baseline_seconds
    needed = int(RATE * seconds)
    return Result(
        pods=PODS,
        ids=len(ids),
        rate=RATE,
        seconds=seconds,
        period=PERIOD,
        cached_lookups=lookups,
        cached_elapsed=elapsed,
        cached_rate=lookups / elapsed,
        cached_not_found=not_found,
        cached_calls=counting.calls,
        cached_rpcs=2 * counting.calls,
        ideal_calls=math.ceil(seconds / PERIOD),
        lookup_p50_us=samples[len(samples) // 2] / 1e3,
        lookup_p99_us=samples[math.ceil(0.99 * len(samples)) - 1] / 1e3,
        lookup_max_us=samples[-1] / 1e3,
        baseline_seconds=baseline_seconds,
        baseline_lookups=baseline_lookups,
        baseline_rate=baseline_rate,
        baseline_calls_needed=needed,
        baseline_seconds_needed=needed / baseline_rate,
        calls_ratio=needed / counting.calls,
        calls_saved=1 - counting.calls / needed,
    )


def main() -> int:
    """Print a markdown table, or JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 s workload, 1 s baseline")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    r = measure(args.quick)
    if args.json:
        print(json.dumps(asdict(r), indent=2))
        return 0
    print(
        f"{r.rate:,} lookups/s for {r.seconds:g} s over {r.pods} pods ({r.ids} IDs), "
        f"period {r.period:g} s, simulated runtime over gRPC\n"
    )
    print("| contender | lookups | lookups/s | runtime calls | p50 µs | p99 µs | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(
        f"| RuntimeCache | {r.cached_lookups:,} | {r.cached_rate:,.0f} | {r.cached_calls} "
        f"(ideal {r.ideal_calls}) | {r.lookup_p50_us:.1f} | {r.lookup_p99_us:.1f} "
        f"| {r.lookup_max_us / 1e3:.1f} |"
    )
    print(
        f"| no cache (extrapolated from {r.baseline_lookups:,} lookups in "
        f"{r.baseline_seconds:g} s) | {r.baseline_calls_needed:,} | {r.baseline_rate:,.0f} "
        f"achievable | {r.baseline_calls_needed:,} (would take {r.baseline_seconds_needed:,.0f} s) "
        "| | | |"
    )
    print(f"\n{r.calls_ratio:,.0f}x fewer runtime calls ({r.calls_saved:.4%} saved)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
