"""podcache: the kubelet's container runtime cache for Python."""

from podcache.cache import (
    AsyncPodGetter,
    AsyncPodWatch,
    AsyncRuntimeCache,
    CacheStats,
    ChangeType,
    Found,
    PodChange,
    PodGetter,
    PodWatch,
    Publication,
    RuntimeCache,
)
from podcache.cache.pids import PodProcess
from podcache.errors import (
    CRIError,
    EndpointNotFoundError,
    EventsUnsupportedError,
    PodcacheError,
    ResyncRequiredError,
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
from podcache.procs import container_of_pid

__all__ = [
    "AmbiguousContainerIDError",
    "AsyncFakeRuntime",
    "AsyncPodGetter",
    "AsyncPodWatch",
    "AsyncRuntimeCache",
    "CRIError",
    "CacheStats",
    "ChangeType",
    "Container",
    "ContainerEvent",
    "ContainerEventType",
    "ContainerID",
    "ContainerState",
    "EndpointNotFoundError",
    "EventsUnsupportedError",
    "FakeRuntime",
    "Found",
    "Pod",
    "PodChange",
    "PodGetter",
    "PodList",
    "PodProcess",
    "PodWatch",
    "PodcacheError",
    "Publication",
    "ResyncRequiredError",
    "RuntimeCache",
    "RuntimeDeadlineError",
    "RuntimeProtocolError",
    "RuntimeUnavailableError",
    "container_of_pid",
]

__version__ = "0.1.0"
