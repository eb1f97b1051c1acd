"""The HTTP parts of bench_watch.py: many watchers on one server; not a test.

Processes: ``podcache sim`` (the runtime, churning), the server (``podcache serve``'s
application and HTTP server, built here with one addition: it records the time at which each
revision was published, on CLOCK_MONOTONIC and CLOCK_REALTIME, and writes them out when it
stops), and the watchers.

fanout: N watchers opened without ``since``, split over several client processes (``clients``:
one Python process reading a thousand sockets would itself add tens of milliseconds before the
last of them is read); each client does no more than read its sockets and keep what arrived,
with two times: when the client read it (CLOCK_MONOTONIC, the server's clock) and when the
kernel queued it on the watcher's socket (``SO_TIMESTAMPNS``, CLOCK_REALTIME); the lines are
parsed after the run. For each change line, its arrival minus its revision's publish time.
Reported: p50/p99 over (watcher, revision) of the client's read ("received", the verdict) and
of the kernel's ("queued": what the server's fan-out alone costs), p99 over revisions of the
time until the last watcher had it ("all received"); errors (a connection refused or reset, a
status other than 200, a stream ended before the run did: each counted, any one fails the
run); the clients' CPU share of the run. The server's RSS (``/proc/PID/status`` VmRSS) idle
before the watchers open, and its peak while they run. Run once with the broadcast (the
server's default) and once with every stream on its own path (``per_stream``): the baseline
of the same run.

consistency: M watchers with churn R/s for S seconds, a bookmark every second; each rebuilds
the state from its lines (a digest: XOR of a hash of each pod's canonical JSON, updated per
line) and counts a line that adds a pod it has or drops/modifies one it has not (lost or
repeated changes). A poller reads ``GET /pods`` ten times a second and keeps each revision's
digest; at every bookmark a watcher's digest is compared with the poller's for that revision
when the poller saw it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

FANOUT_TARGET_MS = 50.0
FANOUT_CLIENTS = 4
"""Client processes the fanout watchers are split over."""
_CHANGE = re.compile(rb'{"type":"(?:ADDED|MODIFIED|DELETED)","revision":(\d+)')
RSS_TARGET_MIB = 100.0
ROOT = Path(__file__).resolve().parent.parent


# -- the instrumented server (a child process) ------------------------------------------------
def serve_instrumented(
    endpoint: str, port: int, period: float, out: str, bookmark: float, *, broadcast: bool
) -> None:
    """``podcache serve``'s app on 127.0.0.1:port, recording each revision's publish time
    (monotonic, wall clock); ``broadcast`` False: every stream on its own path."""
    from podcache.cri import AsyncCRIRuntime
    from podcache.serve.app import App
    from podcache.serve.server import ConnectionLimits, ListenAddress, Listener, run
    from podcache.serve.watchstream import WatchStreams

    published: dict[int, tuple[float, float]] = {}
    runtime = AsyncCRIRuntime(endpoint, timeout=5.0)

    def make_app() -> App:
        app = App(runtime, period, bookmark_interval=bookmark)
        if not broadcast:
            app.streams = WatchStreams(app.cache, bookmark_interval=bookmark, broadcast=False)
            app.metrics.watchers = app.streams.counters
        log = app.cache._core.changes
        publish = log.publish

        def timed(pods: Any, now: float) -> Any:
            result = publish(pods, now)
            if log.revision not in published:
                published[log.revision] = (time.monotonic(), time.time())
            return result

        log.publish = timed  # type: ignore[method-assign]
        return app

    def listening(app: App) -> None:
        print("listening", flush=True)

    try:
        run(
            make_app,
            [Listener(ListenAddress("127.0.0.1", port))],
            limits=ConnectionLimits(max_connections=4096),
            on_listening=listening,
        )
    finally:
        Path(out).write_text(json.dumps({str(k): v for k, v in published.items()}))


# -- processes ---------------------------------------------------------------------------------
class Processes:
    """The simulation and the server, started and stopped."""

    def __init__(
        self, pods: int, churn: float, period: float, bookmark: float, broadcast: bool = True
    ) -> None:
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
                "broadcast" if broadcast else "per-stream",
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

    def stop(self) -> dict[int, tuple[float, float]]:
        self.server.send_signal(signal.SIGTERM)
        self.server.wait(30)
        self.sim.send_signal(signal.SIGINT)
        try:
            self.sim.wait(10)
        except subprocess.TimeoutExpired:
            self.sim.kill()
        published = json.loads(Path(self.published_path).read_text())
        return {int(k): (v[0], v[1]) for k, v in published.items()}


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


async def _watch(port: int, watcher: Watcher, stop: asyncio.Event) -> None:
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
                _line(watcher, json.loads(line), now)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        watcher.ended = repr(exc)
    finally:
        writer.close()


def _line(watcher: Watcher, item: dict[str, Any], now: float) -> None:
    kind = item["type"]
    revision = item["revision"]
    if kind == "BOOKMARK":
        watcher.bookmarks.append((revision, watcher.digest))
        return
    watcher.lines += 1
    watcher.arrivals.setdefault(revision, now)
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
    port: int, count: int, seconds: float
) -> tuple[list[Watcher], dict[int, int], int]:
    stop = asyncio.Event()
    watchers = [Watcher() for _ in range(count)]
    tasks = []
    for watcher in watchers:  # opened in waves: the listen backlog is finite
        tasks.append(asyncio.create_task(_watch(port, watcher, stop)))
        if len(tasks) % 100 == 0:
            await asyncio.sleep(0.05)
    seen: dict[int, int] = {}
    poller = asyncio.create_task(_poll(port, seen, stop))
    await asyncio.sleep(seconds)
    stop.set()
    polls = await poller
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return watchers, seen, polls


# -- fanout: watchers in client processes ------------------------------------------------------
SO_TIMESTAMPNS = 35  # Linux (asm-generic/socket.h); Python's socket module does not name it
_TIMESPEC = struct.Struct("@qq")
_REQUEST = b"GET /pods?watch=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
Arrival = tuple[float, float]  # (client read, CLOCK_MONOTONIC; kernel queued, CLOCK_REALTIME)


def client_main(port: int, count: int, seconds: float) -> None:
    """A client process: ``count`` watchers read for ``seconds``, then one JSON document on
    stdout: per watcher, each revision's first change line's ``Arrival``; and the errors."""
    selector = selectors.DefaultSelector()
    records: list[list[tuple[float, float, bytes]]] = [[] for _ in range(count)]
    errors: dict[str, int] = {}

    def error(kind: str) -> None:
        errors[kind] = errors.get(kind, 0) + 1

    for index in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.sendall(_REQUEST)
        except OSError as exc:
            error(f"connect: {type(exc).__name__}")
            continue
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, index)
        if index % 100 == 99:
            time.sleep(0.05)  # in waves: the listen backlog is finite
    print("open", flush=True)
    deadline = time.monotonic() + seconds
    while (now := time.monotonic()) < deadline:
        for key, _ in selector.select(deadline - now):
            _receive(cast(socket.socket, key.fileobj), records[key.data], selector, error)
    watchers = []
    for received in records:
        arrivals, status = _arrivals(received)
        if status is not None and status != 200:
            error(f"status {status}")
        watchers.append({str(r): t for r, t in arrivals.items()})
    print(json.dumps({"watchers": watchers, "errors": errors}), flush=True)


def _receive(
    sock: socket.socket,
    record: list[tuple[float, float, bytes]],
    selector: selectors.BaseSelector,
    error: Callable[[str], None],
) -> None:
    """One read: kept with its times; the end of the stream (or a failure) is an error."""
    try:
        data, cmsgs, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(_TIMESPEC.size))
    except BlockingIOError:
        return
    except OSError as exc:
        error(f"read: {type(exc).__name__}")
        data, cmsgs = b"", []
    if not data:
        error("stream ended before the run")
        selector.unregister(sock)
        sock.close()
        return
    arrived = time.monotonic()
    queued = float("nan")
    for level, kind, payload in cmsgs:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = _TIMESPEC.unpack(payload[: _TIMESPEC.size])
            queued = sec + nsec / 1e9
    record.append((arrived, queued, data))


def _arrivals(
    received: list[tuple[float, float, bytes]],
) -> tuple[dict[int, Arrival], int | None]:
    """Each revision's first change line's arrival, and the status (None: nothing came)."""
    arrivals: dict[int, Arrival] = {}
    tail = b""
    status = None
    for arrived, queued, data in received:
        if status is None and len(tail + data) >= 12:
            head = (tail + data)[:12]
            status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0
        for match in _CHANGE.finditer(tail + data):
            arrivals.setdefault(int(match[1]), (arrived, queued))
        tail = data[-64:]
    return arrivals, status


def _clients(port: int, count: int, clients: int, seconds: float) -> list[subprocess.Popen[str]]:
    """Client processes for ``count`` watchers, each started with its watchers open."""
    share = [count // clients + (n < count % clients) for n in range(clients)]
    started = [
        subprocess.Popen(
            [sys.executable, __file__, "client", str(port), str(size), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for size in share
        if size
    ]
    for proc in started:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "open":
            raise RuntimeError("a watch client did not start")
    return started


def fanout(count: int, seconds: float, clients: int, *, broadcast: bool) -> dict[str, Any]:
    """N watchers, 2 pods replaced a second, 100 pods: publish -> received, and RSS."""
    procs = Processes(pods=100, churn=2.0, period=0.1, bookmark=15.0, broadcast=broadcast)
    watchers: list[dict[int, Arrival]] = []
    errors: dict[str, int] = {}
    client_cpu = 0.0
    try:
        time.sleep(1.0)
        idle = peak = procs.rss_mib()
        began = time.monotonic()
        started = _clients(procs.port, count, clients, seconds)
        pending = {cast(Any, proc.stdout): proc for proc in started}
        while pending:  # each client reports when its time is up
            ready = select.select(list(pending), [], [], 0.5)[0]
            with contextlib.suppress(FileNotFoundError):
                peak = max(peak, procs.rss_mib())
            for out in ready:
                cpu, found = _report(pending.pop(out))
                client_cpu += cpu
                watchers += found["watchers"]
                for kind, n in found["errors"].items():
                    errors[kind] = errors.get(kind, 0) + n
        wall = time.monotonic() - began
    finally:
        published = procs.stop()
    return {
        "watchers": count,
        "seconds": seconds,
        "broadcast": broadcast,
        "clients": len(started),
        "client_cpu_seconds": client_cpu,
        "client_cpu_share": client_cpu / (wall * len(started)),
        "errors": errors,
        "error_count": sum(errors.values()) + count - len(watchers),
        **_delays(watchers, published, count),
        "idle_rss_mib": idle,
        "peak_rss_mib": peak,
        "rss_growth_mib": peak - idle,
    }


def _report(proc: subprocess.Popen[str]) -> tuple[float, dict[str, Any]]:
    """A client's report, read whole, then the CPU seconds it used (reaped here)."""
    assert proc.stdout is not None
    found: dict[str, Any] = json.loads(proc.stdout.read())
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    found["watchers"] = [{int(r): (t[0], t[1]) for r, t in w.items()} for w in found["watchers"]]
    return usage.ru_utime + usage.ru_stime, found


def _delays(
    watchers: list[dict[int, Arrival]], published: dict[int, tuple[float, float]], count: int
) -> dict[str, Any]:
    """Percentiles of arrival minus publish, over the revisions every watcher saw."""
    delays: list[float] = []
    queued: list[float] = []
    all_received: list[float] = []
    first_received: list[float] = []
    opened = max((min(w) for w in watchers if w), default=0)
    for revision, (at, wall_at) in published.items():
        if revision <= opened:
            continue  # before every watcher was open
        times = [w.get(revision) for w in watchers]
        arrived = [t for t in times if t is not None]
        if len(arrived) < count:
            continue  # published as the run ended
        got = [t[0] - at for t in arrived]
        delays += got
        queued += [t[1] - wall_at for t in arrived]
        all_received.append(max(got))
        first_received.append(min(got))
    return {
        "revisions_measured": len(all_received),
        "p50_ms": _percentile(delays, 50) * 1e3,
        "p99_ms": _percentile(delays, 99) * 1e3,
        "queued_p50_ms": _percentile(queued, 50) * 1e3,
        "queued_p99_ms": _percentile(queued, 99) * 1e3,
        "all_received_p99_ms": _percentile(all_received, 99) * 1e3,
        "all_received_p50_ms": _percentile(all_received, 50) * 1e3,
        "first_received_p50_ms": _percentile(first_received, 50) * 1e3,
    }


def consistency(count: int, seconds: float, churn: float) -> dict[str, Any]:
    """M watchers under churn: rebuilt states against GET /pods at the same revisions."""
    procs = Processes(pods=100, churn=churn, period=0.1, bookmark=1.0)
    try:
        time.sleep(0.5)
        import uvloop

        watchers, seen, polls = uvloop.run(_run_watchers(procs.port, count, seconds))
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
        count, seconds = (200, 10.0) if quick else (1000, 30.0)
        f = fanout(count, seconds, FANOUT_CLIENTS, broadcast=True)
        f["per_stream"] = fanout(count, seconds, FANOUT_CLIENTS, broadcast=False)
        f["p99_vs_per_stream"] = f["p99_ms"] / f["per_stream"]["p99_ms"]
        results["fanout"] = f
        verdicts[f"{f['watchers']} watchers: all received p99 <= {FANOUT_TARGET_MS:g} ms"] = (
            f["all_received_p99_ms"] <= FANOUT_TARGET_MS and f["revisions_measured"] > 0
        )
        verdicts[f"{f['watchers']} watchers: RSS <= idle + {RSS_TARGET_MIB:g} MiB"] = (
            f["rss_growth_mib"] <= RSS_TARGET_MIB
        )
        verdicts[f"{f['watchers']} watchers: no errors"] = f["error_count"] == 0
    if "consistency" in parts:
        c = consistency(20 if quick else 100, 10.0 if quick else 60.0, 20.0)
        results["consistency"] = c
        verdicts[f"{c['watchers']} watchers under churn: states equal GET /pods, none lost"] = (
            c["checks"] > 0 and c["mismatches"] == 0 and c["lost_or_repeated"] == 0
        )
    return results, verdicts


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client_main(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        serve_instrumented(
            sys.argv[1],
            int(sys.argv[2]),
            float(sys.argv[3]),
            sys.argv[4],
            float(sys.argv[5]),
            broadcast=sys.argv[6] == "broadcast",
        )
