"""The one table of the CRI methods podcache's client calls: each method's gRPC path, its
request message, its own wire's request encoder, and the reader of its answer.

Every client takes its paths from here (docs/architecture.md §4, "One wire, two drivers").
Adding a call to the client is one row (a test goes through the table: each encoder against
the generated protobuf module, each reader importable, each path in the proto's service).

A reader is named, ``"module:function"`` (a function of ``bytes``), not imported: this package
imports nothing of podcache, and the one-shot read imports a reader once its requests are sent
(docs/architecture.md §6 rule 1). None: the answer is read by its caller (a streamed message's
bytes, which ``cri.liststream`` gathers; an event, which ``cri.eventstream`` reads).
"""

from __future__ import annotations

from collections.abc import Callable

from podcache.cri.wire import protobuf

__all__ = ["METHODS", "SERVICE", "CRIMethod", "path", "request"]

SERVICE = "/runtime.v1.RuntimeService/"
"""The path prefix of every method of CRI's RuntimeService."""


def path(method: str) -> str:
    """The gRPC path of a RuntimeService method named ``method`` (a row's, or one the drivers'
    tests make up)."""
    return SERVICE + method


class CRIMethod:
    """One method the client calls: ``request``, its request message's name in api.proto;
    ``encode``, the own wire's encoder of it (None: only grpcio sends it, from a protobuf
    message); ``reader``, its answer's reader; ``streaming``: a server-streaming call.
    (A class, not a NamedTuple, whose creation would slow the one-shot read's start-up.)"""

    __slots__ = ("encode", "name", "path", "reader", "request", "streaming")

    def __init__(
        self,
        name: str,
        request: str,
        encode: Callable[..., bytes] | None,
        reader: str | None,
        *,
        streaming: bool = False,
    ) -> None:
        self.name = name
        self.path = path(name)
        """Its gRPC path."""
        self.request = request
        self.encode = encode
        self.reader = reader
        self.streaming = streaming

    def __repr__(self) -> str:
        return f"CRIMethod({self.name!r})"


METHODS: dict[str, CRIMethod] = {
    row.name: row
    for row in (
        CRIMethod(
            "Version",
            "VersionRequest",
            protobuf.version_request,
            "podcache.cri.wire.protobuf:version_fields",
        ),
        CRIMethod("Status", "StatusRequest", None, None),
        CRIMethod(
            "ListPodSandbox",
            "ListPodSandboxRequest",
            lambda all: protobuf.list_requests(all)[0],
            "podcache.cri.convert:read_sandboxes",
        ),
        CRIMethod(
            "ListContainers",
            "ListContainersRequest",
            lambda all: protobuf.list_requests(all)[1],
            "podcache.cri.convert:read_containers",
        ),
        CRIMethod(
            "PodSandboxStatus",
            "PodSandboxStatusRequest",
            protobuf.status_request,
            "podcache.cri.eventwire:status_fields",
        ),
        CRIMethod("StreamPodSandboxes", "StreamPodSandboxesRequest", None, None, streaming=True),
        CRIMethod("StreamContainers", "StreamContainersRequest", None, None, streaming=True),
        CRIMethod(
            "GetContainerEvents", "GetEventsRequest", protobuf.events_request, None, streaming=True
        ),
    )
}
"""Each method the client calls, by name."""


def request(method: str, *arguments: object) -> tuple[str, bytes]:
    """A call the own wire sends: ``method``'s name and its request, written by its row's
    encoder from ``arguments`` (``KeyError`` for a method not in the table; ``ValueError`` for
    one only grpcio sends)."""
    encode = METHODS[method].encode
    if encode is None:
        raise ValueError(f"{method} has no encoder of the own wire's")
    return method, encode(*arguments)
