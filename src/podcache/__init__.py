"""podcache: the kubelet's container runtime cache for Python."""

from podcache.cache import AsyncPodGetter, AsyncRuntimeCache, CacheStats, PodGetter, RuntimeCache
from podcache.errors import (
    CRIError,
    EndpointNotFoundError,
    EventsUnsupportedError,
    PodcacheError,
    RuntimeDeadlineError,
    RuntimeProtocolError,
    RuntimeUnavailableError,
)
from podcache.fake import AsyncFakeRuntime, FakeRuntime
from podcache.model import (
    AmbiguousContainerIDError,
    Container,
    ContainerEvent,
    ContainerEventType,
    ContainerID,
    ContainerState,
    Pod,
    PodList,
)
from podcache.procs import PodProcess, container_of_pid

__all__ = [
    "AmbiguousContainerIDError",
    "AsyncFakeRuntime",
    "AsyncPodGetter",
    "AsyncRuntimeCache",
    "CRIError",
    "CacheStats",
    "Container",
    "ContainerEvent",
    "ContainerEventType",
    "ContainerID",
    "ContainerState",
    "EndpointNotFoundError",
    "EventsUnsupportedError",
    "FakeRuntime",
    "Pod",
    "PodGetter",
    "PodList",
    "PodProcess",
    "PodcacheError",
    "RuntimeCache",
    "RuntimeDeadlineError",
    "RuntimeProtocolError",
    "RuntimeUnavailableError",
    "container_of_pid",
]

__version__ = "0.1.0"
