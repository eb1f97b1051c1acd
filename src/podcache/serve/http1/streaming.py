"""Streaming answers: the stream's task, ``send_chunk``, and how a stream ends.

A stream is written chunk by chunk in its own task, under ``max_unsent``, chunked (bare chunks
to HTTP/1.0); the iterator may write between its yields (``attach``). Deliberately not here:
choosing to stream (``answering``) and the resets that cut a stream off (``lifecycle``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from podcache.serve.http1.items import _End, _Writing
from podcache.serve.http1.lifecycle import Lifecycle
from podcache.serve.http1.states import STREAMING
from podcache.serve.response import Response

__all__ = ["Streaming"]

log = logging.getLogger("podcache.serve")

_LAST_CHUNK = b"0\r\n\r\n"


class Streaming(Lifecycle):
    """A streaming answer being written, and its end."""

    def _start_stream(self, response: Response, keep_alive: bool, http10: bool) -> None:
        transport = self._transport
        assert transport is not None and response.stream is not None
        if http10:
            keep_alive = False  # HTTP/1.0 has no chunked coding: the body ends with the close
        transport.write(self._head(response, keep_alive, http10))
        chunks = response.stream
        self._writing = _Writing(chunks, response.max_unsent, not http10)
        self._stream_began = False
        self._task = self._loop.create_task(self._stream(chunks, keep_alive, chunked=not http10))
        self._enter(STREAMING)
        if any(type(item) is _End for item in self._queue):
            # The client's EOF (or the server's shutdown) came while the answer was being
            # prepared: the stream it began ends at once, cleanly (its head, then its end).
            self._end_stream()
            return
        attach = getattr(chunks, "attach", None)
        if attach is not None:  # a stream that writes chunks itself between its yields
            attach(self.send_chunk)

    def _end_stream(self) -> None:
        """Decide the stream's end: nothing more is written, and its task ends it (closes its
        iterator, writes its last chunk and closes the connection). A task cancelled before it
        first ran would never run its body, so one that has not begun is left to see the end
        decided when it does."""
        self._writing = None
        if self._task is not None and self._stream_began:
            self._task.cancel()

    def send_chunk(self, chunk: bytes) -> bool:
        """Write ``chunk`` as the stream's next chunk (``response.ChunkSink``); reset the
        connection when it leaves more than the stream's ``max_unsent`` unread. False when
        nothing was written: no stream is being written (it ended, its end was decided, or
        the connection is gone), or this chunk cut it off."""
        writing = self._writing
        transport = self._transport
        if writing is None or self.state is not STREAMING or transport is None:
            return False
        if not chunk:
            return True
        if writing.chunked:
            transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
        else:
            transport.write(chunk)
        self.note_unsent()
        if self._unsent > writing.max_unsent:
            log.warning("a stream's client left over %d bytes unread: reset", writing.max_unsent)
            self.abort(cut_off="unread")
            return False
        return True

    async def _stream(
        self, chunks: AsyncIterator[bytes], keep_alive: bool, *, chunked: bool
    ) -> None:
        """Write each chunk as it comes; end the body cleanly when the iterator ends or this
        task is cancelled by the server's shutdown; reset past the stream's ``max_unsent``."""
        transport = self._transport
        assert transport is not None
        self._stream_began = True
        try:
            if self._writing is None:  # its end was decided before this task first ran
                keep_alive = False
            else:
                async for chunk in chunks:
                    if not self.send_chunk(chunk):  # cut off (then CLOSED), or its end decided
                        keep_alive = False
                        break
        except asyncio.CancelledError:
            keep_alive = False  # shutdown (or the connection is gone): end cleanly, then close
        except Exception:
            log.exception("a streaming answer failed; reset")
            self.abort()
            return
        finally:
            self._writing = None
            await _close_iterator(chunks)
        self._task = None
        if self.state is STREAMING:
            if chunked:
                transport.write(_LAST_CHUNK)
            self.note_unsent()
            self._guarded(self._end if not keep_alive else self._next)


async def _close_iterator(chunks: AsyncIterator[bytes]) -> None:
    """Close an async generator (or any iterator with ``aclose``); its failure is logged."""
    close = getattr(chunks, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:
        log.exception("closing a streaming answer failed")
