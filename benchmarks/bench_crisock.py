"""The read-only CRI socket (``podcache serve --cri-listen``) against the runtime itself.

    .venv/bin/python benchmarks/bench_crisock.py [--quick] [--json]

Four measurements, each with its target (docs/architecture.md §10):

- **Upstream load.** ``podcache sim --pods 1000`` in a process of its own (``--stats-file``:
  its list calls are counted there, read by SIGUSR1; its CPU from ``/proc/PID/stat``), and
  ``podcache serve --cri-listen`` in another. 10 clients (threads, a channel each) each list
  sandboxes and containers 10 times a second for 30 s (quick: 10 s), first straight at the
  runtime, then through the socket, then both again (interleaved, so drift cancels). Target:
  the runtime receives at most 1/50 of the direct phases' list calls, and uses at least 10x
  less CPU.
- **Latency.** One client, ``ListContainers`` (unfiltered, 1,000 pods), alternately through the
  socket and straight at the runtime; medians side by side. Target: proxied <= direct. The
  simulator keeps its answers encoded per generation, so here both sides send kept bytes
  through the same grpcio machinery; ``bench_crisock_containerd.py`` measures the same loop
  against containerd, which builds every answer.
- **Freshness.** A simulator (1,000 pods) in a process of its own, under ``serve
  --cri-listen`` with events: a pod is created (a command over a pipe), and the socket's
  ``ListPodSandbox`` filtered by its sandbox ID tells when it lists it, three ways, one
  creation each in turn: asked once so that an answer listing it is in hand by 10 ms after
  the command (sent 0.3 ms before; one that lists it later counts as not listed), the same
  at the delay of a 1-up-1-down staircase (from 10 ms, 1 ms steps until its first turn and
  0.5 ms after, which settles around the median), and polled every 0.5 ms until listed. An
  agent reads the socket 5 times a second meanwhile (as on a node: the cache is read within
  its period). Target: median within 10 ms, which is more than half of the creations listed
  by 10 ms. The poll is an upper bound: its calls (one every 0.5-1 ms) take serve's CPU and
  the machine's while the relist runs, traced at 2-3.5 ms of its median; a single ask
  takes none of that, and counts only answers in hand by its time.
- **Fan-out.** An in-process simulator (1,000 pods): 4 subscribers read
  ``GetContainerEvents`` through the socket while a fifth never reads; 1,000 events are made.
  Target: each of the 4 gets all, in order; the runtime has exactly one subscriber throughout.

Every figure reports min / median / max where it has several samples.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import grpc
from plumbing import serve_cri, simulator

from podcache.cri.proto import api_pb2 as pb
from podcache.sim import SimRuntime
from podcache.sim.population import SimEventType

PODS = 1000
CLIENTS = 10
RATE = 10.0
"""Listings (a ListPodSandbox and a ListContainers) per second per client."""
_RUNTIME = "/runtime.v1.RuntimeService/"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def raw(channel: grpc.Channel, method: str) -> Any:
    return channel.unary_unary(
        _RUNTIME + method, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (its threads included)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


@contextmanager
def sim_process(pods: int, stats_file: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with simulator("--pods", str(pods), "--stats-file", stats_file) as running:
        yield running


@contextmanager
def serve_process(endpoint: str, socket_path: str) -> Iterator[subprocess.Popen[str]]:
    """``podcache serve --cri-listen`` over ``endpoint``; yields once it answers."""
    with serve_cri(endpoint, socket_path) as proc:
        _wait_answering(socket_path)
        yield proc


def _wait_answering(socket_path: str) -> None:
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        lister = raw(channel, "ListPodSandbox")
        deadline = time.monotonic() + 60
        while True:
            try:
                lister(b"", timeout=10)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _list_calls(proc: subprocess.Popen[str], stats_file: str) -> int:
    """The runtime's list calls so far (its stats file, written on SIGUSR1)."""
    before = os.stat(stats_file).st_mtime_ns if os.path.exists(stats_file) else 0
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not os.path.exists(stats_file) or os.stat(stats_file).st_mtime_ns == before:
        if time.monotonic() > deadline:
            raise RuntimeError("the sim did not write its stats file")
        time.sleep(0.01)
    time.sleep(0.05)  # the write is complete
    with open(stats_file, encoding="utf-8") as f:
        counts = json.load(f)
    calls = counts.get("calls", counts)
    return sum(
        kind["calls"]
        for method in ("ListPodSandbox", "ListContainers")
        for kind in calls[method].values()
    )


def _client(target: str, seconds: float, done: list[int]) -> None:
    """One client: a ListPodSandbox and a ListContainers ``RATE`` times a second."""
    with grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)]) as ch:
        sandboxes, containers = raw(ch, "ListPodSandbox"), raw(ch, "ListContainers")
        start = time.monotonic()
        for tick in range(int(seconds * RATE)):
            wait = start + tick / RATE - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            sandboxes(b"", timeout=30)
            containers(b"", timeout=30)
            done[0] += 2


def _phase(
    target: str, sim: subprocess.Popen[str], stats_file: str, seconds: float
) -> dict[str, float]:
    """The clients' calls, and what reached the runtime, for one phase."""
    calls_before, cpu_before = _list_calls(sim, stats_file), _cpu_seconds(sim.pid)
    counters = [[0] for _ in range(CLIENTS)]
    threads = [
        threading.Thread(target=_client, args=(target, seconds, counter)) for counter in counters
    ]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    return {
        "client_calls": sum(c[0] for c in counters),
        "runtime_calls": _list_calls(sim, stats_file) - calls_before,
        "runtime_cpu_s": _cpu_seconds(sim.pid) - cpu_before,
        "seconds": elapsed,
    }


def latency_pairs(proxy: str, direct: str, samples: int) -> dict[str, list[float]]:
    """ListContainers round trips (ms), alternately through the socket and direct."""
    times: dict[str, list[float]] = {"proxied": [], "direct": []}
    with (
        grpc.insecure_channel(proxy, options=[("grpc.max_receive_message_length", -1)]) as p,
        grpc.insecure_channel(direct, options=[("grpc.max_receive_message_length", -1)]) as d,
    ):
        calls = {"proxied": raw(p, "ListContainers"), "direct": raw(d, "ListContainers")}
        for _ in range(5):  # warm both
            for call in calls.values():
                call(b"", timeout=30)
        for i in range(samples):
            order = ("proxied", "direct") if i % 2 == 0 else ("direct", "proxied")
            for name in order:
                began = time.perf_counter()
                calls[name](b"", timeout=30)
                times[name].append((time.perf_counter() - began) * 1000)
    return times


def upstream_load(seconds: float, samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp:
        stats_file = os.path.join(tmp, "stats.json")
        socket_path = os.path.join(tmp, "cri.sock")
        with (
            sim_process(PODS, stats_file) as (endpoint, sim),
            serve_process(endpoint, socket_path),
        ):
            direct, proxied = endpoint, f"unix://{socket_path}"
            phases: dict[str, list[dict[str, float]]] = {"direct": [], "proxied": []}
            for name, target in (("direct", direct), ("proxied", proxied)) * 2:
                phases[name].append(_phase(target, sim, stats_file, seconds))
            latency = latency_pairs(proxied, direct, samples)
    return {"phases": phases, "latency_ms": latency}


def _poll_until_listed(channel: grpc.Channel, sandbox_id: str, began: float) -> float:
    """Seconds from ``began`` until the socket's ListPodSandbox filtered by ``sandbox_id``
    lists it (polled every 0.5 ms: the poll must not take the CPU the relist needs)."""
    lister = raw(channel, "ListPodSandbox")
    data = _by_sandbox_id(sandbox_id)
    while not lister(data, timeout=10):
        if time.perf_counter() - began > 30:
            raise RuntimeError(f"sandbox {sandbox_id} never listed through the socket")
        time.sleep(0.0005)
    return time.perf_counter() - began


def _by_sandbox_id(sandbox_id: str) -> bytes:
    return pb.ListPodSandboxRequest(filter=pb.PodSandboxFilter(id=sandbox_id)).SerializeToString()


def _listed_by(channel: grpc.Channel, sandbox_id: str, began: float, delay: float) -> bool:
    """Whether an answer listing ``sandbox_id`` is in hand ``delay`` s after ``began``: one
    ListPodSandbox filtered by it, sent ``_LEAD`` before then (by a sleep, then a spin of at
    most 0.3 ms, so never early), that lists it and returns by then. The answer's snapshot was
    read before it returned, so each one counted is a pod listed within ``delay``; an answer
    that lists it late counts as not listed."""
    lister = raw(channel, "ListPodSandbox")
    data = _by_sandbox_id(sandbox_id)
    due = began + delay - _LEAD
    if due - time.perf_counter() > _SPIN:
        time.sleep(due - time.perf_counter() - _SPIN)
    while time.perf_counter() < due:
        pass
    listed = bool(lister(data, timeout=10))
    return listed and time.perf_counter() - began <= delay


_LEAD = 0.002
"""How long before its time the single ask is sent: an idle call takes 0.4-1.1 ms, one
made while the relist runs up to 4 ms (and then counts as not listed)."""
_SPIN = 0.0003
STAIR_STEPS_MS = (1.0, 0.5)
"""The staircase's steps: the next creation is asked this much sooner after a listed answer,
this much later after an empty one; the first until the direction first turns."""


def _next_stair(trials: list[tuple[float, bool]]) -> float:
    """The delay (ms) the staircase asks the next creation at, after ``trials``."""
    turned = any(a[1] != b[1] for a, b in itertools.pairwise(trials))
    step = STAIR_STEPS_MS[1] if turned else STAIR_STEPS_MS[0]
    delay, listed = trials[-1]
    return max(STAIR_STEPS_MS[1], delay - step if listed else delay + step)


def staircase_median(trials: list[tuple[float, bool]]) -> float | None:
    """The median visibility time a 1-up-1-down staircase estimates: the mean of the delays
    at which its direction turned, the first turn left out (its start is arbitrary); None
    before three turns."""
    turns = [
        delay for (_, before), (delay, listed) in itertools.pairwise(trials) if listed != before
    ]
    return statistics.fmean(turns[1:]) if len(turns) >= 3 else None


class _Agent:
    """A node agent reading the socket's ListPodSandbox 5 times a second, as agents do: the
    cache is read within its period, so the measure is not of a period's expiry."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._stop = threading.Event()
        self._lister = raw(channel, "ListPodSandbox")
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.wait(0.2):
            self._lister(b"", timeout=10)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _sim_child(pods: int, conn: Any) -> None:
    """The runtime of the freshness measure, in a process of its own: it answers
    ``("create",)`` with the new pod's UID and sandbox ID, ``("remove", uid)`` with None."""
    with SimRuntime(pods, seed=5) as sim:
        conn.send(sim.endpoint)
        while (command := conn.recv()) != ("stop",):
            if command[0] == "create":
                uid, made = sim.population.create_pod()
                sandbox_id = next(  # the new pod's sandbox
                    e.container_id
                    for e in made
                    if e.type is SimEventType.CREATED
                    and e.sandbox is not None
                    and e.container_id == e.sandbox.id
                )
                conn.send((uid, sandbox_id))
            else:
                sim.population.remove_pod(command[1])
                conn.send(None)


@dataclass
class Freshness:
    """The three ways creations are observed through the socket (milliseconds)."""

    polled_ms: list[float]
    """Each creation polled every 0.5 ms until listed: the polls' own calls take serve's
    and the machine's CPU while the relist runs, so this is an upper bound."""
    at_target: list[bool]
    """Each creation asked once (``_listed_by``): whether an answer listing it was in hand
    ``FRESHNESS_TARGET_MS`` after the command. More than half is a median within the
    target."""
    stairs: list[tuple[float, bool]]
    """Each creation asked once at the staircase's delay: (delay ms, ``_listed_by``)."""


FRESHNESS_TARGET_MS = 10.0


def freshness(creations: int) -> Freshness:
    """A pod's creation on the runtime (in its own process) to its sandbox in the socket's
    ListPodSandbox, ``creations`` times each way (``Freshness``), interleaved."""
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=_sim_child, args=(PODS, child))
    process.start()
    try:
        endpoint = parent.recv()
        with (
            tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp,
            serve_process(endpoint, os.path.join(tmp, "cri.sock")),
            grpc.insecure_channel(f"unix://{os.path.join(tmp, 'cri.sock')}") as channel,
        ):
            time.sleep(2.0)  # the event subscription is open
            reading = _Agent(channel)  # an agent on the node: the socket is read all along
            found = Freshness([], [], [])
            stair_ms = FRESHNESS_TARGET_MS
            for _ in range(creations):
                with _created(parent) as (sandbox_id, began):
                    found.polled_ms.append(_poll_until_listed(channel, sandbox_id, began) * 1000)
                with _created(parent) as (sandbox_id, began):
                    delay = FRESHNESS_TARGET_MS / 1000
                    found.at_target.append(_listed_by(channel, sandbox_id, began, delay))
                with _created(parent) as (sandbox_id, began):
                    listed = _listed_by(channel, sandbox_id, began, stair_ms / 1000)
                    found.stairs.append((stair_ms, listed))
                    stair_ms = _next_stair(found.stairs)
            reading.stop()
        return found
    finally:
        parent.send(("stop",))
        process.join(30)


@contextmanager
def _created(parent: Any) -> Iterator[tuple[str, float]]:
    """A pod created by the simulator's process, apart from the last (after the relist
    budget of its removal: docs/architecture.md §7 rule 7, relists take at most a tenth of
    the time): its sandbox ID and when the command was sent; removed afterwards."""
    time.sleep(1.0)
    began = time.perf_counter()
    parent.send(("create",))
    uid, sandbox_id = parent.recv()
    try:
        yield sandbox_id, began
    finally:
        parent.send(("remove", uid))
        parent.recv()


def fanout(events: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp,
        SimRuntime(PODS, seed=5) as sim,
    ):
        socket_path = os.path.join(tmp, "cri.sock")
        with serve_process(sim.endpoint, socket_path):
            sim.wait_for_event_subscribers(1, timeout=60)
            return _fanout(sim, socket_path, events)


def _fanout(sim: SimRuntime, socket_path: str, count: int) -> dict[str, Any]:
    readers = [grpc.insecure_channel(f"unix://{socket_path}") for _ in range(4)]
    stalled = grpc.insecure_channel(f"unix://{socket_path}", options=[("grpc.http2.bdp_probe", 0)])
    method = "/runtime.v1.RuntimeService/GetContainerEvents"
    streams: list[Any] = [
        ch.unary_stream(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)(
            b""
        )
        for ch in [*readers, stalled]
    ]
    got: list[list[str]] = [[] for _ in range(4)]

    def read(stream: Any, into: list[str]) -> None:
        for data in stream:
            into.append(pb.ContainerEventResponse.FromString(data).container_id)
            if len(into) >= count:
                return

    threads = [
        threading.Thread(target=read, args=(s, g), daemon=True)
        for s, g in zip(streams[:4], got, strict=True)
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the five streams are open at the socket
    subscribers = {sim.event_subscribers}
    sent: list[str] = []
    while len(sent) < count:
        sent += [e.container_id for e in sim.churn_step(1)]
        subscribers.add(sim.event_subscribers)
    for thread in threads:
        thread.join(60)
    subscribers.add(sim.event_subscribers)
    for stream in streams:
        stream.cancel()
    for ch in [*readers, stalled]:
        ch.close()
    return {
        "events": count,
        "each_got_all_in_order": [g[:count] == sent[:count] for g in got],
        "runtime_subscribers_seen": sorted(subscribers),
    }


def _print_freshness(fresh: Freshness) -> None:
    listed = sum(fresh.at_target)
    median = staircase_median(fresh.stairs)
    print(
        f"freshness, listed by {FRESHNESS_TARGET_MS:g} ms (asked once): {listed} of "
        f"{len(fresh.at_target)} (target: more than half, a median <= 10 ms)"
    )
    print(
        "freshness, asked once on a staircase: median "
        + ("n/a (under three turns)" if median is None else f"{median:.2f} ms")
        + f" over {len(fresh.stairs)}"
    )
    print(f"freshness, polled every 0.5 ms: min/median/max {_spread(fresh.polled_ms)} ms")


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seconds = 10.0 if args.quick else 30.0
    load = upstream_load(seconds, 100 if args.quick else 300)
    fresh = freshness(10 if args.quick else 30)
    spread = fanout(1000)
    result = {
        **{"pods": PODS, "clients": CLIENTS, "rate": RATE, "seconds": seconds},
        **{"load_average": os.getloadavg(), **load, "freshness": asdict(fresh)},
        "fanout": spread,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, runs in load["phases"].items():
        for run in runs:
            print(
                f"{name:8} client calls {run['client_calls']:6.0f}  runtime list calls "
                f"{run['runtime_calls']:6.0f}  runtime CPU {run['runtime_cpu_s']:6.2f} s  "
                f"({run['seconds']:.1f} s)"
            )
    direct = load["phases"]["direct"]
    proxied = load["phases"]["proxied"]
    calls_ratio = sum(r["runtime_calls"] for r in direct) / max(
        1, sum(r["runtime_calls"] for r in proxied)
    )
    cpu_ratio = sum(r["runtime_cpu_s"] for r in direct) / max(
        1e-9, sum(r["runtime_cpu_s"] for r in proxied)
    )
    print(f"runtime list calls direct/proxied: {calls_ratio:.1f}x (target >= 50)")
    print(f"runtime CPU direct/proxied: {cpu_ratio:.1f}x (target >= 10)")
    for name, values in load["latency_ms"].items():
        print(f"ListContainers {name:8} ms min/median/max: {_spread(values)}")
    _print_freshness(fresh)
    print(f"fan-out: {spread}")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
