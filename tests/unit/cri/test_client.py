"""The CRI getters end to end against an in-process gRPC runtime: requests sent, pods returned."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import grpc
import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime, RuntimeVersion
from podcache.cri.convert import pods_from_responses
from podcache.cri.proto import api_pb2 as pb
from podcache.model import PodList
from tests.unit.cri.servers import CannedRuntime, grpc_runtime


def canned() -> CannedRuntime:
    """A runtime with one ready pod (one running container) and one exited leftover."""
    sandboxes = pb.ListPodSandboxResponse()
    s = sandboxes.items.add(id="sb1", state=pb.SANDBOX_READY, created_at=2_000)
    s.metadata.name, s.metadata.uid, s.metadata.namespace = "web-0", "uid-1", "default"
    old = sandboxes.items.add(id="sb0", state=pb.SANDBOX_NOTREADY, created_at=1_000)
    old.metadata.name, old.metadata.uid, old.metadata.namespace = "job-0", "uid-0", "batch"
    containers = pb.ListContainersResponse()
    c = containers.containers.add(
        id="c1", pod_sandbox_id="sb1", state=pb.CONTAINER_RUNNING, created_at=2_500
    )
    c.metadata.name = "app"
    c.image.image = "nginx:1.27"
    c.image_ref = "docker.io/library/nginx@sha256:aa"
    c.labels.update(
        {
            "io.kubernetes.pod.uid": "uid-1",
            "io.kubernetes.pod.name": "web-0",
            "io.kubernetes.pod.namespace": "default",
        }
    )
    c.annotations["io.kubernetes.container.hash"] = "c0ffee"
    runtime = CannedRuntime(sandboxes=sandboxes, containers=containers)
    runtime.status.status.conditions.add(type="RuntimeReady", status=True)
    runtime.status.status.conditions.add(type="NetworkReady", status=False, reason="NoCNI")
    return runtime


@pytest.fixture
def served(sock_dir: str) -> Iterator[tuple[CannedRuntime, str]]:
    runtime = canned()
    with grpc_runtime(runtime, f"{sock_dir}/cri.sock") as endpoint:
        yield runtime, endpoint


def expected_pods(runtime: CannedRuntime) -> PodList:
    return pods_from_responses("containerd", runtime.sandboxes, runtime.containers)


def sent(runtime: CannedRuntime, method: str) -> list[object]:
    return [request for name, request in runtime.requests if name == method]


def check_running_filters(runtime: CannedRuntime) -> None:
    (sandbox_request,) = sent(runtime, "ListPodSandbox")
    (container_request,) = sent(runtime, "ListContainers")
    assert sandbox_request == pb.ListPodSandboxRequest(
        filter=pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
    )
    assert container_request == pb.ListContainersRequest(
        filter=pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    )
    # The zero enum value is READY/CREATED: only the wrapper's presence makes it a filter.
    assert isinstance(sandbox_request, pb.ListPodSandboxRequest)
    assert sandbox_request.filter.HasField("state")


def check_all_filters(runtime: CannedRuntime) -> None:
    (sandbox_request,) = sent(runtime, "ListPodSandbox")
    (container_request,) = sent(runtime, "ListContainers")
    assert isinstance(sandbox_request, pb.ListPodSandboxRequest)
    assert isinstance(container_request, pb.ListContainersRequest)
    assert not sandbox_request.HasField("filter")  # no sandbox filter at all
    assert container_request.HasField("filter")  # an empty container filter
    assert container_request.filter == pb.ContainerFilter()


# -- get_pods ---------------------------------------------------------------------------------


def test_sync_get_pods_running(served: tuple[CannedRuntime, str]) -> None:
    runtime, endpoint = served
    with CRIRuntime(endpoint) as cri:
        pods = cri.get_pods(False)
    assert pods == expected_pods(runtime)
    assert str(pods[0].containers[0].id) == "containerd://c1"
    assert runtime.methods() == ["Version", "ListPodSandbox", "ListContainers"]
    check_running_filters(runtime)


def test_sync_get_pods_all(served: tuple[CannedRuntime, str]) -> None:
    runtime, endpoint = served
    with CRIRuntime(endpoint) as cri:
        cri.get_pods(True)
    check_all_filters(runtime)


async def test_async_get_pods_running(served: tuple[CannedRuntime, str]) -> None:
    runtime, endpoint = served
    async with AsyncCRIRuntime(endpoint) as cri:
        pods = await cri.get_pods(False)
    assert pods == expected_pods(runtime)
    assert runtime.methods() == ["Version", "ListPodSandbox", "ListContainers"]
    check_running_filters(runtime)


async def test_async_get_pods_all(served: tuple[CannedRuntime, str]) -> None:
    runtime, endpoint = served
    async with AsyncCRIRuntime(endpoint) as cri:
        await cri.get_pods(True)
    check_all_filters(runtime)


# -- one Version per connection ---------------------------------------------------------------


def test_sync_version_is_asked_once_across_threads(served: tuple[CannedRuntime, str]) -> None:
    runtime, endpoint = served
    results: list[PodList] = []
    with CRIRuntime(endpoint) as cri:
        start = threading.Barrier(8)

        def work() -> None:
            start.wait()
            results.append(cri.get_pods(False))

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert len(results) == 8 and all(r == expected_pods(runtime) for r in results)
    assert runtime.methods().count("Version") == 1
    (version_request,) = sent(runtime, "Version")
    assert version_request == pb.VersionRequest(version="0.1.0")


async def test_async_version_is_asked_once_across_tasks(
    served: tuple[CannedRuntime, str],
) -> None:
    runtime, endpoint = served
    async with AsyncCRIRuntime(endpoint) as cri:
        results = await asyncio.gather(*(cri.get_pods(False) for _ in range(8)))
        version = await cri.version()
    assert all(r == expected_pods(runtime) for r in results)
    assert runtime.methods().count("Version") == 1
    assert version == RuntimeVersion("0.1.0", "containerd", "v1.7.20", "v1")


# -- version, status, endpoint ----------------------------------------------------------------


def test_sync_version_and_status(served: tuple[CannedRuntime, str]) -> None:
    runtime, endpoint = served
    with CRIRuntime(endpoint) as cri:
        assert cri.version() == RuntimeVersion("0.1.0", "containerd", "v1.7.20", "v1")
        status = cri.status()
    network = status.condition("NetworkReady")
    assert network is not None and (network.status, network.reason) == (False, "NoCNI")
    assert status.condition("Missing") is None
    assert not status.ready
    assert runtime.methods() == ["Version", "Status"]


async def test_async_status(served: tuple[CannedRuntime, str]) -> None:
    runtime, endpoint = served
    runtime.status.status.conditions[1].status = True
    async with AsyncCRIRuntime(endpoint) as cri:
        status = await cri.status(verbose=True)
    assert status.ready
    (request,) = sent(runtime, "Status")
    assert request == pb.StatusRequest(verbose=True)


def test_endpoint_is_resolved_from_the_environment(
    served: tuple[CannedRuntime, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, endpoint = served
    monkeypatch.setenv("CONTAINER_RUNTIME_ENDPOINT", endpoint.removeprefix("unix://"))
    with CRIRuntime() as cri:
        assert cri.endpoint == endpoint
        assert cri.endpoint_source == "CONTAINER_RUNTIME_ENDPOINT"
        assert cri.get_pods(False) == expected_pods(runtime)


# -- riding through a runtime restart ---------------------------------------------------------
# The channel must be in reconnect backoff (TRANSIENT_FAILURE) when the runtime is back: a
# fail-fast call would then get UNAVAILABLE at once; with wait_for_ready it waits for the next
# attempt, within its deadline. The tests look at the private channel to reach that state
# without spending a whole deadline on a failing call.


def test_sync_call_during_reconnect_backoff_waits_for_the_runtime(sock_dir: str) -> None:
    path = f"{sock_dir}/restart.sock"
    first = canned()
    with grpc_runtime(first, path) as endpoint:
        cri = CRIRuntime(endpoint, timeout=3.0)
        assert cri.get_pods(False) == expected_pods(first)
    failing = threading.Event()

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            failing.set()

    cri._channel.subscribe(watch, try_to_connect=True)
    try:
        assert failing.wait(5), "the channel never failed to reconnect"
        second = canned()
        with grpc_runtime(second, path):
            assert cri.get_pods(False) == expected_pods(second)
    finally:
        cri._channel.unsubscribe(watch)
        cri.close()
    assert second.methods() == ["ListPodSandbox", "ListContainers"]  # Version: once per channel


async def test_async_call_during_reconnect_backoff_waits_for_the_runtime(sock_dir: str) -> None:
    path = f"{sock_dir}/restart.sock"
    first = canned()
    with grpc_runtime(first, path) as endpoint:
        cri = AsyncCRIRuntime(endpoint, timeout=3.0)
        assert await cri.get_pods(False) == expected_pods(first)
    channel = cri._channel
    assert channel is not None
    try:
        async with asyncio.timeout(5):
            state = channel.get_state(try_to_connect=True)
            while state is not grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                await channel.wait_for_state_change(state)
                state = channel.get_state(try_to_connect=True)
        second = canned()
        with grpc_runtime(second, path):
            assert await cri.get_pods(False) == expected_pods(second)
    finally:
        await cri.close()
    assert second.methods() == ["ListPodSandbox", "ListContainers"]
