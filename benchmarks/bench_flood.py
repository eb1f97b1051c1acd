"""Clients that never read: ``podcache serve``'s memory stays within its byte budget.

    .venv/bin/python benchmarks/bench_flood.py [--quick] [--connections N]

What it does:

1. starts ``podcache serve --sim --sim-pods 110 --cache-period 1h --max-buffered 64MiB
   --max-connections 4096`` on loopback (``--max-buffered BYTES`` here sets another budget)
   and measures its idle RSS and open descriptors after a few answers (the baseline);
2. opens ``--connections`` (2,000) connections with a 4 KiB receive buffer; each pipelines 20
   ``GET /pods`` (146 KB answers: 5.8 GB if all were buffered) and never reads;
3. meanwhile a probe asks ``/healthz`` and ``/pods`` every 50 ms on fresh connections, and the
   server's RSS is sampled every 100 ms;
4. closes every flooding connection and waits for the server's descriptors to return to the
   baseline.

Rules (exit status 1 when one is missed): the RSS peak stays under the baseline plus the
budget; every probe is answered 200; after the flood the server holds no more descriptors
than before it and its RSS is back under the baseline plus the budget. The machine's load is
printed: on a shared machine the timings are indicative, the memory rules are not.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from plumbing import free_port, stop

BUDGET = 64 * 1024 * 1024
PIPELINED = 20


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fetch(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as reply:
        reply.read()
        status: int = reply.status
        return status


@dataclass
class Probe:
    """Asks ``/healthz`` and ``/pods`` until stopped; counts answers and failures."""

    base: str
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    slowest: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.wait(0.05):
            for path in ("/healthz", "/pods"):
                started = time.monotonic()
                try:
                    status = fetch(self.base + path)
                except OSError as exc:
                    self.failures.append(f"{path}: {exc}")
                    continue
                self.slowest = max(self.slowest, time.monotonic() - started)
                if status == 200:
                    self.answered += 1
                else:
                    self.failures.append(f"{path}: {status}")

    def stop(self) -> None:
        self._stop.set()


def flood(port: int, count: int) -> list[socket.socket]:
    """``count`` connections, each with PIPELINED requests sent and nothing read."""
    request = b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * PIPELINED
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(60)  # a loaded server accepts slowly while it drops others
        sock.connect(("127.0.0.1", port))
        sock.sendall(request)
        sockets.append(sock)
    return sockets


@dataclass
class Figures:
    """What one run measured."""

    baseline: int
    peak: int
    after: int
    fds: tuple[int, int, int]
    """Server descriptors before, during and after the flood."""
    opened: float
    probe: Probe


def start_server(port: int, budget: int) -> subprocess.Popen[bytes]:
    """``podcache serve`` on ``port``, answering (stderr dropped: it logs the resets)."""
    args = [sys.executable, "-m", "podcache.serve", "--sim", "--sim-pods", "110"]
    args += ["--listen", f"127.0.0.1:{port}", "--cache-period", "1h"]
    args += ["--max-buffered", str(budget), "--max-connections", "4096"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            fetch(f"http://127.0.0.1:{port}/healthz")
            return server
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise
            time.sleep(0.1)


def measure(pid: int, port: int, connections: int, hold: float) -> Figures:
    """Baseline, flood with probes and RSS samples, then the flood's end."""
    base = f"http://127.0.0.1:{port}"
    for _ in range(20):
        fetch(base + "/pods")
    time.sleep(0.5)
    baseline, fds_before = rss_bytes(pid), descriptors(pid)
    probe = Probe(base)
    prober = threading.Thread(target=probe.run, daemon=True)
    prober.start()
    samples: list[int] = []
    started = time.monotonic()
    sockets = flood(port, connections)
    opened = time.monotonic() - started
    while time.monotonic() - started < opened + hold:
        samples.append(rss_bytes(pid))
        time.sleep(0.1)
    fds_during = descriptors(pid)
    probe.stop()
    prober.join()
    for sock in sockets:
        sock.close()
    deadline = time.monotonic() + 30
    while descriptors(pid) > fds_before and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    fds = (fds_before, fds_during, descriptors(pid))
    return Figures(baseline, max(samples), rss_bytes(pid), fds, opened, probe)


def report(figures: Figures, connections: int, budget: int) -> bool:
    """Print the table and the rules; True when every rule is met."""
    mib = 1024 * 1024
    probe = figures.probe
    rules = {
        "RSS peak <= baseline + budget": figures.peak <= figures.baseline + budget,
        "every probe answered 200": not probe.failures and probe.answered > 0,
        "descriptors back to the baseline": figures.fds[2] <= figures.fds[0],
        "RSS after <= baseline + budget": figures.after <= figures.baseline + budget,
    }
    print(f"### {connections} connections that never read, {PIPELINED} GET /pods each")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)\n")
    print(
        "| baseline RSS | budget | peak RSS | peak - baseline | after | fds before/during/after |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {figures.baseline / mib:.1f} MiB | {budget / mib:.0f} MiB | "
        f"{figures.peak / mib:.1f} MiB | {(figures.peak - figures.baseline) / mib:.1f} MiB | "
        f"{figures.after / mib:.1f} MiB | {'/'.join(map(str, figures.fds))} |"
    )
    print(
        f"\nprobes: {probe.answered} answered, {len(probe.failures)} failed, slowest "
        f"{probe.slowest * 1000:.0f} ms; {connections} connections opened in "
        f"{figures.opened:.1f} s"
    )
    for failure in probe.failures[:5]:
        print(f"  failed: {failure}")
    for rule, ok in rules.items():
        print(f"- {rule}: {'met' if ok else 'MISSED'}")
    return all(rules.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="hold the flood 5 s, not 20 s")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--max-buffered", type=int, default=BUDGET, help="the budget, bytes")
    options = parser.parse_args()
    port = free_port()
    server = start_server(port, options.max_buffered)
    try:
        figures = measure(server.pid, port, options.connections, 5.0 if options.quick else 20.0)
    finally:
        stop(server)
    return 0 if report(figures, options.connections, options.max_buffered) else 1


if __name__ == "__main__":
    sys.exit(main())
