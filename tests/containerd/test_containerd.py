"""podcache against a real containerd: exact pod lists, the cache's freshness, and faults.

One population of pods is made once for the module (through the CRI harness, like the kubelet
would) and reused; the pods each test expects are computed here from the harness's records,
never by podcache's conversion code. Tests that add pods record them too, so later tests still
know exactly what the runtime holds. The fault tests SIGKILL containerd and restart it; they
come last.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from podcache import Container, ContainerID, ContainerState, Pod, PodList, RuntimeCache
from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.cri.proto import api_pb2
from podcache.errors import RuntimeUnavailableError
from tests.containerd.conftest import Containerd
from tests.containerd.harness import (
    ANNOTATION_HASH,
    BUSYBOX_IMAGE,
    CONTAINER_CREATED,
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    EXITING_COMMAND,
    LABEL_CONTAINER_NAME,
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
    SANDBOX_NOTREADY,
    SANDBOX_READY,
    ContainerRecord,
    CRIHarness,
    SandboxRecord,
)

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(300)]

RUNTIME_NAME = "containerd"
TIMEOUT = 2.0  # the CRIRuntime deadline the fault tests hold podcache to
SLACK = 1.0  # scheduling slack on a loaded 2-core machine
KUBELET_POD_LABEL_PREFIX = "io.kubernetes.pod."
BACKOFF_GROWN = 6.0  # s into an outage, gRPC's reconnect backoff is seconds long (> TIMEOUT)
BACKOFF_WAIT_MAX = 12.0


def cri_runtime(endpoint: str, timeout: float = TIMEOUT) -> CRIRuntime:
    return CRIRuntime(endpoint, timeout=timeout)


# -- the expected pods, from the harness's records ---------------------------------------------
_CONTAINER_STATES: dict[int, ContainerState] = {
    CONTAINER_CREATED: ContainerState.CREATED,
    CONTAINER_RUNNING: ContainerState.RUNNING,
    CONTAINER_EXITED: ContainerState.EXITED,
}
_SANDBOX_STATES: dict[int, ContainerState] = {
    SANDBOX_READY: ContainerState.RUNNING,
    SANDBOX_NOTREADY: ContainerState.EXITED,
}


@dataclass
class _PodParts:
    name: str
    namespace: str
    sandboxes: list[SandboxRecord] = field(default_factory=list)
    containers: list[ContainerRecord] = field(default_factory=list)


def _newest_first(created_at: int, ident: str) -> tuple[int, str]:
    return (-created_at, ident)


def expected_pods(h: CRIHarness, image_id: str, *, all: bool) -> list[Pod]:
    """What get_pods(all) must return, by the documented rules, from what the harness did.

    all=False: READY sandboxes and RUNNING containers only; all=True: everything not removed.
    Pods are grouped by UID; created_at and labels are the newest sandbox's (labels less the
    kubelet's ``io.kubernetes.pod.*`` keys); host_network (no IPs) when a sandbox is READY
    (the newest READY sandbox's status; every harness pod is on the host network);
    pods newest first, ties by UID; containers and sandboxes newest first, ties by ID.
    """
    parts: dict[str, _PodParts] = {}
    for s in h.live_sandboxes():
        if all or s.state == SANDBOX_READY:
            parts.setdefault(s.uid, _PodParts(s.name, s.namespace)).sandboxes.append(s)
    for c in h.live_containers():
        if all or c.state == CONTAINER_RUNNING:
            parts.setdefault(c.pod_uid, _PodParts(c.pod_name, c.pod_namespace)).containers.append(c)
    for p in parts.values():
        p.sandboxes.sort(key=lambda s: _newest_first(s.created_at, s.id))
        p.containers.sort(key=lambda c: _newest_first(c.created_at, c.id))
    pods = [
        Pod(
            id=uid,
            name=p.name,
            namespace=p.namespace,
            created_at=max((s.created_at for s in p.sandboxes), default=0),
            labels={  # the newest sandbox's, less the kubelet's own pod keys
                key: value
                for key, value in (p.sandboxes[0].labels if p.sandboxes else {}).items()
                if not key.startswith(KUBELET_POD_LABEL_PREFIX)
            },
            # The harness's pods are on the host network (no CNI here): no IPs of their own,
            # and host_network as the newest READY sandbox's status says.
            host_network=any(s.state == SANDBOX_READY for s in p.sandboxes),
            containers=[
                Container(
                    id=ContainerID(RUNTIME_NAME, c.id),
                    sandbox_id=c.sandbox_id,
                    name=c.name,
                    image=c.image,
                    image_id=image_id,  # containerd 1.6 leaves image_id empty: image_ref
                    image_ref=image_id,
                    hash=c.hash,
                    state=_CONTAINER_STATES[c.state],
                    attempt=c.attempt,
                )
                for c in p.containers
            ],
            sandboxes=[
                Container(
                    id=ContainerID(RUNTIME_NAME, s.id),
                    state=_SANDBOX_STATES[s.state],
                    attempt=s.attempt,
                )
                for s in p.sandboxes
            ],
        )
        for uid, p in parts.items()
    ]
    return sorted(pods, key=lambda pod: _newest_first(pod.created_at, pod.id))


@dataclass
class Population:
    """The module's pods: the harness that made (and tracks) them, and a few of them by role."""

    harness: CRIHarness
    image_id: str
    roles: dict[str, SandboxRecord]

    def expected(self, *, all: bool) -> list[Pod]:
        return expected_pods(self.harness, self.image_id, all=all)

    def add_pod(self, name: str) -> SandboxRecord:
        sandbox = self.harness.run_pod(name, labels={"app": name})
        self.harness.create_container(sandbox, "app")
        return sandbox


@pytest.fixture(scope="module")
def population(cri_harness: CRIHarness) -> Iterator[Population]:
    """Ten pods made once: running, exited, created-only, stopped, re-created, removed."""
    h = cri_harness
    started = time.monotonic()
    h.remove_all()  # exactly what this module makes, even on a reused runtime
    roles: dict[str, SandboxRecord] = {}

    web0 = roles["web-0"] = h.run_pod("web-0", labels={"app": "web"})
    h.create_container(web0, "nginx")

    web1 = roles["web-1"] = h.run_pod("web-1", labels={"app": "web", "tier": "front"})
    h.create_container(web1, "nginx")
    h.create_container(web1, "sidecar", hash_hex="ffffffffffffffff")  # uint64 max
    h.remove_container(h.create_container(web1, "scratch"))  # created, then removed again

    db0 = roles["db-0"] = h.run_pod("db-0", "data", labels={"app": "db"})
    for name in ("postgres", "backup", "metrics"):
        h.create_container(db0, name)

    job0 = roles["job-0"] = h.run_pod("job-0", "batch")
    main = h.create_container(job0, "main", command=EXITING_COMMAND)
    h.create_container(job0, "sidecar")
    assert h.wait_exited(main) == 0

    crash0 = roles["crash-0"] = h.run_pod("crash-0")  # a restarted container: attempts 0 and 1
    first = h.create_container(crash0, "app", command=EXITING_COMMAND, attempt=0)
    h.wait_exited(first)
    h.create_container(crash0, "app", attempt=1)

    stopped0 = roles["stopped-0"] = h.run_pod("stopped-0")  # NOTREADY sandbox, EXITED container
    h.create_container(stopped0, "app")
    h.stop_pod(stopped0)

    # Two sandboxes of one UID: the newer one's created_at and labels are the pod's.
    old = roles["recreated-0/0"] = h.run_pod("recreated-0", labels={"version": "1"})
    h.create_container(old, "app")
    h.stop_pod(old)
    new = roles["recreated-0/1"] = h.run_pod(
        "recreated-0", uid=old.uid, attempt=1, labels={"version": "2"}
    )
    h.create_container(new, "app", attempt=1)

    created0 = roles["created-0"] = h.run_pod("created-0")
    h.create_container(created0, "app")
    h.create_container(created0, "init", start=False)  # stays CREATED

    dns0 = roles["coredns-0"] = h.run_pod("coredns-0", "kube-system", labels={"k8s-app": "dns"})
    h.create_container(dns0, "coredns")

    gone0 = roles["gone-0"] = h.run_pod("gone-0")  # a whole pod removed again
    h.create_container(gone0, "app")
    h.create_container(gone0, "sidecar")
    h.remove_pod(gone0)

    population = Population(h, h.image_id(BUSYBOX_IMAGE), roles)
    print(f"\n[containerd] population made in {time.monotonic() - started:.2f} s")
    yield population
    h.remove_all()


# -- the harness and the fixture, through the raw stubs only -----------------------------------
def test_harness_pods_reach_containerd_as_recorded(population: Population) -> None:
    h = population.harness
    assert h.version().runtime_name == RUNTIME_NAME

    listed = {s.id: s for s in h.list_sandboxes()}
    assert set(listed) == {s.id for s in h.live_sandboxes()}
    for rec in h.live_sandboxes():
        got = listed[rec.id]
        assert (got.metadata.name, got.metadata.uid, got.metadata.namespace) == (
            rec.name,
            rec.uid,
            rec.namespace,
        )
        assert (got.metadata.attempt, got.state, got.created_at) == (
            rec.attempt,
            rec.state,
            rec.created_at,
        )
        assert dict(got.labels) == rec.labels
        assert {LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID} <= set(got.labels)

    containers = {c.id: c for c in h.list_containers()}
    assert set(containers) == {c.id for c in h.live_containers()}
    for crec in h.live_containers():
        got_c = containers[crec.id]
        assert (got_c.metadata.name, got_c.pod_sandbox_id, got_c.state) == (
            crec.name,
            crec.sandbox_id,
            crec.state,
        )
        assert (got_c.image.image, got_c.image_ref, got_c.created_at) == (
            BUSYBOX_IMAGE,
            population.image_id,
            crec.created_at,
        )
        assert got_c.labels[LABEL_POD_UID] == crec.pod_uid
        assert got_c.labels[LABEL_CONTAINER_NAME] == crec.name
        assert got_c.annotations[ANNOTATION_HASH] == crec.hash_hex

    # The kubelet's all=False filters select exactly what the records say is READY / RUNNING.
    ready = h.runtime.ListPodSandbox(
        api_pb2.ListPodSandboxRequest(
            filter=api_pb2.PodSandboxFilter(state=api_pb2.PodSandboxStateValue(state=SANDBOX_READY))
        ),
        timeout=5,
    ).items
    assert {s.id for s in ready} == {s.id for s in h.live_sandboxes() if s.state == SANDBOX_READY}
    running = h.runtime.ListContainers(
        api_pb2.ListContainersRequest(
            filter=api_pb2.ContainerFilter(
                state=api_pb2.ContainerStateValue(state=CONTAINER_RUNNING)
            )
        ),
        timeout=5,
    ).containers
    assert {c.id for c in running} == {
        c.id for c in h.live_containers() if c.state == CONTAINER_RUNNING
    }


def test_expected_pods_cover_every_case(population: Population) -> None:
    """The scenario holds what the list tests rely on (guards the expectations themselves)."""
    running, everything = population.expected(all=False), population.expected(all=True)
    assert [p.name for p in everything] == [
        "coredns-0", "created-0", "recreated-0", "stopped-0", "crash-0", "job-0", "db-0",
        "web-1", "web-0",
    ]  # fmt: skip
    assert [p.name for p in running] == [
        "coredns-0", "created-0", "recreated-0", "crash-0", "job-0", "db-0", "web-1", "web-0",
    ]  # fmt: skip
    by_name = {p.name: p for p in everything}
    assert [c.state for c in by_name["crash-0"].containers] == ["running", "exited"]
    assert [c.state for c in by_name["created-0"].containers] == ["created", "running"]
    assert [s.state for s in by_name["recreated-0"].sandboxes] == ["running", "exited"]
    assert by_name["recreated-0"].created_at == population.roles["recreated-0/1"].created_at
    assert by_name["recreated-0"].labels == (("version", "2"),)
    assert dict(by_name["web-1"].labels) == {"app": "web", "tier": "front"}
    assert by_name["stopped-0"].labels == ()
    assert [s.state for s in by_name["stopped-0"].sandboxes] == ["exited"]
    assert len(by_name["db-0"].containers) == 3
    assert max(c.hash for c in by_name["web-1"].containers) == 2**64 - 1


# -- CRIRuntime.get_pods: exactly the expected pods, in the documented order -------------------
@pytest.mark.parametrize("form", ["unix-url", "bare-path"])
def test_get_pods_running_only_is_exactly_ready_sandboxes_and_running_containers(
    containerd: Containerd, population: Population, form: str
) -> None:
    endpoint = containerd.endpoint if form == "unix-url" else containerd.socket_path
    with cri_runtime(endpoint) as runtime:
        got = runtime.get_pods(False)
    assert isinstance(got, PodList)
    assert list(got) == population.expected(all=False)


def test_get_pods_all_adds_exited_containers_and_notready_sandboxes(
    containerd: Containerd, population: Population
) -> None:
    with cri_runtime(containerd.endpoint) as runtime:
        got = runtime.get_pods(True)
    assert list(got) == population.expected(all=True)


def test_containerd_has_no_list_streaming_and_both_getters_list_it_unary(
    containerd: Containerd, population: Population
) -> None:
    """containerd 1.6-2.1 answer StreamPodSandboxes UNIMPLEMENTED (KEP-5825 is not in them):
    the getters learn it at their first listing and list with the unary calls at once."""
    with cri_runtime(containerd.endpoint) as runtime:
        assert runtime.list_streaming is None
        got = runtime.get_pods(True)
        assert runtime.list_streaming is False
    assert list(got) == population.expected(all=True)

    async def listing() -> tuple[PodList, bool | None]:
        async with AsyncCRIRuntime(containerd.endpoint) as aruntime:
            return await aruntime.get_pods(True), aruntime.list_streaming

    in_asyncio, streaming = asyncio.run(listing())
    assert streaming is False
    assert list(in_asyncio) == population.expected(all=True)


# -- RuntimeCache over containerd --------------------------------------------------------------
class ManualClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_cache_hides_new_pod_until_period_passes(
    containerd: Containerd, population: Population
) -> None:
    clock = ManualClock(1000.0)
    with cri_runtime(containerd.endpoint) as runtime:
        cache = RuntimeCache(runtime, 5.0, clock=clock)
        before = cache.get_pods()
        assert list(before) == population.expected(all=False)
        late = population.add_pod("late-0")

        clock.now += 5.0  # exactly one period old: still fresh (refresh needs age > period)
        assert cache.get_pods() is before
        assert before.by_uid(late.uid) is None

        clock.now += 0.001
        after = cache.get_pods()
    assert after.by_uid(late.uid) is not None
    assert list(after) == population.expected(all=False)


def test_cache_shows_a_new_pod_only_after_the_period(
    containerd: Containerd, population: Population
) -> None:
    period = 2.0
    now = [1000.0]  # the cache's clock, moved by the test: making a pod may take any time
    with cri_runtime(containerd.endpoint) as runtime:
        cache = RuntimeCache(runtime, period, clock=lambda: now[0])
        before = cache.get_pods()
        late = population.add_pod("late-1")
        assert runtime.get_pods(False).by_uid(late.uid) is not None  # the runtime has it
        assert cache.get_pods() is before  # within the period: the same snapshot
        now[0] += period
        assert cache.get_pods() is before  # at the period: still (docs/architecture.md §3 rule 1)
        now[0] += 0.001
        after = cache.get_pods()
    assert after is not before
    assert after.by_uid(late.uid) is not None


def test_force_update_if_older_shows_new_pod_at_once(
    containerd: Containerd, population: Population
) -> None:
    with cri_runtime(containerd.endpoint) as runtime:
        cache = RuntimeCache(runtime, 3600.0)
        before = cache.get_pods()
        late = population.add_pod("forced-0")
        assert cache.get_pods() is before  # within the period: the same snapshot, no new pod
        cache.force_update_if_older(time.monotonic())
        after = cache.get_pods()
    assert after.by_uid(late.uid) is not None
    assert list(after) == population.expected(all=False)


# -- faults: SIGKILL and restart (last: they take the runtime away) ----------------------------
def _assert_unreachable(cache: RuntimeCache, containerd: Containerd) -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeUnavailableError) as caught:
        cache.get_pods()
    elapsed = time.monotonic() - started
    assert elapsed < TIMEOUT + SLACK, f"took {elapsed:.2f} s with a {TIMEOUT} s timeout"
    assert containerd.socket_path in str(caught.value), "the error must name the endpoint"


def test_killed_containerd_raises_unavailable_within_timeout_never_stale(
    containerd: Containerd, population: Population
) -> None:
    with cri_runtime(containerd.endpoint) as runtime:
        uncached = RuntimeCache(runtime, 0)
        short = RuntimeCache(runtime, 0.2)
        assert list(uncached.get_pods()) == population.expected(all=False)
        short.get_pods()
        containerd.kill()
        try:
            time.sleep(0.25)  # short's snapshot expires while the runtime is down
            for cache in (uncached, short):
                _assert_unreachable(cache, containerd)
            # A client that never reached the runtime fails the same way.
            with cri_runtime(containerd.endpoint) as fresh:
                _assert_unreachable(RuntimeCache(fresh, 0), containerd)
        finally:
            containerd.start()
        assert list(uncached.get_pods()) == population.expected(all=False)


class HangUpListener:
    """Holds the runtime's socket path while it is down and hangs up on every connection.

    Each accepted connection is a reconnect attempt of the client under test, so a test can
    tell when the client has just failed one and sits in gRPC's reconnect backoff.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.attempts: list[float] = []
        self._stop = threading.Event()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # the SIGKILLed daemon's stale socket
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(16)
        self._sock.settimeout(0.02)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            conn.close()
            self.attempts.append(time.monotonic())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __enter__(self) -> HangUpListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_long_lived_client_first_call_after_restart_succeeds_and_pods_survive(
    containerd: Containerd, population: Population
) -> None:
    with cri_runtime(containerd.endpoint) as runtime:
        cache = RuntimeCache(runtime, 0)
        assert list(cache.get_pods()) == population.expected(all=False)
        containerd.kill()
        killed = time.monotonic()
        try:
            _assert_unreachable(cache, containerd)  # connection refused, like any client sees
            # Then stop calling and watch the client's own reconnect attempts: with no call in
            # flight, every connection is gRPC reconnecting on its backoff timer. Restart just
            # after one that comes BACKOFF_GROWN s into the outage: by then the backoff has
            # grown to seconds (kubelet's policy: 100 ms doubling-ish up to 3 s; gRPC's default:
            # 1 s, 1.6 s, 2.56 s...), so the client is still backing off when containerd is back.
            # A client that never reconnects in the background has no backoff to wait out.
            with HangUpListener(containerd.socket_path) as listener:
                while time.monotonic() < killed + BACKOFF_WAIT_MAX and not any(
                    t >= killed + BACKOFF_GROWN for t in listener.attempts
                ):
                    time.sleep(0.01)
        finally:
            containerd.start()
        # The very first call after the restart: no UNAVAILABLE from a channel still backing off.
        assert list(cache.get_pods()) == population.expected(all=False)
        assert list(runtime.get_pods(True)) == population.expected(all=True)
