"""Pod IPs on a real containerd with real CNI networking: Debian's
containernetworking-plugins (bridge + host-local + loopback), dual-stack where the kernel has
IPv6, on an instance of its own (the other modules' instances stay host-network only).

``Pod.ips`` must be what the runtime reports: the sandbox's own PodSandboxStatus, asked here
with the raw stubs (as crictl would), and the host-local IPAM state on disk, which names each
address's container. Status is asked once per sandbox (podcache's count; none on a steady
listing), and an event's sandbox status fills the memo with no call. The module's teardown
(scripts/containerd-down) removes the bridge, the IPAM state and the network namespaces; the
last test checks it. No traffic is ever sent to a pod IP: the bridge has no address of its own
and nothing here opens a socket to one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from podcache import PodList
from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.cri.oneshot import OneShotRuntime
from podcache.cri.proto import api_pb2
from tests.containerd.conftest import (
    DEFAULT_DIR,
    DOWN,
    EXIT_CANNOT_RUN,
    EXIT_NO_PACKAGES,
    UP,
    UP_TIMEOUT,
    _last_line,
    _run,
    _session_lock,
    cannot_run,
)
from tests.containerd.harness import CRIHarness

VERSION = os.environ.get("CONTAINERD_CNI_VERSION", "2.1")
"""The containerd of this module (2.1: the line current clusters run; events carry status)."""
CNI = {"CONTAINERD_CNI": "1"}
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


class CNIContainerd:
    def __init__(self, directory: Path, endpoint: str) -> None:
        self.directory = directory
        self.endpoint = endpoint
        self.socket_path = str(directory / "containerd.sock")
        self.bridge = (directory / "cni" / "bridge").read_text().strip()
        self.ipam = directory / "cni" / "ipam"
        self.ip_forward = IP_FORWARD.read_text()


@pytest.fixture(scope="module")
def cni() -> Iterator[CNIContainerd]:
    if os.geteuid() != 0:
        cannot_run(f"containerd needs root, tests run as uid {os.geteuid()}")
    directory = Path(os.environ.get("CONTAINERD_TEST_DIR") or DEFAULT_DIR) / f"cni-{VERSION}"
    with _session_lock(directory):
        try:
            up = _run(UP, directory, VERSION, UP_TIMEOUT, CNI)
        except subprocess.TimeoutExpired:
            pytest.fail(f"scripts/containerd-up did not finish in {UP_TIMEOUT:.0f} s")
        if up.returncode in (EXIT_CANNOT_RUN, EXIT_NO_PACKAGES):
            cannot_run(_last_line(up.stderr))
        if up.returncode != 0:
            _run(DOWN, directory, VERSION, 120.0, CNI)
            pytest.fail(f"scripts/containerd-up (CNI) failed:\n{up.stderr[-3000:]}")
        instance = CNIContainerd(directory, _last_line(up.stdout))
        try:
            yield instance
        finally:
            down = _run(DOWN, directory, VERSION, 120.0, CNI)
            if down.returncode != 0:
                pytest.fail(f"scripts/containerd-down (CNI) failed:\n{down.stderr[-3000:]}")


@pytest.fixture(scope="module")
def harness(cni: CNIContainerd) -> Iterator[CRIHarness]:
    with CRIHarness(cni.socket_path) as h:
        yield h


def reported(harness: CRIHarness, sandbox_id: str) -> tuple[tuple[str, ...], bool]:
    """What the runtime says of a sandbox's network, asked directly (crictl inspectp)."""
    status = harness.runtime.PodSandboxStatus(
        api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id), timeout=10
    ).status
    texts = [status.network.ip, *(p.ip for p in status.network.additional_ips)]
    ips = tuple(ipaddress.ip_address(t).compressed for t in texts if t)
    return ips, status.linux.namespaces.options.network == api_pb2.NODE


def ipam_owner(cni: CNIContainerd, ip: str) -> str:
    """The container host-local wrote down for ``ip`` (its files: one per address held)."""
    (network,) = [d for d in cni.ipam.iterdir() if d.is_dir()]
    return (network / ip).read_text().split()[0]


def listing(kind: str, endpoint: str) -> tuple[PodList, int]:
    """One listing by the twin ``kind`` and the status calls it made."""
    if kind == "sync":
        with CRIRuntime(endpoint) as runtime:
            return runtime.get_pods(), runtime.status_calls

    async def twin() -> tuple[PodList, int]:
        async with AsyncCRIRuntime(endpoint) as runtime:
            return await runtime.get_pods(), runtime.status_calls

    return asyncio.run(twin())


@pytest.fixture(scope="module")
def pods(harness: CRIHarness) -> list[str]:
    """Three pods on the pod network and one on the host network; their sandbox IDs."""
    made = [harness.run_pod(f"cni-{n}", pod_network=True) for n in range(3)]
    made.append(harness.run_pod("cni-host"))
    return [sandbox.id for sandbox in made]


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_pod_ips_are_what_the_runtime_and_the_ipam_report(
    cni: CNIContainerd, harness: CRIHarness, pods: list[str], kind: str
) -> None:
    got, calls = listing(kind, cni.endpoint)
    assert calls == len(pods)  # one status call per READY sandbox
    for sandbox_id in pods:
        record = harness.sandboxes[sandbox_id]
        pod = got.by_uid(record.uid)
        assert pod is not None
        assert (pod.ips, pod.host_network) == reported(harness, sandbox_id)
        if record.name == "cni-host":
            assert pod.host_network and pod.ips == ()
            continue
        assert pod.ips and not pod.host_network
        assert ipaddress.ip_address(pod.ips[0]).version == 4  # the primary is the first range's
        for ip in pod.ips:
            assert ipam_owner(cni, ip) == sandbox_id
            assert got.by_ip(ip) is pod
            assert got.by_ip(ipaddress.ip_address(ip).exploded) is pod  # any spelling


def test_the_clis_one_shot_read_is_the_clients_on_a_real_runtime(
    cni: CNIContainerd, pods: list[str]
) -> None:
    """``OneShotRuntime`` (its own HTTP/2 client and HPACK decoder) against containerd's
    grpc-go, whose answers use Huffman strings and its dynamic table: the listing of
    ``CRIRuntime``, IPs included, and its Version, read by itself (no fallback); ``which``'s
    lookup of one IP gives the full listing's pod."""
    oneshot = OneShotRuntime(cni.endpoint, timeout=10.0)
    with CRIRuntime(cni.endpoint, timeout=10.0) as reference:
        for all_ in (False, True):
            assert oneshot.get_pods(all_) == reference.get_pods(all_)
        assert oneshot.version() == reference.version()
        full = reference.get_pods(False)
    assert oneshot.fallbacks == 0
    ip = next(ip for pod in full for ip in pod.ips)
    found = OneShotRuntime(cni.endpoint, timeout=10.0, find_ips=frozenset({ip})).get_pods()
    assert found.by_ip(ip) == full.by_ip(ip)


def test_status_is_asked_once_per_sandbox_on_a_real_runtime(
    cni: CNIContainerd, harness: CRIHarness, pods: list[str]
) -> None:
    with CRIRuntime(cni.endpoint) as runtime:
        first = runtime.get_pods()
        assert runtime.status_calls == len(first)
        assert runtime.get_pods() == first
        assert runtime.status_calls == len(first)  # steady: none
        extra = harness.run_pod("cni-late", pod_network=True)
        try:
            later = runtime.get_pods()
            assert runtime.status_calls == len(first) + 1
            pod = later.by_uid(extra.uid)
            assert pod is not None and (pod.ips, pod.host_network) == reported(harness, extra.id)
        finally:
            harness.remove_pod(extra)
        gone = runtime.get_pods()
        assert gone.by_uid(extra.uid) is None
        assert runtime.status_calls == len(first) + 1
        assert runtime.status_failures == runtime.invalid_ips == 0


def test_an_events_sandbox_status_gives_the_ips_with_no_call(
    cni: CNIContainerd, harness: CRIHarness, pods: list[str]
) -> None:
    with CRIRuntime(cni.endpoint) as runtime:
        runtime.get_pods()
        calls = runtime.status_calls
        stream = runtime.container_events()
        stream.open()
        timer = threading.Timer(30.0, stream.close)  # a runtime that never tells: no hang
        timer.start()
        try:
            extra = harness.run_pod("cni-evented", pod_network=True)
            for event in stream:
                if event.pod_sandbox_id == extra.id and event.type.value == "started":
                    break
        finally:
            timer.cancel()
            stream.close()
        try:
            pods_now = runtime.get_pods()
            assert runtime.status_calls == calls  # learnt from the event
            pod = pods_now.by_uid(extra.uid)
            assert pod is not None and pod.ips
            assert (pod.ips, pod.host_network) == reported(harness, extra.id)
        finally:
            harness.remove_pod(extra)


def netns_of(cni: CNIContainerd, sandbox_id: str) -> Path:
    """The network namespace CRI made for a sandbox (its OCI spec names it)."""
    spec = cni.directory / "state/io.containerd.runtime.v2.task/k8s.io" / sandbox_id
    document = json.loads((spec / "config.json").read_text())
    (path,) = [n["path"] for n in document["linux"]["namespaces"] if n["type"] == "network"]
    return Path(path)


def test_teardown_removes_the_bridge_the_ipam_state_and_the_netns(
    cni: CNIContainerd, harness: CRIHarness, pods: list[str]
) -> None:
    namespaces = [netns_of(cni, sid) for sid in pods if reported(harness, sid)[0]]
    assert namespaces and all(ns.exists() for ns in namespaces)
    held = [ip for sid in pods for ip in reported(harness, sid)[0]]
    assert held and all((next(cni.ipam.iterdir()) / ip).exists() for ip in held)
    assert Path("/sys/class/net", cni.bridge).exists()
    down = _run(DOWN, cni.directory, VERSION, 120.0, CNI)
    assert down.returncode == 0, down.stderr[-3000:]
    assert not Path("/sys/class/net", cni.bridge).exists()
    assert not cni.ipam.exists()
    assert not any(ns.exists() for ns in namespaces)
    assert IP_FORWARD.read_text() == cni.ip_forward  # no gateway: forwarding never touched
