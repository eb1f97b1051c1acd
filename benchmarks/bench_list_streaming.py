"""A node past gRPC's 16 MiB message limit, listed through CRI list streaming.

    .venv/bin/python benchmarks/bench_list_streaming.py [--quick] [--json]

Each runtime is ``podcache sim`` in a process of its own (``--stats-file``: the calls, answer
bytes and messages it counted), so only the client is in this process. Three measurements:

1. **the big node**: 1,000 pods, a 16 KiB ``last-applied-configuration`` on every sandbox and
   container (``--annotation-bytes 16384``: both list answers past 16 MiB). ``get_pods(all)``
   by ``CRIRuntime`` and by ``AsyncCRIRuntime``, each on one getter (as a cache refreshes),
   R times interleaved: seconds per listing (min/median/max), and bytes and messages per
   listing as the runtime counted them.
2. **the same node without streaming** (``--no-streaming``): the listing fails; the seconds
   to fail and the error are recorded (a podcache that did not stream lists could not list
   this node at all).
3. **the price of streaming**, on a node under the limit (1,000 pods, 2 KiB annotations):
   the same listing streamed and unary, R times interleaved in the same minutes, as the ratio
   streamed / unary of the medians (the baseline is the unary listing), in seconds and in
   this process's CPU (the client's; the runtimes are other processes).

Writes ``benchmarks/results/list_streaming.json``; exit 2 on a broken run (a listing that
differs between streamed and unary, or a big-node listing that did not stream).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from podcache.cri import AsyncCRIRuntime, CRIRuntime  # noqa: E402 -- after sys.path names the repository
from podcache.errors import CRIError  # noqa: E402 -- after sys.path names the repository
from podcache.model import PodList  # noqa: E402 -- after sys.path names the repository

RESULTS = ROOT / "benchmarks" / "results" / "list_streaming.json"
PODS = 1_000
BIG = 16 * 1024
SMALL = 2 * 1024
TIMEOUT = 30.0
LISTS = ("StreamPodSandboxes", "StreamContainers", "ListPodSandbox", "ListContainers")
_SIM = [
    sys.executable,
    "-c",
    "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))",
]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Sim:
    """``podcache sim`` in a process of its own; ``counts()`` ends it and reads its stats."""

    def __init__(self, directory: str, name: str, *args: str) -> None:
        self.stats = Path(directory) / f"{name}.json"
        command = [*_SIM, "--socket", f"{directory}/{name}.sock"]
        self._proc = subprocess.Popen(
            [*command, "--stats-file", str(self.stats), "--seed", "31", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._proc.stdout is not None
        self.endpoint = self._proc.stdout.readline().strip()
        if not self.endpoint.startswith("unix://"):
            raise RuntimeError(f"podcache sim {args} did not start")

    def counts(self) -> dict[str, Any]:
        """Stop the runtime; what it counted."""
        self._proc.send_signal(signal.SIGTERM)
        self._proc.wait(60)
        document: dict[str, Any] = json.loads(self.stats.read_text())
        return document

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)


@contextlib.contextmanager
def sims(*specs: tuple[str, list[str]]) -> Iterator[list[Sim]]:
    with tempfile.TemporaryDirectory(prefix="pc-bench-", dir="/tmp") as directory:
        started: list[Sim] = []
        try:
            for name, args in specs:
                started.append(Sim(directory, name, *args))
            yield started
        finally:
            for sim in started:
                sim.kill()


def summary(seconds: list[float]) -> dict[str, float]:
    return {
        "min_ms": min(seconds) * 1e3,
        "median_ms": statistics.median(seconds) * 1e3,
        "max_ms": max(seconds) * 1e3,
        "n": len(seconds),
    }


def per_listing(document: dict[str, Any], listings: int) -> dict[str, float]:
    """Bytes, calls and messages per listing, by RPC, as the runtime counted them."""
    out: dict[str, float] = {}
    for method in LISTS:
        slot = document["calls"][method]["unfiltered"]
        out[f"{method}_calls"] = slot["calls"] / listings
        out[f"{method}_bytes"] = slot["bytes"] / listings
    for method, count in document.get("stream_messages", {}).items():
        out[f"{method}_messages"] = count / listings
    return out


def shape(pods: PodList) -> list[tuple[str, list[str], list[str]]]:
    """What two runtimes of the same seed list alike (their clocks differ: times do not)."""
    return sorted(
        (
            pod.id,
            sorted(str(c.id) for c in pod.containers),
            sorted(str(s.id) for s in pod.sandboxes),
        )
        for pod in pods
    )


def timed(listing: Callable[[], PodList], cpu: list[float] | None = None) -> tuple[float, PodList]:
    """Seconds ``listing`` took; with ``cpu``, this process's CPU seconds are appended."""
    started, cpu_started = time.perf_counter(), time.process_time()
    pods = listing()
    if cpu is not None:
        cpu.append(time.process_time() - cpu_started)
    return time.perf_counter() - started, pods


def big_node(repeats: int) -> dict[str, Any]:
    """1. the big node through streaming, threads and asyncio interleaved."""
    args = ["--pods", str(PODS), "--annotation-bytes", str(BIG)]
    with sims(("big", args)) as (sim,):
        loop = asyncio.new_event_loop()
        thread_getter = CRIRuntime(sim.endpoint, timeout=TIMEOUT)
        async_getter = AsyncCRIRuntime(sim.endpoint, timeout=TIMEOUT)
        try:
            times: dict[str, list[float]] = {"threads": [], "asyncio": []}
            for _ in range(repeats):
                seconds, by_threads = timed(lambda: thread_getter.get_pods(all=True))
                times["threads"].append(seconds)
                seconds, in_asyncio = timed(
                    lambda: loop.run_until_complete(async_getter.get_pods(all=True))
                )
                times["asyncio"].append(seconds)
                if by_threads != in_asyncio or len(by_threads) != PODS:
                    raise SystemExit(2)
            streamed = (thread_getter.list_streaming, async_getter.list_streaming)
        finally:
            thread_getter.close()
            loop.run_until_complete(async_getter.close())
            loop.close()
        document = sim.counts()
    if streamed != (True, True):
        raise SystemExit(2)
    return {
        "pods": PODS,
        "annotation_bytes": BIG,
        "threads": summary(times["threads"]),
        "asyncio": summary(times["asyncio"]),
        "per_listing": per_listing(document, 2 * repeats),
    }


def without_streaming() -> dict[str, Any]:
    """2. the same node, a runtime without streaming: the listing fails."""
    args = ["--pods", str(PODS), "--annotation-bytes", str(BIG), "--no-streaming"]
    with sims(("unary", args)) as (sim,):
        with CRIRuntime(sim.endpoint, timeout=TIMEOUT) as getter:
            getter.version()  # the Version call apart: only the listing is timed
            started = time.perf_counter()
            try:
                getter.get_pods(all=True)
            except CRIError as error:
                failed = {"seconds": time.perf_counter() - started, "error": str(error)}
            else:
                raise SystemExit(2)  # a unary answer past 16 MiB was received
        sim.counts()
    return failed


def price_of_streaming(repeats: int) -> dict[str, Any]:
    """3. streamed against unary on a node under the limit, interleaved."""
    args = ["--pods", str(PODS), "--annotation-bytes", str(SMALL)]
    with sims(("streamed", args), ("unary", [*args, "--no-streaming"])) as (streaming, unary):
        times: dict[str, list[float]] = {"streamed": [], "unary": []}
        cpu: dict[str, list[float]] = {"streamed": [], "unary": []}
        with (
            CRIRuntime(streaming.endpoint, timeout=TIMEOUT) as streamed_getter,
            CRIRuntime(unary.endpoint, timeout=TIMEOUT) as unary_getter,
        ):
            for _ in range(repeats):
                seconds, streamed_pods = timed(
                    lambda: streamed_getter.get_pods(all=True), cpu["streamed"]
                )
                times["streamed"].append(seconds)
                seconds, unary_pods = timed(lambda: unary_getter.get_pods(all=True), cpu["unary"])
                times["unary"].append(seconds)
                if shape(streamed_pods) != shape(unary_pods):
                    raise SystemExit(2)
        streamed_counts, unary_counts = streaming.counts(), unary.counts()
    streamed_summary, unary_summary = summary(times["streamed"]), summary(times["unary"])
    streamed_cpu, unary_cpu = summary(cpu["streamed"]), summary(cpu["unary"])
    return {
        "pods": PODS,
        "annotation_bytes": SMALL,
        "streamed": streamed_summary,
        "unary": unary_summary,
        "ratio_streamed_over_unary_median": streamed_summary["median_ms"]
        / unary_summary["median_ms"],
        "client_cpu_streamed": streamed_cpu,
        "client_cpu_unary": unary_cpu,
        "client_cpu_ratio_median": streamed_cpu["median_ms"] / unary_cpu["median_ms"],
        "streamed_per_listing": per_listing(streamed_counts, repeats),
        "unary_per_listing": per_listing(unary_counts, repeats),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    options = parser.parse_args()
    repeats = 5 if options.quick else 15
    log(f"1. {PODS} pods x {BIG} B of annotations, streamed, {repeats} listings per getter")
    results: dict[str, Any] = {"big_node": big_node(repeats)}
    log("2. the same node without streaming")
    results["without_streaming"] = without_streaming()
    log(f"3. streamed against unary under the limit ({SMALL} B), {repeats} each, interleaved")
    results["price_of_streaming"] = price_of_streaming(repeats)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    if options.json:
        print(json.dumps(results))
    else:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
