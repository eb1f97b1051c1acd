"""podcache's own HTTP/2 client (cri/http2.py, docs/architecture.md §7 rule 6) against a hostile
runtime, the fake of ``h2fake`` over a real unix socket:

- every read and write of a call, acknowledgements included, ends by the call's deadline, and
  closing ends a call in flight at once; the error says how long the call really took;
- floods of control frames (PING, SETTINGS, RST_STREAM, WINDOW_UPDATE, PRIORITY, empty DATA,
  table size updates, unknown types) and of CONTINUATION frames end the connection with a
  violation naming the frame, and a flooded event stream is a failing subscription;
- receive flow control and the frames RFC 9113 makes connection errors are enforced;
- the decode memo of header blocks holds at most ``MAX_MEMO_BYTES``, in real memory too.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import grpc
import hpack
import pytest

from podcache import RuntimeCache
from podcache.cri import h2core
from podcache.cri.caller import SyncCaller
from podcache.cri.endpoint import parse_endpoint
from podcache.cri.h2core import (
    CONTROL_FRAME_BURST,
    MAX_CONTINUATIONS,
    MAX_MEMO_BYTES,
    CallFailedError,
    WireViolationError,
)
from podcache.cri.h2pool import ConnectionPool
from podcache.cri.http2 import Connection
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.wire.headers import HPACKDecoder, literal
from podcache.errors import CRIError, RuntimeDeadlineError, RuntimeProtocolError
from podcache.model import PodList
from tests.unit.cri.h2fake import (
    CONT,
    DATA,
    HEADERS,
    OK_HEADERS,
    PING,
    RST,
    SETTINGS,
    WINDOW,
    FakePeer,
    drain,
    fake_runtime,
    frame,
    message,
)

PRIORITY, UNKNOWN = 2, 0xEE
WAIT = 60.0
"""The safety net of a wait for something that must happen (never a bound on time)."""


def _endpoint_of(where: list[str]) -> str:
    return where[0]


def _calls(where: list[str], count: int, timeout: float = 20.0) -> list[list[bytes]]:
    """``count`` calls one after the other on one connection: each call's answer."""
    connection = Connection(parse_endpoint(where[0]), timeout)
    try:
        return [
            connection.call_all([("ListPodSandbox", b"req")], time.monotonic() + timeout)[0]
            for _ in range(count)
        ]
    finally:
        connection.close()


# -- item 2: deadlines and close() ---------------------------------------------------------------
def test_acknowledgements_to_a_runtime_that_never_reads_end_at_the_calls_deadline(
    sock_dir: str,
) -> None:
    """PINGs to a runtime that reads nothing: the acknowledgements stop fitting the socket, and
    the write waiting for room ends at the call's deadline (DEADLINE_EXCEEDED), not after a
    send timeout of its own as a lost connection."""
    done = threading.Event()

    def script(peer: FakePeer) -> None:
        peer.preface()
        peer.request()
        peer.send(b"".join(frame(PING, 0, 0, n.to_bytes(8)) for n in range(500)))
        done.wait(WAIT)  # reads nothing more

    with fake_runtime(sock_dir, script) as where:
        connection = Connection(parse_endpoint(where[0]), 5)
        connection._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # the kernel's least
        try:
            with pytest.raises(CallFailedError) as failed:
                # 3 s: under the 10 s the acknowledgements' writes had of their own
                connection.call_all([("ListPodSandbox", b"req")], time.monotonic() + 3.0)
        finally:
            done.set()
            connection.close()
    assert failed.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "writing" in failed.value.details
    assert failed.value.method == "ListPodSandbox"


class _SteppingClock:
    """``time`` for h2core whose monotonic clock moves 1 ms each time it is read."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        self.now += 0.001
        return self.now


def test_frames_waiting_in_the_inbox_do_not_hold_a_call_past_its_deadline(
    sock_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer cut into 1,200 one-byte DATA frames, all in one write: the deadline (500 reads
    of a clock that moves 1 ms a read) passes while they wait in the inbox, and the call ends
    there, though no read from the socket was needed."""
    clock = _SteppingClock()
    monkeypatch.setattr(h2core, "time", SimpleNamespace(monotonic=clock.monotonic))

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        wire = message(b"a" * 1195)
        out = frame(HEADERS, 0x4, stream, peer.encoder.encode(OK_HEADERS))
        out += b"".join(frame(DATA, 0, stream, wire[n : n + 1]) for n in range(len(wire)))
        out += frame(HEADERS, 0x5, stream, peer.encoder.encode([("grpc-status", "0")]))
        peer.send(out)
        drain(peer)

    with fake_runtime(sock_dir, script) as where:
        connection = Connection(parse_endpoint(where[0]), 5)
        try:
            with pytest.raises(CallFailedError) as failed:
                connection.call_all([("ListPodSandbox", b"req")], clock.now + 0.5)
        finally:
            connection.close()
    assert failed.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


def _silent_after_request(asked: threading.Event) -> Callable[[FakePeer], None]:
    def script(peer: FakePeer) -> None:
        peer.preface()
        peer.request()
        asked.set()
        drain(peer)

    return script


def test_closing_the_pool_ends_a_call_in_flight_at_once(sock_dir: str) -> None:
    """A call lent a connection waits on a runtime that never answers; ``close()`` from another
    thread ends it CANCELLED, long before its deadline."""
    asked = threading.Event()
    outcome: list[CallFailedError] = []
    with fake_runtime(sock_dir, _silent_after_request(asked)) as where:
        pool = ConnectionPool(parse_endpoint(where[0]))

        def call() -> None:
            try:
                pool.call_all([("ListPodSandbox", b"req")], 15.0)
            except CallFailedError as error:
                outcome.append(error)

        caller = threading.Thread(target=call)
        caller.start()
        assert asked.wait(WAIT)
        pool.close()
        caller.join()
    assert [error.code for error in outcome] == [grpc.StatusCode.CANCELLED]


def test_closing_the_caller_ends_a_relist_in_flight_saying_how_long_it_ran(sock_dir: str) -> None:
    """``CRIRuntime.close()``'s caller: the filtered list calls in flight end at once, with an
    error naming the method, the endpoint and that the getter was closed."""
    asked = threading.Event()
    outcome: list[CRIError] = []
    with fake_runtime(sock_dir, _silent_after_request(asked)) as where:
        caller = SyncCaller(parse_endpoint(where[0]), 15.0, "CRIRuntime")

        def relist() -> None:
            try:
                caller.pod_calls([("ListPodSandbox", pb.ListPodSandboxRequest())])
            except CRIError as error:
                outcome.append(error)

        worker = threading.Thread(target=relist)
        worker.start()
        assert asked.wait(WAIT)
        caller.close()
        worker.join()
    assert len(outcome) == 1
    message_text = str(outcome[0])
    assert where[0] in message_text
    assert "ListPodSandbox was cancelled after" in message_text
    assert "CRIRuntime closed" in message_text


def test_a_deadline_error_says_how_long_the_call_really_took(sock_dir: str) -> None:
    asked = threading.Event()
    with fake_runtime(sock_dir, _silent_after_request(asked)) as where:
        caller = SyncCaller(parse_endpoint(where[0]), 0.3, "CRIRuntime")
        try:
            with pytest.raises(RuntimeDeadlineError) as failed:
                caller.pod_calls([("ListPodSandbox", pb.ListPodSandboxRequest())])
        finally:
            caller.close()
    assert "ListPodSandbox got no answer within 0.3 s (the call took " in str(failed.value)


def test_a_lost_connection_names_the_call_whatever_was_being_written(sock_dir: str) -> None:
    """A PING, then the runtime closes: the acknowledgement's write or the next read fails,
    and either way the failure names the call (it had said "closed during  (...)")."""

    def script(peer: FakePeer) -> None:
        peer.preface()
        peer.request()
        peer.send(frame(PING, 0, 0, b"12345678"))
        peer.sock.shutdown(socket.SHUT_RDWR)

    with fake_runtime(sock_dir, script) as where, pytest.raises(CallFailedError) as failed:
        _calls(where, 1)
    assert failed.value.code is grpc.StatusCode.UNAVAILABLE
    assert failed.value.method == "ListPodSandbox"


# -- item 5: floods ------------------------------------------------------------------------------
def _block_of(peer: FakePeer, stream: int, continuations: int) -> bytes:
    """The response headers as HEADERS and ``continuations`` CONTINUATIONs, all but the first
    frame empty."""
    out = frame(HEADERS, 0, stream, peer.encoder.encode(OK_HEADERS))
    for n in range(continuations):
        out += frame(CONT, 0x4 if n == continuations - 1 else 0, stream)
    return out


@pytest.mark.parametrize("continuations", [MAX_CONTINUATIONS, MAX_CONTINUATIONS + 1])
def test_a_header_block_past_its_continuation_limit_is_a_violation(
    sock_dir: str, continuations: int
) -> None:
    """Empty CONTINUATIONs add no bytes to a block: their count is bounded on its own."""

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.send(_block_of(peer, stream, continuations))
        peer.send(frame(DATA, 0, stream, message(b"ok")))
        peer.headers(stream, [("grpc-status", "0")], end=True)
        drain(peer)

    with fake_runtime(sock_dir, script) as where:
        if continuations > MAX_CONTINUATIONS:
            with pytest.raises(WireViolationError, match="more than 16 CONTINUATION frames"):
                _calls(where, 1)
        else:
            assert _calls(where, 1) == [[b"ok"]]


FLOODS: dict[str, Callable[[FakePeer, int], bytes]] = {
    "PING": lambda peer, stream: frame(PING, 0, 0, b"12345678"),
    "SETTINGS": lambda peer, stream: frame(SETTINGS, 0, 0),
    "RST_STREAM": lambda peer, stream: frame(RST, 0, 1, (8).to_bytes(4)),  # stream 1 ended
    "WINDOW_UPDATE": lambda peer, stream: frame(WINDOW, 0, 1, (1).to_bytes(4)),
    "PRIORITY": lambda peer, stream: frame(PRIORITY, 0, 7, b"\x00\x00\x00\x00\x10"),
    "DATA": lambda peer, stream: frame(DATA, 0, stream),  # empty, without END_STREAM
    "HEADERS": lambda peer, stream: frame(HEADERS, 0x4, stream, b"\x3f\xe1\x1f"),  # size 4096
    "unknown": lambda peer, stream: frame(UNKNOWN, 0, 0, b"x"),
}


@pytest.mark.parametrize("count", [900, 3 * CONTROL_FRAME_BURST], ids=["within", "flood"])
@pytest.mark.parametrize("kind", sorted(FLOODS))
def test_a_flood_of_control_frames_ends_the_connection(
    sock_dir: str, kind: str, count: int
) -> None:
    """A second call's answer comes after ``count`` frames of one kind that carry no data:
    900 are within the budget (the call is answered); three times the burst is a flood, a
    violation naming the frame."""

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.answer(stream, b"first")
        stream, _, _ = peer.request()
        peer.headers(stream, OK_HEADERS)
        peer.send(b"".join(FLOODS[kind](peer, stream) for _ in range(count)))
        peer.send(frame(DATA, 0, stream, message(b"second")))
        peer.headers(stream, [("grpc-status", "0")], end=True)
        drain(peer)

    with fake_runtime(sock_dir, script) as where:
        if count > CONTROL_FRAME_BURST:
            with pytest.raises(WireViolationError) as failed:
                _calls(where, 2)
            named = "unknown" if kind == "unknown" else f"a {kind} frame"
            assert "a flood of control frames" in failed.value.details
            assert named in failed.value.details
            assert failed.value.method == "ListPodSandbox"
        else:
            assert _calls(where, 2) == [[b"first"], [b"second"]]


@pytest.mark.parametrize("updates", [2, 3])
def test_more_than_two_table_size_updates_opening_a_block_is_a_violation(
    sock_dir: str, updates: int
) -> None:
    """RFC 7541 §4.2: a block opens with at most two size updates (the smallest, the final)."""

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        block = b"\x3f\xe1\x1f" * updates + peer.encoder.encode(OK_HEADERS)
        peer.send(frame(HEADERS, 0x4, stream, block))
        peer.send(frame(DATA, 0, stream, message(b"ok")))
        peer.headers(stream, [("grpc-status", "0")], end=True)
        drain(peer)

    with fake_runtime(sock_dir, script) as where:
        if updates > 2:
            with pytest.raises(WireViolationError, match="more than 2 HPACK table size updates"):
                _calls(where, 1)
        else:
            assert _calls(where, 1) == [[b"ok"]]


class _Flooder:
    """A runtime that answers GetContainerEvents with a PING flood (reading what the client
    writes in a thread of its own, so only the flood can stop the stream): ``batches`` writes
    of 200 PINGs (None: endless), then it closes the connection."""

    def __init__(self, batches: int | None) -> None:
        self.streams = 0
        self.batches = batches
        self.stop = threading.Event()

    def __call__(self, peer: FakePeer) -> None:
        peer.preface()
        peer.request()
        self.streams += 1
        threading.Thread(target=_read_all, args=(peer,), daemon=True).start()
        pings = b"".join(frame(PING, 0, 0, n.to_bytes(8)) for n in range(200))
        sent = 0
        while not self.stop.is_set() and (self.batches is None or sent < self.batches):
            peer.send(pings)
            sent += 1


def _read_all(peer: FakePeer) -> None:
    with contextlib.suppress(OSError):
        drain(peer)


@contextlib.contextmanager
def flooding(sock_dir: str, batches: int | None) -> Iterator[tuple[_Flooder, str]]:
    flood = _Flooder(batches)
    try:
        with fake_runtime(sock_dir, flood) as where:
            yield flood, where[0]
    finally:
        flood.stop.set()


def test_a_flooded_event_stream_fails_naming_the_flood(sock_dir: str) -> None:
    """20,000 PINGs, then the connection closed: the stream fails on the flood (in ``open()``
    or in the iteration, whichever reads past the budget), not on the close."""
    with flooding(sock_dir, 100) as (_, url):
        caller = SyncCaller(parse_endpoint(url), 5.0, "CRIRuntime")
        stream = caller.container_events()
        try:
            with pytest.raises(RuntimeProtocolError) as failed:
                stream.open()
                next(stream)
        finally:
            stream.close()
            caller.close()
    text = str(failed.value)
    assert url in text
    assert "GetContainerEvents" in text
    assert "a flood of control frames, the last a PING frame" in text


class _FloodedGetter:
    """A getter with no pods whose event stream is the flooder's."""

    def __init__(self, url: str) -> None:
        self._caller = SyncCaller(parse_endpoint(url), 5.0, "CRIRuntime")

    def get_pods(self, all: bool = False) -> PodList:
        return PodList([])

    def container_events(self) -> object:
        return self._caller.container_events()

    def close(self) -> None:
        self._caller.close()


def test_a_cache_reports_a_flooded_subscription_as_failing(sock_dir: str) -> None:
    """Each subscription the flood reaches ends as a failure: the cache subscribes again and
    again (it does only after a failure), saying "reconnecting" meanwhile; a flooded stream
    that passed its first 50 ms may say "subscribed" until the budget runs out (milliseconds).
    Before the budget, one stream stayed "subscribed" for as long as the flood lasted."""
    states = set()
    with flooding(sock_dir, None) as (flood, url):
        getter = _FloodedGetter(url)
        cache = RuntimeCache(getter, 60.0, events=True)
        try:
            deadline = time.monotonic() + WAIT
            while flood.streams < 3:
                states.add(cache.stats().events_state)
                assert time.monotonic() < deadline, "the cache did not subscribe again"
                time.sleep(0.005)
        finally:
            cache.close()
            getter.close()
    assert "reconnecting" in states


# -- item 8: flow control and the frames RFC 9113 makes connection errors ------------------------
VIOLATIONS: dict[str, tuple[Callable[[int], bytes], str]] = {
    "DATA on stream 0": (lambda stream: frame(DATA, 0, 0, b"x"), "a DATA frame on stream 0"),
    "DATA on a stream never opened": (
        lambda stream: frame(DATA, 0, stream + 2, b"x"),
        "which this client never opened",
    ),
    "WINDOW_UPDATE of 0": (
        lambda stream: frame(WINDOW, 0, 0, (0).to_bytes(4)),
        "a WINDOW_UPDATE frame of 0 on stream 0",
    ),
    "WINDOW_UPDATE of 0 on a stream": (
        lambda stream: frame(WINDOW, 0, stream, (0).to_bytes(4)),
        "a WINDOW_UPDATE frame of 0 on stream 1",
    ),
    "connection window past 2^31-1": (
        lambda stream: frame(WINDOW, 0, 0, (2**31 - 1).to_bytes(4)),
        "takes the connection's window past 2^31-1",
    ),
    "stream window past 2^31-1": (
        lambda stream: frame(WINDOW, 0, stream, (2**31 - 1).to_bytes(4)),
        "takes the window of stream 1 window past 2^31-1",
    ),
    "INITIAL_WINDOW of 2^32-1": (
        lambda stream: frame(SETTINGS, 0, 0, (4).to_bytes(2) + (2**32 - 1).to_bytes(4)),
        "SETTINGS_INITIAL_WINDOW_SIZE 4294967295 (at most 2^31-1)",
    ),
    "MAX_FRAME_SIZE below 16384": (
        lambda stream: frame(SETTINGS, 0, 0, (5).to_bytes(2) + (16383).to_bytes(4)),
        "SETTINGS_MAX_FRAME_SIZE 16383",
    ),
    "ENABLE_PUSH of 1": (
        lambda stream: frame(SETTINGS, 0, 0, (2).to_bytes(2) + (1).to_bytes(4)),
        "SETTINGS_ENABLE_PUSH 1",
    ),
    "SETTINGS on a stream": (lambda stream: frame(SETTINGS, 0, stream), "a SETTINGS frame on"),
    "RST_STREAM on stream 0": (
        lambda stream: frame(RST, 0, 0, (0).to_bytes(4)),
        "a RST_STREAM frame on stream 0",
    ),
    "HEADERS on stream 0": (
        lambda stream: frame(HEADERS, 0x4, 0, b"\x88"),
        "a HEADERS frame on stream 0",
    ),
}
WITHIN: dict[str, Callable[[int], bytes]] = {
    "WINDOW_UPDATE to 2^31-1": lambda stream: frame(WINDOW, 0, 0, (2**31 - 65536).to_bytes(4)),
    "INITIAL_WINDOW of 2^31-1": lambda stream: frame(
        SETTINGS, 0, 0, (4).to_bytes(2) + (2**31 - 1).to_bytes(4)
    ),
    "MAX_FRAME_SIZE of 2^24-1": lambda stream: frame(
        SETTINGS, 0, 0, (5).to_bytes(2) + (2**24 - 1).to_bytes(4)
    ),
}


def _sent_mid_answer(extra: Callable[[int], bytes]) -> Callable[[FakePeer], None]:
    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.headers(stream, OK_HEADERS)
        peer.send(extra(stream))
        peer.send(frame(DATA, 0, stream, message(b"ok")))
        peer.headers(stream, [("grpc-status", "0")], end=True)
        drain(peer)

    return script


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_a_frame_rfc_9113_makes_a_connection_error_is_a_violation(sock_dir: str, case: str) -> None:
    extra, named = VIOLATIONS[case]
    with (
        fake_runtime(sock_dir, _sent_mid_answer(extra)) as where,
        pytest.raises(WireViolationError) as failed,
    ):
        _calls(where, 1)
    assert named in failed.value.details
    assert failed.value.method == "ListPodSandbox"


@pytest.mark.parametrize("case", sorted(WITHIN))
def test_the_same_frames_at_their_limits_are_taken(sock_dir: str, case: str) -> None:
    with fake_runtime(sock_dir, _sent_mid_answer(WITHIN[case])) as where:
        assert _calls(where, 1) == [[b"ok"]]


@pytest.mark.parametrize("extra", [0, 1])
def test_data_past_the_streams_window_is_a_violation(
    sock_dir: str, monkeypatch: pytest.MonkeyPatch, extra: int
) -> None:
    """A stream window below one frame (10,000 bytes, advertised in the client's SETTINGS): a
    DATA frame that fills it is taken, one byte more is a violation."""
    window = 10_000
    monkeypatch.setattr(h2core, "STREAM_WINDOW", window)

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.headers(stream, OK_HEADERS)
        peer.send(frame(DATA, 0, stream, message(b"d" * (window - 5 + extra))))
        peer.headers(stream, [("grpc-status", "0")], end=True)
        drain(peer)

    with fake_runtime(sock_dir, script) as where:
        if extra:
            with pytest.raises(WireViolationError, match="past the flow-control window of stream"):
                _calls(where, 1)
        else:
            assert _calls(where, 1) == [[b"d" * (window - 5)]]


@pytest.mark.parametrize("extra", [0, 1])
def test_data_past_the_connections_window_is_a_violation(sock_dir: str, extra: int) -> None:
    """The connection's window as the client counts it: what it read and has not given back
    (``_unacked``) plus a frame may fill ``CONNECTION_WINDOW``, not pass it (the client gives
    back at half the window, so a runtime can only pass it by ignoring the windows: here the
    count is set just below it)."""

    def script(peer: FakePeer) -> None:
        peer.preface()
        stream, _, _ = peer.request()
        peer.headers(stream, OK_HEADERS)
        peer.send(frame(DATA, 0, stream, message(b"d" * 95)))
        peer.headers(stream, [("grpc-status", "0")], end=True)
        drain(peer)

    with fake_runtime(sock_dir, script) as where:
        connection = Connection(parse_endpoint(where[0]), 5)
        connection._unacked = h2core.CONNECTION_WINDOW - 100 + extra
        try:
            if extra:
                with pytest.raises(WireViolationError, match="past the connection's flow-control"):
                    connection.call_all([("ListPodSandbox", b"req")], time.monotonic() + 5)
            else:
                answer = connection.call_all([("ListPodSandbox", b"req")], time.monotonic() + 5)
                assert answer == [[b"d" * 95]]
        finally:
            connection.close()


def test_a_violation_names_the_frame_the_method_and_the_endpoint(sock_dir: str) -> None:
    extra, _ = VIOLATIONS["DATA on stream 0"]
    with fake_runtime(sock_dir, _sent_mid_answer(extra)) as where:
        caller = SyncCaller(parse_endpoint(where[0]), 5.0, "CRIRuntime")
        try:
            with pytest.raises(RuntimeProtocolError) as failed:
                caller.pod_calls([("ListPodSandbox", pb.ListPodSandboxRequest())])
        finally:
            caller.close()
    assert str(failed.value) == (
        f"runtime at {where[0]} does not speak CRI runtime.v1: its ListPodSandbox "
        "answer broke HTTP/2 or gRPC: a DATA frame on stream 0"
    )


# -- item 9: the decode memo ---------------------------------------------------------------------
def _bare_connection() -> Connection:
    connection = Connection.__new__(Connection)
    connection._decoder = HPACKDecoder(max_header_list_size=2 * h2core.MAX_HEADER_BLOCK)
    connection._decoded_blocks = {}
    connection._memo_bytes = 0
    connection._method = "ListPodSandbox"
    return connection


def _padded_block(n: int, value_bytes: int) -> bytes:
    """A block that keeps the table: one literal never indexed, ``x-pad-<n>``."""
    return literal(f"x-pad-{n}", "v" * value_bytes)


def test_the_decode_memo_holds_at_most_its_bound_and_forgets_the_oldest() -> None:
    connection = _bare_connection()
    blocks = [_padded_block(n, 1000) for n in range(40)]
    costs = []
    for block in blocks:
        headers = connection._decoded(block)
        costs.append(h2core._memo_cost(block, headers))
        assert connection._memo_bytes <= MAX_MEMO_BYTES
        assert connection._memo_bytes == sum(
            h2core._memo_cost(b, h) for b, h in connection._decoded_blocks.items()
        )
    kept = list(connection._decoded_blocks)
    assert kept == blocks[len(blocks) - len(kept) :]  # the newest, in order
    assert connection._memo_bytes + costs[0] > MAX_MEMO_BYTES  # full: one more would pass it


@pytest.mark.parametrize("extra", [0, 1])
def test_a_block_costing_more_than_the_bound_is_never_kept(extra: int) -> None:
    """A block whose cost is exactly the bound is kept (alone); one byte more is decoded every
    time and never kept."""
    connection = _bare_connection()
    target = MAX_MEMO_BYTES + extra
    # a literal's value adds two to the cost a byte (block and header); an indexed :method GET
    # after it adds an odd amount: one of the two shapes reaches the target exactly
    shapes = (
        _padded_block(0, size) + suffix for size in range(target) for suffix in (b"", b"\x82")
    )
    block = next(b for b in shapes if h2core._memo_cost(b, _decoded_fresh(b)) == target)
    connection._decoded(block)
    assert (block in connection._decoded_blocks) is not bool(extra)


def _decoded_fresh(block: bytes) -> dict[bytes, bytes]:
    return dict(hpack.Decoder().decode(block, raw=True))


_SHAPES: dict[str, Callable[[int], bytes]] = {
    # two indexed fields of the static table: the smallest blocks, so the most entries
    "indexed": lambda n: bytes((0x80 | (2 + n % 60), 0x80 | (2 + n // 60 % 60))),
    "small": lambda n: _padded_block(n, 10),
    "large": lambda n: _padded_block(n, 3000),
}


_TRACE_FRAMES = 64
"""Frames kept per allocation: deep enough to reach this test's own frame."""
_THIS_THREADS_WORK = [tracemalloc.Filter(True, __file__, all_frames=True)]
"""Allocations made below this test's frames: what other threads of the suite's process
allocate meanwhile (servers and readers other tests left winding down) is not the memo's."""


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_the_memo_bound_holds_in_real_memory(shape: str) -> None:
    """tracemalloc counts what the memo holds (its entries, their blocks and headers, its own
    table) when full of one shape of block: at most ``MAX_MEMO_BYTES``."""
    connection = _bare_connection()
    make = _SHAPES[shape]
    for n in range(5):  # warm hpack's code paths up before counting
        connection._decoded(make(n))
    connection._decoded_blocks.clear()
    connection._memo_bytes = 0
    tracemalloc.start(_TRACE_FRAMES)
    try:
        before = tracemalloc.take_snapshot().filter_traces(_THIS_THREADS_WORK)
        for n in range(600):
            connection._decoded(make(n))  # each block made now: the memo's keys are counted
        after = tracemalloc.take_snapshot().filter_traces(_THIS_THREADS_WORK)
    finally:
        tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert connection._memo_bytes <= MAX_MEMO_BYTES
    assert held <= MAX_MEMO_BYTES
