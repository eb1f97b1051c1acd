"""CRI list streaming (KEP-5825): which list calls have a streaming twin, and a streamed answer.

Holds ``STREAMED`` (each unary list call, its streaming twin and the twin's request),
``StreamedAnswer`` (one streamed answer's messages as bytes), ``collect`` (a streaming call read
into one, at most ``MAX_STREAMED_LIST_BYTES``), ``ListStreamTooLongError`` (past that bound) and
``over_limit_reason`` (what a list answer, or one streamed message, past gRPC's message limit
is told). The rules are docs/architecture.md §4's (list streaming, and "Two runtimes" rule 1);
besides them: an empty message counts toward the bound with its frame, and the bound is what
a runtime that never ends its stream costs in memory before its deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from google.protobuf.message import Message

from podcache.cri.proto import api_pb2 as pb

__all__ = [
    "MAX_STREAMED_LIST_BYTES",
    "MAX_STREAMED_MESSAGE_BYTES",
    "STREAMED",
    "STREAM_METHODS",
    "ListStreamTooLongError",
    "StreamedAnswer",
    "collect",
    "over_limit_reason",
]


MAX_STREAMED_LIST_BYTES = 256 * 1024 * 1024
"""The most bytes of one streamed list answer podcache receives (its messages' bytes plus
``FRAME_BYTES`` each); past it the call is cancelled and fails. 16 times gRPC's limit on one
message."""

MAX_STREAMED_MESSAGE_BYTES = MAX_STREAMED_LIST_BYTES
"""The largest single message of a streamed list answer podcache receives (gRPC refuses a
larger one, RESOURCE_EXHAUSTED): the whole answer's bound, so how a runtime cuts its listing
into messages never matters."""

FRAME_BYTES = 5
"""gRPC's frame header before each message (a flag byte and a 4-byte length)."""


def _sandboxes_request(request: Message) -> Message:
    assert isinstance(request, pb.ListPodSandboxRequest)
    return pb.StreamPodSandboxesRequest(filter=request.filter)


def _containers_request(request: Message) -> Message:
    assert isinstance(request, pb.ListContainersRequest)
    return pb.StreamContainersRequest(filter=request.filter)


STREAMED: dict[str, tuple[str, type[Message], Callable[[Message], Message]]] = {
    "ListPodSandbox": ("StreamPodSandboxes", pb.StreamPodSandboxesRequest, _sandboxes_request),
    "ListContainers": ("StreamContainers", pb.StreamContainersRequest, _containers_request),
}
"""Each unary list call: its streaming twin, the twin's request type, and the twin's request
made from the unary one (the same filter)."""

STREAM_METHODS: frozenset[str] = frozenset(twin for twin, _, _ in STREAMED.values())
"""The streaming list calls."""


class _StreamingCall(Protocol):
    """What ``collect`` needs of a gRPC streaming call: its messages, and a way to end it."""

    def __iter__(self) -> Iterator[bytes]: ...

    def cancel(self) -> object: ...


class ListStreamTooLongError(Exception):
    """A streamed list answer passed ``bound`` bytes (the call was cancelled)."""

    def __init__(self, method: str, bound: int) -> None:
        super().__init__(method, bound)
        self.method = method
        self.bound = bound

    def reason(self) -> str:
        """The reason a podcache error gives (the caller names the endpoint)."""
        return (
            f"its {self.method} answer passed {_mib(self.bound)} "
            "(podcache's bound on one streamed listing, MAX_STREAMED_LIST_BYTES); the call "
            "was cancelled"
        )


class StreamedAnswer:
    """The non-empty messages of one streamed list answer, in order, as their bytes.

    ``received``: bytes received, frames included (what the bound counts); ``messages``: how
    many messages, empty ones included.
    """

    __slots__ = ("messages", "parts", "received")

    def __init__(self, parts: list[bytes], messages: int, received: int) -> None:
        self.parts = parts
        self.messages = messages
        self.received = received


def collect(call: _StreamingCall, method: str, bound: int | None = None) -> StreamedAnswer:
    """Every message of ``call`` (a streaming call of ``method``), until it ends.

    Raises gRPC's error of the call as it comes; ``ListStreamTooLongError`` (after cancelling
    the call) as soon as the messages pass ``bound`` bytes with their frames (by default
    ``MAX_STREAMED_LIST_BYTES``, read at each call).
    """
    if bound is None:
        bound = MAX_STREAMED_LIST_BYTES
    parts: list[bytes] = []
    received = messages = 0
    for message in call:
        messages += 1
        received += len(message) + FRAME_BYTES
        if received > bound:
            call.cancel()
            raise ListStreamTooLongError(method, bound)
        if message:
            parts.append(message)
    return StreamedAnswer(parts, messages, received)


def _mib(size: int) -> str:
    mib, rest = divmod(size, 1024 * 1024)
    return f"{mib} MiB" if mib and not rest else f"{size:,} bytes"


def over_limit_reason(method: str, details: str, limit: int, streaming: bool | None) -> str:
    """The reason for a list answer that gRPC refused for its size (RESOURCE_EXHAUSTED),
    ``limit`` being the receive limit: a unary one (``channels.MAX_RECEIVE_MESSAGE_BYTES``), or
    one message of a streamed one (``method`` a streaming call; ``MAX_STREAMED_MESSAGE_BYTES``).

    ``streaming``: what the connection learnt of the runtime's list streaming (False: its
    streaming twin answered UNIMPLEMENTED; True: it streams, but this call was one that is
    never streamed; None: not asked yet).
    """
    if method in STREAM_METHODS:
        return (
            f"a message of its {method} answer is over podcache's {_mib(limit)} limit on one "
            f"streamed message (MAX_STREAMED_MESSAGE_BYTES; {details}): the runtime put more "
            "items in one message than a client takes"
        )
    twin = STREAMED[method][0]
    over = f"its {method} answer is over gRPC's {_mib(limit)} message limit ({details})"
    if streaming is False:
        return (
            f"{over}, and the runtime does not stream lists ({twin} is UNIMPLEMENTED: CRI list "
            "streaming, KEP-5825, is not in this runtime); a runtime that streams lists "
            "(CRI-O, a containerd with KEP-5825) or fewer or smaller pods on the node fixes it"
        )
    if streaming is True:
        return f"{over}; the runtime streams lists, but filtered calls are not streamed"
    return f"{over}; whether the runtime streams lists ({twin}) was not asked yet"
