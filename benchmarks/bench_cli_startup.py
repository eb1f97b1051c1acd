"""The CLI's wall time from start to exit, side by side with ``python -c pass``.

    .venv/bin/python benchmarks/bench_cli_startup.py [--pods 110] [--rounds 15] [--json]

A simulated runtime of ``--pods`` pods runs in a process of its own (``podcache sim``, on a
unix socket, no churn). Each round runs, in a rotating order, ``python -c pass`` (the
yardstick: the interpreter's own start-up on this machine, now) and every command measured:
``podcache pods``, ``ps``, ``which IP`` (the newest pod's IP: found in the first step of
status calls) and ``which IP (oldest)`` (the oldest pod's: every pod's status asked; both ask
up to 100 ahead, before click is imported: ``cli.early``), ``version`` (these ask the
runtime) and ``--help``, their standard output a pipe that is read and thrown away (as
a script or ``| grep`` reads it; in a terminal ``pods`` and ``ps`` also fit the table to its width).
Each figure is a whole process's wall time, reported as min / median / max over the rounds,
with the ratio to the yardstick taken round by round (the median of those ratios): the machine
may be busy, and a ratio measured in the same seconds stays meaningful where a raw time does
not. Targets: ``pods``, ``ps``, ``which`` at most 0.12 s, ``version`` and ``--help``
under 0.1 s, on an idle machine where ``python -c pass`` takes about 0.015 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
PODCACHE = str(Path(PYTHON).parent / "podcache")


def _run(argv: list[str], env: dict[str, str]) -> float:
    """One process's wall time, its output read and discarded; it must exit 0."""
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return seconds


def _ips(endpoint: str, env: dict[str, str]) -> tuple[str, str]:
    """The newest and the oldest pod's IP (pods are listed newest first): ``which`` asks the
    statuses newest first and stops once the IP is found, so these are its best and worst."""
    done = subprocess.run(
        [PODCACHE, "pods", "-r", endpoint, "-o", "json"], capture_output=True, env=env, check=True
    )
    held = [pod["ips"][0] for pod in json.loads(done.stdout)["items"] if pod["ips"]]
    return str(held[0]), str(held[-1])


def measure(pods: int, rounds: int) -> dict[str, object]:
    # As installed: .pyc files written and used (a machine that sets PYTHONDONTWRITEBYTECODE
    # would have every run compile podcache's modules from source, about a third of its time).
    skipped = ("CONTAINER_RUNTIME_ENDPOINT", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in skipped}
    env["CRI_CONFIG_FILE"] = "/nonexistent/crictl.yaml"
    directory = tempfile.mkdtemp(prefix="pc-bench-cli-")
    path = f"{directory}/cri.sock"
    sim = subprocess.Popen(
        [PODCACHE, "sim", "--socket", path, "--pods", str(pods)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert sim.stdout is not None
        endpoint = sim.stdout.readline().strip()
        newest, oldest = _ips(endpoint, env)
        commands = {
            "python -c pass": [PYTHON, "-c", "pass"],
            "podcache pods": [PODCACHE, "pods", "-r", endpoint],
            "podcache ps": [PODCACHE, "ps", "-r", endpoint],
            "podcache which IP": [PODCACHE, "which", newest, "-r", endpoint],
            "which IP (oldest)": [PODCACHE, "which", oldest, "-r", endpoint],
            "podcache version": [PODCACHE, "version", "-r", endpoint],
            "podcache --help": [PODCACHE, "--help"],
        }
        for argv in commands.values():  # warm-up: the page cache, the .pyc files
            _run(argv, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        ratios: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for index in range(rounds):
            order = names[index % len(names) :] + names[: index % len(names)]
            taken = {name: _run(commands[name], env) for name in order}
            for name, seconds in taken.items():
                times[name].append(seconds)
                ratios[name].append(seconds / taken["python -c pass"])
    finally:
        sim.terminate()
        sim.wait(10)
    return {
        "pods": pods,
        "rounds": rounds,
        "load_average": os.getloadavg(),
        "commands": {
            name: {
                "min": min(values),
                "median": statistics.median(values),
                "max": max(values),
                "ratio_median": statistics.median(ratios[name]),
            }
            for name, values in times.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = measure(args.pods, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    load = ", ".join(f"{x:.2f}" for x in result["load_average"])  # type: ignore[attr-defined]
    print(f"{args.pods} pods, {args.rounds} rounds, load average {load}")
    print(f"{'command':<20} {'min':>8} {'median':>8} {'max':>8}   x python -c pass (median)")
    for name, row in result["commands"].items():  # type: ignore[attr-defined]
        print(
            f"{name:<20} {row['min'] * 1e3:7.1f}ms {row['median'] * 1e3:7.1f}ms "
            f"{row['max'] * 1e3:7.1f}ms   {row['ratio_median']:.2f}"
        )


if __name__ == "__main__":
    main()
