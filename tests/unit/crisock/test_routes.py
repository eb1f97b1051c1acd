"""The CRI socket's allow-list against every method of the proto and of the CRI v1 API
(docs/architecture.md §10 rule 2)."""

from __future__ import annotations

import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.routes import CRI_SERVICES, READ_ONLY, Route, denial, route_of

# Every RPC of k8s.io/cri-api's runtime.v1 (api.proto) and KEP-5825's streaming lists, by
# service: what a runtime may offer, whether podcache's proto holds it or not.
CRI_V1 = {
    "runtime.v1.RuntimeService": [
        "Version",
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "PodSandboxStatus",
        "ListPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "RemoveContainer",
        "ListContainers",
        "ContainerStatus",
        "UpdateContainerResources",
        "ReopenContainerLog",
        "ExecSync",
        "Exec",
        "Attach",
        "PortForward",
        "ContainerStats",
        "ListContainerStats",
        "PodSandboxStats",
        "ListPodSandboxStats",
        "UpdateRuntimeConfig",
        "Status",
        "CheckpointContainer",
        "GetContainerEvents",
        "ListMetricDescriptors",
        "ListPodSandboxMetrics",
        "RuntimeConfig",
        "UpdatePodSandboxResources",
        "StreamPodSandboxes",
        "StreamContainers",
    ],
    "runtime.v1.ImageService": [
        "ListImages",
        "ImageStatus",
        "PullImage",
        "RemoveImage",
        "ImageFsInfo",
    ],
}

WRITES = [
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "UpdateContainerResources",
    "UpdatePodSandboxResources",
    "ReopenContainerLog",
    "ExecSync",
    "Exec",
    "Attach",
    "PortForward",
    "UpdateRuntimeConfig",
    "CheckpointContainer",
    "PullImage",
    "RemoveImage",
]
"""The calls that change or enter anything: each must be denied."""

READS = {
    "ListPodSandbox": Route.CACHE,
    "ListContainers": Route.CACHE,
    "GetContainerEvents": Route.FAN_OUT,
    "StreamPodSandboxes": Route.CACHE_STREAM,
    "StreamContainers": Route.CACHE_STREAM,
    "Version": Route.CACHED_FORWARD,
    "PodSandboxStatus": Route.STATUS,
    "ContainerStatus": Route.STATUS,
    **dict.fromkeys(
        [
            "Status",
            "RuntimeConfig",
            "ContainerStats",
            "ListContainerStats",
            "PodSandboxStats",
            "ListPodSandboxStats",
            "ListMetricDescriptors",
            "ListPodSandboxMetrics",
            "ListImages",
            "ImageStatus",
            "ImageFsInfo",
        ],
        Route.FORWARD,
    ),
}


def _proto_methods() -> list[str]:
    return [
        f"/{service.full_name}/{method.name}"
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    ]


def _all_methods() -> list[str]:
    known = {f"/{service}/{name}" for service, names in CRI_V1.items() for name in names}
    return sorted(known | set(_proto_methods()))


def test_the_proto_speaks_only_the_socket_services() -> None:
    assert {path.split("/")[1] for path in _proto_methods()} <= set(CRI_SERVICES)


@pytest.mark.parametrize("path", _all_methods())
def test_every_method_is_allowed_as_the_issue_says_or_denied(path: str) -> None:
    name = path.rsplit("/", 1)[-1]
    assert route_of(path) is READS.get(name), path
    if name in WRITES:
        assert route_of(path) is None


def test_every_write_of_the_proto_is_denied() -> None:
    writes = [p for p in _proto_methods() if p.rsplit("/", 1)[-1] in WRITES]
    assert len(writes) >= 6  # the proto's Run/Stop/Remove of sandboxes and containers, Create...
    assert all(route_of(path) is None for path in writes)


def test_the_allow_list_names_only_cri_methods() -> None:
    assert set(READ_ONLY) <= set(_all_methods())


def test_a_method_added_later_is_denied() -> None:
    assert route_of("/runtime.v1.RuntimeService/SomeFutureCall") is None


def test_the_denial_names_the_method_and_says_read_only() -> None:
    text = denial("/runtime.v1.RuntimeService/RemovePodSandbox")
    assert "runtime.v1.RuntimeService/RemovePodSandbox" in text
    assert "read-only" in text
