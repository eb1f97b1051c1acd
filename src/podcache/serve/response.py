"""HTTP responses as plain values (status, headers, body) and the JSON error; no I/O, no routing.

Every error the API returns is ``{"error": "<what went wrong>", "status": N}`` with the same
status on the response line: ``HTTPError`` carries one from wherever it is detected to the
application, which turns it into a ``Response``. Headers are ``(lower-case name, value)`` str
pairs; the HTTP server (``http1``) and the ASGI entry point write them as their protocol wants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from podcache.errors import PodcacheError

__all__ = [
    "JSON",
    "HTTPError",
    "Headers",
    "Response",
    "error_body",
]

Headers = list[tuple[str, str]]
"""Response headers: ``(lower-case name, value)`` pairs, in order."""

JSON = "application/json"

_encode = msgspec.json.Encoder().encode


class Response:
    """A complete response: status, headers and body (the body also for HEAD; servers drop it).

    ``replay`` (set by the application on answers from a snapshot) is what answering the same
    request again from the same snapshot takes: ``(snapshot view, body head, etag?)``.
    """

    __slots__ = ("body", "headers", "replay", "status")

    def __init__(self, status: int, headers: Headers, body: bytes = b"") -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.replay: tuple[Any, bytes, bool] | None = None

    def __repr__(self) -> str:
        return f"<Response {self.status} {len(self.body)} bytes>"


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
