"""Status latency from the cache through the CRI socket, side by side with the runtime's own.

    .venv/bin/python benchmarks/bench_status_latency.py [--calls N] [--rounds R]
        [--base CHECKOUT] [--json]

``podcache sim --pods 1000`` in a process of its own, and ``podcache serve --cri-listen`` over
it (``--cache-period 1m``, so that every status asked after a first untimed round is answered
from the cache: the benchmark reads ``podcache_cri_status_answers_total`` and reports the
answers by source). With ``--base CHECKOUT``, a second serve runs from that checkout's
``.venv`` over the same simulator, so that a change is measured against the commit before it
in the same run.

One client (a channel per target) asks ``ContainerStatus`` (verbose; with ``--method
PodSandboxStatus``, the plain ``PodSandboxStatus`` of their sandboxes, as Falco asks) for the
same 50 containers over and over, ``N`` calls per target per round, each call to every target in
turn (the order rotated each call, so drift and the order cancel): straight at the simulator,
through this checkout's socket, through the base's. Per round and target: p50 and p99 in ms,
and for each process its CPU (its threads' time on a CPU, from ``schedstat``) per call in
microseconds
over the round. Answers are compared byte for byte with the simulator's; a non-OK answer or a
different one is counted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from typing import Any

import grpc
from plumbing import serve_cri, simulator

from podcache.cri.proto import api_pb2 as pb

PODS = 1000
CONTAINERS = 50
"""Containers whose statuses are asked, over and over (all from the cache after one round)."""
_PATH = "/runtime.v1.RuntimeService/"


def cpu_seconds(pid: int) -> float:
    """Process ``pid``'s time on a CPU so far, its threads summed (``/proc/PID/task/*/schedstat``,
    in nanoseconds: ``/proc/PID/stat`` counts in clock ticks, too coarse per call)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self._path)


def answers_by_source(http_path: str, method: str) -> dict[str, float]:
    """``podcache_cri_status_answers_total`` of ``method``, by source, from /metrics."""
    connection = _UnixHTTP(http_path)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("podcache_cri_status_answers_total{") and f'"{method}"' in line:
            source = line.split('source="', 1)[1].split('"', 1)[0]
            out[source] = float(line.rsplit(" ", 1)[1])
    return out


def serve(python: str, endpoint: str, path: str) -> Any:
    """``podcache serve --cri-listen PATH`` run by ``python`` (a checkout's venv) over
    ``endpoint`` with a period no call outlives, its HTTP on ``PATH.http``."""
    return serve_cri(endpoint, path, "--cache-period", "1m", python=python)


class Target:
    """One side asked: its channel, its latencies of the round, its process."""

    def __init__(
        self, name: str, address: str, proc: subprocess.Popen[str] | None, method: str
    ) -> None:
        self.name = name
        self.channel = grpc.insecure_channel(address)
        self.status = self.channel.unary_unary(
            _PATH + method,
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        self.proc = proc
        self.ms: list[float] = []
        self.failed = 0
        self.differ = 0

    def ask(self, request: bytes) -> bytes | None:
        began = time.perf_counter()
        try:
            data: bytes = self.status(request, timeout=30)
        except grpc.RpcError:
            self.failed += 1
            return None
        self.ms.append((time.perf_counter() - began) * 1000)
        return data


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


def requests(address: str, method: str) -> list[bytes]:
    with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", -1)]) as ch:
        lister = ch.unary_unary(
            _PATH + "ListContainers",
            request_serializer=lambda b: b,
            response_deserializer=pb.ListContainersResponse.FromString,
        )
        listed = lister(b"", timeout=30).containers[:CONTAINERS]
    if method == "PodSandboxStatus":
        return [
            pb.PodSandboxStatusRequest(pod_sandbox_id=c.pod_sandbox_id).SerializeToString()
            for c in listed
        ]
    return [
        pb.ContainerStatusRequest(container_id=c.id, verbose=True).SerializeToString()
        for c in listed
    ]


def wait_answering(target: Target, request: bytes) -> None:
    deadline = time.monotonic() + 60
    while target.ask(request) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{target.name} never answered")
        time.sleep(0.1)
    target.ms.clear()
    target.failed = 0


def one_round(targets: list[Target], asked: list[bytes], calls: int) -> dict[str, Any]:
    """``calls`` calls per target, each call to every target in turn (rotated)."""
    for target in targets:
        target.ms.clear()
    cpu = {t.name: cpu_seconds(t.proc.pid) for t in targets if t.proc is not None}
    for i in range(calls):
        request = asked[i % len(asked)]
        shift = i % len(targets)
        answers = {t.name: t.ask(request) for t in targets[shift:] + targets[:shift]}
        direct = answers[targets[0].name]
        for target in targets[1:]:
            target.differ += answers[target.name] != direct
    out: dict[str, Any] = {}
    for target in targets:
        row: dict[str, float] = {
            "p50": percentile(target.ms, 0.5),
            "p99": percentile(target.ms, 0.99),
        }
        if target.proc is not None:
            spent = cpu_seconds(target.proc.pid) - cpu[target.name]
            row["cpu_us_per_call"] = round(spent / calls * 1e6, 1)
        out[target.name] = row
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    pythons = {"serve": sys.executable}
    if args.base:
        pythons["base serve"] = os.path.join(args.base, ".venv", "bin", "python")
    with ExitStack() as stack:
        directory = stack.enter_context(tempfile.TemporaryDirectory())
        endpoint, sim = stack.enter_context(simulator("--pods", str(PODS)))
        targets = [Target("sim", endpoint, sim, args.method)]
        for name, python in pythons.items():
            path = os.path.join(directory, name.replace(" ", "-") + ".sock")
            proc = stack.enter_context(serve(python, endpoint, path))
            targets.append(Target(name, f"unix://{path}", proc, args.method))
        asked = requests(endpoint, args.method)
        for target in targets:
            wait_answering(target, asked[0])
            for request in asked:
                target.ask(request)  # the first round: learnt, not timed
        rounds = [one_round(targets, asked, args.calls) for _ in range(args.rounds)]
        sources = {
            t.name: answers_by_source(
                os.path.join(directory, t.name.replace(" ", "-")) + ".sock.http", args.method
            )
            for t in targets[1:]
        }
        result = {
            "calls": args.calls,
            "method": args.method,
            "rounds": rounds,
            "sources": sources,
            "failed": {t.name: t.failed for t in targets},
            "differ": {t.name: t.differ for t in targets[1:]},
            "load": os.getloadavg(),
        }
        for target in targets:
            target.channel.close()
        return result


def markdown(result: dict[str, Any]) -> list[str]:
    names = list(result["rounds"][0])
    lines = [
        f"{result['calls']} {result['method']} calls per target per round, load {result['load']}",
        "| round | " + " | ".join(f"{n} p50 / p99 ms (CPU us/call)" for n in names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for i, one in enumerate(result["rounds"]):
        cells = [
            f"{one[n]['p50']:.3f} / {one[n]['p99']:.3f}"
            + (f" ({one[n]['cpu_us_per_call']:.0f})" if "cpu_us_per_call" in one[n] else "")
            for n in names
        ]
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    lines.append(f"answers by source: {result['sources']}")
    lines.append(f"failed: {result['failed']}, differing from the simulator's: {result['differ']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", help="a checkout whose .venv runs a second serve")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--method", choices=["ContainerStatus", "PodSandboxStatus"], default="ContainerStatus"
    )
    args = parser.parse_args()
    result = measure(args)
    print(json.dumps(result, indent=1) if args.json else "\n".join(markdown(result)))


if __name__ == "__main__":
    main()
