"""The relay's reading of HTTP/2 (``relay._Frames``, ``relay._Connection``; docs/architecture.md
§10 rules 1 and 6): frame headers found whatever the chunks' cuts, calls opened by a client's
HEADERS on a new stream, completed by the server's END_STREAM, ended by a RST_STREAM."""

from __future__ import annotations

from podcache.serve.crisock.relay import Relay, _Connection, _Frames

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
    changes: list[int] = []
    connection = _Connection(0.0, None, lambda _, change: changes.append(change))
    connection.client_frame(1, 4, 1)
    assert connection.open == {1} and connection.completed == 0
    connection.client_frame(1, 5, 1)  # trailing HEADERS of the same stream: no new call
    connection.server_frame(1, 4, 1)  # the answer's headers: still open
    assert connection.open == {1}
    connection.server_frame(1, 5, 1)  # trailers, END_STREAM: completed
    assert connection.open == set() and connection.completed == 1
    assert connection.idle_since > 0.0
    assert changes == [1, -1]


def test_a_reset_ends_a_call_without_completing_it() -> None:
    connection = _Connection(0.0, None, lambda _, change: None)
    connection.client_frame(1, 4, 1)
    connection.client_frame(1, 4, 3)
    connection.client_frame(3, 0, 1)  # the client's RST_STREAM
    connection.server_frame(3, 0, 3)  # the server's
    assert connection.open == set() and connection.completed == 0
    connection.client_frame(1, 4, 3)  # a stream already used opens nothing
    assert connection.open == set()


def _relay_of(fair_calls: int, connections: int) -> tuple[Relay, list[_Connection]]:
    """A relay holding ``connections`` connections of its own (no sockets: their frames are
    fed by the test)."""
    relay = Relay("unused", max_connections=100, handshake_seconds=5.0, fair_calls=fair_calls)
    made = [_Connection(0.0, None, relay._counted) for _ in range(connections)]
    for connection in made:
        relay._connections[connection] = None
    return relay, made


def _open_calls(connection: _Connection, count: int) -> None:
    first = connection.last_stream + 2 if connection.last_stream else 1
    for stream in range(first, first + 2 * count, 2):
        connection.client_frame(1, 4, stream)


def test_up_to_the_fair_share_every_call_opens_and_nothing_is_closed() -> None:
    relay, (heavy, light) = _relay_of(fair_calls=10, connections=2)
    _open_calls(heavy, 9)
    _open_calls(light, 1)
    assert relay.calls == 10 and relay.busiest == 0
    assert not heavy.closed and not light.closed


def test_past_the_fair_share_a_call_closes_the_busiest_connection() -> None:
    relay, (heavy, other, victim) = _relay_of(fair_calls=10, connections=3)
    _open_calls(heavy, 7)
    _open_calls(other, 3)
    _open_calls(victim, 1)  # the 11th call
    assert heavy.closed and relay.busiest == 1
    assert not other.closed and not victim.closed
    assert relay.calls == 4 and victim.open == {1}


def test_the_busiest_opening_more_closes_nobody_else() -> None:
    relay, (heavy, light) = _relay_of(fair_calls=4, connections=2)
    _open_calls(light, 2)
    _open_calls(heavy, 4)  # past the share, but heavy is the busiest itself
    assert relay.busiest == 0 and not light.closed
    assert relay.calls == 6  # gRPC's own bound (above the share) is what stops it


def test_a_closed_connection_counts_no_call_and_its_late_frames_open_none() -> None:
    relay, (heavy, victim) = _relay_of(fair_calls=3, connections=2)
    _open_calls(heavy, 3)
    _open_calls(victim, 1)
    assert heavy.closed and relay.calls == 1
    _open_calls(heavy, 2)  # frames read before its task ended
    heavy.server_frame(1, 5, 1)  # an answer's end on a call no longer counted
    heavy.release()
    assert relay.calls == 1 and heavy.open == set()
