"""A soak: churn with nobody reading; serve's CPU and RSS over time, this tree
beside the tree before the fix, in the same run.

    .venv/bin/python benchmarks/bench_soak.py [--quick] [--minutes M] [--pods N] [--churn R]
                                              [--before COMMIT] [--json]

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
        """The counters of ``COUNTERS``, each summed over its labels."""
        found = dict.fromkeys(COUNTERS, 0.0)
        for line in self.get("/metrics").decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0].removesuffix("_total")
            if name in found:
                found[name] += float(line.rpartition(" ")[2])
        return found

    def sample(self, elapsed: float) -> None:
        self.samples.append(
            {"t": elapsed, "cpu": self.cpu(), "rss": self.rss_mib()} | self.counters()
        )


@contextmanager
def serve(tree: Tree, endpoint: str, port: int) -> Iterator[Serve]:
    command = [sys.executable, "-m", "podcache.serve", "-r", endpoint]
    command += ["--listen", f"127.0.0.1:{port}"]
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
    """Per sampling interval: CPU (% of a core), RSS (MiB) and each counter's rate."""
    out = []
    for before, after in zip(server.samples, server.samples[1:], strict=False):
        span = after["t"] - before["t"]
        row = {"t": after["t"], "cpu_pct": 100 * (after["cpu"] - before["cpu"]) / span}
        row["rss_mib"] = after["rss"]
        for name in COUNTERS:
            row[name.removeprefix("podcache_") + "_per_s"] = (after[name] - before[name]) / span
        out.append(row)
    return out


def verdict(rows: list[dict[str, float]], warmup: float) -> dict[str, float | bool]:
    """Flat after the warm-up, by thirds: the rule of the module docstring."""
    settled = [row for row in rows if row["t"] > warmup] or rows
    third = max(1, len(settled) // 3)
    parts = settled[:third], settled[third : 2 * third] or settled[:third], settled[-third:]

    def mean(part: list[dict[str, float]], key: str) -> float:
        return sum(row[key] for row in part) / len(part)

    def per_relist(part: list[dict[str, float]]) -> float:
        """CPU in ms per relist of one pod (the work a change makes)."""
        return 10 * mean(part, "cpu_pct") / max(mean(part, "pod_relists_per_s"), 1e-9)

    first, middle, last = parts
    rss_middle = max(row["rss_mib"] for row in middle)
    rss_last = max(row["rss_mib"] for row in last)
    return {
        "cpu_pct_first_third": round(mean(first, "cpu_pct"), 1),
        "cpu_pct_last_third": round(mean(last, "cpu_pct"), 1),
        "events_per_s_first_third": round(mean(first, "events_received_per_s")),
        "events_per_s_last_third": round(mean(last, "events_received_per_s")),
        "cpu_ms_per_relist_first_third": round(per_relist(first), 2),
        "cpu_ms_per_relist_last_third": round(per_relist(last), 2),
        "rss_mib_max_middle_third": round(rss_middle, 1),
        "rss_mib_max_last_third": round(rss_last, 1),
        "flat": per_relist(last) <= 1.25 * per_relist(first) and rss_last <= 1.05 * rss_middle + 4,
    }


def run(args: argparse.Namespace) -> dict[str, object]:
    seconds = args.minutes * 60
    trees = [this_tree(), tree_at(args.before, f"before ({args.before})")]
    with ExitStack() as stack:
        endpoint = stack.enter_context(simulator(args.pods, args.churn))
        servers = [
            stack.enter_context(serve(tree, endpoint, 18600 + n)) for n, tree in enumerate(trees)
        ]
        for server in servers:
            server.get("/pods")  # the one read: the cache fills, events relist from now on
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) <= seconds:
            for server in servers:
                server.sample(elapsed)
                if len(server.samples) > 1:
                    row = windows(server)[-1]
                    print(
                        f"{server.tree.name:>22} t={row['t']:6.0f}s cpu {row['cpu_pct']:5.1f}% "
                        f"rss {row['rss_mib']:6.1f} MiB events/s "
                        f"{row['events_received_per_s']:6.0f} relists/s "
                        f"{row['pod_relists_per_s']:5.0f} full {row['full_relists_per_s']:.2f}/s",
                        flush=True,
                    )
            time.sleep(args.sample)
    warmup = min(300.0, seconds / 3)
    return {
        server.tree.name: {"verdict": verdict(windows(server), warmup), "windows": windows(server)}
        for server in servers
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 minutes, a sample every 10 s")
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--sample", type=float, default=None, help="seconds between samples")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--churn", type=float, default=100.0)
    parser.add_argument("--before", default="b256a58")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    args.minutes = args.minutes or (3.0 if args.quick else 30.0)
    args.sample = args.sample or (10.0 if args.quick else 30.0)
    results = run(args)
    for name, result in results.items():
        print(name, json.dumps(result["verdict"]))  # type: ignore[index]
    if args.json:
        print(json.dumps(results))
    return 0 if results["this"]["verdict"]["flat"] else 1  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
