"""Load benchmark of ``podcache serve`` against nginx serving the same bytes as static files.

    .venv/bin/python benchmarks/bench_serve.py [--quick] [--with-uvicorn]

What it does (wrk: 1 thread, 50 connections, 10 s per run; servers interleaved; median of 3):

1. starts ``podcache serve --sim --sim-pods 110 --cache-period 1h`` on loopback (podcache's own
   HTTP/1.1 server: an asyncio protocol on uvloop with httptools' parser);
2. fetches /pods (the whole node, ~150 KB) and one /containers/{id} answer (~1-2 KB) from it,
   writes those bytes as static files, and starts a private nginx (1 worker, sendfile on,
   config, pid and logs in a temporary directory) on another loopback port;
3. runs wrk against both for both bodies, round-robin, and prints a markdown table: req/s,
   ratio to nginx, latency p50/p99, errors (non-2xx responses and socket errors);
4. a soak: a fresh server whose simulation churns (pods replaced every second, cache period
   2 s), 200 connections on /pods for 60 s; zero errors required, and the server's RSS is
   sampled every half second to show it stays flat.

``--baseline SRC`` adds ``podcache serve`` run from another source tree (``SRC``, its ``src``
directory, e.g. a worktree of the commit before a change) as another column, with the same
simulation: its bodies must equal podcache's but for the times, and the table gives podcache's
req/s over the baseline's in the same rounds (``--no-soak``: the comparison alone).

``--with-uvicorn`` adds the same application under uvicorn (httptools, uvloop, through its
ASGI entry point) as a third column: the same parser and loop with a general ASGI server
around them, for the record of what podcache's own server saves. wrk and nginx are installed
with apt-get when missing. Exit status 1 when a target or the zero-error rule is missed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plumbing import (
    WrkResult,
    ensure_tools,
    free_port,
    stop,
    wait_for,
    wrk,
)

PODS = 110
TARGETS = {"pods": 0.75, "container": 0.5}
"""Minimum podcache/nginx req/s ratio per endpoint."""

_UVICORN_APP = """
import sys, uvicorn
from podcache.cri import AsyncCRIRuntime
from podcache.serve import App
from podcache.serve.asgi import asgi_app
from podcache.sim import SimRuntime
sim = SimRuntime(int(sys.argv[2])).start()
app = App(AsyncCRIRuntime(sim.endpoint), 3600.0)
print("listening on", flush=True, file=sys.stderr)
uvicorn.run(asgi_app(app), host="127.0.0.1", port=int(sys.argv[1]), http="httptools", loop="uvloop",
            log_level="warning", access_log=False, lifespan="off")
"""


def nginx_binary() -> str:
    return shutil.which("nginx") or "/usr/sbin/nginx"


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as reply:
        data: bytes = reply.read()
        return data


@contextmanager
def process(
    args: list[str], ready_url: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A server subprocess, up once ``ready_url`` answers; SIGTERM on the way out."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_for(ready_url)
        yield proc
    finally:
        stop(proc)


def podcache_serve(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "podcache.serve", "--sim", "--listen", f"127.0.0.1:{port}",
            *extra]  # fmt: skip


@contextmanager
def nginx(files: dict[str, bytes]) -> Iterator[int]:
    """A private nginx (1 worker, sendfile) serving ``files`` on a loopback port."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-nginx-") as tmp:
        root = Path(tmp)
        www = root / "www"
        www.mkdir()
        for name, data in files.items():
            (www / name).write_bytes(data)
            (www / name).chmod(0o644)
        for directory in (root, www):
            directory.chmod(0o755)
        temp = "\n".join(
            f"  {kind}_temp_path {root}/{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        conf = root / "nginx.conf"
        conf.write_text(
            f"""worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 100000000;
  default_type application/json;
{temp}
  server {{ listen 127.0.0.1:{port}; root {www}; }}
}}
"""
        )
        args = [nginx_binary(), "-c", str(conf), "-p", str(root), "-e", f"{root}/error.log"]
        with process(args, f"http://127.0.0.1:{port}/{next(iter(files))}"):
            yield port


class RssSampler:
    """Samples a process's resident set size (KiB) every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(self.interval):
            try:
                self.samples.append((time.monotonic() - start, self._rss()))
            except OSError:
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def pick_container(base: str, pods: bytes) -> str:
    """The /containers/{id} path whose answer is closest to 1 KB."""
    import json

    best: tuple[int, str] | None = None
    for pod in json.loads(pods)["items"]:
        for container in pod["containers"]:
            path = "/containers/" + container["id"].split("://", 1)[1]
            size = len(fetch(base + path))
            if best is None or abs(size - 1024) < abs(best[0] - 1024):
                best = (size, path)
    assert best is not None
    return best[1]


def fmt(result: WrkResult) -> str:
    return (
        f"{result.requests_per_second:9.0f} | {result.p50_ms:7.2f} | {result.p99_ms:7.2f} | "
        f"{result.errors}"
    )


def median_cpu(results: list[WrkResult]) -> float:
    """The median over rounds of the server's CPU time per request (microseconds)."""
    return statistics.median(r.cpu_us for r in results if r.cpu_us is not None)


def median(results: list[WrkResult]) -> WrkResult:
    return WrkResult(
        statistics.median(r.requests_per_second for r in results),
        statistics.median(r.p50_ms for r in results),
        statistics.median(r.p99_ms for r in results),
        sum(r.non_2xx for r in results),
        sum(r.socket_errors for r in results),
    )


@dataclass
class Comparison:
    """The rounds of podcache against nginx (and uvicorn): every wrk run, by endpoint and server."""

    servers: list[str]
    sizes: dict[str, int]
    """Endpoint key ("pods", "container") -> body bytes."""
    results: dict[tuple[str, str], list[WrkResult]]
    """(endpoint key, server) -> one result per round."""

    def results_servers(self, key: str) -> set[str]:
        """The servers measured on endpoint ``key``."""
        return {name for endpoint, name in self.results if endpoint == key}

    def ratio(self, key: str, name: str, reference: str) -> float:
        """The median over rounds of ``name``'s req/s over ``reference``'s in the same round."""
        return statistics.median(
            run.requests_per_second / ref.requests_per_second
            for run, ref in zip(
                self.results[(key, name)], self.results[(key, reference)], strict=True
            )
        )


@contextmanager
def uvicorn_app(servers: dict[str, str]) -> Iterator[None]:
    """The same app under uvicorn, added to ``servers`` while it runs."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _UVICORN_APP, str(port), str(PODS)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        servers["uvicorn"] = f"http://127.0.0.1:{port}"
        wait_for(servers["uvicorn"] + "/healthz")
        yield
    finally:
        stop(proc)


def run_rounds(
    servers: dict[str, str],
    paths: dict[str, tuple[str, str]],
    rounds: int,
    seconds: float,
    pids: dict[str, int] | None = None,
) -> dict[tuple[str, str], list[WrkResult]]:
    """A warm-up, then ``rounds`` rounds, each running every server back to back per path."""
    for name, url in servers.items():  # warm-up, not counted
        for path, static in paths.values():
            wrk(url + (static if name == "nginx" else path), connections=50, seconds=2)
    results: dict[tuple[str, str], list[WrkResult]] = {}
    for round_ in range(rounds):
        for key, (path, static) in paths.items():
            for name, url in servers.items():
                target = url + (static if name == "nginx" else path)
                pid = (pids or {}).get(name)
                result = wrk(target, connections=50, seconds=seconds, pid=pid)
                results.setdefault((key, name), []).append(result)
                print(
                    f"round {round_ + 1} {key:9} {name:8} {result.requests_per_second:9.0f} req/s"
                    + ("" if result.cpu_us is None else f" {result.cpu_us:6.1f} us CPU/req"),
                    file=sys.stderr,
                )
    return results


_TIMES = re.compile(rb'"(?:age_seconds|cache_time|created_at|revision)":[0-9.]+')
"""What two servers over the same simulation answer differently: when their simulations and
caches started (the revisions count from the start, in ms)."""


@contextmanager
def baseline_serve(
    source: str | None, servers: dict[str, str], bodies: dict[str, bytes], pids: dict[str, int]
) -> Iterator[None]:
    """``podcache serve`` from the source tree ``source`` (None: none), added to ``servers``
    while it runs; exits when its answers to ``bodies``' paths differ from them but for the
    times (``_TIMES``)."""
    if source is None:
        yield
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": source}
    args = podcache_serve(port, "--sim-pods", str(PODS), "--cache-period", "1h")
    with process(args, url + "/healthz", env) as proc:
        for path, body in bodies.items():
            if _TIMES.sub(b"", fetch(url + path)) != _TIMES.sub(b"", body):
                sys.exit(f"the baseline's {path} differs from podcache's")
        print(f"baseline ({source}): the same bodies but for the times", file=sys.stderr)
        servers["baseline"] = url
        pids["baseline"] = proc.pid
        yield


def compare(
    rounds: int, seconds: float, *, with_uvicorn: bool, baseline: str | None = None
) -> Comparison:
    """podcache serve (a simulated runtime, cache period 1 h) against nginx serving its bodies
    (and the same from the ``baseline`` source tree)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve_args = podcache_serve(port, "--sim-pods", str(PODS), "--cache-period", "1h")
    with process(serve_args, base + "/healthz") as proc:
        pids = {"podcache": proc.pid}
        pods = fetch(base + "/pods")
        container_path = pick_container(base, pods)
        container = fetch(base + container_path)
        print(
            f"bodies: /pods {len(pods)} bytes ({PODS} pods), {container_path[:24]}... "
            f"{len(container)} bytes",
            file=sys.stderr,
        )
        servers = {"podcache": base}
        paths = {"pods": ("/pods", "/pods.json"), "container": (container_path, "/container.json")}
        with nginx({"pods.json": pods, "container.json": container}) as nginx_port:
            servers["nginx"] = f"http://127.0.0.1:{nginx_port}"
            bodies = {"/pods": pods, container_path: container}
            with (
                uvicorn_app(servers) if with_uvicorn else nullcontext(),
                baseline_serve(baseline, servers, bodies, pids),
            ):
                results = run_rounds(servers, paths, rounds, seconds, pids)
    return Comparison(list(servers), {"pods": len(pods), "container": len(container)}, results)


def print_comparison(comparison: Comparison, rounds: int, seconds: float) -> bool:
    """The comparison as a markdown table; True when podcache met its targets without errors."""
    ok = True
    print(
        f"\n### podcache serve vs nginx (wrk -t1 -c50 -d{seconds:g}s, median of {rounds}, "
        f"{os.cpu_count()} CPUs)\n"
    )
    print("| endpoint | body | server | req/s | p50 ms | p99 ms | errors | ratio* | target |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for key, size in comparison.sizes.items():
        reference = comparison.results[(key, "nginx")]
        label = "/pods" if key == "pods" else "/containers/{id}"
        for name in comparison.servers:
            runs = comparison.results[(key, name)]
            result = median(runs)
            # Each round ran the servers back to back: compare within rounds, then take the
            # median, so load from other processes drifting between rounds cancels out.
            ratio = statistics.median(
                run.requests_per_second / ref.requests_per_second
                for run, ref in zip(runs, reference, strict=True)
            )
            target = ""
            if name == "podcache":
                met = ratio >= TARGETS[key]
                target = f">= {TARGETS[key]}x: {'met' if met else 'MISSED'}"
                ok = ok and met
            if result.errors:
                ok = False
            print(f"| {label} | {size} B | {name} | {fmt(result)} | {ratio:.2f}x | {target} |")
        if "baseline" in comparison.results_servers(key):
            print(
                f"| {label} | | podcache / baseline | | | | | "
                f"{comparison.ratio(key, 'podcache', 'baseline'):.3f}x | |"
            )
            mine, theirs = (
                median_cpu(comparison.results[(key, n)]) for n in ("podcache", "baseline")
            )
            print(
                f"| {label} | | server CPU per request, podcache / baseline | {mine:.1f} us / "
                f"{theirs:.1f} us | | | | {mine / theirs:.3f}x | |"
            )
    print(
        "\n*ratio: median over rounds of podcache (or uvicorn) req/s / nginx req/s in the same "
        "round; req/s, p50 and p99 are medians over rounds, errors a sum."
    )
    return ok


def soak(soak_seconds: float) -> bool:
    """200 connections on /pods while the simulation churns, RSS sampled; prints a table.

    True when there were no errors and memory stayed flat.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    soak_args = podcache_serve(
        port, "--sim-pods", str(PODS), "--sim-churn", "20", "--cache-period", "2s"
    )
    with process(soak_args, base + "/healthz") as proc:
        wrk(base + "/pods", connections=200, seconds=3)  # warm-up
        with RssSampler(proc.pid) as sampler:
            result = wrk(base + "/pods", connections=200, seconds=soak_seconds)
        metrics = fetch(base + "/metrics").decode()
    refreshes = re.search(r"^podcache_cache_refreshes_total (\S+)", metrics, re.M)
    rss = [kib for _, kib in sampler.samples]
    # The first fifth is the allocator settling under 200 concurrent bodies; after it, the
    # second half's median must stay within 10% of the first half's.
    settled = rss[len(rss) // 5 :]
    half = len(settled) // 2
    first, last = statistics.median(settled[:half]), statistics.median(settled[half:])
    growth = (last - first) / first
    checkpoints = " ".join(
        f"{t:.0f}s:{kib / 1024:.0f}" for t, kib in sampler.samples[:: max(1, len(rss) // 6)]
    )
    print(
        f"\n### soak: wrk -t1 -c200 -d{soak_seconds:g}s /pods, simulation churning 20 pods/s, "
        "cache period 2 s\n"
    )
    print("| req/s | p50 ms | p99 ms | errors | refreshes | RSS 20-60% | RSS 60-100% | "
          "RSS max | growth |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {fmt(result)} | {refreshes[1] if refreshes else '?'} | {first / 1024:.1f} MiB | "
        f"{last / 1024:.1f} MiB | {max(rss) / 1024:.1f} MiB | {growth:+.1%} |"
    )
    print(f"\nRSS (MiB) over the run: {checkpoints}")
    return result.errors == 0 and growth < 0.10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 3 s, a 10 s soak")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--soak-seconds", type=float, default=None)
    parser.add_argument("--with-uvicorn", action="store_true", help="also the app under uvicorn")
    parser.add_argument("--baseline", metavar="SRC", help="also podcache from this src directory")
    parser.add_argument("--no-soak", action="store_true", help="the comparison only")
    options = parser.parse_args()
    rounds = options.rounds or (1 if options.quick else 3)
    seconds = options.seconds or (3.0 if options.quick else 10.0)
    soak_seconds = options.soak_seconds or (10.0 if options.quick else 60.0)
    ensure_tools("wrk", "nginx")
    comparison = compare(
        rounds, seconds, with_uvicorn=options.with_uvicorn, baseline=options.baseline
    )
    compared_ok = print_comparison(comparison, rounds, seconds)
    soaked_ok = options.no_soak or soak(soak_seconds)
    ok = compared_ok and soaked_ok
    print(f"\n{'all targets met' if ok else 'SOME TARGETS MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
