"""podcache: the kubelet's container runtime cache for Python."""

from podcache.cache import AsyncPodGetter, AsyncRuntimeCache, CacheStats, PodGetter, RuntimeCache
from podcache.fake import AsyncFakeRuntime, FakeRuntime
from podcache.model import (
    AmbiguousContainerIDError,
    Container,
    ContainerID,
    ContainerState,
    Pod,
    PodList,
)

__all__ = [
    "AmbiguousContainerIDError",
    "AsyncFakeRuntime",
    "AsyncPodGetter",
    "AsyncRuntimeCache",
    "CacheStats",
    "Container",
    "ContainerID",
    "ContainerState",
    "FakeRuntime",
    "Pod",
    "PodGetter",
    "PodList",
    "RuntimeCache",
]

__version__ = "0.1.0"
