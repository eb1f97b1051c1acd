"""Clients that never read: ``podcache serve``'s memory stays within its byte budget.

    .venv/bin/python benchmarks/bench_flood.py [--quick] [--connections N]

What it does (issue 12 §4):

1. starts ``podcache serve --sim --sim-pods 110 --cache-period 1h --max-buffered 64MiB
   --max-connections 4096`` on loopback and measures its idle RSS and open descriptors after
   a few answers (the baseline);
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
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field

BUDGET = 64 * 1024 * 1024
PIPELINED = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="hold the flood 5 s, not 20 s")
    parser.add_argument("--connections", type=int, default=2000)
    options = parser.parse_args()
    hold = 5.0 if options.quick else 20.0
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "podcache.serve", "--sim", "--sim-pods", "110"]
    args += ["--listen", f"127.0.0.1:{port}", "--cache-period", "1h"]
    args += ["--max-buffered", str(BUDGET), "--max-connections", "4096"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                fetch(base + "/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for _ in range(20):
            fetch(base + "/pods")
        time.sleep(0.5)
        baseline, fds_before = rss_bytes(server.pid), descriptors(server.pid)
        probe = Probe(base)
        prober = threading.Thread(target=probe.run, daemon=True)
        prober.start()
        samples: list[int] = []
        started = time.monotonic()
        sockets = flood(port, options.connections)
        opened = time.monotonic() - started
        while time.monotonic() - started < opened + hold:
            samples.append(rss_bytes(server.pid))
            time.sleep(0.1)
        fds_during = descriptors(server.pid)
        probe.stop()
        prober.join()
        for sock in sockets:
            sock.close()
        deadline = time.monotonic() + 30
        while descriptors(server.pid) > fds_before and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        after, fds_after = rss_bytes(server.pid), descriptors(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    peak = max(samples)
    mib = 1024 * 1024
    rules = {
        "RSS peak <= baseline + budget": peak <= baseline + BUDGET,
        "every probe answered 200": not probe.failures and probe.answered > 0,
        "descriptors back to the baseline": fds_after <= fds_before,
        "RSS after <= baseline + budget": after <= baseline + BUDGET,
    }
    print(f"### {options.connections} connections that never read, {PIPELINED} GET /pods each")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)\n")
    print(
        "| baseline RSS | budget | peak RSS | peak - baseline | after | fds before/during/after |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {baseline / mib:.1f} MiB | {BUDGET / mib:.0f} MiB | {peak / mib:.1f} MiB | "
        f"{(peak - baseline) / mib:.1f} MiB | {after / mib:.1f} MiB | "
        f"{fds_before}/{fds_during}/{fds_after} |"
    )
    print(
        f"\nprobes: {probe.answered} answered, {len(probe.failures)} failed, slowest "
        f"{probe.slowest * 1000:.0f} ms; {options.connections} connections opened in "
        f"{opened:.1f} s"
    )
    for failure in probe.failures[:5]:
        print(f"  failed: {failure}")
    for rule, ok in rules.items():
        print(f"- {rule}: {'met' if ok else 'MISSED'}")
    return 0 if all(rules.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
