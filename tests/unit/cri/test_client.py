"""The CRI getters end to end against an in-process gRPC runtime: requests sent, pods returned."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime, RuntimeVersion, caller, diagnosis, listcalls
from podcache.cri.convert import pods_from_responses
from podcache.cri.proto import api_pb2 as pb
from podcache.model import PodList
from tests.unit.cri.servers import CannedRuntime, canned, grpc_runtime


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
    assert pods[0].containers[0].id.qualified == "containerd://c1"
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


# -- the hot path: a READY channel is called straight away ----------------------------------


def test_sync_calls_on_a_ready_channel_check_nothing_first(
    served: tuple[CannedRuntime, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, endpoint = served
    checks: list[object] = []
    real = diagnosis._unreachable

    def counted(*args: Any) -> str | None:
        checks.append(args)
        return real(*args)

    monkeypatch.setattr("podcache.cri.caller._unreachable", counted)
    with CRIRuntime(endpoint) as cri:
        cri.get_pods(False)
        assert checks, "a channel that is not READY yet is checked first"
        checks.clear()
        for _ in range(20):
            cri.get_pods(False)
    assert checks == []
    assert runtime.methods().count("Version") == 1


async def test_async_calls_on_a_ready_channel_check_nothing_first(
    served: tuple[CannedRuntime, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, endpoint = served
    checks: list[object] = []
    real = diagnosis._unreachable

    def counted(*args: Any) -> str | None:
        checks.append(args)
        return real(*args)

    monkeypatch.setattr("podcache.cri.caller._unreachable", counted)
    async with AsyncCRIRuntime(endpoint) as cri:
        await cri.get_pods(False)
        assert checks, "a channel that is not READY yet is checked first"
        checks.clear()
        for _ in range(20):
            await cri.get_pods(False)
    assert checks == []
    assert runtime.methods().count("Version") == 1


def test_sync_state_reader_reads_the_channel(served: tuple[CannedRuntime, str]) -> None:
    """Pins the one gRPC internal the sync client reads (see ``channels._state_reader``): should
    a gRPC release move it, the reader would fall back to IDLE and this test fails."""
    _, endpoint = served
    with CRIRuntime(endpoint) as cri:
        line = cri._caller.line
        assert line.state(False) == grpc.ChannelConnectivity.IDLE.value[0]
        cri.version()
        assert line.state(False) == grpc.ChannelConnectivity.READY.value[0]


def test_the_list_calls_hold_a_sync_caller_instead_of_being_a_sync_getter() -> None:
    """Composition: both twins' sync calls are one ``SyncCaller``'s, which
    ``CRIRuntime`` and the asyncio getter's ``_ListCaller`` each hold; neither inherits it."""
    assert not issubclass(listcalls._ListCaller, CRIRuntime)
    assert not issubclass(CRIRuntime, caller.SyncCaller)
    with CRIRuntime("unix:///nonexistent/podcache.sock") as cri:
        assert type(cri._caller) is caller.SyncCaller
    lister = listcalls._ListCaller(cri._endpoint, 1.0)
    try:
        assert type(lister._caller) is caller.SyncCaller
    finally:
        lister.close()
