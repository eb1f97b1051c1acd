"""Why podcache speaks HTTP/2 to the runtime itself: its own client (``cri/http2.py`` over
``cri/wire``) against a client on the ``h2`` library and against grpcio, making the same CRI
calls to the simulator in its own process.

    .venv/bin/python benchmarks/bench_h2_client.py [--quick] [--rounds 5] [--calls 2000] [--json]

The runtime is ``podcache sim`` (110 pods, no churn) in a process of its own, on a unix
socket, so only the client's CPU is in this process. Three clients, each on one connection
(a channel for grpcio), each sending the same request bytes and returning the answer's
message bytes, read by nobody (the reader is the same whichever client brought them):

- ``podcache``: ``http2.Connection.call_all`` (the relist's two calls in one write);
- ``h2``: the ``h2`` library's ``H2Connection`` driven over a blocking socket the same way
  (both calls' frames in one write, read until both streams end, windows given back, the
  trailers' grpc-status checked): the smallest client a library makes of it;
- ``grpcio``: a channel's ``unary_unary`` with bytes in and out (no protobuf on either side),
  blocking calls, as podcache makes its other calls.

The calls, what a pod change makes on this client: the **relist of one pod**
(``ListPodSandbox`` and ``ListContainers`` filtered by the pod's UID label) and a sandbox's
``PodSandboxStatus``, over the node's pods in turn. Every answer is held to grpcio's (the same
bytes for the same request, less a status's timestamp; any difference fails the run, exit 2).

Measured in rounds, the clients interleaved (A, B, C, A, B, C; the order rotated each round):
**CPU per call** (``time.process_time``: every thread of this process, grpcio's own threads
included), **latency** p50 and p99 of each call (a relist: both calls), and, in a separate
pass through a relay that counts the bytes each way (its threads are not timed), the **bytes
per call** on the wire, both ways, once the connection is up. Figures are medians over rounds
with the lowest and highest; ratios are each client's over podcache's in the same round.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import grpc  # noqa: E402 -- after sys.path names the repository
import h2.config  # noqa: E402 -- after sys.path names the repository
import h2.connection  # noqa: E402 -- after sys.path names the repository
import h2.events  # noqa: E402 -- after sys.path names the repository

from podcache.cri.endpoint import parse_endpoint  # noqa: E402 -- after sys.path, as above
from podcache.cri.http2 import Connection  # noqa: E402 -- after sys.path, as above
from podcache.cri.proto import api_pb2 as pb  # noqa: E402 -- after sys.path, as above
from podcache.cri.queries import _pod_requests  # noqa: E402 -- after sys.path, as above
from podcache.cri.wire.grpcwire import message  # noqa: E402 -- after sys.path, as above
from podcache.cri.wire.methods import path  # noqa: E402 -- after sys.path, as above

sys.path.insert(0, str(ROOT / "benchmarks"))
from plumbing import print_figures, reason, span  # noqa: E402 -- after sys.path names benchmarks/
from plumbing import simulator as plumbing_simulator  # noqa: E402 -- as above

PODS = 110
CLIENTS = ("podcache", "h2", "grpcio")
Request = tuple[str, bytes]
"""A call: its method's name and its request message's bytes."""


class Client(Protocol):
    def call_all(self, requests: Sequence[Request]) -> list[bytes]: ...

    def close(self) -> None: ...


# -- the runtime -----------------------------------------------------------------------------------
@contextmanager
def simulator() -> Iterator[str]:
    """``podcache sim`` in its own process; yields its endpoint."""
    with plumbing_simulator("--pods", str(PODS)) as (endpoint, _):
        yield endpoint


# -- the three clients -----------------------------------------------------------------------------
class Ours:
    def __init__(self, endpoint: str) -> None:
        self._connection = Connection(parse_endpoint(endpoint), 5.0)

    def call_all(self, requests: Sequence[Request]) -> list[bytes]:
        answers = self._connection.call_all(requests, time.monotonic() + 10.0)
        return [messages[0] for messages in answers]

    def close(self) -> None:
        self._connection.close()


class H2Library:
    """A gRPC unary client on ``h2.connection.H2Connection``, one call batch at a time."""

    def __init__(self, endpoint: str) -> None:
        where = parse_endpoint(endpoint)
        assert where.path is not None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(where.path)
        self._sock.settimeout(10.0)
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        self._h2.initiate_connection()
        self._sock.sendall(self._h2.data_to_send())

    def call_all(self, requests: Sequence[Request]) -> list[bytes]:
        streams: dict[int, bytearray] = {}
        for method, body in requests:
            stream_id = self._h2.get_next_available_stream_id()
            self._h2.send_headers(stream_id, _headers(method))
            self._h2.send_data(stream_id, message(body), end_stream=True)
            streams[stream_id] = bytearray()
        self._sock.sendall(self._h2.data_to_send())
        ended: set[int] = set()
        while len(ended) < len(streams):
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("the runtime closed the connection")
            for event in self._h2.receive_data(data):
                self._take(event, streams, ended)
            out = self._h2.data_to_send()
            if out:
                self._sock.sendall(out)
        return [bytes(streams[i][5:]) for i in streams]

    def _take(self, event: h2.events.Event, streams: dict[int, bytearray], ended: set[int]) -> None:
        if isinstance(event, h2.events.DataReceived):
            assert event.stream_id is not None and event.data is not None
            streams[event.stream_id] += event.data
            self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived):
            status = dict(event.headers or ()).get(b"grpc-status")
            if status != b"0":
                raise RuntimeError(f"h2: stream {event.stream_id} ended with status {status!r}")
        elif isinstance(event, h2.events.StreamEnded):
            assert event.stream_id is not None
            ended.add(event.stream_id)
        elif isinstance(event, h2.events.StreamReset | h2.events.ConnectionTerminated):
            raise RuntimeError(f"h2: {event}")

    def close(self) -> None:
        self._sock.close()


def _headers(method: str) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path(method).encode()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]


class Grpcio:
    def __init__(self, endpoint: str) -> None:
        self._channel = grpc.insecure_channel(endpoint.replace("unix://", "unix:"))
        self._calls: dict[str, Callable[..., bytes]] = {}

    def call_all(self, requests: Sequence[Request]) -> list[bytes]:
        answers = []
        for method, body in requests:
            call = self._calls.get(method)
            if call is None:
                call = self._calls[method] = self._channel.unary_unary(
                    path(method), request_serializer=None, response_deserializer=None
                )
            answers.append(call(body, timeout=10.0))
        return answers

    def close(self) -> None:
        self._channel.close()


MAKERS: dict[str, Callable[[str], Client]] = {"podcache": Ours, "h2": H2Library, "grpcio": Grpcio}


# -- the calls -------------------------------------------------------------------------------------
def workloads(endpoint: str) -> dict[str, list[list[Request]]]:
    """The relists of the node's pods, and its sandboxes' statuses, one list entry per call."""
    client = Grpcio(endpoint)
    listed = client.call_all([("ListPodSandbox", pb.ListPodSandboxRequest().SerializeToString())])
    client.close()
    sandboxes = pb.ListPodSandboxResponse.FromString(listed[0]).items
    relists = []
    for sandbox in sandboxes:
        sandbox_request, container_request = _pod_requests(sandbox.metadata.uid, False)
        relists.append([
            ("ListPodSandbox", sandbox_request.SerializeToString()),
            ("ListContainers", container_request.SerializeToString()),
        ])  # fmt: skip
    statuses = [
        [("PodSandboxStatus", pb.PodSandboxStatusRequest(pod_sandbox_id=s.id).SerializeToString())]
        for s in sandboxes
    ]
    return {"relist": relists, "status": statuses}


def measure(client: Client, calls: list[list[Request]]) -> tuple[dict[str, Any], list[bytes]]:
    """CPU per call and latency percentiles over ``calls``; the answers, for comparison."""
    latencies = []
    answers: list[bytes] = []
    cpu = time.process_time()
    for requests in calls:
        began = time.perf_counter()
        answers += client.call_all(requests)
        latencies.append(time.perf_counter() - began)
    spent = time.process_time() - cpu
    latencies.sort()
    figures = {
        "cpu_us_per_call": spent / len(calls) * 1e6,
        "p50_us": latencies[len(latencies) // 2] * 1e6,
        "p99_us": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e6,
    }
    return figures, answers


def rounds_of(endpoint: str, work: dict[str, list[list[Request]]], rounds: int,
              calls: int) -> dict[str, dict[str, list[dict[str, Any]]]]:  # fmt: skip
    """Every workload on every client, interleaved, ``rounds`` times; answers held alike."""
    clients = {name: make(endpoint) for name, make in MAKERS.items()}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        for client in clients.values():  # warm-up: connections made, paths cached
            for warm in work.values():
                measure(client, warm[:20])
        for round_ in range(rounds):
            order = CLIENTS[round_ % 3 :] + CLIENTS[: round_ % 3]
            for kind, pool in work.items():
                batch = [pool[i % len(pool)] for i in range(calls)]
                answers: dict[str, list[bytes]] = {}
                for name in order:
                    figures, answers[name] = measure(clients[name], batch)
                    runs.setdefault(kind, {}).setdefault(name, []).append(figures)
                _held_alike(kind, answers)
    finally:
        for client in clients.values():
            client.close()
    return runs


def _comparable(kind: str, answers: list[bytes]) -> list[bytes]:
    """The answers less what differs between two answers to one call: a status's timestamp
    (when it was made)."""
    if kind != "status":
        return answers
    out = []
    for answer in answers:
        status = pb.PodSandboxStatusResponse.FromString(answer)
        status.ClearField("timestamp")
        out.append(status.SerializeToString(deterministic=True))
    return out


def _held_alike(kind: str, answers: dict[str, list[bytes]]) -> None:
    reference = _comparable(kind, answers["grpcio"])
    for name, got in answers.items():
        if _comparable(kind, got) != reference:
            print(f"bench_h2_client: {name}'s {kind} answers differ from grpcio's", file=sys.stderr)
            raise SystemExit(2)


# -- bytes on the wire -----------------------------------------------------------------------------
class Relay:
    """A unix socket relaying each connection to ``target``, counting the bytes each way."""

    def __init__(self, target: str, directory: str) -> None:
        self.target = target
        self.path = os.path.join(directory, "relay.sock")
        self.sent = self.received = 0
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, outgoing: bool) -> None:
        while True:
            try:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            except OSError:
                break
            with self._lock:
                if outgoing:
                    self.sent += len(data)
                else:
                    self.received += len(data)
        for sock in (source, sink):
            sock.close()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.sent, self.received

    def close(self) -> None:
        self._listener.close()


def wire_bytes(endpoint: str, work: dict[str, list[list[Request]]], calls: int) -> dict[str, Any]:
    """Each client's bytes per call, sent and received, once its connection is up."""
    target = parse_endpoint(endpoint).path
    assert target is not None
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-h2-") as directory:
        relay = Relay(target, directory)
        for name, make in MAKERS.items():
            client = make("unix://" + relay.path)
            for kind, pool in work.items():
                client.call_all(pool[0])  # the connection up, its settings exchanged
                time.sleep(0.05)
                sent, received = relay.counts()
                for requests in pool[:calls]:
                    client.call_all(requests)
                time.sleep(0.05)
                now = relay.counts()
                count = min(calls, len(pool))
                out.setdefault(kind, {})[name] = {
                    "sent_per_call": (now[0] - sent) / count,
                    "received_per_call": (now[1] - received) / count,
                }
            client.close()
        relay.close()
    return out


# -- the report ------------------------------------------------------------------------------------
def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ours = runs["podcache"]
    for name, figures in runs.items():
        row: dict[str, Any] = {}
        for key in ("cpu_us_per_call", "p50_us", "p99_us"):
            values = [f[key] for f in figures]
            row[key] = {"median": statistics.median(values), "low": min(values),
                        "high": max(values)}  # fmt: skip
            row[key + "_ratio"] = statistics.median(
                f[key] / o[key] for f, o in zip(figures, ours, strict=True)
            )
        out[name] = row
    return out


def markdown(table: dict[str, Any], wire: dict[str, Any], rounds: int, calls: int) -> list[str]:
    lines = [
        f"CRI calls to the simulator: podcache's HTTP/2 client against h2 and grpcio, {calls} "
        f"calls a round, median of {rounds} rounds (lowest-highest); x ours: the median over "
        "rounds of the client's figure over podcache's in the same round. A relist is two "
        "calls (its latency both's); bytes: on the wire per call, once the connection is up.",
        "",
        "| calls | client | CPU us/call | x ours | p50 us | p99 us | x ours | bytes out/in |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, rows in table.items():
        for name, r in rows.items():
            w = wire[kind][name]
            lines.append(
                f"| {kind} | {name} | {span(r['cpu_us_per_call'])} | "
                f"{r['cpu_us_per_call_ratio']:.2f} | {span(r['p50_us'])} | {span(r['p99_us'])} "
                f"| {r['p99_us_ratio']:.2f} | {w['sent_per_call']:.0f} / "
                f"{w['received_per_call']:.0f} |"
            )
    return lines


def reasons(table: dict[str, Any]) -> list[dict[str, Any]]:
    """Per call and figure (CPU per call, p99): each library's ratio to ours, and whether
    ours keeps its reason there (``plumbing.reason``)."""
    out = []
    for kind, rows in table.items():
        for key, what in (("cpu_us_per_call_ratio", "CPU per call"), ("p99_us_ratio", "p99")):
            libraries = {n: r[key] for n, r in rows.items() if n != "podcache"}
            out.append(reason(f"HTTP/2 client, {kind}: {what}", libraries))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 200 calls")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None, help="calls per client per round")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)
    calls = args.calls or (200 if args.quick else 2000)
    with simulator() as endpoint:
        work = workloads(endpoint)
        runs = rounds_of(endpoint, work, rounds, calls)
        wire = wire_bytes(endpoint, work, 50 if args.quick else PODS)
    table = {kind: summary(by_client) for kind, by_client in runs.items()}
    lines = markdown(table, wire, rounds, calls)
    figures = {"rounds": rounds, "calls": calls, "table": table, "wire": wire,
               "reasons": reasons(table)}  # fmt: skip
    print_figures(args.json, figures, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
