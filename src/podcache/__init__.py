"""podcache: the kubelet's container runtime cache for Python.

The public names are imported on first use (PEP 562): ``import podcache`` (and so every
``import podcache.<module>``, the CLI's included) costs no import of the cache, asyncio or the
CRI client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    **dict.fromkeys(
        (
            "AsyncPodGetter",
            "AsyncPodWatch",
            "AsyncRuntimeCache",
            "CacheStats",
            "ChangeType",
            "Found",
            "PodChange",
            "PodGetter",
            "PodWatch",
            "Publication",
            "RuntimeCache",
        ),
        "podcache.cache",
    ),
    "PodProcess": "podcache.cache.pids",
    **dict.fromkeys(
        (
            "CRIError",
            "EndpointNotFoundError",
            "EventsUnsupportedError",
            "PodcacheError",
            "ResyncRequiredError",
            "RuntimeDeadlineError",
            "RuntimeProtocolError",
            "RuntimeUnavailableError",
        ),
        "podcache.errors",
    ),
    "AsyncFakeRuntime": "podcache.fake",
    "FakeRuntime": "podcache.fake",
    **dict.fromkeys(
        (
            "AmbiguousContainerIDError",
            "Container",
            "ContainerEvent",
            "ContainerEventType",
            "ContainerID",
            "ContainerState",
            "Pod",
            "PodList",
        ),
        "podcache.model",
    ),
    "container_of_pid": "podcache.procs",
}
"""Where each public name lives: imported from there on first use."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'podcache' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
