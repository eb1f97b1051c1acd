"""Pod IPs over real CRI (the simulated runtime on a unix socket), both getter twins:
``Pod.ips`` and ``Pod.host_network`` are what ``PodSandboxStatus`` of the pod's newest
READY sandbox says; status is asked once per new sandbox ID (counted by the runtime itself),
never on a steady node; an event's sandbox status fills the memo with no call; hostile IP
strings are dropped and counted; a failed status call leaves the IPs empty until a retry, at
most ``STATUS_ATTEMPTS`` calls per sandbox; ``get_pod`` fills IPs the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from podcache import Pod, PodList
from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.cri.networks import STATUS_ATTEMPTS
from podcache.sim import PodShape, SimRuntime, SimSandboxState, cli_main

STATUS = "PodSandboxStatus"


class Getter(Protocol):
    invalid_ips: int
    status_calls: int
    status_failures: int

    def get_pods(self, all: bool = False) -> PodList: ...
    def get_pod(self, uid: str) -> Pod | None: ...
    def close(self) -> None: ...


class AsyncTwin:
    """``AsyncCRIRuntime`` driven from a test's thread on a loop of its own."""

    def __init__(self, endpoint: str) -> None:
        self._loop = asyncio.new_event_loop()
        self.runtime = AsyncCRIRuntime(endpoint)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)

    def get_pods(self, all: bool = False) -> PodList:
        return self._loop.run_until_complete(self.runtime.get_pods(all))

    def get_pod(self, uid: str) -> Pod | None:
        return self._loop.run_until_complete(self.runtime.get_pod(uid))

    def close(self) -> None:
        self._loop.run_until_complete(self.runtime.close())
        self._loop.close()


def _getter(kind: str, endpoint: str) -> Getter:
    return CRIRuntime(endpoint) if kind == "sync" else AsyncTwin(endpoint)  # type: ignore[return-value]


@pytest.fixture(params=["sync", "asyncio"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def truth(sim: SimRuntime) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Pod UID -> (IPs, host network) of its newest READY sandbox, from the population."""
    newest: dict[str, Any] = {}
    for sandbox in sim.population.snapshot().sandboxes:
        if sandbox.state is not SimSandboxState.READY:
            continue
        best = newest.get(sandbox.uid)
        key = (-sandbox.created_at, sandbox.id)
        if best is None or key < (-best.created_at, best.id):
            newest[sandbox.uid] = sandbox
    return {
        uid: ((), True) if s.host_network else (((s.ip,) if s.ip else ()), False)
        for uid, s in newest.items()
    }


def ready_sandboxes(pods: PodList) -> set[str]:
    return {
        next(s.id.id for s in pod.sandboxes if s.state.value == "running")
        for pod in pods
        if any(s.state.value == "running" for s in pod.sandboxes)
    }


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(120, seed=23, host_network=0.1) as runtime, runtime.pause_churn():
        yield runtime


def test_ips_are_the_newest_ready_sandboxs_and_host_network_pods_have_none(
    sim: SimRuntime, kind: str
) -> None:
    getter = _getter(kind, sim.endpoint)
    try:
        pods = getter.get_pods()
        expected = truth(sim)
        assert {p.id: (p.ips, p.host_network) for p in pods} == expected
        assert any(host for _, host in expected.values())  # the population has both kinds
        assert sum(1 for ips, _ in expected.values() if ips) > 50
        for pod in pods:
            for ip in pod.ips:
                assert ipaddress.ip_address(ip) in ipaddress.ip_network("10.244.0.0/16")
                assert pods.by_ip(ip) is pod
        assert getter.invalid_ips == 0
    finally:
        getter.close()


def test_status_is_asked_once_per_new_sandbox_and_never_on_a_steady_node(
    sim: SimRuntime, kind: str
) -> None:
    getter = _getter(kind, sim.endpoint)
    try:
        first = getter.get_pods()
        cold = sim.calls().get(STATUS, 0)
        assert cold == len(ready_sandboxes(first)) == getter.status_calls
        for _ in range(3):
            assert getter.get_pods() == first
        assert sim.calls().get(STATUS, 0) == cold  # a steady node: no call at all
        seen = ready_sandboxes(first)
        for _ in range(4):
            sim.churn_step(3)
            pods = getter.get_pods()
            new = ready_sandboxes(pods) - seen
            seen |= new
            assert {p.id: (p.ips, p.host_network) for p in pods} == truth(sim)
        assert sim.calls()[STATUS] == len(seen) == getter.status_calls
    finally:
        getter.close()


def test_a_freed_ip_passes_to_the_next_pod_and_by_ip_follows_it(sim: SimRuntime, kind: str) -> None:
    getter = _getter(kind, sim.endpoint)
    try:
        before = getter.get_pods()
        victim = next(p for p in before if p.ips)
        ip = victim.ips[0]
        assert before.by_ip(ip) is victim
        sim.population.remove_pod(victim.id)
        gone = getter.get_pods()
        assert gone.by_ip(ip) is None
        uid = ""
        for _ in range(50):  # the next READY pod on the pod network takes it
            uid, _ = sim.population.create_pod(PodShape.RUNNING)
            if truth(sim)[uid][0]:
                break
        after = getter.get_pods()
        heir = after.by_uid(uid)
        assert heir is not None and ip in heir.ips  # reused first
        assert after.by_ip(ip) is heir
    finally:
        getter.close()


def test_hostile_ip_strings_are_dropped_and_counted_never_an_error(
    sim: SimRuntime, kind: str
) -> None:
    bad = ("not-an-ip", "10.244.0.256", "fe80::1%eth0", "1.2.3.4/24", "\u0661.2.3.4", "x" * 5000)
    sim.faults.bad_ips = bad
    getter = _getter(kind, sim.endpoint)
    try:
        pods = getter.get_pods()
        assert {p.id: (p.ips, p.host_network) for p in pods} == truth(sim)
        on_pod_network = sum(1 for ips, host in truth(sim).values() if not host)
        assert getter.invalid_ips == on_pod_network * len(bad)  # host-network ones are not read
    finally:
        getter.close()


def test_a_failed_status_call_leaves_ips_empty_until_a_bounded_retry(
    sim: SimRuntime, kind: str
) -> None:
    sim.faults.unimplemented = {STATUS}
    getter = _getter(kind, sim.endpoint)
    try:
        pods = getter.get_pods()
        ready = len(ready_sandboxes(pods))
        assert all(p.ips == () and not p.host_network for p in pods)  # unknown, not wrong
        assert getter.status_failures == ready
        getter.get_pods()
        assert getter.status_failures == 2 * ready  # retried at the next listing
        sim.faults.unimplemented = ()
        healed = getter.get_pods()
        assert {p.id: (p.ips, p.host_network) for p in healed} == truth(sim)
        assert getter.status_calls == 3 * ready

        # A sandbox that keeps failing is given up after STATUS_ATTEMPTS calls.
        sim.faults.unimplemented = {STATUS}
        sim.population.create_pod(PodShape.RUNNING)
        for _ in range(STATUS_ATTEMPTS + 3):
            getter.get_pods()
        assert sim.calls()[STATUS] == 3 * ready + STATUS_ATTEMPTS
    finally:
        getter.close()


def test_get_pod_fills_ips_the_same_way(sim: SimRuntime, kind: str) -> None:
    getter = _getter(kind, sim.endpoint)
    try:
        expected = truth(sim)
        uid = next(u for u, (ips, _) in expected.items() if ips)
        pod = getter.get_pod(uid)
        assert pod is not None and (pod.ips, pod.host_network) == expected[uid]
        assert getter.status_calls == 1
        full = getter.get_pods()  # the memo already knows that sandbox
        assert getter.status_calls == len(ready_sandboxes(full))
        assert full.by_uid(uid) == pod
    finally:
        getter.close()


def test_an_events_sandbox_status_fills_the_memo_with_no_call(sim: SimRuntime) -> None:
    with CRIRuntime(sim.endpoint) as runtime:
        runtime.get_pods()
        calls = sim.calls()[STATUS]
        stream = runtime.container_events()
        stream.open()
        sim.wait_for_event_subscribers()
        uid, events = sim.population.create_pod(PodShape.RUNNING)
        for _ in events:
            next(stream)
        stream.close()
        pods = runtime.get_pods()
        assert sim.calls()[STATUS] == calls  # learnt from the events
        pod = pods.by_uid(uid)
        assert pod is not None and (pod.ips, pod.host_network) == truth(sim)[uid]


def test_the_sim_command_takes_the_cidr_and_bad_ips_and_counts_status_calls(
    tmp_path: Path,
) -> None:
    """``podcache sim --pod-cidr --host-network --bad-ip``, in a process of its own (as the
    benchmark runs it); its stats file (written on SIGUSR1) counts the status calls."""
    code = "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))"
    stats = tmp_path / "stats.json"
    args = ["--pods", "30", "--pod-cidr", "fd00:77::/112", "--host-network", "0", "--bad-ip", "x"]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args, "--stats-file", str(stats)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        with CRIRuntime(endpoint) as runtime:
            pods = runtime.get_pods()
            ips = [ip for pod in pods for ip in pod.ips]
            assert len(ips) == runtime.status_calls == len(pods) > 10
            network = ipaddress.ip_network("fd00:77::/112")
            assert all(ipaddress.ip_address(ip) in network for ip in ips)
            assert runtime.invalid_ips == len(pods)  # one "x" per status answer
    finally:
        proc.terminate()
        proc.wait(10)
    counts = json.loads(stats.read_text())  # written once more on the way out
    status = counts["calls"]["PodSandboxStatus"]
    assert sum(kind["calls"] for kind in status.values()) == len(pods)


def test_the_sim_command_refuses_a_cidr_that_is_not_a_network(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["--pod-cidr", "10.0.0.1/8"]) == 2
    assert "--pod-cidr" in capsys.readouterr().err
