"""The CRI socket's latency target on a real runtime: ``ListContainers`` through the CRI socket and
straight at containerd, side by side.

    .venv/bin/python benchmarks/bench_crisock_containerd.py [--pods 1000] [--versions 2.1]
        [--samples 300] [--rounds 3] [--json]

For each version: a private containerd (``scripts/containerd-up``, directory
``$BENCH_CONTAINERD_DIR/<version>``, default /tmp/podcache-bench-crisock/<version>), ``--pods``
pods made through CRI the way the kubelet does (``tests/containerd/harness.py``, each with one
created container), ``podcache serve --cri-listen`` over it with its defaults, then
``bench_crisock``'s side-by-side loop: ``ListContainers`` unfiltered, alternately through the
socket and straight at containerd, ``--samples`` pairs a round. Before the rounds, both answers
are compared (the same containers, each protobuf-equal; order free) and must be equal.

Why a real runtime: the simulator keeps its list answers encoded per generation, so on
``bench_crisock``'s node its side is a cache too, and the two sides send the same kept bytes
through the same grpcio machinery (medians within 1-5% either way). containerd builds every
answer from its store and marshals it, as the issue says runtimes do. Target: the proxied
median at or below the direct one in every round.

Needs root and Linux; tears each instance down unless it was running before. Prints a summary;
``--json`` prints every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_crisock import latency_pairs, raw, serve_process  # noqa: E402 -- after sys.path names benchmarks/
from bench_perpod_containerd import CGROUP_PARENT, node_of_pods  # noqa: E402 -- as above

from podcache.cri.proto import api_pb2 as pb  # noqa: E402 -- after sys.path names the repository

DEFAULT_DIR = Path(os.environ.get("BENCH_CONTAINERD_DIR", "/tmp/podcache-bench-crisock"))


def _containers(target: str) -> dict[str, pb.Container]:
    """One unfiltered ListContainers answer, by container ID."""
    with grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)]) as ch:
        answer = pb.ListContainersResponse.FromString(raw(ch, "ListContainers")(b"", timeout=30))
    return {c.id: c for c in answer.containers}


def _equal_answers(proxied: str, direct: str) -> dict[str, Any]:
    """Both answers, compared: the same IDs, each container protobuf-equal."""
    through, straight = _containers(proxied), _containers(direct)
    different = [cid for cid in straight if through.get(cid) != straight[cid]]
    return {
        "containers": len(straight),
        "equal": through == straight,
        "missing_or_different": len(different) + len(set(through) - set(straight)),
    }


def measure_version(version: str, pods: int, samples: int, rounds: int) -> dict[str, Any]:
    with node_of_pods(DEFAULT_DIR, version, pods, "bench", CGROUP_PARENT) as endpoint:
        return {"containerd": version, "pods": pods, **_rounds(endpoint, samples, rounds)}


def _rounds(endpoint: str, samples: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp:
        socket_path = os.path.join(tmp, "cri.sock")
        with serve_process(endpoint, socket_path):
            proxied = f"unix://{socket_path}"
            time.sleep(2.0)  # the first listing's items are kept
            answers = _equal_answers(proxied, endpoint)
            medians = []
            for _ in range(rounds):
                times = latency_pairs(proxied, endpoint, samples)
                medians.append({name: statistics.median(ms) for name, ms in times.items()})
    return {"answers": answers, "medians_ms": medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--versions", default="2.1")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if sys.platform != "linux" or os.geteuid() != 0:
        raise SystemExit("bench_crisock_containerd needs root on Linux (it runs containerd)")
    results = [
        measure_version(version, args.pods, args.samples, args.rounds)
        for version in args.versions.split(",")
    ]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for result in results:
        answers = result["answers"]
        print(
            f"containerd {result['containerd']}, {result['pods']} pods: answers equal "
            f"{answers['equal']} ({answers['containers']} containers)"
        )
        for median in result["medians_ms"]:
            ratio = median["proxied"] / median["direct"]
            verdict = "met" if ratio <= 1 else "not met"
            print(
                f"  ListContainers median proxied {median['proxied']:.2f} ms, direct "
                f"{median['direct']:.2f} ms: {ratio:.2f}x ({verdict})"
            )


if __name__ == "__main__":
    main()
