"""The DaemonSet's pod on a real containerd under a serve soak: the image's size, the pod's memory.

    .venv/bin/python benchmarks/bench_image_pod.py [--quick] [--json]

Brings up a private containerd 1.7 with ``scripts/containerd-up`` (directory
``$BENCH_CONTAINERD_DIR``, default /tmp/podcache-bench-image), builds the image with
``scripts/image-build`` (cached), makes ``PODS`` busybox pods through CRI, then runs
deploy/base/daemonset.yaml's pod as tests/containerd/test_image.py does
(``tests/containerd/daemonset.py``: its volumes, users, limits). The kubelet's exec probes run
at the DaemonSet's periods throughout (each is a Python process in the pod's cgroup). The
podcache container's memory cgroup is sampled every half second in two phases:

1. idle: no client for ``IDLE`` seconds;
2. soak: ``CONNECTIONS`` keep-alive connections read ``GET /pods`` over the unix socket for
   ``SOAK`` seconds while one pod is replaced every second.

Reported per phase: the cgroup's working set (usage less inactive file pages: what the
kubelet's eviction and ``kubectl top`` count, against the 256Mi limit) and usage, median and
maximum, the podcache process's RSS, requests answered and errors. Needs root on Linux; tears
the instance down unless it was running before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402 -- after sys.path names the repository

from tests.containerd.conftest import Containerd  # noqa: E402 -- after sys.path names the repository
from tests.containerd.daemonset import (  # noqa: E402 -- after sys.path names the repository
    HostPaths,
    RunningPod,
    import_image,
    probe,
    run_pod,
    socket_on_host,
    wait_for_image,
    wait_until,
)
from tests.containerd.harness import CRIHarness, SandboxRecord  # noqa: E402 -- after sys.path names the repository
from tests.containerd.test_pids import wait_pids  # noqa: E402 -- after sys.path names the repository

PODS = 50
CONNECTIONS = 200
IDLE, SOAK = 20.0, 60.0
QUICK_IDLE, QUICK_SOAK = 5.0, 10.0
CGROUP_PARENT = "podcachebenchimage"
"""The pods' cgroup parent: containerd-down clears it, so it is this benchmark's own."""


def log(message: str) -> None:
    print(f"bench_image_pod: {message}", file=sys.stderr, flush=True)


@dataclass
class Phase:
    name: str
    seconds: float
    working_set_median_mib: float
    working_set_max_mib: float
    usage_max_mib: float
    rss_median_mib: float
    rss_max_mib: float
    requests: int
    errors: int
    cpu_cores: float


def cgroup_dir(pid: int, controller: str) -> Path:
    """The process's cgroup directory for ``controller`` (cgroup v1), else its unified one."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return Path("/sys/fs/cgroup") / controllers / path.lstrip("/")
    unified = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
    return Path("/sys/fs/cgroup") / unified[0].lstrip("/")


def cpu_seconds(pid: int) -> float:
    """CPU time the process's cgroup has used (cpuacct.usage, or cpu.stat's usage_usec)."""
    directory = cgroup_dir(pid, "cpuacct")
    if (directory / "cpuacct.usage").exists():
        return int((directory / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (directory / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


class MemorySampler:
    """The container's memory cgroup (v1 or v2) and its main process's RSS, every 0.5 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cgroup = self._cgroup_dir(pid)
        self.samples: list[tuple[int, int, int]] = []  # (working set, usage, rss) in bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _cgroup_dir(pid: int) -> Path:
        return cgroup_dir(pid, "memory")

    def sample(self) -> tuple[int, int, int]:
        stat = dict(
            (k, int(v))
            for k, v in (
                line.split() for line in (self.cgroup / "memory.stat").read_text().splitlines()
            )
        )
        usage_file = self.cgroup / "memory.usage_in_bytes"
        if not usage_file.exists():
            usage_file = self.cgroup / "memory.current"
        usage = int(usage_file.read_text())
        inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
        rss = 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        return max(0, usage - inactive), usage, rss

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.samples.append(self.sample())

    @contextmanager
    def running(self) -> Iterator[MemorySampler]:
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


class Prober(threading.Thread):
    """The kubelet's exec probes at the DaemonSet's periods, until stopped."""

    def __init__(self, harness: CRIHarness, pod: RunningPod) -> None:
        super().__init__(daemon=True)
        self.harness, self.pod = harness, pod
        self.stop = threading.Event()
        self.failures = 0

    def run(self) -> None:
        spec = self.pod.specs["podcache"]
        periods = {
            kind: float(spec[kind].get("periodSeconds", 10))
            for kind in ("livenessProbe", "readinessProbe")
        }
        due = dict.fromkeys(periods, time.monotonic())
        while not self.stop.wait(0.1):
            for kind, period in periods.items():
                if time.monotonic() >= due[kind]:
                    due[kind] += period
                    if probe(self.harness, self.pod, "podcache", kind).exit_code != 0:
                        self.failures += 1


async def _reader(path: str, deadline: float, counts: list[int]) -> None:
    request = b"GET /pods HTTP/1.1\r\nHost: localhost\r\n\r\n"
    try:
        reader, writer = await asyncio.open_unix_connection(path)
    except OSError:
        counts[1] += 1
        return
    try:
        while time.monotonic() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            counts[0 if head.startswith(b"HTTP/1.1 200") else 1] += 1
    except (OSError, asyncio.IncompleteReadError, StopIteration):
        counts[1] += 1
    finally:
        writer.close()


def soak_load(path: str, seconds: float, connections: int) -> tuple[int, int]:
    """``connections`` keep-alive readers of /pods for ``seconds``: (answered 200, errors)."""
    counts = [0, 0]

    async def run() -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(_reader(path, deadline, counts) for _ in range(connections)))

    asyncio.run(run())
    return counts[0], counts[1]


def _phase(
    name: str, seconds: float, sampler: MemorySampler, load: Callable[[], tuple[int, int]]
) -> Phase:
    with sampler.running():
        started, cpu = time.monotonic(), cpu_seconds(sampler.pid)
        answered, errors = load()
        elapsed = time.monotonic() - started
        cores = (cpu_seconds(sampler.pid) - cpu) / elapsed
    ws = [s[0] for s in sampler.samples] or [0]
    usage = [s[1] for s in sampler.samples] or [0]
    rss = [s[2] for s in sampler.samples] or [0]
    mib = 1 << 20
    return Phase(
        name,
        round(elapsed, 1),
        round(statistics.median(ws) / mib, 1),
        round(max(ws) / mib, 1),
        round(max(usage) / mib, 1),
        round(statistics.median(rss) / mib, 1),
        round(max(rss) / mib, 1),
        answered,
        errors,
        round(cores, 3),
    )


def idle_for(seconds: float) -> tuple[int, int]:
    time.sleep(seconds)
    return 0, 0


def churn(harness: CRIHarness, pods: list[SandboxRecord], stop: threading.Event) -> None:
    """Replace the oldest pod with a new one every second until stopped."""
    n = 0
    while not stop.wait(1.0):
        harness.remove_pod(pods.pop(0))
        n += 1
        sandbox = harness.run_pod(f"churn-{n}", "bench")
        harness.create_container(sandbox, "main")
        pods.append(sandbox)


def containerd_up(directory: Path) -> tuple[Containerd, bool]:
    ctrd = Containerd(directory, "unix://" + str(directory / "containerd.sock"), "1.7")
    reused = ctrd.alive()
    env = dict(os.environ, CONTAINERD_TEST_DIR=str(directory), CONTAINERD_VERSION="1.7")
    env["PODCACHE_PYTHON"] = sys.executable
    done = subprocess.run(
        [str(ROOT / "scripts" / "containerd-up")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/containerd-up failed ({done.returncode}): {done.stderr[-2000:]}")
    return ctrd, reused


def build_image() -> tuple[str, Path]:
    done = subprocess.run(
        [str(ROOT / "scripts" / "image-build")],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/image-build failed ({done.returncode}): {done.stderr[-2000:]}")
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return values["image"], Path(values["archive"])


def image_size(name: str) -> int:
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(done.stdout.strip())


def daemonset() -> dict[str, object]:
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
    done = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (found,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "DaemonSet"]
    return dict(found)


def measure(harness: CRIHarness, ctrd: Containerd, image: str, quick: bool) -> list[Phase]:
    scratch = Path(tempfile.mkdtemp(prefix="pc-bench-img-", dir="/tmp"))
    paths = HostPaths(
        {
            "/run/containerd": str(ctrd.directory),
            "/run/podcache": str(scratch / "run"),
            "/proc": "/proc",
        }
    )
    pods: list[SandboxRecord] = []
    try:
        for i in range(PODS):
            pods.append(harness.run_pod(f"load-{i}", "bench"))
            harness.create_container(pods[-1], "main")
        pod = run_pod(
            harness, daemonset(), image=image, paths=paths, scratch=scratch, name="podcache"
        )
        pods.append(pod.sandbox)
        socket = socket_on_host(pod)
        wait_until(lambda: os.path.exists(socket), "the listen socket", 60.0)
        (pid,) = wait_pids(pod.containers["podcache"].id)
        sampler, prober = MemorySampler(pid), Prober(harness, pod)
        prober.start()
        idle, soak = (QUICK_IDLE, QUICK_SOAK) if quick else (IDLE, SOAK)
        phases = [_phase("idle", idle, sampler, lambda: idle_for(idle))]
        stop = threading.Event()
        churner = threading.Thread(target=churn, args=(harness, pods, stop), daemon=True)
        churner.start()
        phases.append(_phase("soak", soak, sampler, lambda: soak_load(socket, soak, CONNECTIONS)))
        stop.set()
        churner.join()
        prober.stop.set()
        prober.join()
        log(f"probe failures: {prober.failures}")
        return phases
    finally:
        harness.remove_all([p.id for p in pods if not p.removed])
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s idle, 10 s soak")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        raise SystemExit("bench_image_pod needs root on Linux (it runs containerd and podman)")
    os.environ.setdefault("CONTAINERD_TEST_CGROUP_PARENT", CGROUP_PARENT)
    directory = Path(os.environ.get("BENCH_CONTAINERD_DIR", "/tmp/podcache-bench-image"))
    image, archive = build_image()
    ctrd, reused = containerd_up(directory)
    try:
        import_image(archive, ctrd.socket_path, ctrd.env())
        with CRIHarness(ctrd.socket_path, cgroup_parent=CGROUP_PARENT) as harness:
            wait_for_image(harness, image)
            phases = measure(harness, ctrd, image, args.quick)
    finally:
        if not reused:
            env = dict(os.environ, CONTAINERD_TEST_DIR=str(directory), CONTAINERD_VERSION="1.7")
            subprocess.run(
                [str(ROOT / "scripts" / "containerd-down")],
                env=env,
                capture_output=True,
                timeout=300,
                check=False,
            )
    result = {
        "image": image,
        "image_size_mb": round(image_size(image) / 1e6, 1),
        "archive_mb": round(archive.stat().st_size / 1e6, 1),
        "pods": PODS,
        "connections": CONNECTIONS,
        "phases": [asdict(p) for p in phases],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"image {image}: {result['image_size_mb']} MB (archive {result['archive_mb']} MB)")
    print(
        f"{PODS} pods, one replaced a second during the soak; {CONNECTIONS} connections on /pods\n"
    )
    header = "| phase | s | working set median / max MiB | usage max MiB | RSS median / max MiB "
    print(header + "| 200s | errors | CPU cores |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in phases:
        memory = f"{p.working_set_median_mib} / {p.working_set_max_mib} | {p.usage_max_mib}"
        rss = f"{p.rss_median_mib} / {p.rss_max_mib}"
        load = f"{p.requests} | {p.errors} | {p.cpu_cores}"
        print(f"| {p.name} | {p.seconds} | {memory} | {rss} | {load} |")


if __name__ == "__main__":
    main()
