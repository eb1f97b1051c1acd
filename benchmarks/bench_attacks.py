"""Attacks on ``podcache serve`` (§1-4 and ``relists`` below), each beside its quiet baseline.

    .venv/bin/python benchmarks/bench_attacks.py [--quick] [--only closewait,pids,events,big]
                                                 [--json]

``BENCH_SERVE_SRC=/path/to/other/checkout/src`` runs that checkout's serve instead (the figures
before a fix, measured the same way). Three processes, as on a node: the runtime (the
simulator, ``--runtime`` mode of this file, which can also flood its event streams with events
it never lists), ``podcache serve`` on loopback, and this process, the attacker and the probe.
Figures come from the kernel (``/proc/net/tcp``, ``/proc/<pid>/stat``) and from serve's
``/metrics``; every probe answer is counted by status.

- ``closewait`` (§1): 300 sequential watch clients, then 50 clients for 5 s, that close
  before, during and after the first chunk (with and without reading, and half-closing):
  serve's sockets in CLOSE-WAIT and ``podcache_watchers`` afterwards, against 0 before.
- ``pids`` (§2): 5,000 pods; a crafted proc root whose processes sit in a cgroup named like a
  container the runtime does not know (``cri-containerd-<64 hex>.scope``), each newer than the
  snapshot, some with a start time in the future; one client asks ``/pids/<new pid>`` back to
  back: list calls (refreshes) per second and serve's CPU, against the same minutes idle.
- ``events`` (§3): 5,000 pods; the runtime sends 1,000 events/s for IDs it never lists:
  ``/healthz`` p99 and serve's CPU, against the runtime sending none.
- ``big`` (§4): 110 pods; 12 events/s whose sandbox status holds about 15 MB of labels:
  ``/healthz`` p50/p99 and serve's CPU, against none.
- ``relists``: events that name a pod, so each asks for a relist of that pod
  alone: 1,000 events/s each naming a new pod UID at 5,000 and at 200 pods, and 10,000
  events/s naming one listed pod at 5,000 pods (sent in batches every 5 ms). ``/healthz``
  p50/p99, serve's CPU, relists of one pod and full listings per second, against the same
  runtime sending none; each quiet and flooded pair runs back to back.

Rules (exit status 1 when one is missed): §1 nothing in CLOSE-WAIT and the gauge back to 0;
§2 no list call caused by the lookups (refreshes/s within the idle rate plus one per 10 s);
§3 ``/healthz`` p99 <= 25 ms and serve's CPU under 40% of a core; every probe answered 200.
§4 is reported (the event reader's limit and its cost are in docs/performance.md).
``relists``: relists of one pod at most 50/s (a tenth of the time at 2 ms each; they take
longer at 5,000 pods) and every probe answered 200.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from plumbing import free_port
from plumbing import http_get as get

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
_CLOSE_WAIT = "08"


# -- the runtime's process -----------------------------------------------------------------------
FLOOD_KINDS = ("unlisted", "new-pods", "one-pod")
"""What a flood's events name: container IDs the runtime never lists and no pod (§3, §4), a new
pod UID each, or one pod the runtime lists."""
BATCH_EVERY = 0.005
"""Seconds between the batches of a flood naming pods (a Python runtime cannot send 10,000
events a second one by one)."""


POOL = 20_000
"""Distinct pod UIDs a ``new-pods`` flood cycles through (none of them listed)."""


def _pod_events(sandbox: object, kind: str) -> list[object]:
    """The events a flood cycles through: STARTED, without a time (so none is ever covered
    by a call that began after it happened, §7 rule 4), for a fresh container in ``sandbox``
    (``one-pod``) or in a copy of it with a new pod UID each (``new-pods``)."""
    import uuid

    import msgspec

    from podcache.sim.population import SimEvent, SimEventType

    def one(uid: str | None) -> object:
        named = sandbox
        if uid is not None:
            named = msgspec.structs.replace(sandbox, uid=uid, id=secrets.token_hex(32))  # type: ignore[type-var]
        return SimEvent(
            container_id=secrets.token_hex(32),
            type=SimEventType.STARTED,
            created_at=0,
            sandbox=named,  # type: ignore[arg-type]
            containers=(),
        )

    if kind == "one-pod":
        return [one(None)]
    return [one(str(uuid.uuid4())) for _ in range(POOL)]


def flood_pods(sim: object, kind: str, rate: float, stop: threading.Event) -> None:
    """Send ``rate`` events a second, in batches, each naming a new pod UID (``new-pods``) or
    the first pod the runtime lists (``one-pod``), until ``stop``."""
    sandbox = sim.population.snapshot().sandboxes[0]  # type: ignore[attr-defined]
    pool = _pod_events(sandbox, kind)
    per_batch = max(1, round(rate * BATCH_EVERY))
    due = time.monotonic()
    sent = 0
    while not stop.is_set():
        batch = [pool[(sent + n) % len(pool)] for n in range(per_batch)]
        sent += per_batch
        sim.send_events(batch)  # type: ignore[attr-defined]
        due += BATCH_EVERY
        pause = due - time.monotonic()
        if pause > 0:
            stop.wait(pause)
        elif pause < -1.0:
            due = time.monotonic()  # fell behind: no burst to catch up


def run_runtime(
    socket_path: str, pods: int, flood: float, event_bytes: int, kind: str = "unlisted"
) -> None:
    """The simulator on ``socket_path``; with ``flood`` > 0, that many events a second: for
    container IDs it never lists, each with a sandbox status of about ``event_bytes``
    (``unlisted``), or naming pods (``new-pods``, ``one-pod``: ``flood_pods``)."""
    from podcache.sim import SimRuntime
    from podcache.sim.population import SimEvent, SimEventType, SimSandbox, SimSandboxState

    sandbox = None
    if event_bytes:
        value = "v" * 1000
        labels = {f"k{n:07d}": value for n in range(event_bytes // 1010)}
        sandbox = SimSandbox(
            id="f" * 64,
            name="big",
            uid="0" * 8 + "-0000-0000-0000-" + "0" * 12,
            namespace="default",
            attempt=0,
            state=SimSandboxState.READY,
            created_at=1,
            labels=labels,
            annotations={},
        )
    with SimRuntime(pods, socket=socket_path, seed=3) as sim:
        print("ready", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        if flood and kind != "unlisted":
            flood_pods(sim, kind, flood, stop)
            return
        interval = 1.0 / flood if flood else 1.0
        due = time.monotonic()
        while not stop.is_set():
            if flood:
                event = SimEvent(
                    container_id=secrets.token_hex(32),
                    type=SimEventType.STARTED,
                    created_at=time.time_ns(),
                    sandbox=sandbox,
                    containers=(),
                )
                sim.send_events([event])
                due += interval
                pause = due - time.monotonic()
                if pause > 0:
                    stop.wait(pause)
                elif pause < -1.0:
                    due = time.monotonic()  # fell behind: no burst to catch up
            else:
                stop.wait(0.5)


# -- processes -----------------------------------------------------------------------------------
def _wait_line(process: subprocess.Popen[str], word: str, timeout: float = 120.0) -> None:
    assert process.stderr is not None and process.stdout is not None
    deadline = time.monotonic() + timeout
    stream = process.stdout if word == "ready" else process.stderr
    while time.monotonic() < deadline:
        line = stream.readline()
        if word in line:
            return
        if not line and process.poll() is not None:
            raise RuntimeError(f"process exited before saying {word!r}")
    raise RuntimeError(f"no {word!r} within {timeout} s")


STOP_WAIT = 10.0
"""Seconds a process has to end after SIGTERM before it is killed (and that is said)."""


def stop(process: subprocess.Popen[str], what: str) -> None:
    """SIGTERM, then SIGKILL after ``STOP_WAIT`` seconds (said on stderr: a figure of its own)."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:
        print(f"{what} did not end within {STOP_WAIT} s of SIGTERM: killed", file=sys.stderr)
        process.kill()
        process.wait()


@contextmanager
def runtime(
    pods: int, flood: float = 0.0, event_bytes: int = 0, kind: str = "unlisted"
) -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="pc-attack-")
    path = f"{directory}/sim.sock"
    args = [sys.executable, __file__, "--runtime", path, "--pods", str(pods)]
    args += ["--flood", str(flood), "--event-bytes", str(event_bytes), "--kind", kind]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(process, "ready")
        yield f"unix://{path}"
    finally:
        stop(process, "the runtime")


@dataclass
class Serve:
    process: subprocess.Popen[str]
    port: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> float:
        """Seconds of CPU serve used so far (user and system)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def metrics(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for line in get(self.port, "/metrics")[1].decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                found[name] = float(value)
        return found


@contextmanager
def serve(endpoint: str, *extra: str) -> Iterator[Serve]:
    port = free_port()
    args = [sys.executable, "-m", "podcache.serve", "-r", endpoint]
    args += ["--listen", f"127.0.0.1:{port}", "--cache-period", "30s", *extra]
    env = dict(os.environ)
    other = os.environ.get("BENCH_SERVE_SRC")  # another checkout's src/: its serve, for "before"
    if other:
        env["PYTHONPATH"] = other
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        _wait_line(process, "listening on")
        threading.Thread(target=process.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        yield Serve(process, port)
    finally:
        stop(process, "podcache serve")


@dataclass
class Latencies:
    seconds: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    def summary(self) -> dict[str, object]:
        return {
            "requests": len(self.seconds),
            "p50_ms": round(self.quantile(0.5) * 1000, 2),
            "p99_ms": round(self.quantile(0.99) * 1000, 2),
            "non_2xx": sum(n for status, n in self.statuses.items() if not 200 <= status < 300),
        }


def probe_healthz(port: int, seconds: float) -> Latencies:
    """``/healthz`` back to back on one keep-alive connection for ``seconds``."""
    found = Latencies()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        began = time.perf_counter()
        connection.request("GET", "/healthz")
        reply = connection.getresponse()
        reply.read()
        found.seconds.append(time.perf_counter() - began)
        found.statuses[reply.status] = found.statuses.get(reply.status, 0) + 1
        time.sleep(0.005)
    connection.close()
    return found


def measured(server: Serve, seconds: float) -> dict[str, object]:
    """``/healthz`` latency, serve's CPU share, its list calls, the relists of one pod and the
    events read over ``seconds``."""
    before_cpu, before = server.cpu(), server.metrics()
    latencies = probe_healthz(server.port, seconds)
    after_cpu, after = server.cpu(), server.metrics()

    def rate(name: str) -> float:
        return round((after.get(name, 0.0) - before.get(name, 0.0)) / seconds, 3)

    return {
        **latencies.summary(),
        "cpu_share": round((after_cpu - before_cpu) / seconds, 3),
        "refreshes_per_s": rate("podcache_cache_refreshes_total"),
        "pod_relists_per_s": rate("podcache_pod_relists_total"),
        # Seconds spent in relists of one pod per second: the budget's share (at most 0.1).
        "pod_relist_share": rate("podcache_pod_relist_duration_seconds_sum"),
        "events_per_s": rate("podcache_events_received_total"),
    }


# -- §1 ------------------------------------------------------------------------------------------
def close_wait(port: int) -> int:
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local = int(fields[1].rsplit(":", 1)[1], 16)
            count += local == port and fields[3] == _CLOSE_WAIT
    return count


def one_watch(port: int, mode: int) -> None:
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        client.sendall(f"GET /pods?watch=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        if mode % 3 == 1:
            client.recv(10)
        elif mode % 3 == 2:
            client.recv(65536)
        if mode % 2:
            client.shutdown(socket.SHUT_WR)
    finally:
        client.close()


def bench_closewait(quick: bool) -> dict[str, object]:
    with runtime(110) as endpoint, serve(endpoint) as server:
        before = {"close_wait": close_wait(server.port), "watchers": watchers(server)}
        for n in range(300):
            one_watch(server.port, n)
        stop = time.monotonic() + (2.0 if quick else 5.0)

        def client(seed: int) -> None:
            n = seed
            while time.monotonic() < stop:
                one_watch(server.port, n)
                n += 1

        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(2.0)
        status, _ = get(server.port, "/healthz")
        after = {"close_wait": close_wait(server.port), "watchers": watchers(server)}
    ok = after == {"close_wait": 0, "watchers": 0.0} and status == 200
    return {"before": before, "after": after, "healthz": status, "ok": ok}


def watchers(server: Serve) -> float:
    return server.metrics()["podcache_watchers"]


# -- §2 ------------------------------------------------------------------------------------------
def crafted_proc(root: Path, count: int) -> list[int]:
    """A proc root: uptime, and ``count`` processes in a cgroup naming an unknown container,
    every other one with a start time in the future."""
    root.mkdir(parents=True, exist_ok=True)
    uptime = 5000.0
    (root / "uptime").write_text(f"{uptime:.2f} 1.00\n")
    scope = f"/system.slice/cri-containerd-{secrets.token_hex(32)}.scope"
    pids = []
    for n in range(count):
        pid = 10_000 + n
        start = int((uptime * 100) + (10**6 if n % 2 else 0))  # now, or far in the future
        directory = root / str(pid)
        directory.mkdir()
        (directory / "cgroup").write_text(f"0::{scope}\n")
        stat = f"{pid} (sleep) S 1 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1 1"
        (directory / "stat").write_text(stat + "\n")
        pids.append(pid)
    return pids


def bench_pids(quick: bool) -> dict[str, object]:
    seconds = 5.0 if quick else 10.0
    with tempfile.TemporaryDirectory() as directory:
        proc = Path(directory) / "proc"
        pids = crafted_proc(proc, 2000)
        with runtime(5000) as endpoint, serve(endpoint, "--proc-root", str(proc)) as server:
            get(server.port, "/pods")
            idle = measured(server, seconds)
            before = server.metrics()
            cpu = server.cpu()
            stop = time.monotonic() + seconds
            asked = 0
            statuses: dict[int, int] = {}
            while time.monotonic() < stop:
                status, _ = get(server.port, f"/pids/{pids[asked % len(pids)]}")
                statuses[status] = statuses.get(status, 0) + 1
                asked += 1
            after = server.metrics()
            attack = {
                "lookups": asked,
                "statuses": statuses,
                "cpu_share": round((server.cpu() - cpu) / seconds, 3),
                "refreshes_per_s": round(
                    (
                        after["podcache_cache_refreshes_total"]
                        - before["podcache_cache_refreshes_total"]
                    )
                    / seconds,
                    3,
                ),
                "probes": after.get("podcache_pid_lookup_probes_total", 0.0)
                - before.get("podcache_pid_lookup_probes_total", 0.0),
            }
    limit = float(idle["refreshes_per_s"]) + 0.1  # type: ignore[arg-type]
    ok = float(attack["refreshes_per_s"]) <= limit and set(statuses) == {404}  # type: ignore[arg-type]
    return {"idle": idle, "attack": attack, "ok": ok}


# -- §3 and §4 -----------------------------------------------------------------------------------
def bench_flood(pods: int, flood: float, event_bytes: int, quick: bool) -> dict[str, object]:
    seconds = 5.0 if quick else 10.0
    with runtime(pods) as endpoint, serve(endpoint) as server:
        get(server.port, "/pods")
        quiet = measured(server, seconds)
    with runtime(pods, flood, event_bytes) as endpoint, serve(endpoint) as server:
        get(server.port, "/pods")
        time.sleep(1.0)
        flooded = measured(server, seconds)
        received = server.metrics()["podcache_events_received_total"]
    return {"quiet": quiet, "flooded": flooded, "events_received": received}


def bench_events(quick: bool) -> dict[str, object]:
    result = bench_flood(5000, 1000.0, 0, quick)
    flooded = result["flooded"]
    assert isinstance(flooded, dict)
    result["ok"] = (
        flooded["p99_ms"] <= 25.0 and flooded["cpu_share"] < 0.40 and flooded["non_2xx"] == 0
    )
    return result


def bench_big(quick: bool) -> dict[str, object]:
    result = bench_flood(110, 12.0, 15 * 1024 * 1024, quick)
    result["ok"] = True  # reported, not judged here
    return result


RELIST_ATTACKS = (
    ("new-pods", 5000, 1000.0),
    ("new-pods", 200, 1000.0),
    ("one-pod", 5000, 10000.0),
)
"""(what the events name, pods, events a second): the three ``relists`` attacks."""
MAX_RELISTS_PER_S = 50.0


def filled(server: Serve, timeout: float = 120.0) -> None:
    """Wait until serve answers ``/pods`` (its first listing done), however slow the runtime."""
    deadline = time.monotonic() + timeout
    while get(server.port, "/pods")[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"serve never answered /pods within {timeout} s")
        time.sleep(0.5)


def relist_pair(kind: str, pods: int, rate: float, seconds: float) -> dict[str, object]:
    """One attack of ``RELIST_ATTACKS`` and its quiet baseline, back to back. The runtime is
    stopped before serve, so serve's stop does not wait for calls to a flooded runtime."""
    found: dict[str, object] = {}
    for name, flood in (("quiet", 0.0), ("flooded", rate)):
        with ExitStack() as serving, ExitStack() as running:  # the runtime's ends first
            endpoint = running.enter_context(runtime(pods, flood, 0, kind))
            server = serving.enter_context(serve(endpoint))
            filled(server)
            time.sleep(1.0)
            found[name] = measured(server, seconds)
    return found


def bench_relists(quick: bool) -> dict[str, object]:
    """Each attack of ``RELIST_ATTACKS`` beside the same runtime sending no events."""
    seconds = 5.0 if quick else 10.0
    results: dict[str, object] = {}
    ok = True
    for kind, pods, rate in RELIST_ATTACKS:
        pair = relist_pair(kind, pods, rate, seconds)
        results[f"{kind}-{pods}-{int(rate)}"] = pair
        flooded = pair["flooded"]
        assert isinstance(flooded, dict)
        ok = ok and float(flooded["pod_relists_per_s"]) <= MAX_RELISTS_PER_S
        ok = ok and flooded["non_2xx"] == 0
    results["ok"] = ok
    return results


BENCHES = {
    "closewait": bench_closewait,
    "pids": bench_pids,
    "events": bench_events,
    "big": bench_big,
    "relists": bench_relists,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(BENCHES))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runtime", metavar="SOCKET", help=argparse.SUPPRESS)
    parser.add_argument("--pods", type=int, default=110, help=argparse.SUPPRESS)
    parser.add_argument("--flood", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--event-bytes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=FLOOD_KINDS, default="unlisted", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runtime:
        run_runtime(args.runtime, args.pods, args.flood, args.event_bytes, args.kind)
        return 0
    results = {name: BENCHES[name](args.quick) for name in args.only.split(",")}
    verdict = all(result["ok"] for result in results.values())
    print(json.dumps({**results, "load_average": os.getloadavg()}, indent=None if args.json else 2))
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
