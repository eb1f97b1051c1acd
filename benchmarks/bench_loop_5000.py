"""``/healthz`` at 5,000 pods while ``/pods`` is read, this tree against a8d33ac
(the commit before relists of one pod and pod IPs), in interleaved pairs of the same run.

    .venv/bin/python benchmarks/bench_loop_5000.py [--quick] [--rounds N] [--cases a,b]
                                                   [--baseline COMMIT] [--json]

Three cases, each ``podcache serve --cache-period 500ms`` over 5,000 pods replaced at 5/s:

- ``inproc``: the simulated runtime in serve's process (``--sim --sim-pods 5000 --sim-churn
  5``), measured after 25 s of warm-up (``--quick``: 15 s);
- ``own_warm``: the runtime in its own process (``podcache sim``), serve started over its unix
  socket, read once, measured 20 s later (``--quick``: 10 s);
- ``own_cold``: the same, measured from serve's first ``/healthz`` answer: the first ``/pods``
  starts the cold start, whose listing asks 5,000 ``PodSandboxStatus`` (none at a8d33ac);
- ``own_cold_defaults``: ``own_cold`` with serve's defaults (no ``--cache-period``: 2 s, the
  runtime's events followed), as an operator starts it.

In each: wrk reads ``/pods?namespace=nosuch`` on 2 connections while wrk measures ``/healthz``
on 4 connections for 10 s (``--latency``). Reported per tree: p50, p99 and max, requests,
non-2xx answers and socket errors; for the own-process cases the status calls the runtime
answered during the window (its ``--stats-file``) and, cold, how long they went on. After each
window the two trees' ``/healthz`` and ``/pods?namespace=nosuch`` bodies are compared (the
volatile ``cache_time``, ``age_seconds`` and ``revision`` left out).

The baseline is unpacked and built by ``trees.py``. Each round runs every case once per tree,
the order of the pair alternating. The rule (exit status 1 when missed): this tree's median
p99 over the rounds is at most 15 ms in ``inproc`` and ``own_warm`` and 25 ms in ``own_cold``
and ``own_cold_defaults`` (or, in the cold cases, at most 1.5 times the baseline's median), with
no non-2xx answer and equal bodies. ``--quick``: one round.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plumbing import http_get as get
from trees import Tree, this_tree, tree_at

PODS = 5000
CHURN = 5
PERIOD = "500ms"
WINDOW = 10
LIMITS_MS = {"inproc": 15.0, "own_warm": 15.0, "own_cold": 25.0, "own_cold_defaults": 25.0}
BASELINE_RATIO = {"own_cold": 1.5, "own_cold_defaults": 1.5}
"""A cold case also meets its rule at most this many times the baseline's median p99."""
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_VOLATILE = ("cache_time", "age_seconds", "revision")


def ms(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    assert found, text
    return float(found[1]) * _UNITS[found[2]]


def parse_wrk(out: str) -> dict[str, float]:
    """p50/p99/max (ms), requests, non-2xx answers and socket errors from wrk's report."""
    figures: dict[str, float] = {"non_2xx": 0.0, "socket_errors": 0.0}
    for line in out.splitlines():
        words = line.split()
        if words[:1] in (["50%"], ["99%"]):
            figures["p" + words[0].rstrip("%")] = ms(words[1])
        elif words[:1] == ["Latency"] and len(words) >= 4:
            figures["max"] = ms(words[3])
        elif "requests in" in line:
            figures["requests"] = float(words[0])
        elif line.strip().startswith("Non-2xx"):
            figures["non_2xx"] = float(words[-1])
        elif line.strip().startswith("Socket errors"):
            figures["socket_errors"] = float(sum(int(n.rstrip(",")) for n in words[3::2]))
    return figures


def first_answer(port: int, process: subprocess.Popen[bytes]) -> None:
    """Until serve answers ``/healthz``."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if get(port, "/healthz")[0] == 200:
                return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("serve exited before answering") from None
            time.sleep(0.02)
    raise RuntimeError("serve never answered /healthz")


@dataclass
class Runtime:
    endpoint: str
    process: subprocess.Popen[bytes]
    stats: Path

    def status_calls(self) -> int:
        """PodSandboxStatus calls answered so far (the sim writes its counts on SIGUSR1)."""
        before = self.stats.stat().st_mtime_ns if self.stats.exists() else 0
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.stats.exists() and self.stats.stat().st_mtime_ns != before:
                calls = json.loads(self.stats.read_text())["calls"].get("PodSandboxStatus", {})
                return int(sum(kind["calls"] for kind in calls.values()))
            time.sleep(0.01)
        raise RuntimeError("the simulator wrote no stats")


@contextmanager
def own_runtime() -> Iterator[Runtime]:
    directory = Path(tempfile.mkdtemp(prefix="pc-loop-"))
    command = [str(Path(sys.executable).parent / "podcache"), "sim", "--socket"]
    command += [str(directory / "sim.sock"), "--pods", str(PODS), "--churn", str(CHURN)]
    command += ["--stats-file", str(directory / "stats.json")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        process.stdout.readline()  # the endpoint: listening
        yield Runtime(f"unix://{directory / 'sim.sock'}", process, directory / "stats.json")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


@contextmanager
def served(
    tree: Tree, port: int, runtime: Runtime | None, *, defaults: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    source = ["--sim", "--sim-pods", str(PODS), "--sim-churn", str(CHURN)]
    if runtime is not None:
        source = ["-r", runtime.endpoint]
    period = [] if defaults else ["--cache-period", PERIOD]
    command = [sys.executable, "-m", "podcache.serve", *source, *period]
    command += ["--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=tree.env()
    )
    try:
        first_answer(port, process)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def measure(port: int) -> dict[str, float]:
    """wrk on /healthz for the window while another wrk reads /pods?namespace=nosuch; the
    reader's non-2xx answers and socket errors are counted too (``pods_*``)."""
    base = f"http://127.0.0.1:{port}"
    reader = subprocess.Popen(
        ["wrk", "-t1", "-c2", f"-d{WINDOW + 2}s", f"{base}/pods?namespace=nosuch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        probe = subprocess.run(
            ["wrk", "-t1", "-c4", f"-d{WINDOW}s", "--latency", f"{base}/healthz"],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        read, _ = reader.communicate(timeout=WINDOW + 30)
    figures = parse_wrk(probe.stdout)
    pods = parse_wrk(read)
    figures |= {f"pods_{key}": pods.get(key, 0.0) for key in ("requests", "non_2xx")}
    figures["pods_socket_errors"] = pods["socket_errors"]
    return figures


def bodies(port: int) -> dict[str, object]:
    """The answers compared between trees, without the fields that change every time."""
    out: dict[str, object] = {}
    for target in ("/healthz", "/pods?namespace=nosuch"):
        status, body = get(port, target)
        document = json.loads(body)
        for key in _VOLATILE:
            document.pop(key, None)
        out[target] = [status, document]
    return out


@dataclass
class Run:
    """One window's figures (ms, counts) and the bodies compared across trees."""

    figures: dict[str, float]
    bodies: dict[str, object]


def run_case(case: str, tree: Tree, port: int, warmup: float) -> Run:
    with ExitStack() as stack:
        runtime = None if case == "inproc" else stack.enter_context(own_runtime())
        stack.enter_context(served(tree, port, runtime, defaults=case == "own_cold_defaults"))
        if not case.startswith("own_cold"):
            get(port, "/pods?namespace=nosuch")
            time.sleep(warmup)
        calls_before = runtime.status_calls() if runtime else 0
        figures = measure(port)
        if runtime is not None:
            figures["status_calls"] = runtime.status_calls() - calls_before
        return Run(figures, bodies(port))


def summary(values: list[float]) -> str:
    return f"{min(values):.1f}/{statistics.median(values):.1f}/{max(values):.1f}"


def report(results: dict[str, dict[str, list[Run]]], names: list[str]) -> bool:
    """Print each case's figures; whether this tree met every rule."""
    met = True
    for case, by_tree in results.items():
        for name in names:
            runs = [r.figures for r in by_tree[name]]
            bad = sum(r["non_2xx"] + r["socket_errors"] for r in runs)
            pods_bad = sum(r["pods_non_2xx"] + r["pods_socket_errors"] for r in runs)
            calls = [int(r.get("status_calls", 0)) for r in runs]
            print(
                f"{case:>9} {name:>8}: /healthz p99 ms {summary([r['p99'] for r in runs])} "
                f"(min/median/max), p50 ms {summary([r['p50'] for r in runs])}, non-2xx and "
                f"errors {bad:.0f}; /pods non-2xx and errors {pods_bad:.0f}; status calls in "
                f"the window {calls}"
            )
        mine = statistics.median(r.figures["p99"] for r in by_tree["this"])
        base = statistics.median(r.figures["p99"] for r in by_tree[names[-1]])
        same = all(a.bodies == b.bodies for a, b in zip(*by_tree.values(), strict=True))
        clean = all(r.figures["non_2xx"] == 0 for r in by_tree["this"])
        limit = max(LIMITS_MS[case], BASELINE_RATIO.get(case, 0.0) * base)
        verdict = mine <= limit and same and clean
        print(
            f"{case:>9} rule: median p99 {mine:.1f} <= {limit:.1f} ms (baseline's median "
            f"{base:.1f}), bodies equal {same}, no non-2xx {clean}: "
            f"{'met' if verdict else 'MISSED'}"
        )
        met &= verdict
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round, shorter warm-ups")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="inproc,own_warm,own_cold")
    parser.add_argument("--baseline", default="a8d33ac")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    warmups = {"inproc": 15.0 if args.quick else 25.0, "own_warm": 10.0 if args.quick else 20.0}
    trees = [this_tree(), tree_at(args.baseline, args.baseline)]
    names = [tree.name for tree in trees]
    results: dict[str, dict[str, list[Run]]] = {}
    for number in range(rounds):
        for case in args.cases.split(","):
            pair = trees if number % 2 == 0 else trees[::-1]
            for n, tree in enumerate(pair):
                run = run_case(case, tree, 18700 + n, warmups.get(case, 0.0))
                results.setdefault(case, {name: [] for name in names})[tree.name].append(run)
                print(f"round {number + 1} {case} {tree.name}: {run.figures}", flush=True)
    met = report(results, names)
    if args.json:
        print(
            json.dumps(
                {
                    c: {t: [r.figures for r in runs] for t, runs in by.items()}
                    for c, by in results.items()
                }
            )
        )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
