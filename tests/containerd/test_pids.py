"""PID -> pod on a real containerd: pods and containers started through CRI (the harness), their
PIDs found by this test on its own (scanning ``/proc/*/cgroup`` for the IDs it was given), then
``pod_of_pid`` (both twins), ``GET /pids/{pid}`` from a real ``podcache serve`` and
``podcache which`` compared with what the test created. A host process is None / 404 / exit 3;
a container created after the snapshot is found with exactly one refresh."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from podcache import AsyncRuntimeCache, PodList, RuntimeCache
from podcache.cri import AsyncCRIRuntime, CRIRuntime
from tests.containerd.conftest import Containerd
from tests.containerd.harness import ContainerRecord, CRIHarness, SandboxRecord
from tests.serve.conftest import Client, ServeProcess, free_port

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(300)]


def pids_of(ident: str) -> list[int]:
    """Every process whose cgroup file mentions ``ident`` (the test's own scan, no podcache)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/cgroup").read_text()
        except OSError:
            continue
        if ident in text:
            found.append(int(entry))
    return sorted(found)


def wait_pids(ident: str, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while not (found := pids_of(ident)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no process in a cgroup naming {ident} after {timeout} s")
        time.sleep(0.02)
    return found


@dataclass
class Made:
    sandboxes: list[SandboxRecord]
    containers: list[ContainerRecord]

    def expected(self) -> dict[int, tuple[str, str, str]]:
        """pid -> (pod UID, bare container or sandbox ID, container name or "")."""
        out: dict[int, tuple[str, str, str]] = {}
        for s in self.sandboxes:
            for pid in wait_pids(s.id):
                out[pid] = (s.uid, s.id, "")
        for c in self.containers:
            for pid in wait_pids(c.id):
                out[pid] = (c.pod_uid, c.id, c.name)
        return out


@pytest.fixture(scope="module")
def made(cri_harness: CRIHarness) -> Iterator[Made]:
    a = cri_harness.run_pod("pids-a", "pids")
    b = cri_harness.run_pod("pids-b", "pids")
    containers = [
        cri_harness.create_container(a, "main"),
        cri_harness.create_container(b, "one"),
        cri_harness.create_container(b, "two"),
    ]
    yield Made([a, b], containers)
    for s in (a, b):
        cri_harness.remove_pod(s)


def _check(found: object, want: tuple[str, str, str], pid: int) -> None:
    from podcache.cache.pids import PodProcess

    assert isinstance(found, PodProcess), (pid, found)
    uid, ident, name = want
    assert (found.pid, found.pod.id) == (pid, uid)
    assert found.container is not None
    assert (found.container.id.type, found.container.id.id, found.container.name) == (
        "containerd",
        ident,
        name,
    )


def test_pod_of_pid_finds_every_container_and_sandbox_process(
    containerd: Containerd, made: Made
) -> None:
    expected = made.expected()
    assert len(expected) >= 5  # 2 pause processes and 3 containers' sleeps
    with CRIRuntime(containerd.endpoint) as runtime:
        cache = RuntimeCache(runtime, 60.0)
        for pid, want in expected.items():
            _check(cache.pod_of_pid(pid), want, pid)
        assert cache.pod_of_pid(os.getpid()) is None  # a host process


def test_the_asyncio_twin_agrees(containerd: Containerd, made: Made) -> None:
    expected = made.expected()

    async def run() -> None:
        runtime = AsyncCRIRuntime(containerd.endpoint)
        try:
            cache = AsyncRuntimeCache(runtime, 60.0)
            for pid, want in expected.items():
                _check(await cache.pod_of_pid(pid), want, pid)
            assert await cache.pod_of_pid(os.getpid()) is None
            await cache.aclose()
        finally:
            await runtime.close()

    asyncio.run(run())


def test_http_pids_route(containerd: Containerd, made: Made) -> None:
    expected = made.expected()
    port = free_port()
    args = ["-r", containerd.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
    with ServeProcess(args):
        client = Client(port=port)
        for pid, (uid, ident, name) in expected.items():
            reply = client.get(f"/pids/{pid}")
            assert reply.status == 200, reply
            body = reply.json()
            assert (body["pid"], body["pod"]["id"]) == (pid, uid)
            assert (body["container"]["id"], body["container"]["name"]) == (
                f"containerd://{ident}",
                name,
            )
        host = client.get(f"/pids/{os.getpid()}")
        assert host.status == 404 and "no container" in host.json()["error"]


def test_podcache_which(containerd: Containerd, made: Made) -> None:
    expected = made.expected()
    exe = shutil.which("podcache", path=str(Path(sys.executable).parent))
    assert exe is not None
    pids = [str(pid) for pid in expected]
    done = subprocess.run(
        [exe, "which", *pids, "-r", containerd.endpoint, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout)["items"]
    got = {
        i["pid"]: (
            i["pod"]["id"],
            i["container"]["id"].removeprefix("containerd://"),
            i["container"]["name"],
        )
        for i in items
    }
    assert got == expected
    host = subprocess.run(
        [exe, "which", str(os.getpid()), "-r", containerd.endpoint],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert host.returncode == 3, host.stderr


class CountingRuntime:
    """The real CRI client, counting ``get_pods`` calls (the cache's refreshes)."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self.runtime = runtime
        self.calls = 0

    def get_pods(self, all: bool) -> PodList:
        self.calls += 1
        return self.runtime.get_pods(all)


def test_a_container_created_after_the_snapshot_costs_exactly_one_refresh(
    containerd: Containerd, cri_harness: CRIHarness, made: Made
) -> None:
    with CRIRuntime(containerd.endpoint) as runtime:
        counting = CountingRuntime(runtime)
        cache = RuntimeCache(counting, 3600.0)
        cache.get_pods()
        assert counting.calls == 1
        # A host process asks the runtime nothing.
        assert cache.pod_of_pid(1) is None
        sandbox = cri_harness.run_pod("pids-late", "pids")
        try:
            late = cri_harness.create_container(sandbox, "late")
            (pid,) = wait_pids(late.id)
            _check(cache.pod_of_pid(pid), (sandbox.uid, late.id, "late"), pid)
            assert counting.calls == 2
            _check(cache.pod_of_pid(pid), (sandbox.uid, late.id, "late"), pid)
            assert counting.calls == 2
        finally:
            cri_harness.remove_pod(sandbox)
