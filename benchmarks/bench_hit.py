"""Hit-path benchmark: ns per ``get_pods`` hit, against ``time.monotonic()`` and a Go-style port.

Run: ``.venv/bin/python benchmarks/bench_hit.py [--quick] [--json]``. Every contender is timed
in the same process, rounds interleaved so machine drift hits all alike; the figure per
contender is the best (minimum) over rounds of ns per call, as timeit advises (loop overhead
included for all alike), after one untimed warm-up pass. ``measure()`` returns the figures (the
``benchmarks/run`` report reads ``--json``).
Targets: RuntimeCache <= 2.3x time.monotonic() and <= 0.55x the lock-based port.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import threading
import time
from collections.abc import Callable

from podcache import AsyncFakeRuntime, AsyncRuntimeCache, FakeRuntime, Pod, PodList, RuntimeCache


class LockedGoPortCache:
    """Baseline: runtime_cache.go ported line by line (one mutex held for every call)."""

    def __init__(
        self, getter: FakeRuntime, period: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._getter = getter
        self._period = period
        self._clock = clock
        self._cache_time: float | None = None
        self._pods: PodList = PodList()

    def get_pods(self) -> PodList:
        with self._lock:
            if self._cache_time is None or self._clock() - self._cache_time > self._period:
                self._update()
            return self._pods

    def _update(self) -> None:
        timestamp = self._clock()
        self._pods = self._getter.get_pods(False)
        self._cache_time = timestamp


def per_call_ns(fn: Callable[[], object], n: int) -> float:
    """ns per call of ``fn`` in a tight loop."""
    began = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - began) / n


def per_await_ns(fn: Callable[[], object], n: int) -> float:
    """ns per ``await fn()`` in a tight loop inside one coroutine."""

    async def loop() -> float:
        began = time.perf_counter_ns()
        for _ in range(n):
            await fn()  # type: ignore[misc]
        return (time.perf_counter_ns() - began) / n

    return asyncio.run(loop())


def threaded_ns(fn: Callable[[], object], n: int, threads: int) -> float:
    """Wall ns per call when ``threads`` threads each make ``n`` calls at once."""
    barrier = threading.Barrier(threads + 1)

    def work() -> None:
        barrier.wait()
        for _ in range(n):
            fn()

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    began = time.perf_counter_ns()
    for t in pool:
        t.join()
    return (time.perf_counter_ns() - began) / (n * threads)


def measure(quick: bool = False) -> tuple[dict[str, float], int, int]:
    """ns per call of every contender (best of the rounds), with the calls and rounds used.

    One untimed warm-up pass of every contender comes first; then the rounds, each running
    every contender once, in the same order, so drift hits all alike.
    """
    n, rounds = (200_000, 5) if quick else (1_000_000, 9)

    pods = PodList([Pod(id=f"uid-{i}", name=f"p{i}", namespace="default") for i in range(110)])
    cache = RuntimeCache(FakeRuntime(pods), 3600.0)
    go_port = LockedGoPortCache(FakeRuntime(pods), 3600.0)
    acache = AsyncRuntimeCache(AsyncFakeRuntime(pods), 3600.0)
    cache.get_pods()
    go_port.get_pods()
    asyncio.run(acache.get_pods())
    mono = time.monotonic

    def contenders(calls: int) -> dict[str, Callable[[], float]]:
        table: dict[str, Callable[[], float]] = {
            "time.monotonic()": lambda: per_call_ns(mono, calls),
            "RuntimeCache": lambda: per_call_ns(cache.get_pods, calls),
            "AsyncRuntimeCache": lambda: per_await_ns(acache.get_pods, calls),
            "lock-based Go port": lambda: per_call_ns(go_port.get_pods, calls),
        }
        for threads in (2, 16):
            table[f"RuntimeCache, {threads} threads"] = functools.partial(
                threaded_ns, cache.get_pods, calls // threads, threads
            )
            table[f"lock-based Go port, {threads} threads"] = functools.partial(
                threaded_ns, go_port.get_pods, calls // threads, threads
            )
        return table

    for warm_up in contenders(n // 10).values():
        warm_up()
    timed = contenders(n)
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name, measure_one in timed.items():
            samples[name].append(measure_one())
    return {name: min(values) for name, values in samples.items()}, n, rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter loops")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    ns, n, rounds = measure(args.quick)

    base = ns["time.monotonic()"]
    port = ns["lock-based Go port"]
    results: dict[str, float] = {
        "ratio_vs_monotonic": ns["RuntimeCache"] / base,
        "ratio_vs_lock_port": ns["RuntimeCache"] / port,
        "async_ratio_vs_monotonic": ns["AsyncRuntimeCache"] / base,
        "async_ratio_vs_lock_port": ns["AsyncRuntimeCache"] / port,
    }
    if args.json:
        print(json.dumps({"ns": ns, **results, "calls": n, "rounds": rounds}, indent=2))
        return
    print(f"hit path, best of {rounds} rounds x {n:,} calls (ns per call)\n")
    print("| contender | ns/hit | x monotonic | x lock-based port |")
    print("|---|---:|---:|---:|")
    for name, value in ns.items():
        ref = port if "threads" not in name else ns[f"lock-based Go port, {name.split(', ')[1]}"]
        print(f"| {name} | {value:.0f} | {value / base:.2f} | {value / ref:.2f} |")
    ok_mono = results["ratio_vs_monotonic"] <= 2.3
    ok_port = results["ratio_vs_lock_port"] <= 0.55
    print(
        f"\nRuntimeCache hit = {results['ratio_vs_monotonic']:.2f}x time.monotonic() "
        f"(target <= 2.3: {'met' if ok_mono else 'NOT met'}), "
        f"{results['ratio_vs_lock_port']:.2f}x the lock-based port "
        f"(target <= 0.55: {'met' if ok_port else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
