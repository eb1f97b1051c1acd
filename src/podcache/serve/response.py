"""HTTP responses as plain values (status, headers, body) and the JSON error; no I/O, no routing.

Every error the API returns is ``{"error": "<what went wrong>", "status": N}`` with the same
status on the response line: ``HTTPError`` carries one from wherever it is detected to the
application, which turns it into a ``Response``. Headers are ``(lower-case name, value)`` str
pairs; the HTTP server (``http1``) and the ASGI entry point write them as their protocol wants.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec

from podcache.errors import PodcacheError

__all__ = [
    "JSON",
    "STREAM_MAX_UNSENT",
    "ChunkSink",
    "HTTPError",
    "Headers",
    "Response",
    "error_body",
]

Headers = list[tuple[str, str]]
"""Response headers: ``(lower-case name, value)`` pairs, in order."""

JSON = "application/json"

STREAM_MAX_UNSENT = 4 * 1024 * 1024
"""Default bound of a streaming answer's unsent bytes: a client further behind is cut off."""

ChunkSink = Callable[[bytes], bool]
"""What an HTTP server hands a stream that has an ``attach(sink)`` method: ``sink(chunk)``
writes ``chunk`` to the client at once, as the next chunk of the body, under the stream's own
rules (framing, the ``max_unsent`` bound and its cut-off); False when nothing was written
(the stream is ending, or the chunk cut it off). A stream may call it from any callback of
the server's loop while its iterator is not producing a chunk: the body is then its chunks in
the order of the writes and of the iterator's yields together."""

_encode = msgspec.json.Encoder().encode


class Response:
    """A complete response: status, headers and body (the body also for HEAD; servers drop it).

    The body is ``body`` then ``suffix``: a large body kept in a memo is sent as is, followed by
    the few bytes that change per answer (the age), never copied to join them. ``stream``, when
    set, makes a streaming answer instead (``http1``'s module docstring): the chunks of an async
    iterator sent as they come, at most ``max_unsent`` bytes of them left unsent by a slow
    client before it is cut off.
    """

    __slots__ = ("body", "headers", "max_unsent", "status", "stream", "suffix")

    def __init__(
        self,
        status: int,
        headers: Headers,
        body: bytes = b"",
        *,
        suffix: bytes = b"",
        stream: AsyncIterator[bytes] | None = None,
        max_unsent: int = STREAM_MAX_UNSENT,
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.suffix = suffix
        self.stream = stream
        self.max_unsent = max_unsent

    def __repr__(self) -> str:
        kind = "stream" if self.stream is not None else f"{len(self.body) + len(self.suffix)} bytes"
        return f"<Response {self.status} {kind}>"


class HTTPError(PodcacheError):
    """A 4xx/5xx the API answers on purpose; ``message`` is safe to show to the client.

    ``headers`` are added to the response (``Allow`` for 405, ``WWW-Authenticate`` for 401,
    ``Retry-After`` for 503); ``extra`` are more members of the JSON body.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: Headers | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or []
        self.extra = dict(extra) if extra else {}

    def body(self) -> bytes:
        """The JSON error body."""
        return error_body(self.status, self.message, self.extra)


def error_body(status: int, message: str, extra: Mapping[str, Any] | None = None) -> bytes:
    """``{"error": message, "status": status, **extra}`` as JSON bytes."""
    document: dict[str, Any] = {"error": message, "status": status}
    if extra:
        document.update(extra)
    return _encode(document)
