"""How promptly the event stream is read while a 5,000-pod full listing runs ("read
the stream promptly": containerd 2.x blocks delivery to every subscriber while one reads
slowly).

    .venv/bin/python benchmarks/bench_event_lag.py [--quick] [--json]

The runtime is ``podcache sim`` in a process of its own (5,000 pods of 3 containers, pods
replaced at ``CHURN``/s: each replacement is several container events). One
``AsyncCRIRuntime`` in this process reads its event stream (the reader every cache uses: a
thread of its own handing the loop finished events) and records each event's lag: the wall
clock when the loop received it minus the runtime's ``created_at``. Two phases of equal length,
in one run: a quiet baseline, then the same with an ``AsyncRuntimeCache`` over the same
runtime forced to list the whole node back to back (each listing ~0.1-0.3 s of answers read
and converted). Reported: lag median, p99 and max in each phase, the listings made, and
events seen per phase (a reader that stalls shows in p99/max, not in the count).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from podcache import AsyncRuntimeCache
from podcache.cri import AsyncCRIRuntime

PODS = 5_000
CHURN = 5.0
_SIM = "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))"


def summary(lags_ms: list[float]) -> dict[str, float]:
    ordered = sorted(lags_ms)
    if not ordered:
        return {"events": 0}
    return {
        "events": len(ordered),
        "median_ms": statistics.median(ordered),
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max_ms": ordered[-1],
    }


async def read_events(runtime: AsyncCRIRuntime, lags: list[float], stop: asyncio.Event) -> None:
    stream = runtime.container_events()
    await stream.open()
    try:
        async for event in stream:
            lags.append((time.time_ns() - event.created_at) / 1e6)
            if stop.is_set():
                return
    finally:
        await stream.aclose()


async def listings(cache: AsyncRuntimeCache, until: float) -> int:
    count = 0
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        await cache.force_update_if_older(time.monotonic())
        count += 1
    return count


async def measure(endpoint: str, seconds: float) -> dict[str, Any]:
    runtime = AsyncCRIRuntime(endpoint)
    cache = AsyncRuntimeCache(runtime, 30.0)
    await cache.get_pods()  # warm: converter memo, channels
    quiet: list[float] = []
    loaded: list[float] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reader = asyncio.create_task(read_events(runtime, quiet, stop))
    await asyncio.sleep(seconds)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    reader = asyncio.create_task(read_events(runtime, loaded, stop))
    made = await listings(cache, loop.time() + seconds)
    stop.set()
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    await cache.aclose()
    return {
        "pods": PODS,
        "churn_per_s": CHURN,
        "seconds_per_phase": seconds,
        "quiet": summary(quiet),
        "while_listing": summary(loaded),
        "full_listings": made,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seconds = 5.0 if args.quick else 20.0
    sim = subprocess.Popen(
        [sys.executable, "-c", _SIM, "--pods", str(PODS), "--churn", str(CHURN)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sim.stdout is not None
        endpoint = sim.stdout.readline().strip()
        result = asyncio.run(measure(endpoint, seconds))
    finally:
        sim.terminate()
        sim.wait(10)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for phase in ("quiet", "while_listing"):
            figures = result[phase]
            print(
                f"{phase:>14}: {figures['events']} events, lag median "
                f"{figures.get('median_ms', 0):.1f} ms, p99 {figures.get('p99_ms', 0):.1f} ms, "
                f"max {figures.get('max_ms', 0):.1f} ms"
            )
        print(f"full listings of {PODS:,} pods meanwhile: {result['full_listings']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
