"""podcache: the kubelet's container runtime cache for Python."""

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
    "Container",
    "ContainerID",
    "ContainerState",
    "Pod",
    "PodList",
]

__version__ = "0.1.0"
