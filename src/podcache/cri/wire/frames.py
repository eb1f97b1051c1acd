"""HTTP/2's frames as bytes (RFC 9113): the preface, the frame types, flags and settings the
client uses, a frame's layout, and a DATA or HEADERS payload without its padding.

Deliberately not here: connections, flow control and bounds (the connection core's,
``cri.h2core``), and header blocks (``headers``).
"""

from __future__ import annotations

__all__ = [
    "FrameError",
    "client_preface",
    "frame",
    "frame_name",
    "head",
    "setting_pairs",
    "settings",
    "unpadded",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
SETTING_ENABLE_PUSH, SETTING_MAX_STREAMS, SETTING_WINDOW = 0x2, 0x3, 0x4
SETTING_MAX_FRAME, SETTING_MAX_HEADER_LIST = 0x5, 0x6
DEFAULT_WINDOW = 65_535
"""Every flow-control window before SETTINGS or WINDOW_UPDATE move it (RFC 9113 §6.9.2)."""
LAST_STREAM_ID = MAX_WINDOW = 2**31 - 1
LARGEST_FRAME_SETTING = 2**24 - 1
DEFAULT_MAX_FRAME = 16_384
"""SETTINGS_MAX_FRAME_SIZE's default and smallest value (RFC 9113 §6.5.2)."""
HEAD_BYTES = 9
"""A frame's head: length (24 bits), type, flags, stream (31 bits and a reserved bit)."""

_FRAME_NAMES = {
    DATA: "DATA",
    HEADERS: "HEADERS",
    PRIORITY: "PRIORITY",
    RST_STREAM: "RST_STREAM",
    SETTINGS: "SETTINGS",
    PUSH_PROMISE: "PUSH_PROMISE",
    PING: "PING",
    GOAWAY: "GOAWAY",
    WINDOW_UPDATE: "WINDOW_UPDATE",
    CONTINUATION: "CONTINUATION",
}
CONNECTION_KINDS = frozenset({SETTINGS, PING, GOAWAY})
"""Frames that belong to the connection: on stream 0 only (RFC 9113 §6.5, §6.7, §6.8)."""
STREAM_KINDS = frozenset({DATA, HEADERS, PRIORITY, RST_STREAM, CONTINUATION})
"""Frames that belong to a stream: never on stream 0 (RFC 9113 §6.1-6.4, §6.10)."""


class FrameError(ValueError):
    """A frame whose fields contradict its length (the text names the frame)."""


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame: its 9-byte head, then ``payload``."""
    head = len(payload).to_bytes(3) + bytes((kind, flags)) + stream.to_bytes(4)
    return head + payload


def settings(*pairs: tuple[int, int]) -> bytes:
    """A SETTINGS payload: each (identifier, value) as 16 and 32 bits."""
    return b"".join(key.to_bytes(2) + value.to_bytes(4) for key, value in pairs)


def client_preface(stream_window: int, connection_window: int, max_header_list: int) -> bytes:
    """What a client sends first: the preface, its SETTINGS (no push, ``stream_window`` for
    each stream, headers of at most ``max_header_list`` bytes) and the WINDOW_UPDATE that takes
    the connection's window from the default to ``connection_window``."""
    ours = settings(
        (SETTING_ENABLE_PUSH, 0),
        (SETTING_WINDOW, stream_window),
        (SETTING_MAX_HEADER_LIST, max_header_list),
    )
    grow = (connection_window - DEFAULT_WINDOW).to_bytes(4)
    return PREFACE + frame(SETTINGS, 0, 0, ours) + frame(WINDOW_UPDATE, 0, 0, grow)


def head(data: bytes | bytearray, start: int) -> tuple[int, int, int, int]:
    """The head of the frame at ``start`` of ``data`` (at least ``HEAD_BYTES`` from it): its
    payload's length, type, flags and stream (the reserved bit dropped)."""
    length = int.from_bytes(data[start : start + 3])
    stream = int.from_bytes(data[start + 5 : start + HEAD_BYTES]) & LAST_STREAM_ID
    return length, data[start + 3], data[start + 4], stream


def setting_pairs(payload: bytes) -> list[tuple[int, int]]:
    """A SETTINGS payload's (identifier, value) pairs; ``FrameError`` when it is not made of
    whole pairs."""
    if len(payload) % 6:
        raise FrameError(f"a malformed SETTINGS frame ({len(payload)} bytes)")
    return [
        (int.from_bytes(payload[at : at + 2]), int.from_bytes(payload[at + 2 : at + 6]))
        for at in range(0, len(payload), 6)
    ]


def frame_name(kind: int) -> str:
    return _FRAME_NAMES.get(kind, f"unknown (type {kind})")


def unpadded(kind: int, flags: int, payload: bytes) -> bytes:
    """A DATA or HEADERS payload without its padding (and a HEADERS' priority fields);
    ``FrameError`` when the pad length or the priority fields do not fit the payload."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload or payload[0] >= len(payload):
            raise FrameError(f"a padded {frame_name(kind)} frame of {len(payload)} bytes")
        start, end = 1, len(payload) - payload[0]
    if kind == HEADERS and flags & PRIORITY_FLAG:
        start += 5
        if start > end:
            raise FrameError("a HEADERS frame too short for its priority")
    return payload[start:end]
