"""podcache's own HTTP/2 client (cri/http2.py, docs/architecture.md §7 rule 6) against a fake
runtime that speaks raw HTTP/2 frames over a real unix socket: framing split anywhere, flow
control both ways, every bound at and past its limit, status mapping, the decode memo of
header blocks, the pool's one retry, cancellation from another thread (the attacks on it:
``test_http2_hostile``).

``FakePeer`` (``h2fake``) is the fake: the runtime's side of one connection, driven by each
test's script in a thread of its own.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable

import grpc
import hpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri.endpoint import Endpoint, parse_endpoint
from podcache.cri.h2core import (
    MAX_FRAME_BYTES,
    MAX_HEADER_BLOCK,
    MAX_MESSAGE_BYTES,
    CallFailedError,
    WireViolationError,
)
from podcache.cri.h2pool import ConnectionPool
from podcache.cri.http2 import Connection
from podcache.cri.wire.headers import HPACKDecoder, keeps_table
from tests.unit.cri.h2fake import (
    CONT,
    DATA,
    GOAWAY,
    HEADERS,
    OK_HEADERS,
    PING,
    RST,
    SETTINGS,
    WINDOW,
    FakePeer,
    fake_runtime,
    frame,
    message,
)
from tests.unit.cri.h2fake import drain as _drain


def endpoint(where: list[str]) -> Endpoint:
    return parse_endpoint(where[0])


def one_call(where: list[str], timeout: float = 10.0) -> list[bytes]:
    connection = Connection(endpoint(where), timeout)
    try:
        return connection.call_all([("ListPodSandbox", b"req")], _deadline(timeout))[0]
    finally:
        connection.close()


def _deadline(timeout: float) -> float:
    import time

    return time.monotonic() + timeout


# -- the plain call -------------------------------------------------------------------------
def test_a_call_sends_grpc_headers_and_returns_the_answer(sock_dir: str) -> None:
    got: dict[str, object] = {}

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, headers, body = peer.request()
        got.update(headers=headers, body=body, stream=stream)
        peer.answer(stream, b"answer")
        peer.frame()

    with fake_runtime(sock_dir, script) as where:
        assert one_call(where) == [b"answer"]
    headers = got["headers"]
    assert isinstance(headers, dict)
    assert headers[":method"] == "POST"
    assert headers[":path"] == "/runtime.v1.RuntimeService/ListPodSandbox"
    assert headers["content-type"] == "application/grpc"
    assert headers["te"] == "trailers"
    assert headers["grpc-timeout"].endswith("m")
    assert got["body"] == b"req"


frames_around = st.lists(
    st.sampled_from(["ping", "settings", "window", "priority", "unknown"]), max_size=4
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.binary(max_size=3 * MAX_FRAME_BYTES),
    cuts=st.lists(st.integers(1, MAX_FRAME_BYTES), min_size=1, max_size=8),
    pads=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    extras=frames_around,
    write_sizes=st.integers(1, 600),
)
def test_an_answer_split_into_any_frames_and_writes_is_read_whole(  # noqa: PLR0917 -- one argument per strategy
    sock_dir: str,
    body: bytes,
    cuts: list[int],
    pads: list[int],
    extras: list[str],
    write_sizes: int,
) -> None:
    """DATA frames of any size with any padding, PING/SETTINGS/WINDOW_UPDATE/PRIORITY and
    unknown frames between them, written in pieces of any size: one message, as sent; every
    PING answered with its own payload."""
    pings: list[bytes] = []

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        out = frame(HEADERS, 0x4, stream, peer.encoder.encode(OK_HEADERS))
        wire, index = message(body), 0
        while wire:
            piece, wire = wire[: cuts[index % len(cuts)]], wire[cuts[index % len(cuts)] :]
            pad = max(0, min(pads[index % len(pads)], MAX_FRAME_BYTES - len(piece) - 1))
            padded = bytes((pad,)) + piece + b"\x00" * pad if pad else piece
            out += frame(DATA, 0x8 if pad else 0, stream, padded)
            out += _extra(extras[index % len(extras)] if extras else "", index, pings)
            index += 1
        out += frame(HEADERS, 0x5, stream, peer.encoder.encode([("grpc-status", "0")]))
        for start in range(0, len(out), write_sizes):
            peer.send(out[start : start + write_sizes])
        acks = [p for k, f, _, p in _drain(peer) if k == PING and f & 1]
        assert acks == pings

    with fake_runtime(sock_dir, script) as where:
        assert one_call(where) == [body]


def _extra(kind: str, index: int, pings: list[bytes]) -> bytes:
    if kind == "ping":
        payload = index.to_bytes(8)
        pings.append(payload)
        return frame(PING, 0, 0, payload)
    if kind == "settings":
        return frame(SETTINGS, 0, 0, struct.pack(">HI", 0x3, 100))
    if kind == "window":
        return frame(WINDOW, 0, 0, (1000).to_bytes(4))
    if kind == "priority":
        return frame(2, 0, 1, b"\x00\x00\x00\x00\x10")
    if kind == "unknown":
        return frame(0xEE, 0, 0, b"whatever")
    return b""


def test_two_calls_go_out_together_and_each_gets_its_own_answer(sock_dir: str) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        first = peer.request()
        second = peer.request()  # both requests arrive before any answer is sent
        peer.answer(second[0], b"second:" + second[2])
        peer.answer(first[0], b"first:" + first[2])
        peer.frame()

    with fake_runtime(sock_dir, script) as where:
        connection = Connection(endpoint(where), 5)
        answers = connection.call_all([("A", b"1"), ("B", b"2")], _deadline(5))
        connection.close()
    assert answers == [[b"first:1"], [b"second:2"]]


# -- status ---------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK])
def test_a_trailers_only_answer_gives_its_status_and_decoded_message(
    sock_dir: str, code: grpc.StatusCode
) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        pairs = [
            *OK_HEADERS,
            ("grpc-status", str(code.value[0])),
            ("grpc-message", "no%20such%25pod"),
        ]
        peer.headers(stream, pairs, end=True)
        peer.frame()

    with fake_runtime(sock_dir, script) as where, pytest.raises(CallFailedError) as failed:
        one_call(where)
    assert failed.value.code is code
    assert failed.value.details == "no such%pod"
    assert failed.value.method == "ListPodSandbox"


@pytest.mark.parametrize(
    ("status", "content_type", "code"),
    [
        ("404", "application/grpc", grpc.StatusCode.UNIMPLEMENTED),
        ("503", "application/grpc", grpc.StatusCode.UNAVAILABLE),
        ("401", "application/grpc", grpc.StatusCode.UNAUTHENTICATED),
        ("500", "application/grpc", grpc.StatusCode.UNKNOWN),
        ("200", "text/html", grpc.StatusCode.UNKNOWN),
    ],
)
def test_an_answer_that_is_not_grpc_is_mapped_as_grpc_maps_http(
    sock_dir: str, status: str, content_type: str, code: grpc.StatusCode
) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.headers(stream, [(":status", status), ("content-type", content_type)], end=True)
        peer.frame()

    with fake_runtime(sock_dir, script) as where, pytest.raises(CallFailedError) as failed:
        one_call(where)
    assert failed.value.code is code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (0x7, grpc.StatusCode.UNAVAILABLE),
        (0x8, grpc.StatusCode.CANCELLED),
        (0xB, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (0x2, grpc.StatusCode.INTERNAL),
    ],
)
def test_a_reset_stream_gives_the_status_of_its_error_code(
    sock_dir: str, error: int, code: grpc.StatusCode
) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.send(frame(RST, 0, stream, error.to_bytes(4)))
        peer.frame()

    with fake_runtime(sock_dir, script) as where, pytest.raises(CallFailedError) as failed:
        one_call(where)
    assert failed.value.code is code


def test_goaway_fails_the_calls_it_did_not_take_as_unavailable(sock_dir: str) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        peer.request()
        peer.send(frame(GOAWAY, 0, 0, (0).to_bytes(4) + (0).to_bytes(4)))
        peer.frame()

    with fake_runtime(sock_dir, script) as where, pytest.raises(CallFailedError) as failed:
        one_call(where)
    assert failed.value.code is grpc.StatusCode.UNAVAILABLE


def test_a_connection_closed_mid_answer_is_unavailable(sock_dir: str) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.headers(stream, OK_HEADERS)
        peer.send(frame(DATA, 0, stream, message(b"half")[:6]))

    with fake_runtime(sock_dir, script) as where, pytest.raises(CallFailedError) as failed:
        one_call(where)
    assert failed.value.code is grpc.StatusCode.UNAVAILABLE
    assert "closed the connection" in failed.value.details


def test_a_runtime_that_never_answers_fails_at_the_deadline(sock_dir: str) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        peer.request()
        _drain(peer)

    with fake_runtime(sock_dir, script) as where, pytest.raises(CallFailedError) as failed:
        one_call(where, timeout=0.2)
    assert failed.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


# -- bounds ---------------------------------------------------------------------------------
def _answer_with(raw: Callable[[FakePeer, int], None]) -> Callable[[FakePeer], None]:
    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        raw(peer, stream)
        _drain(peer)

    return script


@pytest.mark.parametrize("extra", [0, 1])
def test_a_frame_past_the_frame_limit_is_a_violation(sock_dir: str, extra: int) -> None:
    """At MAX_FRAME_BYTES a frame is read; one byte past it the connection is given up."""
    size = MAX_FRAME_BYTES + extra

    def raw(peer: FakePeer, stream: int) -> None:
        peer.headers(stream, OK_HEADERS)
        body = b"x" * (size - 5)
        peer.send(frame(DATA, 0, stream, message(body)))
        peer.headers(stream, [("grpc-status", "0")], end=True)

    with fake_runtime(sock_dir, _answer_with(raw)) as where:
        if extra:
            with pytest.raises(WireViolationError, match="frame of 16385 bytes"):
                one_call(where)
        else:
            assert one_call(where) == [b"x" * (size - 5)]


@pytest.mark.parametrize("extra", [0, 1])
def test_a_header_block_past_its_limit_is_a_violation(sock_dir: str, extra: int) -> None:
    """A block of HEADERS + CONTINUATIONs of exactly MAX_HEADER_BLOCK bytes is decoded; one
    byte more is refused before it is decoded."""

    def raw(peer: FakePeer, stream: int) -> None:
        block = peer.encoder.encode(OK_HEADERS)
        filler = MAX_HEADER_BLOCK + extra - len(block)
        # a literal never indexed, name "x-pad" (new name), whose value fills the block
        value_size = filler - 1 - 1 - len(b"x-pad") - 4
        pad = b"\x10\x05x-pad" + b"\x7f" + _varint_rest(value_size - 127) + b"a" * value_size
        block += pad
        assert len(block) == MAX_HEADER_BLOCK + extra
        pieces = [block[i : i + MAX_FRAME_BYTES] for i in range(0, len(block), MAX_FRAME_BYTES)]
        peer.send(frame(HEADERS, 0, stream, pieces[0]))
        for index, piece in enumerate(pieces[1:], 1):
            peer.send(frame(CONT, 0x4 if index == len(pieces) - 1 else 0, stream, piece))
        peer.send(frame(DATA, 0, stream, message(b"ok")))
        peer.headers(stream, [("grpc-status", "0")], end=True)

    with fake_runtime(sock_dir, _answer_with(raw)) as where:
        if extra:
            with pytest.raises(WireViolationError, match="header block over"):
                one_call(where)
        else:
            assert one_call(where) == [b"ok"]


def _varint_rest(value: int) -> bytes:
    """The continuation bytes of an HPACK integer past its prefix (always 3 of them here)."""
    out = bytearray()
    for _ in range(3):
        out.append((value & 0x7F) | (0x80 if len(out) < 2 else 0))
        value >>= 7
    return bytes(out)


@pytest.mark.parametrize("extra", [0, 1])
def test_a_message_past_the_receive_limit_is_resource_exhausted(sock_dir: str, extra: int) -> None:
    """The declared length decides: MAX_MESSAGE_BYTES is read (sent whole, through the flow
    control windows), one byte more fails at once, before its bytes arrive."""
    size = MAX_MESSAGE_BYTES + extra

    def raw(peer: FakePeer, stream: int) -> None:
        peer.headers(stream, OK_HEADERS)
        wire = b"\x00" + size.to_bytes(4) + (b"m" * size if not extra else b"")
        for start in range(0, len(wire), MAX_FRAME_BYTES):
            peer.send(frame(DATA, 0, stream, wire[start : start + MAX_FRAME_BYTES]))
        peer.headers(stream, [("grpc-status", "0")], end=True)

    with fake_runtime(sock_dir, _answer_with(raw)) as where:
        if extra:
            with pytest.raises(CallFailedError) as failed:
                one_call(where)
            assert failed.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        else:
            assert [len(m) for m in one_call(where, timeout=60)] == [size]


def test_a_unary_answer_holds_one_message_and_a_second_is_a_violation(sock_dir: str) -> None:
    def raw(peer: FakePeer, stream: int) -> None:
        peer.headers(stream, OK_HEADERS)
        peer.send(frame(DATA, 0, stream, message(b"one") + message(b"two")))
        peer.headers(stream, [("grpc-status", "0")], end=True)

    with (
        fake_runtime(sock_dir, _answer_with(raw)) as where,
        pytest.raises(WireViolationError, match="second message"),
    ):
        one_call(where)


def test_a_compressed_message_is_a_violation(sock_dir: str) -> None:
    def raw(peer: FakePeer, stream: int) -> None:
        peer.headers(stream, OK_HEADERS)
        peer.send(frame(DATA, 0, stream, b"\x01\x00\x00\x00\x01z"))

    with (
        fake_runtime(sock_dir, _answer_with(raw)) as where,
        pytest.raises(WireViolationError, match="compressed"),
    ):
        one_call(where)


# -- flow control ---------------------------------------------------------------------------
def test_a_long_stream_gets_its_windows_back_and_never_stalls(sock_dir: str) -> None:
    """The fake sends only within the windows the client gave (reading WINDOW_UPDATEs when
    they run out): 96 messages of 1 MiB, three times the stream window, all arrive."""
    updates = {"connection": 0, "stream": 0}
    count, size = 96, 1024 * 1024

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        windows = {0: 65535, stream: 65535}
        for got in peer.seen:  # the client's SETTINGS and WINDOW_UPDATE came with its request
            _learn(got, windows, updates)
        updates["connection"] = updates["stream"] = 0
        peer.headers(stream, OK_HEADERS)
        for _ in range(count):
            wire = message(b"e" * size)
            for start in range(0, len(wire), MAX_FRAME_BYTES):
                piece = wire[start : start + MAX_FRAME_BYTES]
                while min(windows.values()) < len(piece):
                    _learn(peer.frame(), windows, updates)
                windows[0] -= len(piece)
                windows[stream] -= len(piece)
                peer.send(frame(DATA, 0, stream, piece))
        peer.headers(stream, [("grpc-status", "0")], end=True)
        _drain(peer)

    with fake_runtime(sock_dir, script) as where:
        call = Connection(endpoint(where), 5).stream("GetContainerEvents", b"")
        got = 0
        while (item := call.next_message()) is not None:
            assert len(item) == size
            got += 1
        call.close()
    assert got == count
    assert updates["connection"] >= 1 and updates["stream"] >= 1


def _learn(
    got: tuple[int, int, int, bytes], windows: dict[int, int], updates: dict[str, int]
) -> None:
    kind, flags, stream, payload = got
    if kind == SETTINGS and not flags & 1:
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == 0x4:
                for sid in windows:
                    if sid:
                        windows[sid] += value - 65535
    elif kind == WINDOW:
        windows[stream] = windows.get(stream, 0) + int.from_bytes(payload)
        updates["connection" if stream == 0 else "stream"] += 1


def test_a_request_waits_for_the_runtimes_window(sock_dir: str) -> None:
    """A runtime that gives a window of 0 gets no DATA until its WINDOW_UPDATE."""
    order: list[str] = []

    def script(peer: FakePeer) -> None:
        peer.preface()
        peer.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 0)))
        kinds: list[int] = []
        while HEADERS not in kinds or SETTINGS not in [k for k, f, _, _ in peer.seen if f & 1]:
            kinds.append(peer.frame()[0])
        assert DATA not in kinds
        order.append("headers")
        peer.send(frame(WINDOW, 0, 1, (100).to_bytes(4)))
        order.append("window given")
        stream, _, body = peer.request()
        order.append("data")
        peer.answer(stream, body)
        _drain(peer)

    with fake_runtime(sock_dir, script) as where:
        connection = Connection(endpoint(where), 5)
        connection._peer_stream_window = 0  # as if the runtime's SETTINGS came first
        assert connection.call_all([("A", b"req")], _deadline(5)) == [[b"req"]]
        connection.close()
    assert order == ["headers", "window given", "data"]


# -- the decode memo -------------------------------------------------------------------------
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 16), header_values, st.booleans(), st.integers(0, 4096)),
        min_size=1,
        max_size=30,
    )
)
def test_header_blocks_decode_as_hpack_decodes_them_memo_or_not(
    answers: list[tuple[int, str, bool, int]],
) -> None:
    """Trailers from an encoder that indexes and resizes its table as it likes: the
    connection's memoised decoding gives what a fresh ``hpack.Decoder`` gives, block by block
    (the reference), and ``_keeps_table`` is true exactly when the table did not change."""
    encoder = hpack.Encoder()
    reference = hpack.Decoder()
    connection = Connection.__new__(Connection)
    connection._decoder = HPACKDecoder(max_header_list_size=MAX_HEADER_BLOCK)
    connection._decoded_blocks = {}
    connection._memo_bytes = 0
    connection._method = "ListPodSandbox"
    for status, details, resize, size in answers:
        if resize:
            encoder.header_table_size = size
        block = encoder.encode([("grpc-status", str(status)), ("grpc-message", details)])
        before = list(reference.header_table.dynamic_entries)
        before_size = reference.header_table.maxsize
        expected = dict(reference.decode(block, raw=True))
        unchanged = (
            list(reference.header_table.dynamic_entries) == before
            and reference.header_table.maxsize == before_size
        )
        assert connection._decoded(block) == expected
        assert not keeps_table(block) or unchanged


def test_a_repeated_block_is_decoded_once_until_the_table_may_change() -> None:
    encoder = hpack.Encoder()
    connection = Connection.__new__(Connection)
    decoder = HPACKDecoder(max_header_list_size=MAX_HEADER_BLOCK)
    connection._decoder = decoder
    connection._decoded_blocks = {}
    connection._memo_bytes = 0
    connection._method = "ListPodSandbox"
    calls = []
    real = decoder.decode

    def counting(block: bytes) -> object:
        calls.append(block)
        return real(block)

    decoder.decode = counting  # type: ignore[method-assign,assignment]
    first = encoder.encode([("grpc-status", "0")])  # adds the entry: not memoised
    again = encoder.encode([("grpc-status", "0")])  # indexed only: memoised
    for block in (first, again, again, again):
        assert connection._decoded(block) == {b"grpc-status": b"0"}
    assert calls == [first, again]
    changing = encoder.encode([("grpc-status", "5")])
    connection._decoded(changing)
    connection._decoded(again)
    assert calls == [first, again, changing, again]


# -- the pool and cancellation -------------------------------------------------------------
def test_the_pool_retries_once_on_a_fresh_connection_when_an_idle_one_was_closed(
    sock_dir: str,
) -> None:
    connections: list[int] = []

    def script(peer: FakePeer) -> None:
        connections.append(1)
        peer.preface()
        stream, _, body = peer.request()
        peer.answer(stream, body)
        if len(connections) == 1:
            return  # closes the connection once idle, as a restarting runtime does
        _drain(peer)

    with fake_runtime(sock_dir, script) as where:
        pool = ConnectionPool(endpoint(where))
        assert pool.call_all([("A", b"one")], 5) == [[b"one"]]
        assert pool.call_all([("A", b"two")], 5) == [[b"two"]]
        pool.close()
    assert len(connections) == 2


def test_the_pool_does_not_retry_a_call_the_runtime_began_to_answer(sock_dir: str) -> None:
    connections: list[int] = []

    def script(peer: FakePeer) -> None:
        connections.append(1)
        peer.preface()
        stream, _, _ = peer.request()
        peer.headers(stream, OK_HEADERS)

    with fake_runtime(sock_dir, script) as where:
        pool = ConnectionPool(endpoint(where))
        with pytest.raises(CallFailedError):
            pool.call_all([("A", b"x")], 5)
        pool.close()
    assert len(connections) == 1


def test_a_runtime_that_takes_no_connection_is_an_os_error(sock_dir: str) -> None:
    pool = ConnectionPool(parse_endpoint(f"unix://{sock_dir}/nothing.sock"))
    with pytest.raises(FileNotFoundError):
        pool.call_all([("A", b"x")], 1)


def test_cancel_from_another_thread_ends_a_waiting_stream_as_cancelled(sock_dir: str) -> None:
    waiting = threading.Event()

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.headers(stream, OK_HEADERS)
        peer.send(frame(DATA, 0, stream, message(b"first")))
        _drain(peer)

    with fake_runtime(sock_dir, script) as where:
        call = Connection(endpoint(where), 5).stream("GetContainerEvents", b"")
        assert call.next_message() == b"first"
        outcome: list[BaseException] = []

        def read() -> None:
            waiting.set()
            try:
                call.next_message()
            except CallFailedError as error:
                outcome.append(error)

        reader = threading.Thread(target=read)
        reader.start()
        waiting.wait()
        call.cancel()
        reader.join(10)
        call.close()
    assert len(outcome) == 1
    assert isinstance(outcome[0], CallFailedError)
    assert outcome[0].code is grpc.StatusCode.CANCELLED


def test_its_receive_limit_is_the_channels() -> None:
    from podcache.cri.channels import MAX_RECEIVE_MESSAGE_BYTES

    assert MAX_RECEIVE_MESSAGE_BYTES == MAX_MESSAGE_BYTES
