"""What a connection holds between callbacks: the items of its queue, the stream it writes.

Deliberately not here: who makes them (parsing, the protocol callbacks) and who consumes them
(answering, streaming).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import NamedTuple


class _Request(NamedTuple):
    """A request waiting in the queue."""

    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    keep_alive: bool
    http10: bool


class _Refusal(NamedTuple):
    """An answer the server gives itself (a JSON error), after which the connection ends."""

    status: int
    message: str


class _Writing(NamedTuple):
    """The stream a ``STREAMING`` connection writes: its chunks, their bound, their framing."""

    chunks: AsyncIterator[bytes]
    max_unsent: int
    chunked: bool


class _End(NamedTuple):
    """Queued after the last request to answer: the client's EOF, or the server's shutdown."""

    reason: str


_Queued = _Request | _Refusal | _End
