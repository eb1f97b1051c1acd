"""Short-lived pods remembered from their events: how many pods created and
removed after a gap of 0-2, 5 and 20 ms the library does not remember at all.

    .venv/bin/python benchmarks/bench_short_lives.py [--trials 30] [--json]

The runtime is the simulator in a process of its own (``--node``: this script, a
``SimRuntime`` commanded over stdin/stdout, one JSON object a line), whose events carry full
statuses as containerd 1.7 and 2.x send them; the node creates a pod (shape RUNNING), waits the
gap and removes it, so the gap is the node's own. The library is ``RuntimeCache(CRIRuntime,
30 s, events=True)`` in this process (the ready view, the default). Once every event of every
pod has reached the cache, a pod is *not remembered* when ``find`` knows neither its UID nor
any of its container IDs (the issue's measure); *keys missed* counts its sandbox ID, container
IDs, IP and UID that ``find`` does not know. Run it against two trees (``PYTHONPATH=TREE/src``)
in one session for a before/after pair.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

GAPS = {"0-2 ms": (0.0, 0.001, 0.002), "5 ms": (0.005,), "20 ms": (0.02,)}


def node_main(socket_path: str) -> int:
    """``--node``: serve a SimRuntime; ``life`` makes one short-lived pod, ``events`` counts."""
    from podcache.sim import PodShape, SimRuntime

    with SimRuntime(20, socket=socket_path, seed=42, host_network=0.0) as sim:
        print(json.dumps({"endpoint": sim.endpoint}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            if command["op"] == "quit":
                break
            uid, made = sim.population.create_pod(PodShape.RUNNING)
            time.sleep(command["gap"])
            made += sim.population.remove_pod(uid)
            sandbox = next(e.sandbox for e in made if e.sandbox is not None)
            containers = sorted({c.id for e in made for c in e.containers})
            reply = {"uid": uid, "sandbox": sandbox.id, "ip": sandbox.ip}
            print(json.dumps(reply | {"containers": containers, "events": len(made)}), flush=True)
    return 0


class Node:
    def __init__(self) -> None:
        directory = tempfile.mkdtemp(prefix="bench-short-lives-")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--node", f"{directory}/sim.sock"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.endpoint: str = self.read()["endpoint"]

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return reply

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
        self.proc.stdin.flush()
        self.proc.wait(15)


def missed(cache: Any, life: dict[str, Any]) -> tuple[bool, int]:
    """Whether the pod is not remembered at all, and how many of its keys are not."""
    keys = [("uid", life["uid"]), ("container_id", life["sandbox"])]
    keys += [("container_id", cid) for cid in life["containers"]]
    keys += [("ip", life["ip"])] if life["ip"] else []
    known = {key: cache.find(**{key[0]: key[1]}) is not None for key in keys}
    pod_known = known[("uid", life["uid"])] or any(
        known[("container_id", cid)] for cid in life["containers"]
    )
    return not pod_known, sum(not seen for seen in known.values())


def run(trials: int, spacing: float) -> dict[str, Any]:
    from podcache import RuntimeCache
    from podcache.cri import CRIRuntime

    node = Node()
    results: dict[str, Any] = {}
    try:
        with (
            CRIRuntime(node.endpoint) as runtime,
            RuntimeCache(runtime, 30.0, events=True) as cache,
        ):
            cache.get_pods()
            while cache.stats().events_state != "subscribed":
                time.sleep(0.01)
            time.sleep(0.1)
            lives: dict[str, list[dict[str, Any]]] = {name: [] for name in GAPS}
            sent = cache.stats().events_received
            for n in range(trials):
                for name, gaps in GAPS.items():
                    life = node.ask(op="life", gap=gaps[n % len(gaps)])
                    sent += life["events"]
                    lives[name].append(life)
                    time.sleep(spacing)  # pods apart, as the trials were
            deadline = time.monotonic() + 60
            while cache.stats().events_received < sent and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # the relists the last events asked for
            for name, made in lives.items():
                outcomes = [missed(cache, life) for life in made]
                results[name] = {
                    "pods": len(made),
                    "not_remembered": sum(gone for gone, _ in outcomes),
                    "keys_missed": sum(keys for _, keys in outcomes),
                }
    finally:
        node.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--spacing", type=float, default=0.3, help="seconds between pods")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--node", metavar="SOCKET", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.node:
        return node_main(args.node)
    results = run(args.trials, args.spacing)
    if args.json:
        print(json.dumps(results))
        return 0
    print("| gap | pods not remembered | keys not found |")
    print("|---|---|---|")
    for name, figures in results.items():
        pods, gone, keys = figures["pods"], figures["not_remembered"], figures["keys_missed"]
        print(f"| {name} | {gone} of {pods} | {keys} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
