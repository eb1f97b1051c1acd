"""A soak: churn with nobody reading (or, ``--cri``, with a Falco-like agent asking statuses
through the CRI socket); serve's CPU and RSS over time, this tree beside the tree before the
fix, in the same run.

    .venv/bin/python benchmarks/bench_soak.py [--quick] [--minutes M] [--pods N] [--churn R]
                                              [--before COMMIT] [--cri] [--json]

One simulated runtime in its own process (``podcache sim --churn R``: R pods replaced per
second, about 9 events each) and two ``podcache serve`` processes subscribed to it, this
checkout's and ``--before``'s (default b256a58, where the issue was measured; unpacked and built
by ``trees.py``). Each serve is read once (``/pods``: the cache fills, so events relist pods);
after that nobody reads, so no full listing runs and only relists of one pod keep the snapshot
current. Every ``--sample`` seconds: each serve's CPU (``/proc/<pid>/stat``), RSS
(``/proc/<pid>/status``) and, from ``/metrics``, events received, relists of one pod and full
listings.

The rule (exit status 1 when this tree misses it), over the thirds of the run after the
warm-up (a third of the run, at most 5 minutes: the departed memory and the change log fill to
their bounds, which hold 5 minutes of changes): CPU per relist of one pod in the last third at
most 1.25 x the first third's (the simulator's churn rate varies with the machine's load, and
how many events one relist covers with it, so CPU alone is not the cost per change), and RSS at
most 5% + 4 MiB above the middle third's peak (a plateau: time-windowed tables at their caps).
``--quick``: 3 minutes, a sample every 10 s; the full run: 30 minutes, every 30 s.

``--cri``: serve also listens with ``--cri-listen`` and ``--cri-keep-departed``
(``--keep-departed``, default 5m), and an agent in its own process (``soak_agent.py``)
drives the socket through the churn: subscribed to ``GetContainerEvents``, per event
``ContainerStatus(verbose)`` and, when that answered, ``PodSandboxStatus`` (Falco's container
plugin), and ``--random-calls`` a second of status calls for IDs drawn from those it saw (live
and departed) and for unknown whole IDs; by default 200 pods, 20 replaced a second (lives of
10 s; about 340 events a second). Only this tree runs unless ``--before`` is given (a
tree without the flags runs without the socket). Sampled besides:
``podcache_cri_status_kept{store}``, ``podcache_cri_status_kept_bytes{store}`` and the status
answers by source. The rule there (``cri_verdict``; the status calls are most of serve's CPU,
so CPU per relist says little): each store at most its bound (docs/architecture.md §10 rules 8
and 9) at every sample, RSS as in the rule above (a plateau: the slopes by third are reported,
but RSS moves by a few MiB with the agent's call rate, which varies with the machine's load),
and CPU per status call in the last third at most 1.25 x the first third's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import Tree, this_tree, tree_at

TICKS = os.sysconf("SC_CLK_TCK")
COUNTERS = ("podcache_events_received", "podcache_pod_relists", "podcache_full_relists")
KEPT = ("podcache_cri_status_kept", "podcache_cri_status_kept_bytes")
"""Gauges by ``store``, sampled as ``<name>:<store>``."""
ANSWERS = "podcache_cri_status_answers"
"""Status answers by source, sampled as ``answers:<source>`` (summed over methods)."""
BOUNDS = {
    "podcache_cri_status_kept:live": 50_000,
    "podcache_cri_status_kept_bytes:live": 64 * 1024 * 1024,
    "podcache_cri_status_kept:departed": 10_000,
    "podcache_cri_status_kept_bytes:departed": 32 * 1024 * 1024,
    "podcache_cri_status_kept:not_found": 4_096,
}
"""Each store's bound (statuses.MAX_ANSWERS, MAX_BYTES, MAX_MISSING;
departedstatus.DEPARTED_ITEMS, DEPARTED_BYTES)."""


@contextmanager
def simulator(pods: int, churn: float) -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="pc-soak-")
    path = f"{directory}/sim.sock"
    command = [str(Path(sys.executable).parent / "podcache"), "sim", "--socket", path]
    command += ["--pods", str(pods), "--churn", str(churn)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # the endpoint: it listens
        yield f"unix://{path}"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


@dataclass
class Serve:
    tree: Tree
    process: subprocess.Popen[str]
    port: int
    samples: list[dict[str, float]] = field(default_factory=list)

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def get(self, target: str) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request("GET", target)
            return connection.getresponse().read()
        finally:
            connection.close()

    def counters(self) -> dict[str, float]:
        """The counters of ``COUNTERS``, each summed over its labels; the gauges of ``KEPT``
        by store and ``ANSWERS`` by source, where serve has them."""
        found = dict.fromkeys(COUNTERS, 0.0)
        for line in self.get("/metrics").decode().splitlines():
            if line.startswith("#"):
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0].removesuffix("_total")
            value = float(line.rpartition(" ")[2])
            if name in found:
                found[name] += value
            elif name in KEPT:
                found[f"{name}:{_label(line, 'store')}"] = value
            elif name == ANSWERS:
                key = f"answers:{_label(line, 'source')}"
                found[key] = found.get(key, 0.0) + value
        return found

    def sample(self, elapsed: float) -> None:
        self.samples.append(
            {"t": elapsed, "cpu": self.cpu(), "rss": self.rss_mib()} | self.counters()
        )


def _label(line: str, label: str) -> str:
    """The value of ``label`` in one exposition line (empty when it has none)."""
    return line.partition(f'{label}="')[2].partition('"')[0]


def serve_has(tree: Tree, flag: str) -> bool:
    """Whether ``tree``'s serve takes ``flag``."""
    done = subprocess.run(
        [sys.executable, "-m", "podcache.serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env=tree.env(),
    )
    return flag in done.stdout


@contextmanager
def serve(tree: Tree, endpoint: str, port: int, extra: list[str]) -> Iterator[Serve]:
    command = [sys.executable, "-m", "podcache.serve", "-r", endpoint]
    command += ["--listen", f"127.0.0.1:{port}", *extra]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=tree.env()
    )
    try:
        assert process.stderr is not None
        while "listening on" not in (line := process.stderr.readline()):
            if not line and process.poll() is not None:
                raise RuntimeError(f"{tree.name}'s serve exited before listening")
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield Serve(tree, process, port)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def windows(server: Serve) -> list[dict[str, float]]:
    """Per sampling interval: CPU (% of a core), RSS (MiB), each counter's rate, and (``--cri``)
    the status answers' rate by source and each store's size at its end."""
    out = []
    for before, after in zip(server.samples, server.samples[1:], strict=False):
        span = after["t"] - before["t"]
        row = {"t": after["t"], "cpu_pct": 100 * (after["cpu"] - before["cpu"]) / span}
        row["rss_mib"] = after["rss"]
        for name in COUNTERS:
            row[name.removeprefix("podcache_") + "_per_s"] = (after[name] - before[name]) / span
        for name, value in after.items():
            if name.startswith("answers:"):
                row[f"{name}_per_s"] = (value - before.get(name, 0.0)) / span
            elif name.startswith(KEPT):
                row[name] = value
        out.append(row)
    return out


def _mean(part: list[dict[str, float]], key: str) -> float:
    return sum(row.get(key, 0.0) for row in part) / len(part)


def _slope(part: list[dict[str, float]], key: str) -> float:
    """Least-squares slope of ``key`` over ``part``, per minute."""
    if len(part) < 2:
        return 0.0
    t_mean, v_mean = _mean(part, "t"), _mean(part, key)
    spread = sum((row["t"] - t_mean) ** 2 for row in part)
    rise = sum((row["t"] - t_mean) * (row[key] - v_mean) for row in part)
    return 60 * rise / spread if spread else 0.0


def _thirds(rows: list[dict[str, float]], warmup: float) -> list[list[dict[str, float]]]:
    settled = [row for row in rows if row["t"] > warmup] or rows
    third = max(1, len(settled) // 3)
    return [settled[:third], settled[third : 2 * third] or settled[:third], settled[-third:]]


def verdict(rows: list[dict[str, float]], warmup: float) -> dict[str, float | bool]:
    """Flat after the warm-up, by thirds: the rule of the module docstring."""
    first, middle, last = _thirds(rows, warmup)

    def per_relist(part: list[dict[str, float]]) -> float:
        """CPU in ms per relist of one pod (the work a change makes)."""
        return 10 * _mean(part, "cpu_pct") / max(_mean(part, "pod_relists_per_s"), 1e-9)

    rss_middle = max(row["rss_mib"] for row in middle)
    rss_last = max(row["rss_mib"] for row in last)
    return {
        "cpu_pct_first_third": round(_mean(first, "cpu_pct"), 1),
        "cpu_pct_last_third": round(_mean(last, "cpu_pct"), 1),
        "events_per_s_first_third": round(_mean(first, "events_received_per_s")),
        "events_per_s_last_third": round(_mean(last, "events_received_per_s")),
        "cpu_ms_per_relist_first_third": round(per_relist(first), 2),
        "cpu_ms_per_relist_last_third": round(per_relist(last), 2),
        "rss_mib_max_middle_third": round(rss_middle, 1),
        "rss_mib_max_last_third": round(rss_last, 1),
        "rss_mib_per_min_first_third": round(_slope(first, "rss_mib"), 2),
        "rss_mib_per_min_last_third": round(_slope(last, "rss_mib"), 2),
        "cpu_pct_per_min_first_third": round(_slope(first, "cpu_pct"), 2),
        "cpu_pct_per_min_last_third": round(_slope(last, "cpu_pct"), 2),
        "flat": per_relist(last) <= 1.25 * per_relist(first) and rss_last <= 1.05 * rss_middle + 4,
    }


def cri_verdict(rows: list[dict[str, float]], warmup: float) -> dict[str, object]:
    """The stores against their bounds at every sample, the status calls' rate and CPU per
    call by thirds, and RSS's slope in the last third (``--cri``'s rule)."""
    first, middle, last = _thirds(rows, warmup)
    peaks = {name: max(row.get(name, 0.0) for row in rows) for name in BOUNDS}
    rss_middle = max(row["rss_mib"] for row in middle)
    rss_last = max(row["rss_mib"] for row in last)
    within = all(peaks[name] <= bound for name, bound in BOUNDS.items())

    def calls(part: list[dict[str, float]]) -> float:
        return sum(_mean(part, f"answers:{source}_per_s") for source in SOURCES)

    def cpu_per_call(part: list[dict[str, float]]) -> float:
        return 10 * _mean(part, "cpu_pct") / max(calls(part), 1e-9)

    last_row = rows[-1]
    return {
        "status_calls_per_s_first_third": round(calls(first)),
        "status_calls_per_s_last_third": round(calls(last)),
        "answers_per_s_last_third": {
            source: round(_mean(last, f"answers:{source}_per_s"), 1) for source in SOURCES
        },
        "cpu_ms_per_status_call_first_third": round(cpu_per_call(first), 3),
        "cpu_ms_per_status_call_last_third": round(cpu_per_call(last), 3),
        "kept_peak": {name: int(value) for name, value in peaks.items()},
        "kept_at_end": {name: int(last_row.get(name, 0.0)) for name in BOUNDS},
        "bounds": BOUNDS,
        "within_bounds": within,
        "flat": within
        and rss_last <= 1.05 * rss_middle + 4
        and cpu_per_call(last) <= 1.25 * cpu_per_call(first),
    }


SOURCES = ("cache", "departed", "upstream")


@contextmanager
def agent(target: str, per_second: float) -> Iterator[dict[str, int]]:
    """``soak_agent.py`` on ``target`` while the context lasts; its counts after."""
    out = Path(tempfile.mkdtemp(prefix="pc-soak-agent-")) / "counts.json"
    script = Path(__file__).resolve().parent / "soak_agent.py"
    command = [sys.executable, str(script), "--target", target, "--out", str(out)]
    process = subprocess.Popen([*command, "--random-calls", str(per_second)])
    counts: dict[str, int] = {}
    try:
        yield counts
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        if out.exists():
            counts.update(json.loads(out.read_text()))


def _extra(tree: Tree, args: argparse.Namespace, socket_path: str) -> list[str]:
    """serve's CRI flags for ``--cri``, where ``tree`` has them."""
    if not args.cri or not serve_has(tree, "--cri-keep-departed"):
        return []
    return ["--cri-listen", socket_path, "--cri-keep-departed", args.keep_departed]


def _print_row(server: Serve) -> None:
    row = windows(server)[-1]
    line = (
        f"{server.tree.name:>22} t={row['t']:6.0f}s cpu {row['cpu_pct']:5.1f}% "
        f"rss {row['rss_mib']:6.1f} MiB events/s "
        f"{row['events_received_per_s']:6.0f} relists/s "
        f"{row['pod_relists_per_s']:5.0f} full {row['full_relists_per_s']:.2f}/s"
    )
    if "podcache_cri_status_kept:live" in row:
        calls = sum(row.get(f"answers:{source}_per_s", 0.0) for source in SOURCES)
        line += (
            f" status/s {calls:5.0f} kept live {row['podcache_cri_status_kept:live']:6.0f}"
            f" departed {row['podcache_cri_status_kept:departed']:6.0f}"
            f" not_found {row.get('podcache_cri_status_kept:not_found', 0):5.0f}"
        )
    print(line, flush=True)


def run(args: argparse.Namespace) -> dict[str, object]:
    seconds = args.minutes * 60
    trees = [this_tree()] + (
        [tree_at(args.before, f"before ({args.before})")] if args.before else []
    )
    directory = tempfile.mkdtemp(prefix="pc-soak-cri-")
    agents: list[dict[str, int]] = []
    with ExitStack() as stack:
        endpoint = stack.enter_context(simulator(args.pods, args.churn))
        servers = []
        for n, tree in enumerate(trees):
            socket_path = f"{directory}/cri{n}.sock"
            extra = _extra(tree, args, socket_path)
            servers.append(stack.enter_context(serve(tree, endpoint, 18600 + n, extra)))
            if extra:
                agents.append(
                    stack.enter_context(agent(f"unix://{socket_path}", args.random_calls))
                )
        for server in servers:
            server.get("/pods")  # the one read: the cache fills, events relist from now on
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) <= seconds:
            for server in servers:
                server.sample(elapsed)
                if len(server.samples) > 1:
                    _print_row(server)
            time.sleep(args.sample)
    warmup = min(300.0, seconds / 3)
    results: dict[str, object] = {"config": vars(args) | {"warmup_s": warmup}}
    for server in servers:
        rows = windows(server)
        result: dict[str, object] = {"verdict": verdict(rows, warmup), "windows": rows}
        if "podcache_cri_status_kept:live" in rows[-1]:
            result["cri"] = cri_verdict(rows, warmup)
        results[server.tree.name] = result
    if agents:
        results["agent_calls"] = agents[0]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 minutes, a sample every 10 s")
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--sample", type=float, default=None, help="seconds between samples")
    parser.add_argument("--pods", type=int, default=None, help="1000; with --cri, 200")
    parser.add_argument("--churn", type=float, default=None, help="100; with --cri, 20")
    parser.add_argument("--before", default=None, help="default b256a58; with --cri, none")
    parser.add_argument("--cri", action="store_true", help="the CRI socket and its agent too")
    parser.add_argument("--keep-departed", default="5m", help="serve's --cri-keep-departed")
    parser.add_argument("--random-calls", type=float, default=50.0, help="the agent's, a second")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    args.minutes = args.minutes or (3.0 if args.quick else 30.0)
    args.sample = args.sample or (10.0 if args.quick else 30.0)
    if args.before is None and not args.cri:
        args.before = "b256a58"
    args.pods = args.pods or (200 if args.cri else 1000)  # with --cri: pods of 10 s lives
    args.churn = args.churn or (20.0 if args.cri else 100.0)
    results = run(args)
    this: dict[str, dict[str, object]] = results["this"]  # type: ignore[assignment]
    for name, result in results.items():
        if isinstance(result, dict) and "verdict" in result:
            print(name, json.dumps(result["verdict"]), json.dumps(result.get("cri", {})))
    if args.json:
        print(json.dumps(results))
    rule = this.get("cri", this["verdict"])  # --cri: the socket's calls are most of the CPU
    return 0 if rule["flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
