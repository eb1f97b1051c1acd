"""The agent of ``bench_soak.py --cri``: Falco-like status calls on a CRI socket until SIGTERM.

    .venv/bin/python benchmarks/soak_agent.py --target unix:///path/cri.sock --out counts.json
                                              [--random-calls N] [--seed S]

Two threads on one connection. The event thread is the Falco container plugin's loop
(``plugins/container/go-worker/pkg/container/cri.go``): ``GetContainerEvents``, and per event
``ContainerStatus(container_id, verbose=true)`` and, when that answered,
``PodSandboxStatus(the event's sandbox)``; a stream that ends (the socket cut a subscriber that
fell behind, RESOURCE_EXHAUSTED) is counted and opened again. The random thread makes
``--random-calls`` status calls a second: half for an ID drawn from the last ``SEEN`` IDs the
events named (live, or departed: ``--cri-keep-departed`` answers those), half for an unknown
whole ID (64 hex characters: the runtime's NOT_FOUND, which the socket keeps). On SIGTERM the
calls made, by method and code, are written as JSON to ``--out``. Nothing here measures serve.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from podcache.cri.proto import api_pb2 as pb

RUNTIME = "/runtime.v1.RuntimeService/"
SEEN = 20_000
"""IDs named by events that the random thread draws from, the newest."""


def _identity(data: bytes) -> bytes:
    return data


class Agent:
    """One connection's status calls, counted by ``method:code``."""

    def __init__(self, target: str, seed: int) -> None:
        self.channel = grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", -1)]
        )
        self.stopping = threading.Event()
        self.counts: collections.Counter[str] = collections.Counter()
        self.seen: collections.deque[tuple[str, str]] = collections.deque(maxlen=SEEN)
        self.random = random.Random(seed)
        self._lock = threading.Lock()
        self._calls: dict[str, Callable[..., Any]] = {
            method: self.channel.unary_unary(
                RUNTIME + method, request_serializer=_identity, response_deserializer=_identity
            )
            for method in ("ContainerStatus", "PodSandboxStatus")
        }

    def write(self, path: str) -> None:
        """The counts so far, as JSON, to ``path``."""
        with self._lock:
            Path(path).write_text(json.dumps(dict(self.counts)))

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def status(self, method: str, ident: str, verbose: bool) -> bool:
        """One status call; whether it was answered."""
        if method == "ContainerStatus":
            request = pb.ContainerStatusRequest(container_id=ident, verbose=verbose)
            data = request.SerializeToString()
        else:
            sandbox = pb.PodSandboxStatusRequest(pod_sandbox_id=ident, verbose=verbose)
            data = sandbox.SerializeToString()
        try:
            self._calls[method](data, timeout=30)
        except grpc.RpcError as error:
            self._count(f"{method}:{error.code().name}")
            return False
        self._count(f"{method}:OK")
        return True

    def follow_events(self) -> None:
        """The Falco loop, subscribing again whenever the stream ends, until stopped."""
        subscribe = self.channel.unary_stream(
            RUNTIME + "GetContainerEvents",
            request_serializer=_identity,
            response_deserializer=pb.ContainerEventResponse.FromString,
        )
        while not self.stopping.is_set():
            stream: Any = subscribe(pb.GetEventsRequest().SerializeToString())
            try:
                for event in stream:
                    self._count("events")
                    self.on_event(event)
                    if self.stopping.is_set():
                        stream.cancel()
                self._count("event stream ended:OK")
            except grpc.RpcError as error:
                self._count(f"event stream ended:{error.code().name}")
                time.sleep(0.5)

    def on_event(self, event: Any) -> None:
        sandbox_id = event.pod_sandbox_status.id
        self.seen.append(("ContainerStatus", event.container_id))
        if sandbox_id:
            self.seen.append(("PodSandboxStatus", sandbox_id))
        if self.status("ContainerStatus", event.container_id, True) and sandbox_id:
            self.status("PodSandboxStatus", sandbox_id, False)

    def call_randomly(self, per_second: float) -> None:
        """``per_second`` calls for seen IDs and unknown ones, alternately, until stopped."""
        due = time.monotonic()
        while not self.stopping.is_set() and per_second > 0:
            due += 1 / per_second
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            verbose = self.random.random() < 0.5
            if self.seen and self.random.random() < 0.5:
                method, ident = self.seen[self.random.randrange(len(self.seen))]
                self.status(method, ident, verbose)
            else:
                method = self.random.choice(("ContainerStatus", "PodSandboxStatus"))
                self.status(method, self.random.randbytes(32).hex(), verbose)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the CRI socket, unix://PATH")
    parser.add_argument("--out", required=True, help="where the counts go on SIGTERM")
    parser.add_argument("--random-calls", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    agent = Agent(args.target, args.seed)
    signal.signal(signal.SIGTERM, lambda *_: agent.stopping.set())
    threads = [
        threading.Thread(target=agent.follow_events, daemon=True),
        threading.Thread(target=agent.call_randomly, args=(args.random_calls,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    agent.stopping.wait()
    agent.write(args.out)
    agent.channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
