"""CRIRuntime against the simulated runtime: exactly the simulation's pods, under churn and faults.

The expected PodList is built here, independently, from the population's snapshot: a small
transcription of the kubelet's grouping rules (reference/kubelet-runtime-cache.md) plus the
project's total order. It deliberately shares no code with ``podcache.cri.convert``.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from podcache import (
    AsyncRuntimeCache,
    Container,
    ContainerID,
    ContainerState,
    Pod,
    PodList,
    RuntimeCache,
)
from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.errors import (
    CRIError,
    RuntimeDeadlineError,
    RuntimeProtocolError,
    RuntimeUnavailableError,
)
from podcache.sim import (
    Malformed,
    PodShape,
    SimContainer,
    SimContainerState,
    SimEvent,
    SimRuntime,
    SimSandbox,
    SimSandboxState,
    malformed_uid,
)
from tests.unit.cri.servers import raw_peer

RUNTIME = "podcache-sim"
TIMEOUT = 2.0
HEX = re.compile(r"[0-9a-fA-F]+")
CONTAINER_STATES = {
    SimContainerState.CREATED: ContainerState.CREATED,
    SimContainerState.RUNNING: ContainerState.RUNNING,
    SimContainerState.EXITED: ContainerState.EXITED,
    SimContainerState.UNKNOWN: ContainerState.UNKNOWN,
}


# -- the expected model, built from the simulation's own records -------------------------------
def kubelet_hash(annotations: dict[str, str]) -> int:
    text = annotations.get("io.kubernetes.container.hash", "")
    if not HEX.fullmatch(text) or int(text, 16) >= 1 << 64:
        return 0
    return int(text, 16)


def expected_pods(
    sandboxes: Iterable[SimSandbox],
    containers: Iterable[SimContainer],
    *,
    all: bool,
    runtime: str = RUNTIME,
) -> PodList:
    """What the kubelet's GetPods(all) makes of these records, in podcache's total order.

    Plus podcache's pod labels: the newest sandbox's, less the ``io.kubernetes.pod.*`` keys
    and CRI-O's ``io.kubernetes.container.name``, and its IPs and host-network flag: the newest
    READY sandbox's status's.
    """
    if not all:
        sandboxes = [s for s in sandboxes if s.state is SimSandboxState.READY]
        containers = [c for c in containers if c.state is SimContainerState.RUNNING]
    heads: dict[str, tuple[str, str]] = {}
    pod_sandboxes: dict[str, list[SimSandbox]] = {}
    pod_containers: dict[str, list[SimContainer]] = {}
    for sandbox in sandboxes:
        if not sandbox.has_metadata:
            continue
        heads.setdefault(sandbox.uid, (sandbox.name, sandbox.namespace))
        if sandbox.id:
            pod_sandboxes.setdefault(sandbox.uid, []).append(sandbox)
    for container in containers:
        if not container.has_metadata:
            continue
        labels = container.labels
        uid = labels.get("io.kubernetes.pod.uid", "")
        heads.setdefault(
            uid,
            (
                labels.get("io.kubernetes.pod.name", ""),
                labels.get("io.kubernetes.pod.namespace", ""),
            ),
        )
        if container.id and container.has_image:
            pod_containers.setdefault(uid, []).append(container)

    pods = []
    for uid, (name, namespace) in heads.items():
        own_sandboxes = sorted(pod_sandboxes.get(uid, []), key=lambda s: (-s.created_at, s.id))
        own_containers = sorted(pod_containers.get(uid, []), key=lambda c: (-c.created_at, c.id))
        ready = next((s for s in own_sandboxes if s.state is SimSandboxState.READY), None)
        pods.append(
            Pod(
                ips=[ready.ip] if ready and ready.ip and not ready.host_network else [],
                host_network=bool(ready and ready.host_network),
                id=uid,
                name=name,
                namespace=namespace,
                created_at=max((s.created_at for s in own_sandboxes), default=0),
                labels={
                    key: value
                    for key, value in (own_sandboxes[0].labels if own_sandboxes else {}).items()
                    if not key.startswith("io.kubernetes.pod.")
                    and key != "io.kubernetes.container.name"
                },
                sandboxes=[
                    Container(
                        id=ContainerID(runtime, s.id),
                        state=ContainerState.RUNNING
                        if s.state is SimSandboxState.READY
                        else ContainerState.EXITED,
                        attempt=s.attempt,
                    )
                    for s in own_sandboxes
                ],
                containers=[
                    Container(
                        id=ContainerID(runtime, c.id),
                        sandbox_id=c.pod_sandbox_id,
                        name=c.name,
                        image=c.image,
                        image_id=c.image_id or c.image_ref,
                        image_ref=c.image_ref,
                        image_runtime_handler=c.image_runtime_handler,
                        hash=kubelet_hash(dict(c.annotations)),
                        state=CONTAINER_STATES[c.state],
                        attempt=c.attempt,
                    )
                    for c in own_containers
                ],
            )
        )
    pods.sort(key=lambda p: (-p.created_at, p.id))
    return PodList(pods)


def expected_now(sim: SimRuntime, *, all: bool) -> PodList:
    snapshot = sim.population.snapshot()
    extra_sandboxes, extra_containers = sim.faults.malformed_items()
    return expected_pods(
        snapshot.sandboxes + extra_sandboxes,
        snapshot.containers + extra_containers,
        all=all,
        runtime=sim.flavor.runtime_name,
    )


def assert_same_pods(actual: PodList, expected: PodList) -> None:
    # Compare pod by pod first for a readable failure, then the whole lists.
    assert [p.id for p in actual] == [p.id for p in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got == want, f"pod {want.id} ({want.full_name}) differs"
    assert actual == expected


@pytest.fixture(params=["containerd", "crio"])
def sim(request: pytest.FixtureRequest) -> Iterator[SimRuntime]:
    """150 pods, as containerd and as CRI-O (its name, chunking and sandbox label)."""
    with SimRuntime(pods=150, seed=31, flavor=request.param) as runtime:
        yield runtime


@pytest.fixture
def cri(sim: SimRuntime) -> Iterator[CRIRuntime]:
    with CRIRuntime(sim.endpoint, timeout=TIMEOUT) as client:
        yield client


# -- exact pods -------------------------------------------------------------------------------
@pytest.mark.parametrize("all", [False, True], ids=["running", "all"])
def test_get_pods_returns_exactly_the_simulated_pods(
    sim: SimRuntime, cri: CRIRuntime, all: bool
) -> None:
    assert_same_pods(cri.get_pods(all), expected_now(sim, all=all))


def test_the_expected_model_covers_ties_states_and_image_fallbacks(
    sim: SimRuntime, cri: CRIRuntime
) -> None:
    # Guards the test itself: the comparison above must have exercised these cases.
    pods = cri.get_pods(True)
    created = [p.created_at for p in pods]
    assert len(set(created)) < len(created)  # pods tied on created_at, ordered by ID
    containers = [c for p in pods for c in p.containers]
    assert {c.state for c in containers} == set(ContainerState)
    assert any(c.image_id == c.image_ref and "@sha256:" not in c.image_ref for c in containers)
    assert any("@sha256:" in c.image_ref and c.image_id != c.image_ref for c in containers)
    assert any(len(p.sandboxes) == 2 for p in pods)
    assert all(dict(p.labels).keys() >= {"app", "tier"} for p in pods if p.sandboxes)
    runtime = sim.flavor.runtime_name
    assert all(c.id.type == runtime for p in pods for c in (*p.containers, *p.sandboxes))
    running = cri.get_pods(False)
    assert len(running) < len(pods)
    assert all(s.state is ContainerState.RUNNING for p in running for s in p.sandboxes)


def test_malformed_items_are_handled_by_the_kubelets_rules(
    sim: SimRuntime, cri: CRIRuntime
) -> None:
    sim.faults.malformed = set(Malformed)
    for all in (False, True):
        pods = cri.get_pods(all)
        assert_same_pods(pods, expected_now(sim, all=all))
    pods = cri.get_pods(False)
    orphan = pods.by_uid("")
    assert orphan is not None
    assert (orphan.name, orphan.namespace, orphan.created_at) == ("", "", 0)
    invalid = pods.by_uid(malformed_uid(Malformed.CONTAINER_INVALID_HASH))
    assert invalid is not None
    assert [c.hash for c in invalid.containers] == [0]
    assert pods.by_uid(malformed_uid(Malformed.SANDBOX_NO_METADATA)) is None
    assert pods.by_uid(malformed_uid(Malformed.CONTAINER_NO_METADATA)) is None
    for kind in (Malformed.SANDBOX_EMPTY_ID, Malformed.CONTAINER_NO_IMAGE):
        empty = pods.by_uid(malformed_uid(kind))
        assert empty is not None
        assert (empty.containers, empty.sandboxes) == ((), ())


# -- churn ------------------------------------------------------------------------------------
def test_paused_churn_gives_exactly_the_snapshot_and_resumes() -> None:
    with (
        SimRuntime(pods=120, seed=5, churn=80.0) as sim,
        CRIRuntime(sim.endpoint, timeout=TIMEOUT) as cri,
    ):
        generations = []
        for _ in range(3):
            with sim.pause_churn():
                generations.append(sim.population.generation)
                assert_same_pods(cri.get_pods(True), expected_now(sim, all=True))
                assert_same_pods(cri.get_pods(False), expected_now(sim, all=False))
                assert sim.population.generation == generations[-1]
            time.sleep(0.1)
        assert generations[0] < generations[1] < generations[2]


def test_under_running_churn_every_item_returned_existed_during_the_call() -> None:
    with (
        SimRuntime(pods=100, seed=8, churn=300.0) as sim,
        CRIRuntime(sim.endpoint, timeout=TIMEOUT) as cri,
    ):
        events: list[SimEvent] = []
        unsubscribe = sim.population.subscribe(events.extend)
        try:
            changes = 0
            for all in (True, False) * 4:
                before = sim.population.snapshot()
                first_event = len(events)
                pods = cri.get_pods(all)
                window = events[first_event:]
                changes += len(window)
                known_ids = {s.id for s in before.sandboxes} | {c.id for c in before.containers}
                known_ids |= {e.container_id for e in window}
                known_uids = before.pod_uids() | {
                    e.sandbox.uid for e in window if e.sandbox is not None
                }
                for pod in pods:
                    assert pod.id in known_uids
                    for item in (*pod.containers, *pod.sandboxes):
                        assert item.id.id in known_ids
        finally:
            unsubscribe()
        assert changes > 0  # the calls really overlapped churn


# -- the cache on top -------------------------------------------------------------------------
def test_runtime_cache_serves_one_object_until_the_period_passes(
    sim: SimRuntime, cri: CRIRuntime
) -> None:
    cri.get_pods()  # the getter learns every sandbox's IPs: the cache's refreshes make no call
    now = [1000.0]  # the cache's clock, moved by the test (a loaded machine moves no period)
    cache = RuntimeCache(cri, 0.2, clock=lambda: now[0])
    first = cache.get_pods()
    assert cache.get_pods() is first
    uid, _ = sim.population.create_pod(PodShape.RUNNING)
    now[0] += 0.19
    assert cache.get_pods() is first  # still within the period: the new pod is not seen
    now[0] += 0.02
    refreshed = cache.get_pods()
    assert refreshed is not first
    assert refreshed.by_uid(uid) is not None
    assert_same_pods(refreshed, expected_now(sim, all=False))


# -- asyncio ----------------------------------------------------------------------------------
async def test_the_async_client_returns_the_same_pods(sim: SimRuntime) -> None:
    async with AsyncCRIRuntime(sim.endpoint, timeout=TIMEOUT) as cri:
        for all in (False, True):
            assert_same_pods(await cri.get_pods(all), expected_now(sim, all=all))
        # The getter knows every sandbox's IPs already; the clock stands still (a loaded
        # machine's pause between the two reads must not end the period).
        cache = AsyncRuntimeCache(cri, 0.2, clock=lambda: 1000.0)
        first = await cache.get_pods()
        assert await cache.get_pods() is first
        assert_same_pods(first, expected_now(sim, all=False))


async def test_the_async_client_gives_up_on_a_hanging_runtime_in_time(sim: SimRuntime) -> None:
    sim.faults.hang()
    async with AsyncCRIRuntime(sim.endpoint, timeout=1.0) as cri:
        started = time.monotonic()
        with pytest.raises(RuntimeDeadlineError):  # the hang holds for ever: the deadline ended it
            await cri.get_pods(False)
        assert time.monotonic() - started >= 1.0  # and not before it


# -- errors -----------------------------------------------------------------------------------
def fails_in_time(endpoint: str, timeout: float = 1.0) -> CRIError:
    """The error of one ``get_pods`` with ``timeout``: it ends the call, whatever the endpoint
    does (a call that never ends fails by the test's own timeout); how long past the deadline
    a loaded machine takes is not bounded here."""
    with (
        CRIRuntime(endpoint, timeout=timeout) as cri,
        pytest.raises(CRIError) as caught,
    ):
        cri.get_pods(False)
    assert endpoint.removeprefix("unix://") in str(caught.value)
    return caught.value


def test_an_endpoint_with_no_socket_is_unreachable(tmp_path: Path) -> None:
    error = fails_in_time(f"unix://{tmp_path}/missing.sock")
    assert isinstance(error, RuntimeUnavailableError)


def test_a_socket_that_does_not_speak_grpc_is_a_protocol_error(tmp_path: Path) -> None:
    def answer_http(conn: socket.socket) -> None:
        # Like an HTTP/1 server: read the request (gRPC's preface), answer, hang up.
        conn.settimeout(1.0)
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(4096):
            pass

    with raw_peer(str(tmp_path / "http.sock"), answer_http) as endpoint:
        error = fails_in_time(endpoint)
    assert isinstance(error, RuntimeProtocolError)


def test_a_grpc_server_that_is_not_a_cri_runtime_is_a_protocol_error(sim: SimRuntime) -> None:
    sim.faults.unimplemented = {"Version"}
    error = fails_in_time(sim.endpoint)
    assert isinstance(error, RuntimeProtocolError)


def test_a_hanging_runtime_is_a_deadline_error_in_time(sim: SimRuntime) -> None:
    sim.faults.hang()
    error = fails_in_time(sim.endpoint)
    assert isinstance(error, RuntimeDeadlineError)
    assert isinstance(error, TimeoutError)


def test_a_list_failure_fails_the_whole_call(sim: SimRuntime, cri: CRIRuntime) -> None:
    cri.get_pods(False)  # connected, Version known
    sim.faults.fail_rate = 1.0
    with pytest.raises(RuntimeUnavailableError):
        cri.get_pods(False)
    sim.faults.fail_rate = 0.0
    assert_same_pods(cri.get_pods(False), expected_now(sim, all=False))
