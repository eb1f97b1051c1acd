"""The C relay's HTTP/2 (rule 8 of ``relay``): the client's header blocks written again for
gRPC, the status calls it answers itself, and the client's windows kept.

Real unix sockets, the C relay (``_relay.Core``) in front of an upstream of the test's: a raw
socket read frame by frame (the header blocks, the windows), or a real grpcio server (the
answers). Every check is causal: a frame is looked for only after what must have caused it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import grpc
import hpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.wire.frames import frame
from podcache.serve.crisock._relay import DURATION_BOUNDS, Core
from podcache.serve.crisock.calls import DURATION_BUCKETS
from tests.unit.cri.h2fake import PREFACE, FakePeer

DATA, HEADERS, SETTINGS, PING, WINDOW_UPDATE, CONTINUATION = 0, 1, 4, 6, 8, 9
END_STREAM, ACK, END_HEADERS = 1, 1, 4
CONTAINER, SANDBOX = 0, 1
RS = "/runtime.v1.RuntimeService/"
SAFETY = 30.0
"""Seconds a socket read may wait before the test fails (a failure bound, never a claim)."""
ANSWERS_MAX, ANSWER_MAX_BYTES = 16384, 64 * 1024  # _h2.h


class Frame(NamedTuple):
    kind: int
    flags: int
    stream: int
    payload: bytes


class Reader(FakePeer):
    """The fake runtime's peer of ``h2fake``, reading frames off a blocking socket."""

    def frame(self) -> Frame:
        return Frame(*super().frame())

    def more(self, size: int) -> None:
        """Until ``size`` bytes beyond those held have come (frames cut anywhere)."""
        self._need(len(self.inbox) + size)


@dataclass
class Relayed:
    core: Core
    path: str
    upstream: socket.socket

    def connect(self) -> tuple[socket.socket, Reader]:
        """A client's connection, and the upstream's end of it (its preface read)."""
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(SAFETY)
        client.connect(self.path)
        client.sendall(PREFACE)
        accepted, _ = self.upstream.accept()
        accepted.settimeout(SAFETY)
        far = Reader(accepted)
        far.preface()
        return client, far


@contextmanager
def relay_to(target: str, directory: str) -> Iterator[Core]:
    core = Core(target, 64, 600.0, 10**6)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(os.path.join(directory, "relay.sock"))
    listening.listen(64)
    core.listen(listening.fileno())
    listening.close()
    try:
        yield core
    finally:
        core.close()


@pytest.fixture
def relayed() -> Iterator[Relayed]:
    with tempfile.TemporaryDirectory() as directory:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = os.path.join(directory, "upstream.sock")
        upstream.bind(target)
        upstream.listen(64)
        upstream.settimeout(SAFETY)
        with relay_to(target, directory) as core:
            yield Relayed(core, os.path.join(directory, "relay.sock"), upstream)
        upstream.close()


# -- header blocks ------------------------------------------------------------------------------

_NAMES = st.sampled_from(
    [":path", ":method", ":authority", "content-type", "te", "grpc-timeout", "user-agent", "x-a"]
)
_VALUES = st.one_of(st.text(max_size=40), st.sampled_from([RS + "ContainerStatus", "POST", ""]))
_FIELDS = st.lists(st.tuples(_NAMES, _VALUES), max_size=12)
_BLOCK = st.tuples(
    _FIELDS,
    st.booleans(),  # Huffman-coded strings
    st.sampled_from([None, 0, 256, 4096, 8192]),  # a table size update first
    st.integers(0, 64),  # where a CONTINUATION starts (0: one HEADERS frame)
)


def _fields(decoded: Iterable[tuple[str | bytes, str | bytes]]) -> list[tuple[str, str]]:
    return [(str(name), str(value)) for name, value in decoded]


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(blocks=st.lists(_BLOCK, min_size=1, max_size=8))
def test_each_block_reaches_grpc_whole_and_readable_without_a_table(
    relayed: Relayed, blocks: list[tuple[list[tuple[str, str]], bool, int | None, int]]
) -> None:
    client, far = relayed.connect()
    encoder = hpack.Encoder()
    try:
        for index, (fields, huffman, table_size, cut) in enumerate(blocks):
            stream = 2 * index + 1
            if table_size is not None:
                encoder.header_table_size = table_size
            block = encoder.encode(fields, huffman=huffman)
            if 0 < cut < len(block):
                sent = frame(HEADERS, END_STREAM, stream, block[:cut])
                sent += frame(CONTINUATION, END_HEADERS, stream, block[cut:])
            else:
                sent = frame(HEADERS, END_STREAM | END_HEADERS, stream, block)
            client.sendall(sent)
            got = far.frame()
            assert (got.kind, got.stream, got.flags & END_STREAM) == (HEADERS, stream, END_STREAM)
            written = got.payload
            while not got.flags & END_HEADERS:
                got = far.frame()
                assert (got.kind, got.stream) == (CONTINUATION, stream)
                written += got.payload
            # A fresh decoder for every block: gRPC needs no table kept in step with the client's.
            assert _fields(hpack.Decoder().decode(written)) == fields
    finally:
        client.close()
        far.sock.close()


def test_a_malformed_block_ends_the_connection(relayed: Relayed) -> None:
    client, far = relayed.connect()
    client.sendall(frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff\xff\xff"))  # index past 2^28
    with pytest.raises(EOFError):
        far.frame()
    client.close()


def test_a_stray_continuation_ends_the_connection(relayed: Relayed) -> None:
    client, far = relayed.connect()
    client.sendall(frame(CONTINUATION, END_HEADERS, 1, b""))
    with pytest.raises(EOFError):
        far.frame()
    client.close()


# -- the status calls answered here ----------------------------------------------------------------

RAW = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}


if TYPE_CHECKING:
    _Handler = grpc.GenericRpcHandler[Any, Any]
else:
    _Handler = grpc.GenericRpcHandler


class _Upstream(_Handler):
    """A gRPC server standing for podcache's: it answers every call with its path's bytes and
    counts the calls it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        method = str(details.method)

        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                self.seen.append(method)
            return b"\x0a\x03grpc"

        return grpc.unary_unary_rpc_method_handler(answer)


@dataclass
class Served:
    core: Core
    upstream: _Upstream
    channel: grpc.Channel

    def ask(self, method: str, request: bytes) -> bytes:
        data: bytes = self.channel.unary_unary(RS + method, **RAW)(request, timeout=SAFETY)
        return data


@pytest.fixture
def served() -> Iterator[Served]:
    with tempfile.TemporaryDirectory() as directory:
        upstream = _Upstream()
        server = grpc.server(futures.ThreadPoolExecutor(4), handlers=[upstream])
        target = os.path.join(directory, "grpc.sock")
        server.add_insecure_port("unix://" + target)
        server.start()
        with relay_to(target, directory) as core:
            channel = grpc.insecure_channel("unix://" + os.path.join(directory, "relay.sock"))
            yield Served(core, upstream, channel)
            channel.close()
        server.stop(None)


def container_request(ident: str, *, verbose: bool = False) -> bytes:
    return pb.ContainerStatusRequest(container_id=ident, verbose=verbose).SerializeToString()


def _answered(core: Core, method: str) -> int:
    counts = core.status_counts()
    return int(counts[method]["answered"])


def test_a_kept_answer_is_given_here_and_nothing_else_is(served: Served) -> None:
    core = served.core
    answer = pb.ContainerStatusResponse(
        status=pb.ContainerStatus(id="a" * 64, state=pb.CONTAINER_RUNNING)
    ).SerializeToString()
    assert core.put_status(CONTAINER, b"a" * 64, False, answer, time.monotonic() + 600)
    assert served.ask("ContainerStatus", container_request("a" * 64)) == answer
    assert served.upstream.seen == []
    assert _answered(core, "ContainerStatus") == 1
    # Another verbosity, another ID, another method: gRPC's.
    served.ask("ContainerStatus", container_request("a" * 64, verbose=True))
    served.ask("ContainerStatus", container_request("b" * 64))
    served.ask(
        "PodSandboxStatus", pb.PodSandboxStatusRequest(pod_sandbox_id="a" * 64).SerializeToString()
    )
    served.ask("ListContainers", b"")
    assert served.upstream.seen == [
        RS + m for m in ("ContainerStatus",) * 2 + ("PodSandboxStatus", "ListContainers")
    ]
    assert _answered(core, "ContainerStatus") == 1


def test_a_dropped_or_cleared_answer_is_grpcs_again(served: Served) -> None:
    core = served.core
    for ident in (b"a", b"b"):
        assert core.put_status(SANDBOX, ident, False, b"\x0a\x01" + ident, time.monotonic() + 600)
    ask = served.ask
    request = {i: pb.PodSandboxStatusRequest(pod_sandbox_id=i).SerializeToString() for i in "ab"}
    assert ask("PodSandboxStatus", request["a"]) == b"\x0a\x01a"
    core.drop_status(b"a")
    assert ask("PodSandboxStatus", request["a"]) == b"\x0a\x03grpc"
    assert ask("PodSandboxStatus", request["b"]) == b"\x0a\x01b"
    core.clear_statuses()
    assert ask("PodSandboxStatus", request["b"]) == b"\x0a\x03grpc"
    assert core.status_counts()["kept"] == 0
    assert _answered(core, "PodSandboxStatus") == 2


def test_an_answer_past_its_freshness_is_not_kept_nor_given(served: Served) -> None:
    core = served.core
    assert not core.put_status(CONTAINER, b"a", False, b"old", time.monotonic() - 1)
    assert served.ask("ContainerStatus", container_request("a")) == b"\x0a\x03grpc"


def test_answers_are_bounded_in_size_and_count(served: Served) -> None:
    core = served.core
    fresh = time.monotonic() + 600
    largest = b"\x0a" + b"x" * (ANSWER_MAX_BYTES - 1)
    assert core.put_status(CONTAINER, b"largest", False, largest, fresh)
    assert not core.put_status(CONTAINER, b"larger", False, largest + b"x", fresh)
    large = largest[:65_000]  # within the client's first windows (64 KiB less one byte)
    assert core.put_status(CONTAINER, b"large", False, large, fresh)
    assert served.ask("ContainerStatus", container_request("large")) == large  # 4 DATA frames
    assert _answered(core, "ContainerStatus") == 1
    core.clear_statuses()
    for index in range(ANSWERS_MAX):
        assert core.put_status(CONTAINER, str(index).encode(), False, b"", fresh)
    assert not core.put_status(CONTAINER, b"one more", False, b"", fresh)
    assert core.status_counts()["kept"] == ANSWERS_MAX
    # Past the bound the expired go first.
    core.clear_statuses()
    for index in range(ANSWERS_MAX):
        assert core.put_status(CONTAINER, str(index).encode(), False, b"", time.monotonic() + 0.001)
    time.sleep(0.01)  # every one of them expires (a wait for a deadline, not a claim of speed)
    assert core.put_status(CONTAINER, b"one more", False, b"", fresh)
    assert core.status_counts()["kept"] == 1


def test_many_answers_on_one_connection_never_make_grpc_end_it(served: Served) -> None:
    """The client's BDP probes after the relay's answers are answered by the relay: gRPC would
    count them as abuse (too_many_pings) and send GOAWAY, and the channel would go idle."""
    core = served.core
    answer = b"\x0a\x10" + b"s" * 16
    assert core.put_status(CONTAINER, b"a", False, answer, time.monotonic() + 600)
    states: list[grpc.ChannelConnectivity] = []
    served.ask("ListContainers", b"")  # connected
    served.channel.subscribe(states.append)
    for _ in range(3000):
        assert served.ask("ContainerStatus", container_request("a")) == answer
    served.ask("ListContainers", b"")
    served.channel.unsubscribe(states.append)
    assert grpc.ChannelConnectivity.IDLE not in states, states
    assert _answered(core, "ContainerStatus") == 3000


# -- the client's windows -------------------------------------------------------------------------


def _status_call(encoder: hpack.Encoder, stream: int, ident: str) -> bytes:
    block = encoder.encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", RS + "ContainerStatus"),
            (":authority", "x"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    message = container_request(ident)
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    return frame(HEADERS, END_HEADERS, stream, block) + frame(DATA, END_STREAM, stream, body)


def _answer_frames(reader: Reader, stream: int) -> int:
    """One answer's frames off ``reader``: its DATA bytes."""
    flow = 0
    while True:
        got = reader.frame()
        if got.kind == WINDOW_UPDATE:
            continue
        assert got.stream == stream, got
        if got.kind == DATA:
            flow += len(got.payload)
        if got.kind == HEADERS and got.flags & END_STREAM:
            return flow


def test_answers_stop_at_the_clients_window_and_grpc_never_overruns_it(relayed: Relayed) -> None:
    core = relayed.core
    answer = b"\x0a" + b"w" * 19_999
    assert core.put_status(CONTAINER, b"a", False, answer, time.monotonic() + 600)
    client, far = relayed.connect()
    reader = Reader(client)
    encoder = hpack.Encoder()
    window = 65_535
    for stream in (1, 3, 5):  # 3 x 20,005 bytes fit the window; a fourth does not
        client.sendall(_status_call(encoder, stream, "a"))
        window -= _answer_frames(reader, stream)
    assert window == 65_535 - 3 * 20_005
    client.sendall(_status_call(encoder, 7, "a"))
    got = far.frame()  # the fourth went to gRPC, its header block written again
    assert (got.kind, got.stream) == (HEADERS, 7)
    assert dict(_fields(hpack.Decoder().decode(got.payload)))[":path"] == RS + "ContainerStatus"
    assert far.frame().kind == DATA
    # gRPC, whose view of the window is larger by the answers' bytes, sends past the client's:
    # the relay holds it till the client's credit covers it.
    far.sock.sendall(
        frame(HEADERS, END_HEADERS, 7, b"\x88")
        + frame(DATA, 0, 7, b"g" * 10_000)
        + frame(HEADERS, END_STREAM | END_HEADERS, 7, b"\x88")
    )
    headers = reader.frame()
    assert (headers.kind, headers.stream) == (HEADERS, 7)
    assert not reader.inbox  # nothing came with the HEADERS: the DATA waits, and what follows it
    client.setblocking(False)
    with pytest.raises(BlockingIOError):
        client.recv(1)
    client.settimeout(SAFETY)
    client.sendall(frame(WINDOW_UPDATE, 0, 0, (60_015).to_bytes(4, "big")))
    window += 60_015
    data = reader.frame()
    assert (data.kind, data.stream, len(data.payload)) == (DATA, 7, 10_000)
    assert len(data.payload) <= window  # it came only once the credit covered it
    assert reader.frame().flags & END_STREAM
    # The credit that gave back the answers' bytes is not gRPC's: gRPC gets the rest only.
    client.sendall(frame(WINDOW_UPDATE, 0, 0, (10_000 + 5).to_bytes(4, "big")))
    credit = far.frame()
    assert (credit.kind, int.from_bytes(credit.payload, "big")) == (WINDOW_UPDATE, 10_005)
    client.close()
    far.sock.close()


def test_a_ping_after_answers_is_answered_here_and_before_none_it_is_grpcs(
    relayed: Relayed,
) -> None:
    core = relayed.core
    assert core.put_status(CONTAINER, b"a", False, b"\x0a\x01a", time.monotonic() + 600)
    client, far = relayed.connect()
    reader = Reader(client)
    client.sendall(frame(PING, 0, 0, b"12345678"))
    assert far.frame() == Frame(PING, 0, 0, b"12345678")
    client.sendall(_status_call(hpack.Encoder(), 1, "a"))
    _answer_frames(reader, 1)
    client.sendall(frame(PING, 0, 0, b"abcdefgh"))
    got = reader.frame()
    while got.kind == WINDOW_UPDATE:
        got = reader.frame()
    assert got == Frame(PING, ACK, 0, b"abcdefgh")
    client.close()
    far.sock.close()


def test_a_client_that_floods_pings_while_grpc_is_mid_frame_is_closed(relayed: Relayed) -> None:
    """The relay's own frames for the client wait for a frame boundary of gRPC's: past 192 KiB
    of them (a client that pings and pings while gRPC's frame waits) the connection ends."""
    core = relayed.core
    assert core.put_status(CONTAINER, b"a", False, b"\x0a\x01a", time.monotonic() + 600)
    client, far = relayed.connect()
    reader = Reader(client)
    client.sendall(_status_call(hpack.Encoder(), 1, "a"))
    _answer_frames(reader, 1)  # pings are the relay's to answer from now on
    far.sock.sendall(frame(DATA, 0, 3, b"g" * 100)[:50])  # gRPC stops inside a frame
    reader.more(50)  # the relay is inside gRPC's frame before the first ping comes
    flood = frame(PING, 0, 0, b"12345678") * 12_000  # 204 KB of answers owed
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed on the way
        client.sendall(flood)
    with contextlib.suppress(ConnectionResetError):
        while client.recv(65536):  # kept open, this would wait till SAFETY and fail
            pass
    assert core.counts()["connections"] == 0
    far.sock.close()


def test_the_relays_duration_buckets_are_the_sockets() -> None:
    """The relay's answers are merged into ``podcache_cri_request_duration_seconds`` bucket by
    bucket: its bounds are the socket's."""
    assert DURATION_BOUNDS == DURATION_BUCKETS


@pytest.mark.parametrize(("size", "kept"), [(65_536, True), (65_537, False)])
def test_a_clients_table_is_at_most_64_kib(relayed: Relayed, size: int, kept: bool) -> None:
    client, far = relayed.connect()
    encoder = hpack.Encoder()
    encoder.header_table_size = size  # the block starts with a size update
    client.sendall(frame(HEADERS, END_STREAM | END_HEADERS, 1, encoder.encode([("x-a", "b")])))
    if kept:
        assert _fields(hpack.Decoder().decode(far.frame().payload)) == [("x-a", "b")]
    else:
        with pytest.raises(EOFError):
            far.frame()
    client.close()
