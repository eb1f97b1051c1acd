"""The benchmark runner behind ``benchmarks/run``: runs every benchmark, then writes the report.

    benchmarks/run [--quick]
                   [--only hit,contention,refresh,calls_saved,pids,ips,serve,loop_stall,events,
                           perpod,reasons_http1,reasons_h2,reasons_upb,reasons_hpack]
                   [--wait-load 1.0 --wait-max 1200] [--out benchmarks/results]

Each benchmark runs as a subprocess of its own (``bench_*.py``, in its ``--json`` mode where it
has one; ``bench_serve.py``'s printed tables are parsed here), with a timeout, in a process group
of its own so a timeout ends everything it started. Warm-up, repeats and the interleaving of
contender and baseline happen inside each benchmark, so every ratio compares figures measured
side by side in the same process and the same minutes. A benchmark that fails, times out or
prints nothing readable is recorded as failed, with its exit status and the tail of its output,
and the others still run. The machine, the Python, the podcache commit, the date and the load
average are recorded too; everything goes to ``results.json``, which ``report.py`` turns into
``RESULTS.md`` and the PNG plots. This module measures nothing itself and draws nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import report

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REFRESH_SIZES = {True: (10, 50, 100, 1_000, 5_000), False: (10, 50, 100, 500, 1_000, 2_000, 5_000)}
"""Pods per refresh measured, by quick mode."""

Parsed = dict[str, object]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script: how to call it and how to read what it prints."""

    key: str
    title: str
    script: str
    args: Callable[[bool], list[str]]
    parse: Callable[[str], Parsed]
    timeout: tuple[float, float]
    """Seconds allowed in quick and in full mode."""


def _json(text: str) -> Parsed:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


# -- bench_serve adapter: it prints markdown tables, not JSON ----------------------------------
def markdown_tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Every markdown table in ``text`` as (the heading above it, header cells, row cells)."""
    tables: list[tuple[str, list[str], list[list[str]]]] = []
    heading = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        separator = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", separator):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i].strip()))
                i += 1
            tables.append((heading, header, rows))
            continue
        i += 1
    return tables


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _number(cell: str) -> float:
    found = re.search(r"[-+]?[0-9][0-9,]*\.?[0-9]*", cell)
    if found is None:
        raise ValueError(f"no number in {cell!r}")
    return float(found[0].replace(",", ""))


def parse_serve(text: str) -> Parsed:
    """bench_serve.py's printed tables: the req/s comparison and the soak, as numbers."""
    comparison: list[dict[str, object]] = []
    soak: dict[str, object] | None = None
    headings: dict[str, str] = {}
    for heading, header, rows in markdown_tables(text):
        names = [h.lower() for h in header]
        if "endpoint" in names and "server" in names:
            headings["comparison"] = heading
            for cells in rows:
                row = dict(zip(names, cells, strict=False))
                comparison.append(
                    {
                        "endpoint": row["endpoint"],
                        "body_bytes": _number(row["body"]) if "body" in row else None,
                        "server": row["server"],
                        "rps": _number(row["req/s"]),
                        "p50_ms": _number(row["p50 ms"]),
                        "p99_ms": _number(row["p99 ms"]),
                        "errors": int(_number(row["errors"])),
                        # The median over rounds of the within-round ratio to nginx.
                        "ratio": _number(row["ratio*"]) if "ratio*" in row else None,
                    }
                )
        elif names and names[0] == "req/s" and rows:
            headings["soak"] = heading
            row = dict(zip(names, rows[0], strict=False))
            soak = {
                "rps": _number(row["req/s"]),
                "p50_ms": _number(row["p50 ms"]),
                "p99_ms": _number(row["p99 ms"]),
                "errors": int(_number(row["errors"])),
                "cells": dict(zip(header, rows[0], strict=False)),
            }
    if not comparison:
        raise ValueError("no 'endpoint | server | req/s' table in bench_serve.py's output")
    return {"comparison": comparison, "soak": soak, "headings": headings}


BENCHMARKS = (
    Benchmark(
        "hit",
        "Hit path",
        "bench_hit.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (120, 600),
    ),
    Benchmark(
        "contention",
        "Contention",
        "bench_contention.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (150, 900),
    ),
    Benchmark(
        "refresh",
        "Refresh cost",
        "bench_refresh.py",
        lambda quick: [
            "--json",
            "--sizes",
            ",".join(map(str, REFRESH_SIZES[quick])),
            *(["--quick"] if quick else []),
        ],
        _json,
        (150, 900),
    ),
    Benchmark(
        "calls_saved",
        "CRI calls saved",
        "bench_calls_saved.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (90, 300),
    ),
    Benchmark(
        "pids",
        "PID to pod",
        "bench_pids.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (90, 300),
    ),
    Benchmark(
        "ips",
        "Pod IPs",
        "bench_ips.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (240, 600),
    ),
    Benchmark(
        "watch",
        "Watch",
        "bench_watch.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (240, 900),
    ),
    Benchmark(
        "serve",
        "serve vs nginx",
        "bench_serve.py",
        lambda quick: ["--quick"] if quick else [],
        parse_serve,
        (240, 1200),
    ),
    Benchmark(
        "loop_stall",
        "Event-loop stalls at 5,000 pods",
        "bench_loop_stall.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (150, 600),
    ),
    Benchmark(
        "events",
        "Container events (containerd 1.7)",
        "bench_events.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (400, 900),
    ),
    Benchmark(
        "perpod",
        "One pod change at scale (events)",
        "bench_perpod.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (300, 900),
    ),
    Benchmark(
        "agents",
        "Node agents' CRI patterns",
        "bench_agents.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (300, 1200),
    ),
    # Each own part against the library beside it (docs/architecture.md's "why our own").
    Benchmark(
        "reasons_http1",
        "HTTP/1.1 server vs uvicorn",
        "bench_http1_uvicorn.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (240, 1500),
    ),
    Benchmark(
        "reasons_h2",
        "HTTP/2 client vs h2 and grpcio",
        "bench_h2_client.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (120, 600),
    ),
    Benchmark(
        "reasons_upb",
        "C reader vs upb",
        "bench_upb.py",
        lambda quick: ["--json", *(["--quick"] if quick else [])],
        _json,
        (120, 600),
    ),
    Benchmark(
        "reasons_hpack",
        "HPACK decoder vs hpack",
        "bench_hpack.py",
        lambda quick: ["--json", *(["--calls", "200", "--rounds", "2"] if quick else [])],
        _json,
        (120, 300),
    ),
)


# -- the machine -----------------------------------------------------------------------------
def _first(path: str, pattern: str) -> str | None:
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    found = re.search(pattern, text, re.M)
    return found[1].strip() if found else None


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return done.stdout.strip()


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, object]:
    """CPU, cores, memory, kernel, OS, Python, protobuf backend, podcache commit, date, load."""
    from google.protobuf.internal import api_implementation

    memory_kib = _first("/proc/meminfo", r"^MemTotal:\s+(\d+)")
    changed = _git("status", "--porcelain", "--untracked-files=no").splitlines()
    return {
        "cpu": _first("/proc/cpuinfo", r"^model name\s*:(.*)$") or platform.processor() or "?",
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(int(memory_kib) / 2**20, 1) if memory_kib else None,
        "kernel": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "os": _first("/etc/os-release", r'^PRETTY_NAME="?([^"\n]*)"?$') or "?",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "protobuf_backend": api_implementation.Type(),
        "commit": _git("rev-parse", "--short=12", "HEAD") or "unknown",
        "uncommitted_files": len(changed),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


# -- running ---------------------------------------------------------------------------------
def run_one(bench: Benchmark, quick: bool) -> dict[str, object]:
    """Run one benchmark script; never raises: a failure is recorded in what it returns."""
    record: dict[str, object] = {"key": bench.key, "title": bench.title, "script": bench.script}
    script = HERE / bench.script
    if not script.exists():
        record.update(status="skipped", reason=f"benchmarks/{bench.script} does not exist")
        return record
    command = [sys.executable, str(script), *bench.args(quick)]
    record["command"] = " ".join(["benchmarks/" + bench.script, *bench.args(quick)])
    record["load_before"] = load_average()
    timeout = bench.timeout[0 if quick else 1]
    began = time.perf_counter()
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends all it started
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, err = proc.communicate()
        record.update(status="failed", reason=f"timed out after {timeout:g} s")
    record["seconds"] = round(time.perf_counter() - began, 1)
    record["load_after"] = load_average()
    record["exit_status"] = proc.returncode
    record["stderr_tail"] = err.strip().splitlines()[-15:]
    if record.get("status") == "failed":
        record["stdout_tail"] = out.strip().splitlines()[-15:]
        return record
    try:
        record["data"] = bench.parse(out)
    except (ValueError, KeyError, TypeError) as exc:
        record.update(
            status="failed",
            reason=f"printed no readable result ({type(exc).__name__}: {exc})",
            stdout_tail=out.strip().splitlines()[-15:],
        )
        if bench.key == "serve" and _serve_tools_missing():
            record.update(status="skipped", reason="wrk or nginx missing and not installable")
        return record
    if bench.key == "serve":
        record["raw"] = out
    record["status"] = "ok"
    return record


def _serve_tools_missing() -> bool:
    """wrk or nginx is still not there (bench_serve.py installs them with apt-get)."""
    nginx = shutil.which("nginx") or (Path("/usr/sbin/nginx").exists() or None)
    return shutil.which("wrk") is None or nginx is None


def _end_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the benchmark's process group, SIGKILL it if still there after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_quiet(threshold: float, max_seconds: float) -> dict[str, object]:
    """Poll the 1-minute load average until it is below ``threshold``, at most ``max_seconds``."""
    began = time.monotonic()
    while True:
        load = os.getloadavg()[0]
        waited = time.monotonic() - began
        if load < threshold or waited >= max_seconds:
            return {"threshold": threshold, "waited_s": round(waited), "reached": load < threshold}
        print(
            f"load average {load:.2f} >= {threshold:g}; waiting ({waited:.0f} s so far)",
            file=sys.stderr,
        )
        time.sleep(min(30.0, max(1.0, max_seconds - waited)))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, write results.json, RESULTS.md and the plots; 1 if any failed."""
    parser = argparse.ArgumentParser(
        prog="benchmarks/run", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="short runs (a few minutes)")
    parser.add_argument(
        "--only",
        type=lambda text: [k.strip() for k in text.split(",") if k.strip()],
        default=[b.key for b in BENCHMARKS],
        help="comma-separated benchmarks to run (default: all): "
        + ", ".join(b.key for b in BENCHMARKS),
    )
    parser.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    parser.add_argument(
        "--wait-load",
        type=float,
        default=None,
        metavar="LOAD",
        help="first wait until the 1-minute load average is below LOAD",
    )
    parser.add_argument(
        "--wait-max", type=float, default=1200.0, metavar="SECONDS", help="longest such wait"
    )
    args = parser.parse_args(argv)
    unknown = set(args.only) - {b.key for b in BENCHMARKS}
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")

    waited = None
    if args.wait_load is not None:
        waited = wait_for_quiet(args.wait_load, args.wait_max)
    results: dict[str, object] = {
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "load_start": load_average(),
        "load_wait": waited,
    }
    began = time.perf_counter()
    runs = []
    chosen = [b for b in BENCHMARKS if b.key in args.only]
    for number, bench in enumerate(chosen, 1):
        print(f"[{number}/{len(chosen)}] {bench.title} ({bench.script}) ...", file=sys.stderr)
        try:
            record = run_one(bench, args.quick)
        except Exception as exc:  # the runner itself must still write the report
            record = {
                "key": bench.key,
                "title": bench.title,
                "script": bench.script,
                "status": "failed",
                "reason": f"could not run: {exc!r}",
            }
        print(
            f"    {record['status']} in {record.get('seconds', 0)} s"
            + (f": {record['reason']}" if "reason" in record else ""),
            file=sys.stderr,
        )
        runs.append(record)
    results["benchmarks"] = runs
    results["load_end"] = load_average()
    results["seconds"] = round(time.perf_counter() - began, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    written = report.write(results, args.out)
    print(f"wrote {', '.join(map(str, written))} in {results['seconds']} s", file=sys.stderr)
    return 0 if all(r["status"] != "failed" for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
