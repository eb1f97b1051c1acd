"""Answering: the queue taken in order, ``respond_now`` or a task, and the bytes of a head.

``_next`` is the only code that chooses the state after an answer. Deliberately not here: how
requests reach the queue (``parsing``), how a stream is written (``streaming``), how a
connection ends (``lifecycle``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from http import HTTPStatus
from typing import Any, cast

from podcache.serve.http1.items import _Refusal, _Request
from podcache.serve.http1.lifecycle import Lifecycle
from podcache.serve.http1.states import _OVER, ANSWERING, BLOCKED, HEAD, IDLE
from podcache.serve.http1.streaming import _close_iterator
from podcache.serve.response import JSON, Response, error_body

__all__ = ["Answering"]

log = logging.getLogger("podcache.serve")

_INTERNAL_ERROR = "internal server error (logged by the server)"
_NO_BODY = frozenset({204, 304})  # statuses whose answers have no body (RFC 9110 6.4.1)
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
_CLOSING: set[asyncio.Task[None]] = set()  # streams of HEAD answers being closed


class Answering(Lifecycle):
    """The queue, answered in order; a head and its body written together."""

    def _next(self) -> None:
        """Answer what is queued, in order, until an answer must wait; then enter the state
        that waits (the only place that chooses the state after an answer)."""
        queue = self._queue
        while self.state not in _OVER:
            if self._unsent > self._high_water:  # as of the last write (note_unsent)
                self._enter(BLOCKED)
                return
            if not queue:
                if not self._unparsed:
                    self._enter(IDLE if self._head_began is None else HEAD)
                    return
                held, self._unparsed = self._unparsed, b""
                self._feed(held)
                continue
            item = queue.popleft()
            if type(item) is _Request:
                if not self._answer(item):
                    return  # ANSWERING or STREAMING
            elif type(item) is _Refusal:
                self._send_refusal(item)
            else:
                self._end()

    def _answer(self, request: _Request) -> bool:
        """Answer ``request`` now if ``respond_now`` can; else start a task for it. True when
        the answer was written."""
        answer = None
        if self._respond_now is not None:
            try:
                answer = self._respond_now(
                    request.method, request.path, request.query, request.headers
                )
            except Exception:
                log.exception("the responder failed on %s %.200s", request.method, request.path)
                self._send_refusal(_Refusal(500, _INTERNAL_ERROR))
                return True
        if type(answer) is Response:
            return self._send(request, answer)
        waiting = cast(Coroutine[Any, Any, Response] | None, answer)
        self._task = self._loop.create_task(self._complete(request, waiting))
        self._enter(ANSWERING)
        return False

    async def _complete(
        self, request: _Request, waiting: Coroutine[Any, Any, Response] | None
    ) -> None:
        """The answer that had to wait (``waiting``, else ``respond``'s: the server has no
        ``respond_now``), in its task; then the queue goes on."""
        try:
            if waiting is None:
                waiting = self._respond(
                    request.method, request.path, request.query, request.headers
                )
            response = await waiting
        except Exception:
            log.exception("the responder failed on %s %.200s", request.method, request.path)
            self._task = None
            self._guarded(lambda: self._send_refusal(_Refusal(500, _INTERNAL_ERROR)))
            return
        self._task = None
        if self.state is ANSWERING:
            self._guarded(lambda: self._deliver(request, response))
        elif response.stream is not None:  # the connection ended meanwhile: never written
            await _close_iterator(response.stream)

    def _deliver(self, request: _Request, response: Response) -> None:
        """Write the answer that waited; unless it is a stream, go on with the queue."""
        if self._send(request, response):
            self._next()

    def _send(self, request: _Request, response: Response) -> bool:
        """Write ``response`` to ``request``; True unless it is a stream (then STREAMING)."""
        transport = self._transport
        assert transport is not None
        keep_alive = request.keep_alive and self._open_after()
        status = response.status
        head_only = request.method == "HEAD" or status in _NO_BODY or status < 200
        if response.stream is not None:
            if not head_only:
                self._start_stream(response, keep_alive, request.http10)
                return False
            self._drop_stream(response.stream)
        head = self._head(response, keep_alive, request.http10)
        if head_only:
            transport.write(head)
        elif response.suffix:
            transport.writelines((head, response.body, response.suffix))
        else:
            # One writev, the body never copied; one path for bodies of every size.
            transport.writelines((head, response.body))
        if transport.get_write_buffer_size() != self._unsent:  # else nothing to note
            self.note_unsent()
        if not keep_alive:
            self._end()
        return True

    def _open_after(self) -> bool:
        """Whether the connection may stay open after this answer: not once the server is
        closing, unless another request waits for its answer."""
        return not self._server.closing or any(type(item) is _Request for item in self._queue)

    def _drop_stream(self, stream: AsyncIterator[bytes]) -> None:
        """Close a stream never iterated (a HEAD's, or a status without a body)."""
        closing = self._loop.create_task(_close_iterator(stream))
        _CLOSING.add(closing)  # a reference until it is done (the loop keeps a weak one)
        closing.add_done_callback(_CLOSING.discard)

    def _head(self, response: Response, keep_alive: bool, http10: bool) -> bytes:
        """The status line and header lines of ``response``, and the blank line."""
        status = response.status
        headers = response.headers
        fields = "\r\n".join(map(": ".join, headers)) + "\r\n" if headers else ""
        # No content-length on 1xx, 204 and 304 (RFC 9110 8.6): they have no body.
        if status in _NO_BODY or status < 200:
            length = ""
        elif response.stream is not None:  # HTTP/1.0: no chunks, the close ends the body
            length = "" if http10 else "transfer-encoding: chunked\r\n"
        else:
            length = f"content-length: {len(response.body) + len(response.suffix)}\r\n"
        if not keep_alive:
            connection = "connection: close\r\n"
        elif http10:
            connection = "connection: keep-alive\r\n"
        else:
            connection = ""
        line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n"
        # UTF-8, not latin-1: the same bytes for the ASCII the application sends, and faster.
        return f"{line}{fields}{length}{connection}{self._server.tail}\r\n".encode()

    def _send_refusal(self, refusal: _Refusal) -> None:
        transport = self._transport
        assert transport is not None
        self._queue.clear()
        self._stop_parsing()
        if self.state in _OVER:
            return
        body = error_body(refusal.status, refusal.message)
        response = Response(refusal.status, [("content-type", JSON)], body)
        transport.write(self._head(response, keep_alive=False, http10=False) + body)
        self.note_unsent()
        self._end()
