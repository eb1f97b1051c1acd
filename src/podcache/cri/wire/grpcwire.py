"""gRPC over HTTP/2 as bytes (gRPC's PROTOCOL-HTTP2.md): a message's 5-byte prefix, the status
codes as numbers, and the status a header block gives (trailers, an HTTP status, a reset).

Status codes are gRPC's numbers (``OK`` 0 ... ``UNAUTHENTICATED`` 16), the values of
``grpc.StatusCode``, which the connection core maps them to (``cri.h2core``). Deliberately
not here: frames (``frames``), HPACK (``headers``), and what a status means to podcache
(``cri.failures``).
"""

from __future__ import annotations

__all__ = [
    "http_failure",
    "message",
    "percent_decoded",
    "reset_status",
    "status_of",
]

OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 2, 3, 4, 5
ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION = 6, 7, 8, 9
ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS = 10, 11, 12, 13, 14, 15
UNAUTHENTICATED = 16
_CODES = 17
"""How many codes there are: a number from 0 to 16 is one."""


# gRPC's mapping of an HTTP status that is not 200 (doc/http-grpc-status-mapping.md).
_HTTP_CODES = {
    400: INTERNAL,
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    404: UNIMPLEMENTED,
    429: UNAVAILABLE,
    502: UNAVAILABLE,
    503: UNAVAILABLE,
    504: UNAVAILABLE,
}
# An RST_STREAM's error code as a status (gRPC's PROTOCOL-HTTP2.md); anything else is INTERNAL.
_RESET_CODES = {
    0x0: INTERNAL,
    0x7: UNAVAILABLE,
    0x8: CANCELLED,
    0xB: RESOURCE_EXHAUSTED,
    0xC: PERMISSION_DENIED,
}


def message(body: bytes) -> bytes:
    """``body`` as one uncompressed gRPC message."""
    return b"\x00" + len(body).to_bytes(4) + body


def status_of(headers: dict[bytes, bytes]) -> tuple[int, str]:
    """The status a trailer block (or a trailers-only answer) gives: its grpc-status (UNKNOWN
    when missing or not a code) and its grpc-message, percent-decoded."""
    raw = headers.get(b"grpc-status")
    if raw is None:
        return UNKNOWN, "the answer ended without a grpc-status"
    number = int(raw) if raw.isdigit() and len(raw) <= 3 else -1
    code = number if 0 <= number < _CODES else UNKNOWN
    details = percent_decoded(headers.get(b"grpc-message", b"")).decode("utf-8", "replace")
    return code, details


_HEX = frozenset(b"0123456789abcdefABCDEF")


def percent_decoded(raw: bytes) -> bytes:
    """grpc-message's percent-encoding undone (as ``urllib.parse.unquote_to_bytes``, which
    would cost the one-shot read ``re`` and ``ipaddress`` at start-up): each ``%XX`` of two hex
    digits is its byte, any other ``%`` is kept."""
    if b"%" not in raw:
        return raw
    first, *rest = raw.split(b"%")
    out = bytearray(first)
    for part in rest:
        if len(part) >= 2 and part[0] in _HEX and part[1] in _HEX:
            out.append(int(part[:2], 16))
            out += part[2:]
        else:
            out += b"%" + part
    return bytes(out)


def http_failure(headers: dict[bytes, bytes]) -> tuple[int, str] | None:
    """The status of response headers that are not a gRPC answer's (an HTTP status other
    than 200, a content type other than gRPC's), or None."""
    status = headers.get(b":status", b"")
    if status != b"200":
        number = int(status) if status.isdigit() and len(status) == 3 else 0
        code = _HTTP_CODES.get(number, UNKNOWN)
        return code, f"the runtime answered HTTP status {status.decode('ascii', 'replace')!r}"
    content_type = headers.get(b"content-type", b"")
    if not content_type.startswith(b"application/grpc"):
        shown = content_type[:60].decode("ascii", "replace")
        return UNKNOWN, f"the runtime answered content-type {shown!r}, not gRPC"
    return None


def reset_status(error: int) -> tuple[int, str]:
    """The status of a stream the runtime reset with HTTP/2 error code ``error``."""
    return _RESET_CODES.get(error, INTERNAL), f"the runtime reset the stream (HTTP/2 error {error})"
