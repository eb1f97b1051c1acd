"""HTTP/2 and HPACK as bytes for podcache's own HTTP/2 client (``http2``): no I/O, no state.

Holds the frame types, flags and settings the client uses, the frame layout, HPACK's integers
and literals (the request header block, written as literals never indexed), the scans of a
received header block that decoding relies on (``_keeps_table``, ``_leading_size_updates``),
gRPC's readings of a header block (``_status_of``, ``_http_failure``) and its status tables,
and the two failures the client raises (``CallFailedError``, ``WireViolationError``).
Deliberately not here: connections, flow control, decoding (``hpack``) and the bounds, which
are ``http2``'s.
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple
from urllib.parse import unquote_to_bytes

import grpc

__all__ = ["CallFailedError", "WireViolationError"]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS, _PUSH_PROMISE = 0, 1, 2, 3, 4, 5
_PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 6, 7, 8, 9
_END_STREAM = _ACK = 0x1
_END_HEADERS, _PADDED, _PRIORITY_FLAG = 0x4, 0x8, 0x20
_SETTING_ENABLE_PUSH, _SETTING_MAX_STREAMS, _SETTING_WINDOW = 0x2, 0x3, 0x4
_SETTING_MAX_FRAME, _SETTING_MAX_HEADER_LIST = 0x5, 0x6
_DEFAULT_WINDOW = 65_535
_LAST_STREAM_ID = _MAX_WINDOW = 2**31 - 1
_LARGEST_FRAME_SETTING = 2**24 - 1
_MAX_SIZE_UPDATES = 2
_SERVICE = "/runtime.v1.RuntimeService/"
_FRAME_NAMES = {
    _DATA: "DATA",
    _HEADERS: "HEADERS",
    _PRIORITY: "PRIORITY",
    _RST_STREAM: "RST_STREAM",
    _SETTINGS: "SETTINGS",
    _PUSH_PROMISE: "PUSH_PROMISE",
    _PING: "PING",
    _GOAWAY: "GOAWAY",
    _WINDOW_UPDATE: "WINDOW_UPDATE",
    _CONTINUATION: "CONTINUATION",
}
_CONNECTION_KINDS = frozenset({_SETTINGS, _PING, _GOAWAY})
"""Frames that belong to the connection: on stream 0 only (RFC 9113 §6.5, §6.7, §6.8)."""
_STREAM_KINDS = frozenset({_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _CONTINUATION})
"""Frames that belong to a stream: never on stream 0 (RFC 9113 §6.1-6.4, §6.10)."""

_CODES = {code.value[0]: code for code in grpc.StatusCode}
# gRPC's mapping of an HTTP status that is not 200 (doc/http-grpc-status-mapping.md).
_HTTP_CODES = {
    400: grpc.StatusCode.INTERNAL,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.UNIMPLEMENTED,
    429: grpc.StatusCode.UNAVAILABLE,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.UNAVAILABLE,
}
# An RST_STREAM's error code as a status (gRPC's PROTOCOL.md); anything else is INTERNAL.
_RESET_CODES = {
    0x0: grpc.StatusCode.INTERNAL,
    0x7: grpc.StatusCode.UNAVAILABLE,
    0x8: grpc.StatusCode.CANCELLED,
    0xB: grpc.StatusCode.RESOURCE_EXHAUSTED,
    0xC: grpc.StatusCode.PERMISSION_DENIED,
}


class CallFailedError(Exception):
    """A call that did not end with OK: its status ``code``, ``details`` and ``method``."""

    def __init__(self, code: grpc.StatusCode, details: str, method: str = "") -> None:
        super().__init__(f"{method or 'call'}: {code.name}: {details}")
        self.code = code
        self.details = details
        self.method = method


class WireViolationError(CallFailedError):
    """The runtime broke HTTP/2 or gRPC framing (the connection is not used again)."""

    def __init__(self, details: str, method: str = "") -> None:
        super().__init__(grpc.StatusCode.INTERNAL, details, method)


class _Frame(NamedTuple):
    kind: int
    flags: int
    stream: int
    payload: bytes


def _integer_end(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """(value, position after) of an HPACK integer at ``pos`` (RFC 7541 §5.1); (-1, end)
    when it runs past the block."""
    limit = (1 << prefix_bits) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while pos < len(block):
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, len(block)


def _keeps_table(block: bytes) -> bool:
    """Whether decoding a header block leaves the dynamic table as it is: it holds indexed
    fields (1xxxxxxx) and literals not indexed (0000xxxx, 0001xxxx) only, no literal with
    incremental indexing (01xxxxxx) and no table size update (001xxxxx), RFC 7541 §6."""
    pos, end = 0, len(block)
    while pos < end:
        first = block[pos]
        if first >= 0x80:
            pos = _integer_end(block, pos, 7)[1]
            continue
        if first >= 0x20:
            return False
        index, pos = _integer_end(block, pos, 4)
        for _ in range(2 if index == 0 else 1):  # the name when not indexed, then the value
            if pos >= end:
                return False
            size, pos = _integer_end(block, pos, 7)
            pos += max(size, end) if size < 0 else size
        if index < 0 or pos > end:
            return False
    return True


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + stream.to_bytes(4) + payload


def _hpack_integer(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) in a first byte holding ``first``'s high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: str | int, value: str) -> bytes:
    """A header as a literal never added to the table (RFC 7541 §6.2.2); ``name``: a static
    table index, or the name itself. No Huffman coding."""
    encoded = value.encode("ascii")
    if isinstance(name, int):
        head = _hpack_integer(name, 4, 0x00)
    else:
        raw = name.encode("ascii")
        head = b"\x00" + _hpack_integer(len(raw), 7, 0x00) + raw
    return head + _hpack_integer(len(encoded), 7, 0x00) + encoded


@functools.cache
def _request_headers(path: str, authority: str) -> bytes:
    """The header block of a call: POST (static 3), http (static 6), its path and authority
    (made once per method and authority: literals never indexed do not depend on the table)."""
    return b"".join(
        (
            b"\x83\x86",
            _literal(4, path),
            _literal(1, authority),
            _literal(31, "application/grpc"),
            _literal("te", "trailers"),
            _literal("user-agent", "podcache"),
        )
    )


def _grpc_timeout(seconds: float) -> bytes:
    """The grpc-timeout header of a deadline ``seconds`` away (milliseconds, at least 1)."""
    return _literal("grpc-timeout", f"{min(99_999_999, max(1, int(seconds * 1000)))}m")


def _leading_size_updates(block: bytes) -> int:
    """How many HPACK dynamic table size updates (001xxxxx) open ``block``: RFC 7541 §4.2
    allows two (the smallest size, then the final one); hpack refuses one after a field."""
    count, pos = 0, 0
    while pos < len(block) and block[pos] & 0xE0 == 0x20:
        count += 1
        if count > _MAX_SIZE_UPDATES:
            break
        pos = _integer_end(block, pos, 5)[1]
    return count


def _frame_name(kind: int) -> str:
    return _FRAME_NAMES.get(kind, f"unknown (type {kind})")


def _status_of(headers: dict[bytes, bytes]) -> tuple[grpc.StatusCode, str]:
    """The status a trailer block (or a trailers-only answer) gives."""
    raw = headers.get(b"grpc-status")
    if raw is None:
        return grpc.StatusCode.UNKNOWN, "the answer ended without a grpc-status"
    number = int(raw) if raw.isdigit() and len(raw) <= 3 else -1
    code = _CODES.get(number, grpc.StatusCode.UNKNOWN)
    details = unquote_to_bytes(headers.get(b"grpc-message", b"")).decode("utf-8", "replace")
    return code, details


def _http_failure(headers: dict[bytes, bytes]) -> tuple[grpc.StatusCode, str] | None:
    """The status of response headers that are not a gRPC answer's, or None."""
    status = headers.get(b":status", b"")
    if status != b"200":
        number = int(status) if status.isdigit() and len(status) == 3 else 0
        code = _HTTP_CODES.get(number, grpc.StatusCode.UNKNOWN)
        return code, f"the runtime answered HTTP status {status.decode('ascii', 'replace')!r}"
    content_type = headers.get(b"content-type", b"")
    if not content_type.startswith(b"application/grpc"):
        shown = content_type[:60].decode("ascii", "replace")
        return grpc.StatusCode.UNKNOWN, f"the runtime answered content-type {shown!r}, not gRPC"
    return None


def _unpadded(frame: _Frame, method: str) -> bytes:
    """A DATA or HEADERS payload without its padding (and a HEADERS' priority fields)."""
    payload = frame.payload
    start, end = 0, len(payload)
    if frame.flags & _PADDED:
        if not payload or payload[0] >= len(payload):
            raise WireViolationError(
                f"a padded {_frame_name(frame.kind)} frame of {len(payload)} bytes", method
            )
        start, end = 1, len(payload) - payload[0]
    if frame.kind == _HEADERS and frame.flags & _PRIORITY_FLAG:
        start += 5
        if start > end:
            raise WireViolationError("a HEADERS frame too short for its priority", method)
    return payload[start:end]
