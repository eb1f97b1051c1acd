"""What one pod change costs at scale, events on: latency, list bytes, CPU, listings.

    .venv/bin/python benchmarks/bench_perpod.py [--quick] [--json] [--sizes 110,1000,5000]

The runtime is the simulator in a process of its own (``--node``: this script, a
``SimRuntime`` commanded over its stdin/stdout with one JSON object per line), so its gRPC
server and its pod changes never share the measured process. Pods are made with the
population's own methods in that process; the simulator's call counts
(``SimRuntime.call_counts``: calls and answer bytes per list RPC, filtered by a label
selector or an ID, or unfiltered) are read through the same pipe.

For every size (110, 1,000, 5,000 pods; the default population, 1-4 main containers a pod),
a ``RuntimeCache(CRIRuntime, 30 s, events=True)`` in this process:

1. **latency**: a pod created (shape RUNNING) -> its UID in ``get_pods()``, and a pod removed
   -> its UID gone, >= 50 trials each (``--quick``: 12); the reader polls the cache's hit path
   every 0.2 ms, measured from the command sent to the node (so it includes the pipe's
   ~0.1 ms). Between trials the node is let go quiet (no list call for 150 ms).
2. **per change** (no reader polling): process CPU time of this process (``time.process_time``,
   every thread) from the change to quiescence, minus the idle CPU of an equally long window
   measured just before; list calls and answer bytes per change from the node's counts,
   filtered and unfiltered.
3. **full listings** over the whole run at that size: unfiltered ListPodSandbox calls (or their
   streaming twin StreamPodSandboxes, as the client streams when the node does) from the
   cache's creation on, against what the rule allows (the first read's, the first
   subscription's, one per resubscription, ``stats().resubscriptions``, and one per period
   elapsed).

At 5,000 pods only, **serve under churn**: ``podcache serve`` (its own process, events on,
30 s period) for 30 s (``--quick``: 10 s) of one pod crash-looping (2 restarts/s), one pod
created and one removed each second; its CPU from ``/proc/PID/stat``, and ``/healthz`` asked
every 20 ms meanwhile over one keep-alive connection (p99, non-2xx answers). The same load
against the library's process gives its CPU too.

Targets (5,000 pods) are printed beside each figure: latency median <= 10 ms and
p99 <= 30 ms, <= 64 KiB of list answers per change, <= 3 ms of library CPU per change, full
listings only by the period and (re)subscription, serve <= 5% of one core with /healthz
p99 <= 10 ms. Writes ``benchmarks/results/perpod.json``; exit status 0 whether or not targets
are met (the "before" figures miss them by design), 2 on a broken run.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plumbing import serve_http  # noqa: E402 -- after sys.path names benchmarks/

from podcache import RuntimeCache  # noqa: E402 -- after sys.path names the repository
from podcache.cri import CRIRuntime  # noqa: E402 -- after sys.path names the repository

PERIOD = 30.0
SIZES = (110, 1_000, 5_000)
POLL = 0.0002
QUIET = 0.15
"""Seconds without a list call at the node after which a change counts as fully handled."""
TARGETS = {
    "latency_median_ms": 10.0,
    "latency_p99_ms": 30.0,
    "bytes_per_change": 64 * 1024,
    "cpu_ms_per_change": 3.0,
    "serve_core_fraction": 0.05,
    "healthz_p99_ms": 10.0,
}
RESULTS = ROOT / "benchmarks" / "results" / "perpod.json"


def log(message: str) -> None:
    print(f"bench_perpod: {message}", file=sys.stderr, flush=True)


# -- the node: the simulator in its own process -----------------------------------------------
def node_main(pods: int, socket_path: str) -> int:
    """``--node``: serve a SimRuntime and obey one JSON command a line on stdin."""
    from podcache.sim import PodShape, SimRuntime

    with SimRuntime(pods, socket=socket_path, seed=22) as sim:
        print(json.dumps({"endpoint": sim.endpoint}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            reply: dict[str, Any] = {}
            if op == "create":
                reply["uid"], made = sim.population.create_pod(PodShape.RUNNING)
                reply["events"] = len(made)
            elif op == "remove":
                reply["events"] = len(sim.population.remove_pod(command["uid"]))
            elif op == "crash":
                sim.population.crash_container(command["uid"])
            elif op == "shape":
                snapshot = sim.population.snapshot()
                reply |= {"pods": len(sim.population), "sandboxes": len(snapshot.sandboxes)}
                reply["containers"] = len(snapshot.containers)
            elif op == "counts":
                reply["counts"] = sim.call_counts()
            elif op == "reset":
                sim.reset_call_counts()
            elif op == "quit":
                break
            print(json.dumps(reply), flush=True)
    return 0


class Node:
    """The bench's side of the node process; one command at a time (a lock)."""

    def __init__(self, pods: int) -> None:
        self._dir = tempfile.mkdtemp(prefix="bench-perpod-")
        self._proc = subprocess.Popen(
            [sys.executable, __file__, "--node", str(pods), f"{self._dir}/sim.sock"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._lock = threading.Lock()
        self.endpoint: str = self._read()["endpoint"]

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the node process ended (status {self._proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, op: str, **args: Any) -> dict[str, Any]:
        with self._lock:
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self._proc.stdin.flush()
            return self._read()

    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = self.ask("counts")["counts"]
        return counts

    def list_calls(self) -> int:
        counts = self.counts()
        return sum(
            _listed(counts, m, k)["calls"]
            for m in ("ListPodSandbox", "ListContainers")
            for k in ("filtered", "unfiltered")
        )

    def wait_quiet(self, timeout: float = 60.0) -> None:
        """Until no list call reached the node for QUIET seconds."""
        deadline = time.monotonic() + timeout
        seen = self.list_calls()
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < QUIET:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the node was never quiet for {QUIET} s")
            time.sleep(0.02)
            now = self.list_calls()
            if now != seen:
                seen, quiet_since = now, time.monotonic()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError):
            self.ask("quit")
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


@contextmanager
def node(pods: int) -> Iterator[Node]:
    started = Node(pods)
    try:
        yield started
    finally:
        started.close()


# -- figures ------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1e3 for v in values]
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": max(ms),
    }


def verdict(value: float, bound: float) -> str:
    return "PASS" if value <= bound else "FAIL"


def wait_until(check: Callable[[], bool], timeout: float = 30.0, poll: float = POLL) -> float:
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"condition not reached in {timeout} s")
        time.sleep(poll)
    return time.perf_counter() - started


def has_pod(cache: RuntimeCache, uid: str) -> bool:
    return cache.get_pods().by_uid(uid) is not None


def shows(cache: RuntimeCache, uid: str, *, present: bool) -> Callable[[], bool]:
    """A check: the pod is (or, with ``present=False``, is not) in ``get_pods()``."""
    return lambda: has_pod(cache, uid) == present


def subscribed(cache: RuntimeCache) -> None:
    cache.get_pods()
    wait_until(lambda: cache.stats().events_state == "subscribed", 30, 0.005)


# -- 1. latency ----------------------------------------------------------------------------------
def timed_change(n: Node, cache: RuntimeCache, op: str, uid: str = "") -> tuple[str, float]:
    """One change made at the node, and seconds until the cache shows it."""
    started = time.perf_counter()
    if op == "create":
        uid = n.ask("create")["uid"]
        wait_until(lambda: has_pod(cache, uid))
    else:
        n.ask("remove", uid=uid)
        wait_until(lambda: not has_pod(cache, uid))
    return uid, time.perf_counter() - started


def measure_latency(n: Node, cache: RuntimeCache, trials: int) -> dict[str, Any]:
    created: list[float] = []
    removed: list[float] = []
    for _ in range(trials):
        n.wait_quiet()
        uid, seconds = timed_change(n, cache, "create")
        created.append(seconds)
        n.wait_quiet()
        removed.append(timed_change(n, cache, "remove", uid)[1])
    return {"created_visible": summary_ms(created), "removed_gone": summary_ms(removed)}


_STREAMED = {"ListPodSandbox": "StreamPodSandboxes", "ListContainers": "StreamContainers"}
"""Each list RPC's streaming twin (KEP-5825): the client streams a node's listing when the
runtime does, as the simulator does by default."""


def _listed(counts: dict[str, Any], method: str, kind: str) -> dict[str, int]:
    """Calls and bytes of ``method`` and its streaming twin together, of one kind."""
    slots = [counts[name][kind] for name in (method, _STREAMED[method]) if name in counts]
    return {key: sum(slot[key] for slot in slots) for key in ("calls", "bytes")}


# -- 2. per change -------------------------------------------------------------------------------
def per_change_totals(counts: dict[str, Any], changes: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    total_bytes = 0
    for method in ("ListPodSandbox", "ListContainers"):
        for kind in ("filtered", "unfiltered"):
            slot = _listed(counts, method, kind)
            total_bytes += slot["bytes"]
            out[f"{method}_{kind}_calls_per_change"] = slot["calls"] / changes
            out[f"{method}_{kind}_bytes_per_change"] = slot["bytes"] / changes
    out["list_bytes_per_change"] = total_bytes / changes
    return out


def idle_cpu_rate(n: Node, seconds: float) -> float:
    """CPU seconds per second this process spends with nothing changing, asking the node for
    its counts as often as ``wait_quiet`` does (so that cost is not charged to the cache)."""
    cpu, wall = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < seconds:
        time.sleep(0.02)
        n.list_calls()
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def _listed_bytes(counts: dict[str, Any]) -> tuple[int, int]:
    """(unfiltered ListPodSandbox calls, list answer bytes) in the node's counts."""
    total = sum(
        _listed(counts, method, kind)["bytes"]
        for method in ("ListPodSandbox", "ListContainers")
        for kind in ("filtered", "unfiltered")
    )
    return _listed(counts, "ListPodSandbox", "unfiltered")["calls"], total


def measure_per_change(n: Node, cache: RuntimeCache, changes: int) -> dict[str, Any]:
    """Alternate create/remove; CPU from each change to quiescence, minus idle CPU.

    A change whose window holds a full listing the period made (an unfiltered ListPodSandbox:
    the cache's 30 s period runs out during a long run) is set apart: that listing is the
    period's cost, counted in the full listings, not the change's. The figures per change are
    over the other changes; how many were set apart, and all changes together, are reported
    too."""
    n.wait_quiet()
    idle = idle_cpu_rate(n, 2.0)
    n.ask("reset")
    cpu_by_kind: dict[str, list[float]] = {"create": [], "remove": []}
    change_bytes: list[int] = []
    set_apart = {"changes": 0, "bytes": 0, "cpu_s": 0.0}
    created: list[str] = []
    before = _listed_bytes(n.counts())
    for index in range(changes):
        cpu, wall = time.process_time(), time.perf_counter()
        if index % 2 == 0:
            uid = n.ask("create")["uid"]
            created.append(uid)
        else:
            uid = created.pop()
            n.ask("remove", uid=uid)
        wait_until(shows(cache, uid, present=index % 2 == 0), poll=0.002)
        n.wait_quiet()
        used = max(0.0, time.process_time() - cpu - idle * (time.perf_counter() - wall))
        after = _listed_bytes(n.counts())
        full, listed = after[0] - before[0], after[1] - before[1]
        before = after
        if full:
            set_apart["changes"] += 1
            set_apart["bytes"] += listed
            set_apart["cpu_s"] += used
            continue
        change_bytes.append(listed)
        cpu_by_kind["create" if index % 2 == 0 else "remove"].append(used)
    counts = n.counts()
    every = cpu_by_kind["create"] + cpu_by_kind["remove"]
    kept = len(every)
    return {
        "changes": changes,
        "changes_measured": kept,
        "changes_with_a_period_listing": set_apart["changes"],
        "period_listing_bytes": set_apart["bytes"],
        "period_listing_cpu_ms": set_apart["cpu_s"] * 1e3,
        "cpu_ms_per_change": sum(every) / max(kept, 1) * 1e3,
        "cpu_ms_per_create": statistics.mean(cpu_by_kind["create"] or [0.0]) * 1e3,
        "cpu_ms_per_remove": statistics.mean(cpu_by_kind["remove"] or [0.0]) * 1e3,
        "cpu_ms_per_create_median": statistics.median(cpu_by_kind["create"] or [0.0]) * 1e3,
        "cpu_ms_per_remove_median": statistics.median(cpu_by_kind["remove"] or [0.0]) * 1e3,
        "idle_cpu_fraction": idle,
        **per_change_totals(counts, changes),
        # over the changes measured (the period's listings set apart)
        "list_bytes_per_change": sum(change_bytes) / max(kept, 1),
        "list_bytes_per_change_all": _listed_bytes(counts)[1] / changes,
    }


# -- 3. full listings ----------------------------------------------------------------------------
def full_listings(n: Node, cache: RuntimeCache, began: float, baseline: int) -> dict[str, Any]:
    """Unfiltered ListPodSandbox calls since the cache was made (at ``began``) against what
    the rule allows: the first read's, the first subscription's, one per (re)subscription
    after it, and one per period elapsed since the first read."""
    counts = n.counts()
    done = _listed(counts, "ListPodSandbox", "unfiltered")["calls"] + baseline
    seconds = time.monotonic() - began
    allowed = 2 + cache.stats().resubscriptions + int(seconds // PERIOD)
    return {"full_listings": done, "seconds": seconds, "allowed": allowed}


# -- one size -------------------------------------------------------------------------------------
def measure_size(pods: int, trials: int, changes: int) -> dict[str, Any]:
    log(f"{pods} pods: starting the node")
    with node(pods) as n, CRIRuntime(n.endpoint) as runtime:
        shape = n.ask("shape")
        n.ask("reset")
        began = time.monotonic()
        cache = RuntimeCache(runtime, PERIOD, events=True, stats=True)
        with cache:
            subscribed(cache)
            n.wait_quiet()
            log(f"{pods} pods: latency, {trials} trials")
            latency = measure_latency(n, cache, trials)
            before = _listed(n.counts(), "ListPodSandbox", "unfiltered")["calls"]
            log(f"{pods} pods: cost per change, {changes} changes")
            per_change = measure_per_change(n, cache, changes)
            listings = full_listings(n, cache, began, before)
            stats = cache.stats()
    return {
        "pods": pods,
        "node": shape,
        "latency": latency,
        "per_change": per_change,
        "listings": listings,
        "cache": {
            "refreshes": stats.refreshes,
            "event_refreshes": stats.event_refreshes,
            "events_received": stats.events_received,
            "resubscriptions": stats.resubscriptions,
            # per-pod relists; absent from caches that only relist the node
            "pod_relists": getattr(stats, "pod_relists", None),
            "pod_relists_dropped": getattr(stats, "pod_relists_dropped", None),
        },
    }


# -- churn: podcache serve and the library under ordinary churn ------------------------------------
class Churn:
    """One pod crash-looping (2 restarts/s) plus 1 pod/s created and 1 removed, on a thread."""

    def __init__(self, n: Node) -> None:
        self._node = n
        self._stop = threading.Event()
        self._victim = n.ask("create")["uid"]
        self._spares = [n.ask("create")["uid"] for _ in range(3)]
        self.changes = 0
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)

    def _run(self) -> None:
        tick = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._node.ask("crash", uid=self._victim)
            self.changes += 1
            if tick % 2 == 0:
                self._spares.append(self._node.ask("create")["uid"])
                self._node.ask("remove", uid=self._spares.pop(0))
                self.changes += 2
            tick += 1
            next_at += 0.5
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def process_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class HealthProbe:
    """``GET /healthz`` every 20 ms over one keep-alive connection; latencies and non-2xx."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self.non_2xx = 0
        self._thread = threading.Thread(target=self._run, name="healthz", daemon=True)

    def _run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=10)
        while not self._stop.wait(0.02):
            started = time.perf_counter()
            try:
                connection.request("GET", "/healthz")
                reply = connection.getresponse()
                reply.read()
                ok = 200 <= reply.status < 300
            except OSError:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=10)
                ok = False
            self.latencies.append(time.perf_counter() - started)
            self.non_2xx += not ok
        connection.close()

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def serve(endpoint: str, events: str, period: str) -> Iterator[tuple[int, int]]:
    """``podcache serve`` over ``endpoint`` in its own process; yields (port, pid)."""
    extra = ("--events", events, "--cache-period", period, "--timeout", "10s")
    with serve_http(endpoint, *extra) as (port, proc):
        yield port, proc.pid


def serve_under_churn(n: Node, seconds: float, events: str, period: str) -> dict[str, Any]:
    with serve(n.endpoint, events, period) as (port, pid):
        time.sleep(2.0)  # the first listing and the subscription settle
        n.wait_quiet()
        cpu = process_cpu(pid)
        with HealthProbe(port) as probe, Churn(n) as churn:
            time.sleep(seconds)
        used = process_cpu(pid) - cpu
    return {
        "events": events,
        "period": period,
        "seconds": seconds,
        "changes": churn.changes,
        "cpu_seconds": used,
        "core_fraction": used / seconds,
        "healthz": {**summary_ms(probe.latencies), "non_2xx": probe.non_2xx},
    }


def library_under_churn(n: Node, seconds: float) -> dict[str, Any]:
    with CRIRuntime(n.endpoint) as runtime, RuntimeCache(runtime, PERIOD, events=True) as cache:
        subscribed(cache)
        n.wait_quiet()
        cpu = time.process_time()
        with Churn(n) as churn:
            time.sleep(seconds)
        used = time.process_time() - cpu
    return {
        "seconds": seconds,
        "changes": churn.changes,
        "cpu_seconds": used,
        "core_fraction": used / seconds,
    }


def measure_churn(pods: int, seconds: float) -> dict[str, Any]:
    log(f"{pods} pods: podcache serve and the library under churn, {seconds} s each")
    with node(pods) as n:
        return {
            "pods": pods,
            "serve_events": serve_under_churn(n, seconds, "on", "30s"),
            "library_events": library_under_churn(n, seconds),
        }


# -- report ---------------------------------------------------------------------------------------
def checks(sizes: list[dict[str, Any]], churn: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each target of the issue beside its figure (at the largest size measured)."""
    big = sizes[-1]
    latency, per_change, listings = big["latency"], big["per_change"], big["listings"]
    rows = [
        (
            "created visible, median ms",
            latency["created_visible"]["median_ms"],
            "latency_median_ms",
        ),
        ("created visible, p99 ms", latency["created_visible"]["p99_ms"], "latency_p99_ms"),
        ("removed gone, median ms", latency["removed_gone"]["median_ms"], "latency_median_ms"),
        ("removed gone, p99 ms", latency["removed_gone"]["p99_ms"], "latency_p99_ms"),
        ("list answer bytes per change", per_change["list_bytes_per_change"], "bytes_per_change"),
        ("library CPU ms per change", per_change["cpu_ms_per_change"], "cpu_ms_per_change"),
    ]
    out = [
        {
            "pods": big["pods"],
            "what": what,
            "value": value,
            "target": TARGETS[key],
            "verdict": verdict(value, TARGETS[key]),
        }
        for what, value, key in rows
    ]
    out.append(
        {
            "pods": big["pods"],
            "what": "full listings (unfiltered ListPodSandbox)",
            "value": listings["full_listings"],
            "target": listings["allowed"],
            "verdict": verdict(listings["full_listings"], listings["allowed"]),
        }
    )
    if churn is not None:
        serve_run = churn["serve_events"]
        for what, value, key in (
            ("serve CPU, fraction of one core", serve_run["core_fraction"], "serve_core_fraction"),
            ("/healthz p99 ms under churn", serve_run["healthz"]["p99_ms"], "healthz_p99_ms"),
        ):
            out.append(
                {
                    "pods": churn["pods"],
                    "what": what,
                    "value": value,
                    "target": TARGETS[key],
                    "verdict": verdict(value, TARGETS[key]),
                }
            )
    return out


def print_report(result: dict[str, Any]) -> None:
    print(
        "| pods (containers) | created visible median / p99 (ms) "
        "| removed gone median / p99 (ms) | CPU per pod created / removed (ms) "
        "| list bytes per change | full listings (allowed) |"
    )
    print("|---|---|---|---|---|---|")
    for size in result["sizes"]:
        c, r = size["latency"]["created_visible"], size["latency"]["removed_gone"]
        pc, fl = size["per_change"], size["listings"]
        print(
            f"| {size['pods']} ({size['node']['containers']}) "
            f"| {c['median_ms']:.1f} / {c['p99_ms']:.1f} "
            f"| {r['median_ms']:.1f} / {r['p99_ms']:.1f} "
            f"| {pc['cpu_ms_per_create']:.1f} / {pc['cpu_ms_per_remove']:.1f} "
            f"| {pc['list_bytes_per_change'] / 1024:.0f} KiB "
            f"| {fl['full_listings']} ({fl['allowed']}) |"
        )
    print()
    for check in result["checks"]:
        print(
            f"{check['verdict']}  {check['what']} at {check['pods']} pods: "
            f"{check['value']:.4g} (target <= {check['target']:.4g})"
        )
    churn = result.get("churn")
    if churn is not None:
        s, lib = churn["serve_events"], churn["library_events"]
        print(
            f"\nunder churn at {churn['pods']} pods: serve {s['cpu_seconds']:.2f} s CPU in "
            f"{s['seconds']:.0f} s, /healthz p99 {s['healthz']['p99_ms']:.1f} ms, "
            f"{s['healthz']['non_2xx']} non-2xx; library {lib['cpu_seconds']:.2f} s CPU"
        )
    print(f"load average: before {result['load_before']}, after {result['load_after']}")


def run(quick: bool, sizes: list[int]) -> dict[str, Any]:
    trials, changes, churn_seconds = (12, 10, 10.0) if quick else (50, 30, 30.0)
    load_before = list(os.getloadavg())
    measured = [measure_size(pods, trials, changes) for pods in sizes]
    churn = measure_churn(max(sizes), churn_seconds) if max(sizes) >= 5_000 else None
    result: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "period": PERIOD,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "load_before": load_before,
        "sizes": measured,
        "churn": churn,
        "targets": TARGETS,
    }
    result["checks"] = checks(measured, churn)
    result["load_after"] = list(os.getloadavg())
    return result


def git_commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with the hidden ``--node``, be the node process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials, 10 s of churn")
    parser.add_argument("--json", action="store_true", help="print the JSON result")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="pod counts")
    parser.add_argument("--output", default=str(RESULTS), help="where to write the JSON")
    parser.add_argument("--node", nargs=2, metavar=("PODS", "SOCKET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.node:
        return node_main(int(args.node[0]), args.node[1])
    try:
        result = run(args.quick, [int(size) for size in args.sizes.split(",")])
    except (TimeoutError, RuntimeError) as exc:
        log(f"broken run: {exc}")
        return 2
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
