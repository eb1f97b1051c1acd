"""podcache's exception hierarchy; what went wrong in plain words, not how to retry or log it.

::

    PodcacheError
    ├── EndpointNotFoundError        no endpoint configured and no default socket exists
    └── CRIError                     a runtime at a known endpoint failed us (.endpoint, .reason)
        ├── RuntimeUnavailableError  not reachable: no socket, refused, denied, connection lost
        ├── RuntimeDeadlineError     no answer within the deadline (also a TimeoutError)
        ├── RuntimeProtocolError     it answered, but not as a CRI v1 runtime
        └── EventsUnsupportedError   it has no GetContainerEvents (UNIMPLEMENTED: containerd 1.6)

Every message names the endpoint. The gRPC error that caused one is its ``__cause__``; this
module itself knows nothing of gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CRIError",
    "EndpointNotFoundError",
    "EventsUnsupportedError",
    "PodcacheError",
    "RuntimeDeadlineError",
    "RuntimeProtocolError",
    "RuntimeUnavailableError",
]


class PodcacheError(Exception):
    """Base class of every error podcache raises on purpose."""


class CRIError(PodcacheError):
    """A container runtime at ``endpoint`` failed a request; ``reason`` says how."""

    _template = "runtime at {endpoint} failed: {reason}"

    def __init__(self, endpoint: str, reason: str) -> None:
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(self._template.format(endpoint=endpoint, reason=reason))

    def __reduce__(self) -> tuple[type[CRIError], tuple[str, str]]:
        return type(self), (self.endpoint, self.reason)


class RuntimeUnavailableError(CRIError):
    """The runtime is not reachable: no socket, nobody listening, access denied, or it hung up."""

    _template = "runtime at {endpoint} is not reachable: {reason}"


class RuntimeDeadlineError(CRIError, TimeoutError):
    """The runtime accepted the connection but did not answer within the deadline."""

    _template = "runtime at {endpoint} did not answer in time: {reason}"


class RuntimeProtocolError(CRIError):
    """Something answers at the endpoint, but not as a CRI runtime.v1 runtime."""

    _template = "runtime at {endpoint} does not speak CRI runtime.v1: {reason}"


class EventsUnsupportedError(CRIError):
    """The runtime answers CRI but not GetContainerEvents (containerd before 1.7)."""

    _template = "runtime at {endpoint} does not stream container events: {reason}"


class EndpointNotFoundError(PodcacheError):
    """No endpoint was configured and none of the default runtime sockets exists.

    ``endpoint`` is always None (there is none); ``tried`` lists the places looked at.
    """

    endpoint: None = None

    def __init__(self, tried: Sequence[str]) -> None:
        self.tried = tuple(tried)
        super().__init__(
            "no container runtime endpoint configured and none of the default sockets exists "
            f"(tried: {'; '.join(self.tried)}); set one with -r/--runtime-endpoint, the "
            "CONTAINER_RUNTIME_ENDPOINT environment variable, or runtime-endpoint in the crictl "
            "config file (--config/-c, CRI_CONFIG_FILE, default /etc/crictl.yaml)"
        )

    def __reduce__(self) -> tuple[type[EndpointNotFoundError], tuple[tuple[str, ...]]]:
        return type(self), (self.tried,)
