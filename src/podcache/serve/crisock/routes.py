"""The CRI socket's allow-list: which method, by gRPC path, is answered how; every other
method of the CRI services is denied (docs/architecture.md §10 rule 2).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.wire.methods import SERVICE

__all__ = [
    "CRI_SERVICES",
    "METHODS",
    "OTHER",
    "QUOTE_BYTES",
    "READ_ONLY",
    "Route",
    "denial",
    "is_cri",
    "method_label",
    "quoted",
    "route_of",
]


class Route(enum.Enum):
    """How an allowed method is answered."""

    CACHE = "answered from the cache"
    CACHE_STREAM = "answered from the cache, as a stream of whole-item slices (KEP-5825)"
    FORWARD = "forwarded to the runtime (identical calls in flight share one)"
    CACHED_FORWARD = "forwarded once, the answer kept until the runtime's connection drops"
    FAN_OUT = "podcache's one event subscription, fanned out"
    STATUS = "answered from the kept statuses (events', the runtime's), else asked once per change"


CRI_SERVICES = ("runtime.v1.RuntimeService", "runtime.v1.ImageService")
"""The services the socket speaks; their methods are allowed by ``READ_ONLY`` or denied."""

_RUNTIME = SERVICE
_IMAGE = "/runtime.v1.ImageService/"

READ_ONLY: Mapping[str, Route] = MappingProxyType(
    {
        _RUNTIME + "ListPodSandbox": Route.CACHE,
        _RUNTIME + "ListContainers": Route.CACHE,
        _RUNTIME + "StreamPodSandboxes": Route.CACHE_STREAM,
        _RUNTIME + "StreamContainers": Route.CACHE_STREAM,
        _RUNTIME + "GetContainerEvents": Route.FAN_OUT,
        _RUNTIME + "Version": Route.CACHED_FORWARD,
        _RUNTIME + "Status": Route.FORWARD,
        _RUNTIME + "RuntimeConfig": Route.FORWARD,
        _RUNTIME + "PodSandboxStatus": Route.STATUS,
        _RUNTIME + "ContainerStatus": Route.STATUS,
        _RUNTIME + "ContainerStats": Route.FORWARD,
        _RUNTIME + "ListContainerStats": Route.FORWARD,
        _RUNTIME + "PodSandboxStats": Route.FORWARD,
        _RUNTIME + "ListPodSandboxStats": Route.FORWARD,
        _RUNTIME + "ListMetricDescriptors": Route.FORWARD,
        _RUNTIME + "ListPodSandboxMetrics": Route.FORWARD,
        _IMAGE + "ListImages": Route.FORWARD,
        _IMAGE + "ImageStatus": Route.FORWARD,
        _IMAGE + "ImageFsInfo": Route.FORWARD,
    }
)
"""Every method the socket answers, and how. Nothing else of ``CRI_SERVICES`` is allowed."""


_API_METHODS = {
    "runtime.v1.RuntimeService": """Version RunPodSandbox StopPodSandbox RemovePodSandbox
        PodSandboxStatus ListPodSandbox CreateContainer StartContainer StopContainer
        RemoveContainer ListContainers ContainerStatus UpdateContainerResources
        ReopenContainerLog ExecSync Exec Attach PortForward ContainerStats ListContainerStats
        PodSandboxStats ListPodSandboxStats UpdateRuntimeConfig Status CheckpointContainer
        GetContainerEvents ListMetricDescriptors ListPodSandboxMetrics RuntimeConfig
        UpdatePodSandboxResources StreamPodSandboxes StreamContainers""",
    "runtime.v1.ImageService": "ListImages ImageStatus PullImage RemoveImage ImageFsInfo",
}
METHODS: frozenset[str] = frozenset(
    {f"/{service}/{name}" for service, names in _API_METHODS.items() for name in names.split()}
    | {
        f"/{service.full_name}/{method.name}"
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
)
"""Every method path of the two CRI services: the CRI v1 API's, and any more in the proto
this podcache was built with."""
OTHER = "other"
"""The metric label of every path that is not one of ``METHODS`` (§10 rule 7)."""
QUOTE_BYTES = 128
"""At most this many characters of a client's method path are quoted in a message."""


def method_label(path: str) -> str:
    """The method's name for metrics: one of ``METHODS``' names, else ``OTHER``."""
    return path.rsplit("/", 1)[-1] if path in METHODS else OTHER


def quoted(path: str) -> str:
    """``path`` for a message: whole when short, else its first ``QUOTE_BYTES`` characters and
    how long it was (so a long name cannot make the answer too large to send)."""
    text = path.lstrip("/")
    if len(text) <= QUOTE_BYTES:
        return text
    return f"{text[:QUOTE_BYTES]}... ({len(text)} characters)"


def route_of(path: str) -> Route | None:
    """How ``path`` is answered; None: denied (a CRI method not in ``READ_ONLY``)."""
    return READ_ONLY.get(path)


def is_cri(path: str) -> bool:
    """Whether ``path`` names a method of one of ``CRI_SERVICES`` (allowed or denied)."""
    service, _, method = path.lstrip("/").partition("/")
    return service in CRI_SERVICES and bool(method)


def denial(path: str) -> str:
    """The PERMISSION_DENIED details for ``path``: the method, and why."""
    return (
        f"{quoted(path)} is denied: this CRI socket (podcache) is read-only; it answers "
        "list, status, stats, image-status and event calls only"
    )
