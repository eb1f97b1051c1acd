"""podcache's exception hierarchy; what went wrong in plain words, not how to retry or log it.

::

    PodcacheError
    ├── EndpointNotFoundError        no endpoint configured and no default socket exists
    ├── ResyncRequiredError          a watch cannot go on from where it is: list again
    ├── CRIError                     a runtime at a known endpoint failed us (.endpoint, .reason)
    │   ├── RuntimeUnavailableError  not reachable: no socket, refused, denied, connection lost
    │   ├── RuntimeDeadlineError     no answer within the deadline (also a TimeoutError)
    │   ├── RuntimeProtocolError     it answered, but not as a CRI v1 runtime
    │   └── EventsUnsupportedError   it has no GetContainerEvents (UNIMPLEMENTED: containerd 1.6)
    ├── MalformedListingError        list answer bytes that are not a CRI message (a ValueError)
    ├── AmbiguousContainerIDError    an ID prefix matching several IDs (a LookupError)
    ├── TokenFileError               serve's token file cannot be used (a ValueError)
    ├── ServeError                   serve cannot start: address in use, bad socket path...
    │   └── CRISocketError           a --cri-listen path it cannot claim (serve.crisock)
    ├── ProcFormatError              a /proc file too large or not in the kernel's format (procs)
    ├── HTTPError                    a 4xx/5xx the HTTP API answers on purpose (serve.response)
    └── CLIError                     what the CLI reports with an exit status (cli.exits)
        ├── NotFoundError            nothing matches (exit 3)
        └── AmbiguousIDError         an ID prefix matches several (exit 2)

Every error podcache raises on purpose is in this tree, keeping its built-in base
(docs/architecture.md §2). ``HTTPError``, the ``CLIError`` family, ``ProcFormatError`` and
``CRISocketError`` live in the modules named beside them; the rest here. CRIError messages
name the endpoint; the gRPC error that caused one is its ``__cause__``; this module itself
knows nothing of gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AmbiguousContainerIDError",
    "CRIError",
    "EndpointNotFoundError",
    "EventsUnsupportedError",
    "MalformedListingError",
    "PodcacheError",
    "ResyncRequiredError",
    "RuntimeDeadlineError",
    "RuntimeProtocolError",
    "RuntimeUnavailableError",
    "ServeError",
    "TokenFileError",
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


class ResyncRequiredError(PodcacheError):
    """A watch cannot deliver the changes it was asked for: list again and watch from the
    list's revision.

    ``since`` is the revision the watch stood at (or was opened with); ``oldest`` the oldest
    revision a watch may still start from; ``revision`` the cache's current one; ``reason``
    says why in words (a revision older than the history kept, one the cache never reached,
    or a watcher further behind than its ``max_lag``).
    """

    def __init__(self, since: int, oldest: int, revision: int, reason: str) -> None:
        self.since = since
        self.oldest = oldest
        self.revision = revision
        self.reason = reason
        super().__init__(
            f"cannot watch from revision {since}: {reason} (the cache is at revision "
            f"{revision}; a watch may start from revision {oldest} to {revision}): list the "
            "pods again and watch from the list's revision"
        )

    def __reduce__(self) -> tuple[type[ResyncRequiredError], tuple[int, int, int, str]]:
        return type(self), (self.since, self.oldest, self.revision, self.reason)


class MalformedListingError(PodcacheError, ValueError):
    """The bytes of a list answer are not a valid message of the CRI API; the message names
    the message type and, from the C reader, the byte."""


class AmbiguousContainerIDError(PodcacheError, LookupError):
    """A container-ID prefix matched more than one container or sandbox."""

    def __init__(self, prefix: str, matches: Sequence[str]) -> None:
        self.prefix = prefix
        self.matches = tuple(matches)
        shown = ", ".join(self.matches[:5]) + (", ..." if len(self.matches) > 5 else "")
        super().__init__(
            f"container ID prefix {prefix!r} is ambiguous: it matches {len(self.matches)} "
            f"IDs ({shown})"
        )

    def __reduce__(self) -> tuple[type[AmbiguousContainerIDError], tuple[str, tuple[str, ...]]]:
        return type(self), (self.prefix, self.matches)


class TokenFileError(PodcacheError, ValueError):
    """The token file cannot be used; the message says why and names the file."""


class ServeError(PodcacheError):
    """The server cannot start (address in use, bad socket path...); the message says why."""
