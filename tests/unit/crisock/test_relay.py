"""The relay's reading of HTTP/2 (``relay._Frames``, ``relay._Connection``; docs/architecture.md
§10 rules 1 and 6): frame headers found whatever the chunks' cuts, calls opened by a client's
HEADERS on a new stream, completed by the server's END_STREAM, ended by a RST_STREAM."""

from __future__ import annotations

from podcache.serve.crisock.relay import _Connection, _Frames

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    head = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return head + payload


def test_frame_headers_are_found_at_every_cut_of_the_bytes() -> None:
    data = (
        PREFACE
        + frame(4, 0, 0, b"\0" * 6)  # SETTINGS
        + frame(1, 4, 1, b"h" * 40)  # HEADERS
        + frame(0, 1, 1, b"d" * 100)  # DATA, END_STREAM
        + frame(3, 0, 3, b"\0\0\0\x08")  # RST_STREAM
    )
    expected = [(4, 0, 0), (1, 4, 1), (0, 1, 1), (3, 0, 3)]
    for cut in range(1, len(data)):
        seen: list[tuple[int, int, int]] = []
        frames = _Frames(len(PREFACE), lambda *head: seen.append(head))  # noqa: B023 -- used at once
        frames.feed(data[:cut])
        frames.feed(data[cut:])
        assert seen == expected, cut
    seen = []
    frames = _Frames(len(PREFACE), lambda *head: seen.append(head))
    for byte in data:  # one byte at a time
        frames.feed(bytes([byte]))
    assert seen == expected


def test_a_call_is_open_from_its_headers_to_the_servers_end_of_stream() -> None:
    connection = _Connection(0.0, None)
    connection.client_frame(1, 4, 1)
    assert connection.open == {1} and connection.completed == 0
    connection.client_frame(1, 5, 1)  # trailing HEADERS of the same stream: no new call
    connection.server_frame(1, 4, 1)  # the answer's headers: still open
    assert connection.open == {1}
    connection.server_frame(1, 5, 1)  # trailers, END_STREAM: completed
    assert connection.open == set() and connection.completed == 1
    assert connection.idle_since > 0.0


def test_a_reset_ends_a_call_without_completing_it() -> None:
    connection = _Connection(0.0, None)
    connection.client_frame(1, 4, 1)
    connection.client_frame(1, 4, 3)
    connection.client_frame(3, 0, 1)  # the client's RST_STREAM
    connection.server_frame(3, 0, 3)  # the server's
    assert connection.open == set() and connection.completed == 0
    connection.client_frame(1, 4, 3)  # a stream already used opens nothing
    assert connection.open == set()
