"""A victim's latency on the CRI socket during attacks on it, against a baseline commit.

    .venv/bin/python benchmarks/bench_crisock_attacks.py [--baseline COMMIT] [--seconds 10]
                                                          [--attacks none,streams,slots,silent]
                                                          [--json]

The victim asks ``ListPodSandbox`` by ID (an answer from the cache) on a connection of its own,
a new one for each call as crictl makes, with a 2 s deadline, one call after another for
``--seconds``. Attacks (each against a fresh ``podcache serve --cri-listen`` over the simulator
in its own process, 100 pods):

- ``none``: nothing else runs.
- ``streams`` (finding 2): 100 ``StreamContainers`` on one connection that never reads a byte.
- ``slots`` (finding 2): 300 ``PodSandboxStatus`` with distinct IDs, the simulator answering
  every call in 2 s (the victim's list is the cache's: the runtime is never asked for it).
- ``silent`` (finding 6): 1,100 connections that send nothing, each made again as it closes.
- ``list``: no attack; 1,000 pods, and the victim asks ``ListContainers`` unfiltered on one
  connection kept open (the relay's cost on a large answer; bodies compared item by item).

Reported per attack and tree: the victim's calls, non-OK answers, answers whose bytes differ
from the runtime's own (asked directly before the attack), and the latency's median, p99 and
max in ms. The baseline runs from ``git archive`` of its commit (``trees.py``), in the same
run, the attacks interleaved tree by tree. Not part of the suite: run on demand.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from trees import Tree, this_tree, tree_at

from podcache.cri.proto import api_pb2 as pb

_SIM = "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))"
_RS = "/runtime.v1.RuntimeService/"
PODS = 100
DEADLINE = 2.0


def _raw(channel: grpc.Channel, method: str) -> Any:
    return channel.unary_unary(
        _RS + method, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )


@contextmanager
def simulator(latency: float, pods: int = PODS) -> Iterator[str]:
    """``podcache sim`` in its own process (this checkout's); its endpoint."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIM, "--pods", str(pods), "--latency", str(latency)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=this_tree().env(),
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


@contextmanager
def served(tree: Tree, endpoint: str, path: str) -> Iterator[None]:
    """``podcache serve --cri-listen path`` of ``tree``, once its socket answers a list."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "podcache.serve", "-r", endpoint, "--cache-period", "600s"),
            *("--listen", f"unix:{path}.http", "--cri-listen", path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=tree.env(),
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _ask(path, pb.ListPodSandboxRequest().SerializeToString(), 5.0)
                break
            except (grpc.RpcError, OSError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{tree.name}: serve did not answer on {path}") from None
                time.sleep(0.2)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def _ask(path: str, request: bytes, timeout: float, method: str = "ListPodSandbox") -> bytes:
    """One call on a new connection (a channel of its own subchannel pool)."""
    channel = grpc.insecure_channel(f"unix://{path}", [("grpc.use_local_subchannel_pool", 1)])
    try:
        answer: bytes = _raw(channel, method)(request, timeout=timeout)
        return answer
    finally:
        channel.close()


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    head = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return head + payload


def _never_reading(path: str, method: str, streams: int) -> socket.socket:
    """A connection opening ``streams`` calls of ``method`` that never reads a byte (HPACK
    literals without indexing, RFC 7541 §6.2.2)."""
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peer.connect(path)
    headers = b"".join(
        bytes([0, len(name)]) + name.encode() + bytes([len(value)]) + value.encode()
        for name, value in [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", _RS + method),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    sent = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"") + _frame(4, 1, 0, b"")
    for index in range(streams):
        sent += _frame(1, 4, 2 * index + 1, headers) + _frame(0, 1, 2 * index + 1, b"\0" * 5)
    peer.sendall(sent)
    return peer


@contextmanager
def streams_attack(path: str, stop: threading.Event) -> Iterator[None]:
    peer = _never_reading(path, "StreamContainers", 100)
    try:
        time.sleep(1.0)  # its answers reach the window and stop
        yield
    finally:
        peer.close()


@contextmanager
def slots_attack(path: str, stop: threading.Event) -> Iterator[None]:
    channels = [
        grpc.insecure_channel(f"unix://{path}", [("grpc.use_local_subchannel_pool", 1)])
        for _ in range(3)
    ]
    calls = [
        _raw(channels[n % 3], "PodSandboxStatus").future(
            pb.PodSandboxStatusRequest(pod_sandbox_id=f"attack-{n}").SerializeToString(),
            timeout=120,
        )
        for n in range(300)
    ]
    try:
        time.sleep(1.0)
        yield
    finally:
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()


@contextmanager
def silent_attack(path: str, stop: threading.Event) -> Iterator[None]:
    """1,100 connections that say nothing, each made again as soon as it is closed."""

    def hold() -> None:
        while not stop.is_set():
            peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                peer.connect(path)
                peer.settimeout(0.5)
                while not stop.is_set():
                    try:
                        if not peer.recv(65536):
                            break  # closed by the server: connect again
                    except TimeoutError:
                        continue
            except OSError:
                time.sleep(0.01)
            finally:
                peer.close()

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(1100)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2.0)
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)


@contextmanager
def no_attack(path: str, stop: threading.Event) -> Iterator[None]:
    yield


ATTACKS: dict[str, Callable[[str, threading.Event], Any]] = {
    "none": no_attack,
    "streams": streams_attack,
    "slots": slots_attack,
    "silent": silent_attack,
}


def _items(answer: bytes) -> list[bytes]:
    listed = pb.ListContainersResponse.FromString(answer).containers
    return sorted(item.SerializeToString(deterministic=True) for item in listed)


def victim(
    ask: Callable[[], bytes], same: Callable[[bytes], bool], seconds: float
) -> dict[str, float]:
    latencies: list[float] = []
    failed = differ = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            differ += not same(ask())
        except grpc.RpcError:
            failed += 1
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {
        "calls": len(latencies),
        "non_ok": failed,
        "bodies_differ": differ,
        "median_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2),
        "max_ms": round(latencies[-1], 2),
    }


def run_list(tree: Tree, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch, simulator(0, 1000) as ep:
        path = f"{scratch}/cri.sock"
        request = pb.ListContainersRequest().SerializeToString()
        expected = _items(_ask(ep.removeprefix("unix://"), request, 30.0, "ListContainers"))
        with served(tree, ep, path):
            channel = grpc.insecure_channel(
                f"unix://{path}", [("grpc.use_local_subchannel_pool", 1)]
            )
            method = _raw(channel, "ListContainers")
            try:
                return victim(
                    lambda: method(request, timeout=DEADLINE),
                    lambda answer: _items(answer) == expected,
                    seconds,
                )
            finally:
                channel.close()


def run(tree: Tree, attack: str, seconds: float) -> dict[str, float]:
    if attack == "list":
        return run_list(tree, seconds)
    with tempfile.TemporaryDirectory() as scratch, simulator(2.0 if attack == "slots" else 0) as ep:
        os.chmod(scratch, 0o700)
        path = f"{scratch}/cri.sock"
        direct = ep.removeprefix("unix://")
        listing = pb.ListPodSandboxResponse.FromString(
            _ask(direct, pb.ListPodSandboxRequest().SerializeToString(), 30.0)
        )
        sandbox = listing.items[0].id
        request = pb.ListPodSandboxRequest(filter=pb.PodSandboxFilter(id=sandbox))
        expected = _ask(direct, request.SerializeToString(), 30.0)
        with served(tree, ep, path):
            stop = threading.Event()
            with ATTACKS[attack](path, stop):
                return victim(
                    lambda: _ask(path, request.SerializeToString(), DEADLINE),
                    lambda answer: answer == expected,
                    seconds,
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="f9bf559")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--attacks", default="none,streams,slots,silent,list")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = [this_tree(), tree_at(args.baseline, args.baseline)]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for attack in args.attacks.split(","):
        for tree in trees:
            figures = run(tree, attack, args.seconds)
            results.setdefault(attack, {})[tree.name] = figures
            print(f"{attack:>8} {tree.name:>8}: {figures}", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
