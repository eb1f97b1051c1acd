"""What the benchmarks share to run what they measure: processes started, waited for and
stopped, a GET, wrk, a best-of-passes timer, and the rows of an own part's reasons.

Each benchmark keeps what it measures and how it reads it; only the running around it is here.
Nothing here measures on its own (``wrk`` and ``best_pass`` measure what they are given).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

STOP_WAIT = 15.0
"""Seconds a process has to end after SIGTERM before it is killed."""
SIM = [sys.executable, "-c", "from podcache.cli import main; main()", "sim"]
"""``podcache sim`` as this Python runs it (the checkout's, without the console script)."""
Item = TypeVar("Item")
REASON = 1.10
"""The rule for an own part beside a library: a library within 10% of ours replaces it."""


# -- processes -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def stop(proc: subprocess.Popen[Any], wait: float = STOP_WAIT) -> None:
    """SIGTERM, then SIGKILL when it has not ended within ``wait`` seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def endpoint_of(proc: subprocess.Popen[str]) -> str:
    """The endpoint ``podcache sim`` prints on its first line (it listens from then)."""
    assert proc.stdout is not None
    endpoint = proc.stdout.readline().strip()
    if not endpoint:
        raise RuntimeError(f"podcache sim exited ({proc.wait()}) without an endpoint")
    return endpoint


@contextmanager
def simulator(*args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``podcache sim ARGS`` in its own process; yields its endpoint and process, and stops
    it on the way out."""
    proc = subprocess.Popen(
        [*SIM, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        yield endpoint_of(proc), proc
    finally:
        stop(proc)


def wait_listening(proc: subprocess.Popen[str], what: str = "podcache serve") -> None:
    """Read ``proc``'s stderr until it says ``listening on``; from then a thread keeps the
    pipe drained (a full pipe would stop the process)."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if "listening on" in line:
            break
    else:
        raise RuntimeError(f"{what} exited ({proc.wait()}) before listening")
    threading.Thread(target=proc.stderr.read, daemon=True).start()


@contextmanager
def serve_cri(
    endpoint: str, socket_path: str, *extra: str, python: str = sys.executable
) -> Iterator[subprocess.Popen[str]]:
    """``podcache serve --cri-listen SOCKET_PATH`` (its HTTP on ``SOCKET_PATH.http``) over
    ``endpoint`` with ``extra`` arguments, run by ``python`` (another checkout's venv for a
    baseline); yields once it says it listens."""
    proc = subprocess.Popen(
        [
            *(python, "-m", "podcache.serve", "-r", endpoint),
            *("--listen", f"unix:{socket_path}.http", "--cri-listen", socket_path, *extra),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_listening(proc)
        yield proc
    finally:
        stop(proc)


def wait_for(url: str, timeout: float = 30.0) -> None:
    """Until a GET of ``url`` is answered (any status but a refused connection)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                reply.read()
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def serve_http(endpoint: str, *extra: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``podcache serve`` over ``endpoint`` on a loopback port with ``extra`` arguments;
    yields the port and the process once it is ready (``/readyz``)."""
    port = free_port()
    args = [sys.executable, "-m", "podcache.serve", "-r", endpoint]
    args += ["--listen", f"127.0.0.1:{port}", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/healthz")
        wait_for(f"http://127.0.0.1:{port}/readyz", timeout=60)
        yield port, proc
    finally:
        stop(proc)


def http_get(port: int, target: str, timeout: float = 30.0) -> tuple[int, bytes]:
    """One GET on 127.0.0.1:``port``: the status and the body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", target)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def cpu_seconds(pid: int) -> float:
    """Process ``pid``'s CPU time so far (user and system), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- wrk -----------------------------------------------------------------------------------------
def ensure_tools(*tools: str) -> None:
    """``tools`` installed with apt-get where missing (nginx may sit outside PATH)."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if "nginx" in missing and os.path.exists("/usr/sbin/nginx"):
        missing.remove("nginx")
    if not missing:
        return
    print(f"installing {' '.join(missing)} with apt-get", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", *missing], check=True, env=env, capture_output=True
    )


@dataclass
class WrkResult:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int
    cpu_us: float | None = None
    """The server process's CPU time per request answered (user and system, microseconds),
    when its process was known: unlike req/s, barely moved by other load on the machine."""

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors


def _millis(text: str) -> float:
    value, unit = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def wrk(url: str, *, connections: int, seconds: float, pid: int | None = None) -> WrkResult:
    """One wrk run (1 thread) with latency percentiles; ``pid``: the server's process, whose
    CPU time per request is measured."""
    cpu_before = None if pid is None else cpu_seconds(pid)
    result = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    )
    out = result.stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out)[1])  # type: ignore[index]
    p50 = _millis(re.search(r"\s50%\s+(\S+)", out)[1])  # type: ignore[index]
    p99 = _millis(re.search(r"\s99%\s+(\S+)", out)[1])  # type: ignore[index]
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+([0-9]+)", out)
    sockets = re.search(
        r"Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)", out
    )
    cpu_us = None
    if pid is not None and cpu_before is not None:
        requests = int(re.search(r"([0-9]+) requests in", out)[1])  # type: ignore[index]
        cpu_us = (cpu_seconds(pid) - cpu_before) * 1e6 / max(requests, 1)
    return WrkResult(
        rps,
        p50,
        p99,
        int(non_2xx[1]) if non_2xx else 0,
        sum(int(n) for n in sockets.groups()) if sockets else 0,
        cpu_us,
    )


# -- timing and reporting ------------------------------------------------------------------------
def best_pass(
    readers: Mapping[str, Callable[[Item], object]],
    items: Sequence[Item],
    passes: int,
    clock: Callable[[], int] = time.process_time_ns,
) -> dict[str, float]:
    """Each reader's best pass over ``items`` in microseconds per item, the readers' passes
    interleaved; ``clock`` in nanoseconds."""
    best = dict.fromkeys(readers, float("inf"))
    for _ in range(passes):
        for name, read in readers.items():
            began = clock()
            for item in items:
                read(item)
            best[name] = min(best[name], (clock() - began) / 1000 / len(items))
    return best


def span(figure: dict[str, float], digits: int = 0) -> str:
    """A median with its range over rounds: ``median (low-high)``."""
    return f"{figure['median']:.{digits}f} ({figure['low']:.{digits}f}-{figure['high']:.{digits}f})"


def reason(name: str, libraries: dict[str, float]) -> dict[str, Any]:
    """One row of an own part's reasons: each library's figure over ours, and whether ours
    keeps its reason (every library at least ``REASON`` times ours)."""
    best = min(libraries.values())
    (only,) = libraries if len(libraries) == 1 else ("every library",)
    return {
        "name": f"{name}, {only} >= {REASON}x ours",
        "measured": ", ".join(f"{n} {r:.2f}x" for n, r in libraries.items()),
        "ratio": best,
        "holds": best >= REASON,
    }


def print_figures(as_json: bool, figures: dict[str, Any], lines: list[str]) -> None:
    """The figures with their markdown lines as JSON, or the lines alone."""
    if as_json:
        print(json.dumps({**figures, "markdown": lines}, indent=2))
    else:
        print("\n".join(lines))
