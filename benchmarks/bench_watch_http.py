"""The HTTP parts of bench_watch.py: many watchers on one server; not a test.

Three processes: ``podcache sim`` (the runtime, churning), the server (``podcache serve``'s
application and HTTP server, built here with one addition: it records the monotonic time at
which each revision was published, and writes them out when it stops), and this process,
whose watchers are raw sockets on one uvloop. CLOCK_MONOTONIC is the machine's, so the
server's publish times and the watchers' arrival times compare directly.

fanout: N watchers opened without ``since``; the simulation replaces pods; for each change
line, its arrival at each watcher minus its revision's publish time. Reported: p50/p99 over
(watcher, revision), and p99 over revisions of the time until the last watcher had it ("all
received"). The server's RSS (``/proc/PID/status`` VmRSS) idle before the watchers open, and
its peak while they run.

consistency: M watchers with churn R/s for S seconds, a bookmark every second; each rebuilds
the state from its lines (a digest: XOR of a hash of each pod's canonical JSON, updated per
line) and counts a line that adds a pod it has or drops/modifies one it has not (lost or
repeated changes). A poller reads ``GET /pods`` ten times a second and keeps each revision's
digest; at every bookmark a watcher's digest is compared with the poller's for that revision
when the poller saw it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FANOUT_TARGET_MS = 50.0
_CHANGE = re.compile(rb'{"type":"(?:ADDED|MODIFIED|DELETED)","revision":(\d+)')
RSS_TARGET_MIB = 100.0
ROOT = Path(__file__).resolve().parent.parent


# -- the instrumented server (a child process) ------------------------------------------------
def serve_instrumented(endpoint: str, port: int, period: float, out: str, bookmark: float) -> None:
    """``podcache serve``'s app on 127.0.0.1:port, recording each revision's publish time."""
    from podcache.cri import AsyncCRIRuntime
    from podcache.serve.app import App
    from podcache.serve.server import ConnectionLimits, ListenAddress, run

    published: dict[int, float] = {}
    runtime = AsyncCRIRuntime(endpoint, timeout=5.0)

    def make_app() -> App:
        app = App(runtime, period, bookmark_interval=bookmark)
        log = app.cache._core.changes
        publish = log.publish

        def timed(pods: Any, now: float) -> Any:
            result = publish(pods, now)
            published.setdefault(log.revision, time.monotonic())
            return result

        log.publish = timed  # type: ignore[method-assign]
        return app

    def listening(app: App) -> None:
        print("listening", flush=True)

    try:
        run(
            make_app,
            ListenAddress("127.0.0.1", port),
            limits=ConnectionLimits(max_connections=4096),
            on_listening=listening,
        )
    finally:
        Path(out).write_text(json.dumps({str(k): v for k, v in published.items()}))


# -- processes ---------------------------------------------------------------------------------
class Processes:
    """The simulation and the server, started and stopped."""

    def __init__(self, pods: int, churn: float, period: float, bookmark: float) -> None:
        self.dir = tempfile.mkdtemp(prefix="pcw-", dir="/tmp")
        self.port = _free_port()
        self.published_path = os.path.join(self.dir, "published.json")
        sock = os.path.join(self.dir, "sim.sock")
        self.sim = subprocess.Popen(
            [*_podcache(), "sim", "--socket", sock, "--pods", str(pods), "--churn", str(churn)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.sim.stdout is not None
        endpoint = self.sim.stdout.readline().strip()
        self.server = subprocess.Popen(
            [
                sys.executable,
                __file__,
                endpoint,
                str(self.port),
                str(period),
                self.published_path,
                str(bookmark),
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.server.stdout is not None
        if self.server.stdout.readline().strip() != "listening":
            raise RuntimeError("the instrumented server did not start")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.server.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> dict[int, float]:
        self.server.send_signal(signal.SIGTERM)
        self.server.wait(30)
        self.sim.send_signal(signal.SIGINT)
        try:
            self.sim.wait(10)
        except subprocess.TimeoutExpired:
            self.sim.kill()
        published = json.loads(Path(self.published_path).read_text())
        return {int(k): v for k, v in published.items()}


def _podcache() -> list[str]:
    return [str(Path(sys.executable).parent / "podcache")]


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- watchers ----------------------------------------------------------------------------------
def _digest(obj: dict[str, Any]) -> int:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


@dataclass
class Watcher:
    """One stream's state and records."""

    arrivals: dict[int, float] = field(default_factory=dict)  # revision -> first line's time
    pods: dict[str, int] = field(default_factory=dict)  # uid -> digest of the pod
    digest: int = 0
    bookmarks: list[tuple[int, int]] = field(default_factory=list)  # (revision, digest)
    lost_or_repeated: int = 0
    lines: int = 0
    ended: str = ""


class _Arrivals(asyncio.Protocol):
    """A fanout watcher: only when each revision's first change line arrives. Scans the raw
    bytes (no framing, no JSON), keeping a short tail so a line split between reads is seen."""

    def __init__(self, watcher: Watcher, stop: asyncio.Event) -> None:
        self.watcher = watcher
        self.stop = stop
        self.tail = b""
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        arrivals = self.watcher.arrivals
        for match in _CHANGE.finditer(self.tail + data):
            arrivals.setdefault(int(match[1]), now)
        self.tail = data[-64:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.stop.is_set():
            self.watcher.ended = repr(exc) if exc else "closed by the server"
        if not self.closed.done():
            self.closed.set_result(None)


async def _arrivals(port: int, watcher: Watcher, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(
        lambda: _Arrivals(watcher, stop), "127.0.0.1", port
    )
    transport.write(b"GET /pods?watch=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        await protocol.closed
    finally:
        transport.close()


async def _watch(port: int, watcher: Watcher, track: bool, stop: asyncio.Event) -> None:
    if not track:
        await _arrivals(port, watcher, stop)
        return
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /pods?watch=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        watcher.ended = head.split(b"\r\n")[0].decode()
        writer.close()
        return
    text = b""
    try:
        while not stop.is_set():
            size = int(await reader.readuntil(b"\r\n"), 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                watcher.ended = "last chunk"
                return
            now = time.monotonic()
            text += data[:-2]
            *lines, text = text.split(b"\n")
            for line in lines:
                _line(watcher, json.loads(line), now, track)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        watcher.ended = repr(exc)
    finally:
        writer.close()


def _line(watcher: Watcher, item: dict[str, Any], now: float, track: bool) -> None:
    kind = item["type"]
    revision = item["revision"]
    if kind == "BOOKMARK":
        if track:
            watcher.bookmarks.append((revision, watcher.digest))
        return
    watcher.lines += 1
    watcher.arrivals.setdefault(revision, now)
    if not track:
        return
    uid = item["object"]["id"]
    old = watcher.pods.get(uid)
    if kind == "ADDED":
        if old is not None:
            watcher.lost_or_repeated += 1
            watcher.digest ^= old
        new = _digest(item["object"])
        watcher.pods[uid] = new
        watcher.digest ^= new
    elif old is None:
        watcher.lost_or_repeated += 1
    elif kind == "DELETED":
        del watcher.pods[uid]
        watcher.digest ^= old
    else:
        new = _digest(item["object"])
        watcher.pods[uid] = new
        watcher.digest ^= old ^ new


async def _poll(port: int, seen: dict[int, int], stop: asyncio.Event) -> int:
    """GET /pods ten times a second: each revision's digest."""
    polls = 0
    while not stop.is_set():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = await reader.read()
        writer.close()
        body = json.loads(raw.partition(b"\r\n\r\n")[2])
        digest = 0
        for pod in body["items"]:
            digest ^= _digest(pod)
        seen[body["revision"]] = digest
        polls += 1
        await asyncio.sleep(0.1)
    return polls


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def _run_watchers(
    port: int,
    count: int,
    seconds: float,
    *,
    track: bool,
    sample: Callable[[], None] | None = None,
) -> tuple[list[Watcher], dict[int, int], int]:
    stop = asyncio.Event()
    watchers = [Watcher() for _ in range(count)]
    tasks = []
    for watcher in watchers:  # opened in waves: the listen backlog is finite
        tasks.append(asyncio.create_task(_watch(port, watcher, track, stop)))
        if len(tasks) % 100 == 0:
            await asyncio.sleep(0.05)
    seen: dict[int, int] = {}
    poller = asyncio.create_task(_poll(port, seen, stop)) if track else None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if sample is not None:
            sample()
    stop.set()
    polls = await poller if poller is not None else 0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return watchers, seen, polls


def fanout(count: int, seconds: float) -> dict[str, Any]:
    """N watchers, 2 pods replaced a second, 100 pods: publish -> received, and RSS."""
    procs = Processes(pods=100, churn=2.0, period=0.1, bookmark=15.0)
    try:
        time.sleep(1.0)
        idle = procs.rss_mib()
        peak = [idle]

        def sample() -> None:
            peak.append(procs.rss_mib())

        import uvloop

        watchers, _, _ = uvloop.run(
            _run_watchers(procs.port, count, seconds, track=False, sample=sample)
        )
    finally:
        published = procs.stop()
    delays: list[float] = []
    all_received: list[float] = []
    first_received: list[float] = []
    first_revision = max((min(w.arrivals) for w in watchers if w.arrivals), default=0)
    for revision, at in published.items():
        if revision <= first_revision:
            continue  # before every watcher was open
        times = [w.arrivals.get(revision) for w in watchers]
        got = [t - at for t in times if t is not None]
        if len(got) < len(watchers):
            continue  # published as the run ended
        delays += got
        all_received.append(max(got))
        first_received.append(min(got))
    return {
        "watchers": count,
        "seconds": seconds,
        "revisions_measured": len(all_received),
        "ended_early": sum(1 for w in watchers if w.ended),
        "p50_ms": _percentile(delays, 50) * 1e3,
        "p99_ms": _percentile(delays, 99) * 1e3,
        "all_received_p99_ms": _percentile(all_received, 99) * 1e3,
        "all_received_p50_ms": _percentile(all_received, 50) * 1e3,
        "first_received_p50_ms": _percentile(first_received, 50) * 1e3,
        "idle_rss_mib": idle,
        "peak_rss_mib": max(peak),
        "rss_growth_mib": max(peak) - idle,
    }


def consistency(count: int, seconds: float, churn: float) -> dict[str, Any]:
    """M watchers under churn: rebuilt states against GET /pods at the same revisions."""
    procs = Processes(pods=100, churn=churn, period=0.1, bookmark=1.0)
    try:
        time.sleep(0.5)
        import uvloop

        watchers, seen, polls = uvloop.run(_run_watchers(procs.port, count, seconds, track=True))
    finally:
        procs.stop()
    checks = mismatches = 0
    for watcher in watchers:
        for revision, digest in watcher.bookmarks:
            expected = seen.get(revision)
            if expected is None:
                continue
            checks += 1
            mismatches += digest != expected
    return {
        "watchers": count,
        "seconds": seconds,
        "churn_per_s": churn,
        "lines": sum(w.lines for w in watchers),
        "bookmarks": sum(len(w.bookmarks) for w in watchers),
        "polls": polls,
        "checks": checks,
        "mismatches": mismatches,
        "lost_or_repeated": sum(w.lost_or_repeated for w in watchers),
        "streams_ended_early": sum(1 for w in watchers if w.ended),
    }


def run_http_parts(parts: set[str], *, quick: bool) -> tuple[dict[str, Any], dict[str, bool]]:
    """The parts asked for, and their verdicts."""
    results: dict[str, Any] = {}
    verdicts: dict[str, bool] = {}
    if "fanout" in parts:
        f = fanout(200 if quick else 1000, 10.0 if quick else 30.0)
        results["fanout"] = f
        verdicts[f"{f['watchers']} watchers: all received p99 <= {FANOUT_TARGET_MS:g} ms"] = (
            f["all_received_p99_ms"] <= FANOUT_TARGET_MS and f["revisions_measured"] > 0
        )
        verdicts[f"{f['watchers']} watchers: RSS <= idle + {RSS_TARGET_MIB:g} MiB"] = (
            f["rss_growth_mib"] <= RSS_TARGET_MIB
        )
    if "consistency" in parts:
        c = consistency(20 if quick else 100, 10.0 if quick else 60.0, 20.0)
        results["consistency"] = c
        verdicts[f"{c['watchers']} watchers under churn: states equal GET /pods, none lost"] = (
            c["checks"] > 0 and c["mismatches"] == 0 and c["lost_or_repeated"] == 0
        )
    return results, verdicts


if __name__ == "__main__":
    serve_instrumented(
        sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    )
