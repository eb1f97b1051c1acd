"""Why podcache serves HTTP/1.1 itself: its own server against uvicorn (httptools, and h11)
serving the same application, under load and under the attacks the serve tests make.

    .venv/bin/python benchmarks/bench_http1_uvicorn.py [--quick] [--rounds 3] [--json]

Four processes, as on a node: the runtime (``podcache sim`` in its own process, 110 pods, no
churn), and three servers over it, each one ``App`` with a cache period of 1 h:

- ``podcache``: ``podcache serve -r <sim> --events off`` (its own server: ``serve/http1``);
- ``uvicorn-httptools``: ``uvicorn.run(asgi_app(App(...)), http="httptools", loop="uvloop")``;
- ``uvicorn-h11``: the same with ``http="h11"``.

First the three answer the same targets (``/pods``, one ``/containers/{id}``): their bodies
are compared, less when each snapshot was taken, and any difference fails the run (exit 2).
Then every scenario runs on each server in turn (A, B, C, A, B, C: ``--rounds`` rounds, the
servers' order rotated each round), and the figures are the medians over rounds, with their
spread (lowest and highest):

- ``load``: wrk, 1 thread, 50 connections, on ``/containers/{id}`` (about 1 KB): requests
  per second, p50/p99 latency, non-2xx answers and socket errors, and **CPU per call** (the
  server process's utime + stime over the run, from ``/proc``, divided by the requests);
- the attacks, each while a probe asks ``/containers/{id}`` back to back on one keep-alive
  connection: the probe's p50/p99, its non-200 answers and failures, the server's CPU per
  probe call (everything the server spent meanwhile, the attack included, over the probe's
  calls) and its peak RSS, and what became of the attack:

  - ``slowloris``: 400 connections send a request head one byte a second, for 12 s (past
    podcache's 10 s head timeout): how many the server closed;
  - ``idle``: 900 connections opened and left silent (under podcache's cap of 1,024);
  - ``huge-headers``: 4 clients send, over and over, a request with a 1 MiB header: the
    answers' statuses (and those cut off before an answer);
  - ``slow-readers``: 200 connections each pipeline 16 requests for ``/pods`` (about 150 KB
    each) and never read: the server's peak RSS.

wrk is installed with apt-get when missing. Prints a table (``--json``: the figures); exit 2
on a broken run (bodies differ, a server does not start).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from plumbing import (  # noqa: E402 -- after sys.path names benchmarks/
    ensure_tools,
    free_port,
    http_get,
    print_figures,
    reason,
    span,
    stop,
    wait_for,
    wrk,
)
from plumbing import simulator as plumbing_simulator  # noqa: E402 -- as above

PODS = 110
SERVERS = ("podcache", "uvicorn-httptools", "uvicorn-h11")
TICKS = os.sysconf("SC_CLK_TCK")
_UVICORN = """
import sys, uvicorn
from podcache.cri import AsyncCRIRuntime
from podcache.serve import App
from podcache.serve.asgi import asgi_app
app = App(AsyncCRIRuntime(sys.argv[3]), 3600.0)
uvicorn.run(asgi_app(app), host="127.0.0.1", port=int(sys.argv[1]), http=sys.argv[2],
            loop="uvloop", log_level="critical", access_log=False, lifespan="off")
"""


@dataclass(frozen=True)
class Sizes:
    """How big each attack is (``--quick`` makes them smaller)."""

    seconds: float
    """Seconds of each wrk run and of each probe (slowloris: ``slowloris_seconds``)."""
    slowloris: int
    slowloris_seconds: float
    idle: int
    huge_clients: int
    huge_bytes: int
    slow_readers: int


FULL = Sizes(5.0, 400, 12.0, 900, 4, 1024 * 1024, 200)
QUICK = Sizes(1.0, 20, 1.5, 40, 1, 1024 * 1024, 5)


# -- the processes -------------------------------------------------------------------------------
@contextmanager
def simulator() -> Iterator[str]:
    """``podcache sim`` in its own process; yields its endpoint."""
    with plumbing_simulator("--pods", str(PODS)) as (endpoint, _):
        yield endpoint


def _server_command(name: str, port: int, endpoint: str) -> list[str]:
    if name == "podcache":
        return [sys.executable, "-m", "podcache.serve", "-r", endpoint, "--events", "off",
                "--cache-period", "1h", "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    parser = name.removeprefix("uvicorn-")
    return [sys.executable, "-c", _UVICORN, str(port), parser, endpoint]


@dataclass
class Server:
    name: str
    port: int
    pid: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def servers(endpoint: str) -> Iterator[dict[str, Server]]:
    """The three servers over ``endpoint``, each up once its /healthz answers."""
    with ExitStack() as stack:
        started: dict[str, Server] = {}
        for name in SERVERS:
            port = free_port()
            proc = subprocess.Popen(
                _server_command(name, port, endpoint),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            stack.callback(stop, proc)
            started[name] = Server(name, port, proc.pid)
        for server in started.values():
            wait_for(server.base + "/healthz")
        yield started


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the answers compared --------------------------------------------------------------------------
_WHEN = re.compile(rb'"(age_seconds|cache_time|revision)":\s*[0-9.e+-]+')
"""What differs between two servers' snapshots of the same pods: when each was taken."""


def get(server: Server, target: str) -> tuple[int, bytes]:
    return http_get(server.port, target)


def container_target(server: Server) -> str:
    pods = json.loads(get(server, "/pods")[1])
    container_id: str = pods["items"][0]["containers"][0]["id"]
    return "/containers/" + container_id.split("://", 1)[1]


def same_answers(running: dict[str, Server], targets: list[str]) -> dict[str, int]:
    """Each target's body size; SystemExit(2) unless every server answers it 200, alike."""
    sizes: dict[str, int] = {}
    for target in targets:
        bodies = {name: get(server, target) for name, server in running.items()}
        kept = {(status, _WHEN.sub(b"", body)) for status, body in bodies.values()}
        if len(kept) != 1 or next(iter(kept))[0] != 200:
            print(f"bench_http1_uvicorn: the servers answer {target} differently", file=sys.stderr)
            raise SystemExit(2)
        sizes[target] = len(next(iter(bodies.values()))[1])
    return sizes


# -- load ----------------------------------------------------------------------------------------
def load(server: Server, target: str, sizes: Sizes) -> dict[str, float]:
    before = cpu_seconds(server.pid)
    result = wrk(server.base + target, connections=50, seconds=sizes.seconds)
    spent = cpu_seconds(server.pid) - before
    requests = result.requests_per_second * sizes.seconds
    return {
        "rps": result.requests_per_second,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "non_2xx": result.non_2xx,
        "socket_errors": result.socket_errors,
        "cpu_us_per_call": spent / max(requests, 1) * 1e6,
        "cpu_us_per_request": spent / max(requests, 1) * 1e6,
    }


# -- the probe -----------------------------------------------------------------------------------
def probe(server: Server, target: str, seconds: float) -> dict[str, Any]:
    """``target`` asked back to back on one keep-alive connection for ``seconds`` (a fresh
    connection after a failure): latencies of the 200 answers, the others counted."""
    latencies: list[float] = []
    other = failures = 0
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        began = time.perf_counter()
        try:
            connection.request("GET", target)
            answer = connection.getresponse()
            answer.read()
        except (OSError, http.client.HTTPException):
            failures += 1
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            continue
        if answer.status == 200:
            latencies.append(time.perf_counter() - began)
        else:
            other += 1
    connection.close()
    return {"latencies": latencies, "non_200": other, "failures": failures}


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# -- the attacks ---------------------------------------------------------------------------------
def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(False)
    return sock


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed (or answered and closed) this connection."""
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return not data or _closed(sock)


@dataclass
class Attack:
    """An attack's connections and threads, and what became of them."""

    sockets: list[socket.socket] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    outcome: dict[str, int] = field(default_factory=dict)

    def end(self) -> dict[str, int]:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        self.outcome["closed_by_server"] = sum(_closed(s) for s in self.sockets)
        self.outcome["connections"] = len(self.sockets)
        for sock in self.sockets:
            sock.close()
        return self.outcome


def slowloris(port: int, sizes: Sizes) -> Attack:
    attack = Attack([_connect(port) for _ in range(sizes.slowloris)])
    for sock in attack.sockets:
        sock.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")

    def drip() -> None:
        while not attack.stop.wait(1.0):
            for sock in attack.sockets:
                try:
                    sock.send(b"a")
                except OSError:
                    continue

    attack.threads.append(threading.Thread(target=drip, daemon=True))
    attack.threads[0].start()
    return attack


def idle(port: int, sizes: Sizes) -> Attack:
    return Attack([_connect(port) for _ in range(sizes.idle)])


def _huge_request(port: int, header: bytes, outcome: dict[str, int]) -> None:
    """One request with a header of ``header``'s bytes; its status (or ``cut``) counted."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + header)
            sock.sendall(b"\r\n\r\n")
            line = sock.makefile("rb").readline()
        except OSError:
            line = b""
    key = line.split(b" ")[1].decode() if line.count(b" ") >= 2 else "cut"
    outcome[key] = outcome.get(key, 0) + 1


def huge_headers(port: int, sizes: Sizes) -> Attack:
    attack = Attack()
    header = b"a" * sizes.huge_bytes

    def send() -> None:
        while not attack.stop.is_set():
            _huge_request(port, header, attack.outcome)

    for _ in range(sizes.huge_clients):
        attack.threads.append(threading.Thread(target=send, daemon=True))
        attack.threads[-1].start()
    return attack


def slow_readers(port: int, sizes: Sizes) -> Attack:
    attack = Attack([_connect(port) for _ in range(sizes.slow_readers)])
    requests = b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 16
    for sock in attack.sockets:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.send(requests)
    return attack


ATTACKS: dict[str, Callable[[int, Sizes], Attack]] = {
    "slowloris": slowloris,
    "idle": idle,
    "huge-headers": huge_headers,
    "slow-readers": slow_readers,
}


class PeakRss:
    """A thread sampling a process's RSS every 100 ms: the peak, in MiB."""

    def __init__(self, pid: int) -> None:
        self.peak = rss_mib(pid)
        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.wait(0.1):
                self.peak = max(self.peak, rss_mib(pid))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()

    def end(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


_NOT_ANSWERS = ("closed_by_server", "connections")
"""The keys of an attack's outcome that count connections, not requests answered (the others:
the attack's requests by status, and ``cut``)."""


def under_attack(server: Server, target: str, name: str, sizes: Sizes) -> dict[str, Any]:
    """The probe while attack ``name`` runs against ``server``."""
    rss = PeakRss(server.pid)
    attack = ATTACKS[name](server.port, sizes)
    time.sleep(0.5)  # the attack's connections are in
    before = cpu_seconds(server.pid)
    seconds = sizes.slowloris_seconds if name == "slowloris" else sizes.seconds
    probed = probe(server, target, seconds)
    spent = cpu_seconds(server.pid) - before
    outcome = attack.end()
    calls = len(probed["latencies"])
    answered = sum(n for key, n in outcome.items() if key not in _NOT_ANSWERS)
    figures = {
        "p50_ms": _percentile(probed["latencies"], 0.5) * 1000,
        "p99_ms": _percentile(probed["latencies"], 0.99) * 1000,
        "probe_calls": calls,
        "probe_non_200": probed["non_200"],
        "probe_failures": probed["failures"],
        "cpu_us_per_call": spent / max(calls, 1) * 1e6,
        "cpu_us_per_request": spent / max(calls + answered, 1) * 1e6,
        "peak_rss_mib": rss.end(),
        "attack": outcome,
    }
    time.sleep(0.5)  # the server lets the attack's connections go
    return figures


# -- rounds and the report -----------------------------------------------------------------------
def run(rounds: int, sizes: Sizes, scenarios: list[str]) -> dict[str, Any]:
    with simulator() as endpoint, servers(endpoint) as running:
        target = container_target(running["podcache"])
        bodies = same_answers(running, ["/pods", target])
        for server in running.values():  # warm-up, not counted
            wrk(server.base + target, connections=50, seconds=1)
        results: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for round_ in range(rounds):
            order = SERVERS[round_ % 3 :] + SERVERS[: round_ % 3]
            for scenario in scenarios:
                for name in order:
                    server = running[name]
                    if scenario == "load":
                        figures: dict[str, Any] = load(server, target, sizes)
                    else:
                        figures = under_attack(server, target, scenario, sizes)
                    results.setdefault(scenario, {}).setdefault(name, []).append(figures)
                    print(f"round {round_ + 1} {scenario:13} {name:18} {_brief(figures)}",
                          file=sys.stderr)  # fmt: skip
    return {"bodies": bodies, "rounds": rounds, "runs": results}


def _brief(figures: dict[str, Any]) -> str:
    return f"p99 {figures['p99_ms']:.2f} ms, CPU {figures['cpu_us_per_call']:.0f} us/call"


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, lowest and highest of each figure over the rounds; counts summed."""
    out: dict[str, Any] = {}
    for key in ("p50_ms", "p99_ms", "cpu_us_per_call", "cpu_us_per_request", "rps",
                "peak_rss_mib"):  # fmt: skip
        values = [r[key] for r in runs if key in r]
        if values:
            out[key] = {"median": statistics.median(values), "low": min(values),
                        "high": max(values)}  # fmt: skip
    for key in ("non_2xx", "socket_errors", "probe_non_200", "probe_failures", "probe_calls"):
        if key in runs[0]:
            out[key] = sum(r[key] for r in runs)
    attack: dict[str, int] = {}
    for r in runs:
        for name, count in r.get("attack", {}).items():
            attack[name] = attack.get(name, 0) + count
    if attack:
        out["attack"] = attack
    return out


def ratios(runs: dict[str, list[dict[str, Any]]], key: str) -> dict[str, float]:
    """Each server's median over rounds of its figure over podcache's in the same round."""
    ours = runs["podcache"]
    return {
        name: statistics.median(
            r[key] / o[key] for r, o in zip(runs[name], ours, strict=True) if o[key] > 0
        )
        for name in runs
    }


def report(result: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for scenario, by_server in result["runs"].items():
        table[scenario] = {
            "servers": {name: summary(runs) for name, runs in by_server.items()},
            "cpu_ratio": ratios(by_server, "cpu_us_per_call"),
            "cpu_request_ratio": ratios(by_server, "cpu_us_per_request"),
            "p99_ratio": ratios(by_server, "p99_ms"),
        }
    return table


def markdown(table: dict[str, Any], rounds: int) -> list[str]:
    lines = [
        f"podcache's HTTP/1.1 server against uvicorn, median of {rounds} rounds "
        "(lowest-highest); x ours: the median over rounds of the server's figure over "
        "podcache's in the same round. CPU per request: the server's CPU over the probe's "
        "calls and the attack's requests it answered (huge-headers: its 431s and 400s).",
        "",
        "| scenario | server | CPU us/call | CPU us/request | x ours | p50 ms | p99 ms | x ours "
        "| not 200 | peak RSS MiB | attack |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for scenario, row in table.items():
        for name, s in row["servers"].items():
            bad = s.get("non_2xx", 0) + s.get("socket_errors", 0)
            bad += s.get("probe_non_200", 0) + s.get("probe_failures", 0)
            rss = span(s["peak_rss_mib"], 0) if "peak_rss_mib" in s else "-"
            attack = ", ".join(f"{k} {v}" for k, v in s.get("attack", {}).items()) or "-"
            lines.append(
                f"| {scenario} | {name} | {span(s['cpu_us_per_call'], 0)} | "
                f"{span(s['cpu_us_per_request'], 0)} | {row['cpu_request_ratio'][name]:.2f} | "
                f"{span(s['p50_ms'], 2)} | {span(s['p99_ms'], 2)} | "
                f"{row['p99_ratio'][name]:.2f} | {bad} | {rss} | {attack} |"
            )
    return lines


def reasons(table: dict[str, Any]) -> list[dict[str, Any]]:
    """Per scenario and figure (CPU per request, p99): each library's ratio to ours, and
    whether ours keeps its reason there (``plumbing.reason``)."""
    out = []
    for scenario, row in table.items():
        for key, what in (("cpu_request_ratio", "CPU per request"), ("p99_ratio", "p99")):
            libraries = {n: r for n, r in row[key].items() if n != "podcache"}
            out.append(reason(f"HTTP/1.1 server, {scenario}: {what}", libraries))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, small attacks, 1 s each")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--only", default="load," + ",".join(ATTACKS), help="scenarios")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    ensure_tools("wrk")
    rounds = args.rounds or (1 if args.quick else 3)
    result = run(rounds, sizes, [s for s in args.only.split(",") if s])
    table = report(result)
    lines = markdown(table, rounds)
    figures = {"bodies": result["bodies"], "rounds": rounds, "table": table,
               "reasons": reasons(table)}  # fmt: skip
    print_figures(args.json, figures, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
