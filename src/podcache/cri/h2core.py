"""The HTTP/2 connection core of podcache's own gRPC client: one connection's streams, frames,
flow control, bounds, deadlines and outcomes, over a socket its driver connected; its two
drivers are ``http2`` (pooled) and ``oneshot`` (docs/architecture.md §4, "One wire, two
drivers"). The rules a hostile runtime is held to (deadlines, the control-frame budget,
received flow control, the decode memo's bound) are §7 rule 6's; besides them:

- **One thread per connection.** A connection is used by one thread at a time; ``cancel()`` is
  the one call another thread may make: it shuts the socket down, and the reading thread sees
  its call cancelled.
- **What it speaks.** HTTP/2 over the runtime's socket (unix or loopback TCP), no TLS, no
  compression asked for (a compressed message is a violation), request headers written as
  literals (never indexed). PINGs and SETTINGS are acknowledged; the windows it gives the
  runtime (``STREAM_WINDOW``, ``CONNECTION_WINDOW``: ``preface``) are given back as it reads;
  the ones the runtime gives it are never overrun (a request waits for a WINDOW_UPDATE).
- **Bounds.** ``MAX_FRAME_BYTES``, ``MAX_HEADER_BLOCK`` and ``MAX_CONTINUATIONS``, at most
  ``MAX_SIZE_UPDATES`` HPACK table size updates at a block's start, a message of at most
  ``MAX_MESSAGE_BYTES`` (RESOURCE_EXHAUSTED past it, as grpcio's limit), one message in a
  unary answer (a second is a violation; a stream's are taken one at a time, so at most one
  frame's worth wait), ``MAX_MEMO_BYTES`` of decode memo.
- **Deadlines.** ``_deadline`` is the driver's; without one (a stream's), reads wait as long
  as the driver asks and writes have ``SEND_TIMEOUT`` each.
- **Outcomes.** A call ends with gRPC's status number and details (``Stream.status``): the
  trailers' grpc-status and grpc-message (percent-decoded), an HTTP status other than 200 by
  gRPC's table, RST_STREAM by its error code, GOAWAY UNAVAILABLE. A failure of the connection
  is a ``CallFailedError``: a lost connection UNAVAILABLE (cancelled: CANCELLED), the deadline
  DEADLINE_EXCEEDED; a runtime that breaks HTTP/2 or gRPC framing is a ``WireViolationError``
  naming the frame: the connection is closed, never reused. Every failure names the method
  being read or written. ``grpc.StatusCode`` is mapped only in ``status_code``.
"""

from __future__ import annotations

import _socket
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from podcache.cri.wire import frames, grpcwire
from podcache.cri.wire.grpcwire import (
    CANCELLED,
    DEADLINE_EXCEEDED,
    INTERNAL,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
)
from podcache.cri.wire.headers import (
    MAX_SIZE_UPDATES,
    HPACKDecoder,
    HPACKError,
    grpc_timeout,
    keeps_table,
    leading_size_updates,
    request_headers,
)
from podcache.cri.wire.methods import path

if TYPE_CHECKING:
    import grpc

__all__ = [
    "CONNECTION_WINDOW",
    "CONTROL_FRAMES_PER_CALL",
    "CONTROL_FRAMES_PER_SECOND",
    "CONTROL_FRAME_BURST",
    "MAX_CONTINUATIONS",
    "MAX_FRAME_BYTES",
    "MAX_HEADER_BLOCK",
    "MAX_MEMO_BYTES",
    "MAX_MESSAGE_BYTES",
    "SEND_TIMEOUT",
    "STREAM_WINDOW",
    "CallFailedError",
    "Connection",
    "Stream",
    "WireViolationError",
    "preface",
    "status_code",
]

MAX_FRAME_BYTES = 16_384
"""Largest frame payload accepted: HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which it keeps."""
MAX_HEADER_BLOCK = 64 * 1024
"""Largest header block (HEADERS and CONTINUATION payloads); its decoded header list may be
twice that (HPACK's count: names, values and 32 bytes a header), which also bounds a block
of indexed fields that each name a big table entry."""
STREAM_WINDOW = 32 * 1024 * 1024
"""The flow-control window each stream gives the runtime: two messages at the receive limit."""
CONNECTION_WINDOW = 64 * 1024 * 1024
"""The connection's flow-control window given to the runtime."""
SEND_TIMEOUT = 10.0
"""Seconds a write may wait for the runtime to read, without a deadline (a stream's)."""
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The receive limit of one gRPC message: the channels' (``channels.MAX_RECEIVE_MESSAGE_BYTES``,
the kubelet's), one limit for every client."""
MAX_CONTINUATIONS = 16
"""Most CONTINUATION frames one header block may take: a block of ``MAX_HEADER_BLOCK`` bytes
cut into frames of 4 KiB. Its byte bound does not count empty ones (CVE-2024-27316's flood)."""
CONTROL_FRAME_BURST = 1_000
"""The control-frame budget a connection starts with and never holds more of."""
CONTROL_FRAMES_PER_SECOND = 100
"""Control frames given back to the budget each second."""
CONTROL_FRAMES_PER_CALL = 16
"""Control frames given back for each call opened (a call brings about four)."""
MAX_MEMO_BYTES = 16 * 1024
"""Most bytes the decode memo of header blocks holds: each block's bytes, its headers' names
and values, and the objects around them (``_memo_cost``, checked against tracemalloc)."""

_RECV_BYTES = 256 * 1024
_COMPACT_AT = 1024 * 1024
_MEMO_ENTRY_COST = 400
"""What a memo entry costs besides its bytes: the entry, the block's and the headers' objects."""
_MEMO_HEADER_COST = 120
"""What each decoded header of a memo entry costs besides its name's and value's bytes."""


def preface() -> bytes:
    """What a driver writes first on a connection (before or with its first calls): the
    preface, and SETTINGS giving this module's windows."""
    return frames.client_preface(STREAM_WINDOW, CONNECTION_WINDOW, MAX_HEADER_BLOCK)


_STATUS_CODES: dict[int, grpc.StatusCode] = {}


def status_code(number: int) -> grpc.StatusCode:
    """gRPC's status ``number`` (``grpcwire``) as ``grpc.StatusCode``: the one place the own
    client maps them (the table made on first use: the one-shot read imports no grpc)."""
    if not _STATUS_CODES:
        import grpc  # noqa: PLC0415 -- see above

        _STATUS_CODES.update((code.value[0], code) for code in grpc.StatusCode)
    return _STATUS_CODES[number]


class CallFailedError(Exception):
    """A call that did not end with OK: its status (``number``, gRPC's; ``code``, the same as a
    ``grpc.StatusCode``), ``details`` and ``method``."""

    def __init__(self, number: int, details: str, method: str = "") -> None:
        super().__init__(number, details, method)
        self.number = number
        self.details = details
        self.method = method

    @property
    def code(self) -> grpc.StatusCode:
        return status_code(self.number)

    def __str__(self) -> str:
        return f"{self.method or 'call'}: {self.code.name}: {self.details}"


class WireViolationError(CallFailedError):
    """The runtime broke HTTP/2 or gRPC framing (the connection is not used again)."""

    def __init__(self, details: str, method: str = "") -> None:
        super().__init__(INTERNAL, details, method)


class _Frame:
    __slots__ = ("flags", "kind", "payload", "stream")

    def __init__(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        self.kind = kind
        self.flags = flags
        self.stream = stream
        self.payload = payload


def _memo_cost(block: bytes, headers: dict[bytes, bytes]) -> int:
    """The bytes a memo entry holds: the block, its headers' names and values, and the objects
    around them (measured with tracemalloc: tests/unit/cri/test_http2_hostile.py)."""
    named = sum(len(name) + len(value) + _MEMO_HEADER_COST for name, value in headers.items())
    return _MEMO_ENTRY_COST + len(block) + named


class Stream:
    """One call's state on a connection: its answer as it arrives."""

    __slots__ = (
        "answered",
        "headers_seen",
        "messages",
        "method",
        "pending",
        "remote_closed",
        "send_window",
        "status",
        "unacked",
        "unary",
    )

    def __init__(self, method: str, unary: bool, send_window: int) -> None:
        self.method = method
        self.unary = unary
        self.send_window = send_window
        self.headers_seen = False
        self.pending = bytearray()
        self.messages: deque[bytes] = deque()
        self.status: tuple[int, str] | None = None
        """How the call ended: gRPC's status number and its details (None: not yet)."""
        self.unacked = 0
        self.answered = False
        self.remote_closed = False
        """The runtime ended its side (END_STREAM or RST_STREAM): it may send no DATA or
        HEADERS."""

    def end(self, code: int, details: str) -> None:
        if self.status is None:
            self.status = (code, details)


class _HeaderBlock:
    """A header block being assembled: its stream, bytes, END_STREAM and CONTINUATIONs."""

    __slots__ = ("continuations", "data", "ends", "stream")

    def __init__(self, stream: int, data: bytearray, ends: bool) -> None:
        self.stream = stream
        self.data = data
        self.ends = ends
        self.continuations = 0


class Connection:
    """One HTTP/2 connection to the runtime over ``sock`` (connected; the preface, ``preface()``,
    is the driver's to write), for one thread at a time (see the module rules)."""

    def __init__(self, sock: _socket.socket, authority: str) -> None:
        self._sock = sock
        self._authority = authority
        self._decoder = HPACKDecoder(max_header_list_size=2 * MAX_HEADER_BLOCK)
        self._decoded_blocks: dict[bytes, dict[bytes, bytes]] = {}
        self._memo_bytes = 0
        self._inbox = bytearray()
        self._start = 0
        self._next_id = 1
        self._streams: dict[int, Stream] = {}
        self._block: _HeaderBlock | None = None
        self._send_window = frames.DEFAULT_WINDOW
        self._peer_stream_window = frames.DEFAULT_WINDOW
        self._peer_max_streams = frames.LAST_STREAM_ID
        self._unacked = 0
        self._going_away: int | None = None
        self._cancelled = False
        self._control_budget = float(CONTROL_FRAME_BURST)
        self._control_at = time.monotonic()
        self._method = "the HTTP/2 preface"
        """The call being read or written now (every failure names it)."""
        self._deadline: float | None = None
        """The deadline of every read and write (None: a stream's, whose writes have
        ``SEND_TIMEOUT``)."""
        self.broken: str | None = None
        """Why the connection may not be used again (None: it may)."""

    def answered(self) -> bool:
        """Whether any stream of this connection received a frame of its answer."""
        return any(stream.answered for stream in self._streams.values())

    def close(self) -> None:
        """Close the socket (the owning thread only)."""
        self.broken = self.broken or "closed"
        self._sock.close()

    def cancel(self) -> None:
        """From any thread: shut the socket down; the thread reading or writing on it sees its
        call cancelled at once."""
        self._cancelled = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(_socket.SHUT_RDWR)

    # -- sending -----------------------------------------------------------------------------
    def _open(self, method: str, body: bytes, out: bytearray, *, unary: bool = False) -> int:
        """Open one call: its headers and request message appended to ``out`` (sent by the
        caller), or, when the runtime's windows do not take the message yet, ``out`` and the
        headers sent now and the message once a WINDOW_UPDATE made room. Its stream ID."""
        self._method = method
        if self._next_id > frames.LAST_STREAM_ID or self._going_away is not None:
            raise CallFailedError(UNAVAILABLE, "the connection is used up", method)
        stream_id = self._next_id
        self._next_id += 2
        stream = Stream(method, unary, self._peer_stream_window)
        self._streams[stream_id] = stream
        self._control_budget = min(
            CONTROL_FRAME_BURST, self._control_budget + CONTROL_FRAMES_PER_CALL
        )
        block = request_headers(path(method), self._authority)
        if self._deadline is not None:
            block += grpc_timeout(self._deadline - time.monotonic())
        message = grpcwire.message(body)
        if len(block) > MAX_FRAME_BYTES or len(message) > MAX_FRAME_BYTES:
            raise ValueError(f"the request of {method} does not fit one frame")
        out += frames.frame(frames.HEADERS, frames.END_HEADERS, stream_id, block)
        if len(message) > min(self._send_window, stream.send_window):
            self._send(bytes(out))
            out.clear()
            while len(message) > min(self._send_window, stream.send_window):
                if stream.status is not None:
                    raise CallFailedError(*stream.status, method)
                self._take(self._next_frame(self._deadline))
        self._send_window -= len(message)
        stream.send_window -= len(message)
        out += frames.frame(frames.DATA, frames.END_STREAM, stream_id, message)
        return stream_id

    def _send_calls(
        self, requests: Sequence[tuple[str, bytes]], out: bytearray, *, unary: bool = True
    ) -> list[int]:
        """Open a call for each request (``_open``), written in one write after ``out`` (what
        waits to be written); their stream IDs."""
        ids = [self._open(method, body, out, unary=unary) for method, body in requests]
        if out:
            self._send(bytes(out))
        return ids

    def _send(self, data: bytes) -> None:
        """Write ``data`` whole by the call's deadline (a stream's: within ``SEND_TIMEOUT``);
        a write that does not finish leaves a frame cut, so the connection is broken."""
        deadline = self._deadline
        timeout = SEND_TIMEOUT if deadline is None else deadline - time.monotonic()
        if timeout <= 0:
            raise self._deadline_passed("before writing")
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(data)
        except TimeoutError:
            if self._cancelled:
                raise self._lost("writing: cancelled") from None
            if deadline is not None:
                raise self._deadline_passed("writing: the runtime did not read") from None
            why = f"the runtime did not read what was sent within {SEND_TIMEOUT:g} s"
            raise self._lost(why) from None
        except OSError as error:
            raise self._lost(f"writing: {error.strerror or error}") from None

    def _lost(self, why: str) -> CallFailedError:
        """The failure of every call when the connection is gone (cancelled: CANCELLED)."""
        self.broken = why
        if self._cancelled:
            return CallFailedError(CANCELLED, "the connection was cancelled", self._method)
        return CallFailedError(UNAVAILABLE, f"connection lost: {why}", self._method)

    def _deadline_passed(self, when: str) -> CallFailedError:
        """The failure of a call whose deadline passed (the connection is not used again: a
        frame may be cut, an answer may still come)."""
        self.broken = "a call's deadline passed"
        if self._cancelled:
            return self._lost(when)
        return CallFailedError(DEADLINE_EXCEEDED, f"deadline exceeded ({when})", self._method)

    # -- reading -----------------------------------------------------------------------------
    def _finish(self, ids: list[int]) -> list[Stream]:
        """Read until every stream of ``ids`` ended (frames of any stream taken as they come);
        each one's state, in order, no longer the connection's."""
        for stream_id in ids:
            stream = self._streams[stream_id]
            self._method = stream.method
            while stream.status is None:
                self._take(self._next_frame(self._deadline))
        return [self._streams.pop(stream_id) for stream_id in ids]

    def _next_frame(self, deadline: float | None) -> _Frame:
        """The next frame, read by ``deadline`` (checked before each frame: frames waiting in
        the inbox do not hold a call past it)."""
        if deadline is not None and time.monotonic() >= deadline:
            raise self._deadline_passed("reading")
        inbox = self._inbox
        while True:
            start = self._start
            if len(inbox) - start >= frames.HEAD_BYTES:
                length, kind, flags, stream = frames.head(inbox, start)
                if length > MAX_FRAME_BYTES:
                    self.broken = "an oversized frame"
                    raise WireViolationError(
                        f"a frame of {length} bytes (at most {MAX_FRAME_BYTES}): not HTTP/2?",
                        self._method,
                    )
                end = start + frames.HEAD_BYTES + length
                if len(inbox) >= end:
                    self._start = end
                    payload = bytes(inbox[start + frames.HEAD_BYTES : end])
                    return _Frame(kind, flags, stream, payload)
            if start >= _COMPACT_AT or start == len(inbox):
                del inbox[:start]
                self._start = 0
            self._fill(deadline)

    def _fill(self, deadline: float | None) -> None:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise self._deadline_passed("reading")
        try:
            self._sock.settimeout(timeout)
            chunk = self._sock.recv(_RECV_BYTES)
        except TimeoutError:
            raise self._deadline_passed("reading: the runtime sent nothing more") from None
        except OSError as error:
            raise self._lost(f"reading: {error.strerror or error}") from None
        if not chunk:
            raise self._lost("the runtime closed the connection")
        self._inbox += chunk

    # -- frames ------------------------------------------------------------------------------
    def _take(self, frame: _Frame) -> None:
        """Act on one frame (a header block is assembled first, whatever its stream), after
        the rules every frame is held to: the control-frame budget, and the stream it may be
        on. A DATA frame with a payload (an answer's bytes: the hot path) is checked by its
        handler alone, against the streams this client opened."""
        kind = frame.kind
        if self._block is not None and kind != frames.CONTINUATION:
            raise self._violation(
                f"a header block interrupted by a {frames.frame_name(kind)} frame"
            )
        if kind == frames.DATA and frame.payload:
            self._on_data(frame)
            return
        self._spend(frame)
        self._check_stream(frame)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, frame)

    def _check_stream(self, frame: _Frame) -> None:
        """A frame other than DATA with a payload is on a stream its type may be on: the
        connection's (0) for SETTINGS, PING, GOAWAY; a stream this client opened for the
        others (PRIORITY: any stream but 0)."""
        kind = frame.kind
        if frame.stream == 0:
            if kind in frames.STREAM_KINDS:
                raise self._violation(f"a {frames.frame_name(kind)} frame on stream 0")
        elif kind in frames.CONNECTION_KINDS:
            raise self._violation(f"a {frames.frame_name(kind)} frame on stream {frame.stream}")
        elif kind != frames.PRIORITY and not self._opened(frame.stream):
            raise self._violation(
                f"a {frames.frame_name(kind)} frame on stream {frame.stream}, "
                "which this client never opened"
            )

    def _opened(self, stream_id: int) -> bool:
        """Whether this client opened ``stream_id`` (odd, below the next one it would open)."""
        return stream_id < self._next_id and stream_id % 2 == 1

    def _unpadded(self, frame: _Frame) -> bytes:
        """A DATA or HEADERS payload without its padding (a violation when it does not fit)."""
        try:
            return frames.unpadded(frame.kind, frame.flags, frame.payload)
        except frames.FrameError as error:
            raise self._violation(str(error)) from None

    def _spend(self, frame: _Frame) -> None:
        """Take one control frame from the budget (refilled by the time since the last)."""
        now = time.monotonic()
        budget = self._control_budget + (now - self._control_at) * CONTROL_FRAMES_PER_SECOND
        self._control_at = now
        self._control_budget = min(float(CONTROL_FRAME_BURST), budget) - 1
        if self._control_budget < 0:
            raise self._violation(
                f"a flood of control frames, the last a {frames.frame_name(frame.kind)} frame "
                f"(more than {CONTROL_FRAME_BURST} at once, {CONTROL_FRAMES_PER_SECOND} a "
                f"second and {CONTROL_FRAMES_PER_CALL} a call)"
            )

    def _violation(self, details: str) -> WireViolationError:
        self.broken = details
        return WireViolationError(details, self._method)

    def _on_settings(self, frame: _Frame) -> None:
        try:
            pairs = frames.setting_pairs(frame.payload)
        except frames.FrameError as error:
            raise self._violation(str(error)) from None
        if frame.flags & frames.ACK:
            if pairs:
                raise self._violation(f"a malformed SETTINGS frame ({len(frame.payload)} bytes)")
            return
        for key, value in pairs:
            self._setting(key, value)
        self._send(frames.frame(frames.SETTINGS, frames.ACK, 0))

    def _setting(self, key: int, value: int) -> None:
        """One setting of the runtime's SETTINGS: the ones this client acts on, the ones it
        holds to RFC 9113 §6.5.2 (a violation), the rest ignored."""
        if key == frames.SETTING_WINDOW:
            self._new_stream_window(value)
        elif key == frames.SETTING_MAX_STREAMS:
            self._peer_max_streams = value
        elif key == frames.SETTING_MAX_FRAME and not (
            MAX_FRAME_BYTES <= value <= frames.LARGEST_FRAME_SETTING
        ):
            raise self._violation(f"a SETTINGS frame with SETTINGS_MAX_FRAME_SIZE {value}")
        elif key == frames.SETTING_ENABLE_PUSH and value != 0:
            raise self._violation(f"a SETTINGS frame with SETTINGS_ENABLE_PUSH {value}")

    def _new_stream_window(self, value: int) -> None:
        """SETTINGS_INITIAL_WINDOW_SIZE: every open stream's window moves by the difference
        (RFC 9113 §6.9.2); past 2^31-1, for the setting or a window, is a connection error."""
        if value > frames.MAX_WINDOW:
            raise self._violation(
                f"a SETTINGS frame with SETTINGS_INITIAL_WINDOW_SIZE {value} (at most 2^31-1)"
            )
        for stream in self._streams.values():
            stream.send_window += value - self._peer_stream_window
            if stream.send_window > frames.MAX_WINDOW:
                raise self._violation(
                    f"a SETTINGS frame with SETTINGS_INITIAL_WINDOW_SIZE {value}, which takes "
                    f"the window of {stream.method} past 2^31-1"
                )
        self._peer_stream_window = value

    def _on_ping(self, frame: _Frame) -> None:
        if len(frame.payload) != 8:
            raise self._violation(f"a malformed PING frame ({len(frame.payload)} bytes)")
        if not frame.flags & frames.ACK:
            self._send(frames.frame(frames.PING, frames.ACK, 0, frame.payload))

    def _on_window_update(self, frame: _Frame) -> None:
        if len(frame.payload) != 4:
            raise self._violation(f"a malformed WINDOW_UPDATE frame ({len(frame.payload)} bytes)")
        increment = int.from_bytes(frame.payload) & frames.LAST_STREAM_ID
        if increment == 0:
            raise self._violation(f"a WINDOW_UPDATE frame of 0 on stream {frame.stream}")
        if frame.stream == 0:
            self._send_window += increment
            window, whose = self._send_window, "the connection's"
        elif (stream := self._streams.get(frame.stream)) is not None:
            stream.send_window += increment
            window, whose = stream.send_window, f"the window of stream {frame.stream}"
        else:
            return  # a stream that ended: the runtime may not know yet
        if window > frames.MAX_WINDOW:
            raise self._violation(
                f"a WINDOW_UPDATE frame of {increment} that takes {whose} window past 2^31-1"
            )

    def _on_goaway(self, frame: _Frame) -> None:
        if len(frame.payload) < 8:
            raise self._violation(f"a malformed GOAWAY frame ({len(frame.payload)} bytes)")
        last = int.from_bytes(frame.payload[:4]) & frames.LAST_STREAM_ID
        self._going_away = last
        self.broken = "the runtime sent GOAWAY"
        for stream_id, stream in self._streams.items():
            if stream_id > last:
                stream.end(UNAVAILABLE, "the runtime is closing the connection")

    def _on_reset(self, frame: _Frame) -> None:
        if len(frame.payload) != 4:
            raise self._violation(f"a malformed RST_STREAM frame ({len(frame.payload)} bytes)")
        stream = self._streams.get(frame.stream)
        if stream is not None:
            stream.remote_closed = True
            stream.end(*grpcwire.reset_status(int.from_bytes(frame.payload)))

    def _on_push(self, frame: _Frame) -> None:
        raise self._violation("a PUSH_PROMISE frame, which this client disabled")

    def _on_headers(self, frame: _Frame) -> None:
        self._open_stream(frame)
        payload = self._unpadded(frame)
        self._block = _HeaderBlock(
            frame.stream, bytearray(payload), bool(frame.flags & frames.END_STREAM)
        )
        self._block_grew(frame)

    def _open_stream(self, frame: _Frame) -> Stream:
        """The stream a DATA or HEADERS frame is for, which the runtime may still send on."""
        stream = self._streams.get(frame.stream)
        if stream is not None and not stream.remote_closed:
            return stream
        name = frames.frame_name(frame.kind)
        if frame.stream == 0:
            raise self._violation(f"a {name} frame on stream 0")
        if not self._opened(frame.stream):
            raise self._violation(
                f"a {name} frame on stream {frame.stream}, which this client never opened"
            )
        raise self._violation(
            f"a {name} frame on stream {frame.stream}, which the runtime had ended"
        )

    def _on_continuation(self, frame: _Frame) -> None:
        block = self._block
        if block is None or block.stream != frame.stream:
            raise self._violation("a CONTINUATION frame that continues no header block")
        block.continuations += 1
        if block.continuations > MAX_CONTINUATIONS:
            raise self._violation(
                f"a header block of more than {MAX_CONTINUATIONS} CONTINUATION frames"
            )
        block.data.extend(frame.payload)
        self._block_grew(frame)

    def _block_grew(self, frame: _Frame) -> None:
        block = self._block
        assert block is not None
        if len(block.data) > MAX_HEADER_BLOCK:
            raise self._violation(f"a header block over {MAX_HEADER_BLOCK} bytes")
        if not frame.flags & frames.END_HEADERS:
            return
        self._block = None
        headers = self._decoded(bytes(block.data))
        stream = self._streams[block.stream]
        if block.ends:
            stream.remote_closed = True
        _stream_headers(stream, headers, block.ends)

    def _decoded(self, block: bytes) -> dict[bytes, bytes]:
        """A header block's headers, decoded whatever its stream (the table is the
        connection's). A block that leaves the table as it is (``_keeps_table``) is
        remembered with its headers (at most ``MAX_MEMO_BYTES`` in all, the oldest forgotten
        first) until a block that may change the table: a runtime repeats the same few blocks
        on every answer."""
        known = self._decoded_blocks.get(block)
        if known is not None:
            return known
        if block and block[0] & 0xE0 == 0x20 and leading_size_updates(block) > MAX_SIZE_UPDATES:
            raise self._violation(
                f"a header block opening with more than {MAX_SIZE_UPDATES} HPACK table size updates"
            )
        try:
            headers = dict(self._decoder.decode(block))
        except HPACKError as error:
            raise self._violation(f"a header block HPACK cannot decode ({error})") from None
        if not keeps_table(block):
            self._decoded_blocks.clear()  # decoded under a table that may have changed
            self._memo_bytes = 0
        else:
            self._remember(block, headers)
        return headers

    def _remember(self, block: bytes, headers: dict[bytes, bytes]) -> None:
        """Keep a decoded block, forgetting the oldest while the memo would pass its bound."""
        cost = _memo_cost(block, headers)
        if cost > MAX_MEMO_BYTES:
            return
        memo = self._decoded_blocks
        while self._memo_bytes + cost > MAX_MEMO_BYTES:
            oldest = next(iter(memo))
            self._memo_bytes -= _memo_cost(oldest, memo.pop(oldest))
        memo[block] = headers
        self._memo_bytes += cost

    def _on_data(self, frame: _Frame) -> None:
        stream = self._open_stream(frame)
        size = len(frame.payload)
        if self._unacked + size > CONNECTION_WINDOW:
            raise self._violation(
                f"a DATA frame of {size} bytes past the connection's flow-control window "
                f"({CONNECTION_WINDOW - self._unacked} bytes left)"
            )
        if stream.unacked + size > STREAM_WINDOW:
            raise self._violation(
                f"a DATA frame of {size} bytes past the flow-control window of stream "
                f"{frame.stream} ({STREAM_WINDOW - stream.unacked} bytes left)"
            )
        self._unacked += size
        stream.answered = True
        stream.unacked += size
        stream.pending += self._unpadded(frame)
        self._split(stream)
        if frame.flags & frames.END_STREAM:
            stream.remote_closed = True
            stream.end(INTERNAL, "the answer ended without trailers")
        self._give_back(frame.stream, stream)

    def _split(self, stream: Stream) -> None:
        """Move the whole messages of ``stream.pending`` to its messages."""
        pending = stream.pending
        while len(pending) >= 5:
            if pending[0] != 0:
                raise self._violation(
                    f"a gRPC message with flags {pending[0]} (compressed, which was not asked for)"
                )
            size = int.from_bytes(pending[1:5])
            if size > MAX_MESSAGE_BYTES:
                self.broken = "an oversized message"
                raise CallFailedError(
                    RESOURCE_EXHAUSTED,
                    f"received message larger than max ({size} vs. {MAX_MESSAGE_BYTES})",
                    stream.method,
                )
            if len(pending) < 5 + size:
                return
            if stream.unary and stream.messages:  # bounds what a unary answer may hold
                raise self._violation(f"a second message in the answer of {stream.method}")
            stream.messages.append(bytes(pending[5 : 5 + size]))
            del pending[: 5 + size]

    def _give_back(self, stream_id: int, stream: Stream) -> None:
        """Return read bytes to the runtime's windows once half of one is used."""
        updates = b""
        if self._unacked >= CONNECTION_WINDOW // 2:
            updates += frames.frame(frames.WINDOW_UPDATE, 0, 0, self._unacked.to_bytes(4))
            self._unacked = 0
        if stream.status is None and stream.unacked >= STREAM_WINDOW // 2:
            updates += frames.frame(frames.WINDOW_UPDATE, 0, stream_id, stream.unacked.to_bytes(4))
            stream.unacked = 0
        if updates:
            self._send(updates)


def _stream_headers(stream: Stream, headers: dict[bytes, bytes], ends: bool) -> None:
    """A stream's header block: its response headers (first), or its trailers (ending)."""
    stream.answered = True
    if not stream.headers_seen:
        stream.headers_seen = True
        failure = grpcwire.http_failure(headers)
        if failure is not None:
            stream.end(*failure)
            return
    if ends:
        stream.end(*grpcwire.status_of(headers))


_HANDLERS = {
    frames.DATA: Connection._on_data,
    frames.HEADERS: Connection._on_headers,
    frames.RST_STREAM: Connection._on_reset,
    frames.SETTINGS: Connection._on_settings,
    frames.PUSH_PROMISE: Connection._on_push,
    frames.PING: Connection._on_ping,
    frames.GOAWAY: Connection._on_goaway,
    frames.WINDOW_UPDATE: Connection._on_window_update,
    frames.CONTINUATION: Connection._on_continuation,
}
"""What each frame type does; PRIORITY and unknown types are ignored (RFC 9113 §5.5)."""
