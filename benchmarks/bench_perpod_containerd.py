"""The real-runtime targets at 110 pods on containerd 1.7 and 2.1: latency and equality.

    .venv/bin/python benchmarks/bench_perpod_containerd.py [--quick] [--versions 1.7,2.1]

For each version, a private containerd (``scripts/containerd-up``, directory
``$BENCH_CONTAINERD_DIR/<version>``, default /tmp/podcache-bench-perpod/<version>) with 110
pods made through CRI the way the kubelet does (``tests/containerd/harness.py``), and a
``RuntimeCache(CRIRuntime, period, events=True)``:

1. **started container visible**: StartContainer returning -> the container in ``get_pods()``
   (and StopContainer returning -> gone), >= 50 trials, 30 s period (``bench_events``'s
   measurement, reused); target: median <= 10 ms.
2. **equality at quiescence**: rounds of seeded random pod changes through CRI (run, start,
   stop, remove, crash-loop turns: ``tests/containerd/test_equality.py``'s sequence) on top of
   the 110 pods; after each round's last change returned, the time until ``get_pods()`` equals
   a fresh full listing (made by a warm getter of its own, as in test_equality), with a
   period far longer than the run (only events can explain it);
   target: within 100 ms (median and max reported). Full listings per round are counted.

Needs root and Linux; tears each instance down unless it was running before. Writes
``benchmarks/results/perpod_containerd.json`` and prints a summary with PASS/FAIL beside each
target.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_events import measure_latency  # noqa: E402 -- after sys.path names benchmarks/

from podcache import RuntimeCache  # noqa: E402 -- after sys.path names the repository
from podcache.cri import CRIRuntime  # noqa: E402 -- after sys.path names the repository
from tests.containerd.conftest import Containerd  # noqa: E402 -- after sys.path names the repository
from tests.containerd.harness import CRIHarness  # noqa: E402 -- after sys.path names the repository
from tests.containerd.test_equality import (  # noqa: E402 -- after sys.path names the repository
    CountingGetter,
    Sequence,
    seconds_to_equality,
)

PODS = 110
EQUALITY_PERIOD = 3600.0
CGROUP_PARENT = "podcachebenchperpod"
"""The pods' cgroup parent: containerd-down clears it, so it is this benchmark's own."""
TARGETS = {"started_median_ms": 10.0, "equality_ms": 100.0}
RESULTS = ROOT / "benchmarks" / "results" / "perpod_containerd.json"


def log(message: str) -> None:
    print(f"bench_perpod_containerd: {message}", file=sys.stderr, flush=True)


def _env(directory: Path, version: str) -> dict[str, str]:
    where = str(directory / version)  # one instance per version, as the tests keep them
    env = dict(os.environ, CONTAINERD_TEST_DIR=where, CONTAINERD_VERSION=version)
    env["PODCACHE_PYTHON"] = sys.executable
    env["CONTAINERD_TEST_CGROUP_PARENT"] = CGROUP_PARENT
    return env


def containerd_up(directory: Path, version: str) -> tuple[Containerd, bool]:
    """containerd ``version`` in ``directory/version``; whether it was running before."""
    where = directory / version
    ctrd = Containerd(where, "unix://" + str(where / "containerd.sock"), version)
    reused = ctrd.alive()
    done = subprocess.run(
        [str(ROOT / "scripts" / "containerd-up")],
        env=_env(directory, version),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/containerd-up failed ({done.returncode}): {done.stderr[-2000:]}")
    ctrd.endpoint = done.stdout.strip().splitlines()[-1]
    return ctrd, reused


def containerd_down(directory: Path, version: str) -> None:
    subprocess.run(
        [str(ROOT / "scripts" / "containerd-down")],
        env=_env(directory, version),
        capture_output=True,
        timeout=300,
        check=False,
    )


@contextmanager
def node_of_pods(
    directory: Path, version: str, pods: int, prefix: str, cgroup_parent: str
) -> Iterator[str]:
    """containerd ``version`` (``containerd_up``) with ``pods`` pods of one running container
    each (``PREFIX-N``), made as the kubelet makes them; yields its endpoint. The pods are
    removed after, and containerd stopped when it was not running before."""
    ctrd, reused = containerd_up(directory, version)
    try:
        with CRIHarness(ctrd.socket_path, cgroup_parent=cgroup_parent) as h:
            h.remove_all()
            began = time.monotonic()
            for i in range(pods):
                h.create_container(h.run_pod(f"{prefix}-{i}", "bench"), "app")
            made = time.monotonic() - began
            print(f"containerd {version}: {pods} pods made in {made:.0f} s", file=sys.stderr)
            try:
                yield ctrd.endpoint
            finally:
                h.remove_all()
    finally:
        ctrd.close()
        if not reused:
            containerd_down(directory, version)


def measure_equality(h: CRIHarness, endpoint: str, rounds: int, steps: int) -> dict[str, Any]:
    """Per round: seeded random changes, then ms until the cache equals a full listing."""
    seed = random.SystemRandom().randrange(2**32)
    sequence = Sequence(h, random.Random(seed))
    took: list[float] = []
    listings: list[int] = []
    failures: list[dict[str, Any]] = []
    with CRIRuntime(endpoint) as runtime, CRIRuntime(endpoint) as fresh:
        fresh.get_pods(False)  # warm, as the cache's getter is (see seconds_to_equality)
        getter = CountingGetter(runtime)
        with RuntimeCache(getter, EQUALITY_PERIOD, events=True) as cache:
            cache.get_pods()
            while cache.stats().events_state != "subscribed":
                time.sleep(0.01)
            try:
                for _ in range(rounds):
                    before = getter.full_listings
                    for _ in range(steps):
                        sequence.step()
                    try:
                        took.append(seconds_to_equality(cache, fresh) * 1e3)
                    except AssertionError as exc:  # recorded: the run goes on
                        failures.append({"round": len(listings), "error": str(exc)[:4000]})
                        log(f"round {len(listings)}: {str(exc)[:4000]}")
                    listings.append(getter.full_listings - before)
            finally:
                sequence.cleanup()
            stats = cache.stats()
    return {
        "seed": seed,
        "rounds": rounds,
        "steps_per_round": steps,
        "equality_ms": {
            "median": statistics.median(took) if took else None,
            "max": max(took) if took else None,
            "all": took,
        },
        "never_equal": failures,
        "steps": sequence.log,
        "full_listings_per_round": listings,
        "pod_relists": getter.pod_relists,
        "resubscriptions": stats.resubscriptions,
    }


def measure_version(directory: Path, version: str, quick: bool) -> dict[str, Any]:
    trials, rounds = (50, 5) if quick else (100, 20)
    ctrd, reused = containerd_up(directory, version)
    try:
        with CRIHarness(ctrd.socket_path, cgroup_parent=CGROUP_PARENT) as h:
            h.remove_all()
            pods = []
            for i in range(PODS):
                sandbox = h.run_pod(f"bench-{i}", "bench")
                h.create_container(sandbox, "app")
                pods.append(sandbox)
            log(f"containerd {version}: {PODS} pods made; latency, {trials} trials")
            latency = measure_latency(h, ctrd.endpoint, pods, trials)
            log(f"containerd {version}: equality, {rounds} rounds")
            equality = measure_equality(h, ctrd.endpoint, rounds, steps=8)
            h.remove_all()
    finally:
        ctrd.close()
        if not reused:
            containerd_down(directory, version)
    return {"containerd": version, "pods": PODS, "latency": latency, "equality": equality}


def print_report(result: dict[str, Any]) -> None:
    for row in result["versions"]:
        start = row["latency"]["start"]
        equal = row["equality"]["equality_ms"]
        verdict = "PASS" if start["median_ms"] <= TARGETS["started_median_ms"] else "FAIL"
        print(
            f"{verdict}  containerd {row['containerd']}: started container visible median "
            f"{start['median_ms']:.1f} ms, p99 {start['p99_ms']:.1f} ms (target median <= 10)"
        )
        failed = row["equality"]["never_equal"]
        if failed or not equal["all"]:
            print(
                f"FAIL  containerd {row['containerd']}: {len(failed)} rounds never equal "
                f"to a full listing: {[f['error'][:300] for f in failed]}"
            )
            continue
        verdict = "PASS" if equal["max"] <= TARGETS["equality_ms"] else "FAIL"
        print(
            f"{verdict}  containerd {row['containerd']}: equal to a full listing "
            f"{equal['median']:.1f} ms after quiescence (median; max {equal['max']:.1f} ms; "
            f"target <= 100); full listings per round "
            f"{row['equality']['full_listings_per_round']}"
        )
    print(f"load average: before {result['load_before']}, after {result['load_after']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials and rounds")
    parser.add_argument("--versions", default="1.7,2.1", help="containerd versions (with events)")
    parser.add_argument("--output", default=str(RESULTS), help="where to write the JSON")
    args = parser.parse_args()
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        raise SystemExit("bench_perpod_containerd needs root on Linux (it runs containerd)")
    directory = Path(os.environ.get("BENCH_CONTAINERD_DIR", "/tmp/podcache-bench-perpod"))
    load_before = list(os.getloadavg())
    versions = [measure_version(directory, v, args.quick) for v in args.versions.split(",")]
    result = {
        "quick": args.quick,
        "load_before": load_before,
        "versions": versions,
        "targets": TARGETS,
        "load_after": list(os.getloadavg()),
    }
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
