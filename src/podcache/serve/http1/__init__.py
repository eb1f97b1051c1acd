"""HTTP/1.1 over asyncio transports for one application; no routing, no sockets of its own.

``HTTPServer`` holds what all connections share (the responder, the limits, a coarse clock,
the ``Date`` header, the open connections); ``HTTPConnection`` is the ``asyncio.Protocol`` of
one connection. ``server`` binds the sockets and hands ``HTTPServer.connection`` to
``loop.create_server``; ``App`` (routing, checks, bodies) is the responder.

Theory of operation. Bytes go to httptools' (llhttp's) parser; each complete request head joins
the connection's queue, and requests are answered one at a time, in order. An answer comes
from ``respond_now`` when it needs no waiting (a cache hit: no task, no suspension), else from
the coroutine ``respond_now`` returned instead (or ``respond``'s, for a server given no
``respond_now``) run in an asyncio task; the queue waits meanwhile. A response is one
``bytes`` head (status line and headers) and the body, handed to the transport together: a
large body is never copied in user space. What the server answers itself (a ``_Refusal``:
malformed, too large, has a body, wrong version, too slow, a bad or foreign Host) is JSON from
``response.error_body``, queued in order like a request, and ends the connection.

Every connection is in exactly one state, ``HTTPConnection.state``; ``_enter`` is the only
code that changes it, and the tables below are the whole machine.

====================  ===============================================  ========================
state                 what is happening                                the server's tick
====================  ===============================================  ========================
``IDLE``              between requests: nothing queued or answering    ``idle_timeout`` since
                                                                       it began: ``ENDING``
``HEAD``              a request head is arriving; nothing to answer    ``head_timeout`` since
                                                                       its target began: 408
``ANSWERING``         a task computes the answer to the oldest         none: the responder
                      request; later ones wait in the queue            bounds its own wait
``BLOCKED``           the unsent answers passed the transport's        no write progress for
                      high-water mark: no answer is started, no input  ``idle_timeout``: reset
                      read, until it drains to the low-water mark
``STREAMING``         a streaming answer is being written, chunk by    unsent bytes stuck for
                      chunk, by its task                               ``idle_timeout``: reset
``ENDING``            the last answer is written (or the connection    no write progress for
                      timed out idle): half-closed or closing, input   ``linger_timeout``: reset
                      discarded until the client closes
``CLOSED``            the transport is gone                            none
====================  ===============================================  ========================

========================================  =====================  ==========================
event                                     in state               next state
========================================  =====================  ==========================
a request target begins to arrive         ``IDLE``               ``HEAD``
a head completes (queued)                 ``IDLE``, ``HEAD``     ``_next()`` decides
a head completes (queued)                 any other              unchanged: it waits
``_next()``: unsent over the high-water   any open               ``BLOCKED``
``_next()``: a request, ``respond_now``   any open               its answer written; loop
answers it
``_next()``: a request it cannot answer   any open               ``ANSWERING``
``_next()``: a streaming answer           any open               ``STREAMING``
``_next()``: a refusal, an answer that    any open               ``ENDING``
closes, the end of input (client EOF),
the server's shutdown
``_next()``: nothing queued               any open               ``HEAD`` if a head is
                                                                 arriving, else ``IDLE``
the answering task finishes               ``ANSWERING``          answer written; ``_next()``
the stream ends (or is cut off cleanly)   ``STREAMING``          ``_next()``
``resume_writing``                        ``BLOCKED``            ``_next()``
client EOF                                ``IDLE``, ``HEAD``     closed (``CLOSED``)
client EOF                                others                 an end marker is queued;
                                                                 a stream ends cleanly
client EOF again (uvloop repeats it)      any                    unchanged
``shutdown()``                            ``IDLE``, ``HEAD``     ``ENDING``
``shutdown()``                            others                 an end marker is queued;
                                                                 a stream ends cleanly
a stream starts with an end marker        ``ANSWERING``          ``STREAMING``, its end
queued (EOF or shutdown came while its                           decided: head, last chunk,
answer was prepared)                                             ``ENDING``
over the byte budget, or a stream's own   any open               reset (``CLOSED``)
bound
``connection_lost``                       any                    ``CLOSED``
========================================  =====================  ==========================

Bounds: docs/architecture.md §5, item 2 (their values and reasons in ``limits``). One timer
for all connections ticks once a second; no timer is set per request.

Streaming answers (for long-lived feeds such as a watch), the API a responder plugs into:

- return ``Response(status, headers, stream=chunks, max_unsent=N)`` from ``respond`` (or
  ``respond_now``), where ``chunks`` is an async iterator of ``bytes`` (an async generator);
  the server sends the head with ``transfer-encoding: chunked`` (no content-length), then
  each non-empty chunk as it comes, then the last chunk; to HTTP/1.0 it sends the chunks bare
  and ends the body by closing. HEAD gets the head only; the iterator is closed unread.
- Chunks are written as they come, without waiting for the client: ``max_unsent`` (default
  ``response.STREAM_MAX_UNSENT``) bounds what the client may leave unread; a chunk that leaves
  more resets the connection. The stream's unsent bytes count against ``max_buffered`` like
  any others, and the stream holds one of ``max_connections``. A quiet stream is not idle
  (send a heartbeat chunk if the client needs one); unsent bytes that do not drain for
  ``idle_timeout`` reset it.
- The stream runs in its own task (state ``STREAMING``); requests pipelined behind it wait
  for its end. Its iterator is closed (``aclose``, so a generator's ``finally`` runs) when it
  ends, when it is cut off, when the connection is lost, and on the server's shutdown
  (SIGTERM), which ends the chunked body cleanly (the last chunk) and closes the connection.
  The client's close or half-close ends it the same way, in every state: one that came while
  the answer was still being prepared ends the stream as soon as it begins (a stream never
  ends by itself, so an end left queued behind it would never be reached), and an answer
  whose connection was lost meanwhile has its iterator closed unwritten. The end of a stream
  whose task has not yet run is decided by a flag its task reads first, never by cancelling
  it: a task cancelled before it runs skips its body, ``finally`` included.
- A reset by one of the server's bounds tells an iterator that has ``cut_off(reason)`` why:
  ``unread`` (past ``max_unsent``), ``budget`` (``max_buffered``), ``stalled`` (unsent bytes
  stuck for ``idle_timeout``).
- An exception from the iterator is logged and resets the connection (the body cannot be
  turned into an error answer once its head is sent).
- A stream may also be written between its iterator's yields: when the iterator has an
  ``attach`` method, the server calls it with ``send_chunk`` (``response.ChunkSink``), which
  writes a chunk at once under the same framing, bound and cut-off as the iterator's; it
  writes nothing (False) once the stream's end is decided (its iterator ended, shutdown,
  client EOF, a reset).

Modules, one concept each: docs/architecture.md §5, item 2; ``states.TRANSITIONS`` is the
data of the tables above. This package imports nothing of podcache but ``serve.response``.

It deliberately supports only what a read-only JSON API needs: no request bodies (refused,
never read), no upgrades (answered as plain HTTP/1.1, then closed), no HTTP/2. Targets must be
ASCII (llhttp refuses raw non-ASCII bytes: 400).
"""

from podcache.serve.http1.admission import Responder, RespondNow
from podcache.serve.http1.connection import HTTPConnection, HTTPServer
from podcache.serve.http1.limits import (
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    LINGER_TIMEOUT,
    MAX_BUFFERED,
    MAX_CONNECTIONS,
    MAX_HEAD,
    MAX_HEADER_FIELDS,
    MAX_PIPELINE,
    MAX_TARGET,
    SEND_BUFFER,
)
from podcache.serve.http1.states import State

__all__ = [
    "HEAD_TIMEOUT",
    "IDLE_TIMEOUT",
    "LINGER_TIMEOUT",
    "MAX_BUFFERED",
    "MAX_CONNECTIONS",
    "MAX_HEAD",
    "MAX_HEADER_FIELDS",
    "MAX_PIPELINE",
    "MAX_TARGET",
    "SEND_BUFFER",
    "HTTPConnection",
    "HTTPServer",
    "RespondNow",
    "Responder",
    "State",
]
