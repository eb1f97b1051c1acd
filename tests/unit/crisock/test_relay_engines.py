"""Both relay engines held to one specification (``relay``'s rules 1-5; docs/architecture.md
§10 rules 1 and 6): ``Relay`` (asyncio, the socket's loop) and ``NativeRelay`` (C, a thread of
its own). Real unix sockets: a client, the engine under test, and an upstream standing in for
gRPC (it reads and writes what the test scripts; no HTTP/2 of its own).

Every check is causal: the relay counts a frame before it writes the frame on, so once a
frame's bytes arrived on the far side the relay's count includes it; a closed connection is
seen as the end of its bytes, never as "within N seconds".
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.serve.command import MAX_CRI_LISTEN
from podcache.serve.crisock import _relay
from podcache.serve.crisock.relay import AnyRelay, NativeRelay, Relay

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM = 0, 1, 3
END_STREAM, END_HEADERS = 1, 4
CONTINUATION, PING = 9, 6
ENGINES: dict[str, type[Relay] | type[NativeRelay]] = {"python": Relay, "c": NativeRelay}


def hpack_int(value: int) -> bytes:
    """An HPACK integer of a 7-bit prefix (RFC 7541 §5.1), its first byte's high bit clear."""
    if value < 127:
        return bytes([value])
    out, value = [127], value - 127
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes([*out, value])


def header_block(size: int) -> bytes:
    """A header block of ``size`` bytes (empty below 4): one literal field, never indexed in a
    table and not Huffman-coded, the form the C engine writes a block again in (byte for
    byte the same)."""
    if size < 4:
        return b""
    value = size - 3
    while 3 + len(hpack_int(value)) + value > size:
        value -= 1
    return b"\x00\x01x" + hpack_int(value) + b"\xa5" * value


def frame(kind: int, flags: int, stream: int, payload: int = 0) -> bytes:
    """A frame of ``payload`` bytes; a HEADERS frame's are a whole header block (END_HEADERS)."""
    body = header_block(payload) if kind == HEADERS else b"\xa5" * payload
    if kind == HEADERS:
        flags |= END_HEADERS
    head = len(body).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return head + body


@dataclass
class CallsModel:
    """Rule 5, written once more as the reference: a client's HEADERS on a stream above the
    last it opened opens a call; the server's END_STREAM on HEADERS or DATA completes it; a
    RST_STREAM either way ends it."""

    open: set[int] = field(default_factory=set)
    last: int = 0
    completed: int = 0

    def client(self, kind: int, stream: int) -> None:
        if kind == HEADERS and stream > self.last:
            self.last = stream
            self.open.add(stream)
        elif kind == RST_STREAM:
            self.open.discard(stream)

    def server(self, kind: int, flags: int, stream: int) -> None:
        if kind in (HEADERS, DATA) and flags & END_STREAM and stream in self.open:
            self.open.discard(stream)
            self.completed += 1
        elif kind == RST_STREAM:
            self.open.discard(stream)


@dataclass
class Peer:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def ended(self) -> bool:
        """True once the other side closed (everything it sent read and dropped)."""
        while await self.reader.read(65536):
            pass
        return True


@dataclass
class Bench:
    relay: AnyRelay
    path: str
    upstream: asyncio.Queue[Peer]

    async def connect(self) -> tuple[Peer, Peer]:
        """A client's connection through the relay, and the upstream's end of it."""
        reader, writer = await asyncio.open_unix_connection(self.path)
        return Peer(reader, writer), await self.upstream.get()


@asynccontextmanager
async def bench(
    engine: str, *, max_connections: int = 64, handshake: float = 600.0, fair_calls: int = 10**6
) -> AsyncIterator[Bench]:
    with tempfile.TemporaryDirectory() as directory:
        target = os.path.join(directory, "upstream.sock")
        accepted: asyncio.Queue[Peer] = asyncio.Queue()

        async def on_upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await accepted.put(Peer(reader, writer))

        upstream = await asyncio.start_unix_server(on_upstream, path=target)
        relay = ENGINES[engine](
            target,
            max_connections=max_connections,
            handshake_seconds=handshake,
            fair_calls=fair_calls,
        )
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = os.path.join(directory, "relay.sock")
        listening.bind(path)
        listening.listen(64)
        listening.setblocking(False)
        await relay.serve(listening)
        try:
            yield Bench(relay, path, accepted)
        finally:
            await relay.aclose()
            upstream.close()


async def passed(data: bytes, sender: Peer, receiver: Peer) -> None:
    sender.writer.write(data)
    await sender.writer.drain()
    assert await receiver.reader.readexactly(len(data)) == data  # byte for byte


async def passed_in_two(data: bytes, cut: int, sender: Peer, receiver: Peer) -> None:
    """``data`` sent in two writes cut at ``cut``; it arrives whole (the C engine reads some
    frames whole before it writes them on)."""
    sender.writer.write(data[:cut])
    await sender.writer.drain()
    await asyncio.sleep(0)
    sender.writer.write(data[cut:])
    await sender.writer.drain()
    assert await receiver.reader.readexactly(len(data)) == data  # byte for byte


_KINDS = st.sampled_from([DATA, HEADERS, 2, RST_STREAM, 4, 6, 8, 9])
_STEP = st.tuples(
    st.booleans(),  # from the client (else from the upstream)
    _KINDS,
    st.integers(0, 1),  # END_STREAM or not
    st.integers(0, 4).map(lambda n: 2 * n + 1),  # few streams: opened ones are ended often
    st.one_of(st.integers(0, 40), st.integers(40_000, 70_000)),  # past the relay's chunk too
    st.integers(1, 9),  # where the frame's bytes are cut in two
)


@pytest.mark.parametrize("engine", sorted(ENGINES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_STEP, max_size=25))
def test_both_engines_count_calls_as_the_model_does_at_every_cut(
    engine: str, steps: list[tuple[bool, int, int, int, int, int]]
) -> None:
    asyncio.run(_count_calls(engine, steps))


async def _count_calls(engine: str, steps: list[tuple[bool, int, int, int, int, int]]) -> None:
    model = CallsModel()
    async with bench(engine) as relayed:
        client, upstream = await relayed.connect()
        await passed(PREFACE[:5], client, upstream)
        await passed(PREFACE[5:], client, upstream)
        for from_client, drawn, flags, stream, payload, cut in steps:
            # A client's stray CONTINUATION ends its connection (RFC 9113 §6.10).
            kind = PING if from_client and drawn == CONTINUATION else drawn
            data = frame(kind, flags, stream, payload)
            sender, receiver = (client, upstream) if from_client else (upstream, client)
            await passed_in_two(data, cut, sender, receiver)
            if from_client:
                model.client(kind, stream)
            else:
                model.server(kind, flags, stream)
            assert relayed.relay.calls == len(model.open)
        assert relayed.relay.connections == 1
        client.writer.close()
        assert await upstream.ended()


async def _call(client: Peer, upstream: Peer, stream: int, *, answered: bool) -> None:
    await passed(frame(HEADERS, 4, stream, 8), client, upstream)
    if answered:
        await passed(frame(HEADERS, 5, stream, 8), upstream, client)


@pytest.mark.parametrize("engine", sorted(ENGINES))
async def test_at_the_bound_the_idle_longest_is_closed_and_with_none_idle_the_new_one(
    engine: str,
) -> None:
    async with bench(engine, max_connections=3) as relayed:
        peers = [await relayed.connect() for _ in range(3)]
        for stream, (client, upstream) in enumerate(peers):
            await passed(PREFACE, client, upstream)
            await _call(client, upstream, 1, answered=stream != 1)  # the second stays busy
        # the first became idle before the third: the first is the idle longest
        fourth = await relayed.connect()
        assert await peers[0][0].ended() and await peers[0][1].ended()
        assert relayed.relay.evicted == 1 and relayed.relay.connections == 3
        await passed(PREFACE, *fourth)
        await _call(*fourth, 1, answered=False)
        await _call(*peers[2], 3, answered=False)
        reader, _ = await asyncio.open_unix_connection(relayed.path)  # none idle: refused
        assert await reader.read() == b""
        assert relayed.relay.refused == 1 and relayed.relay.connections == 3
        await _call(*peers[1], 3, answered=True)  # the busy ones still relay
        await _call(*fourth, 3, answered=True)


@pytest.mark.parametrize("engine", sorted(ENGINES))
async def test_a_connection_without_a_call_in_its_first_seconds_is_closed(engine: str) -> None:
    async with bench(engine, handshake=3.0) as relayed:
        used, unused = await relayed.connect(), await relayed.connect()
        await passed(PREFACE, *used)
        await _call(*used, 1, answered=True)
        await passed(PREFACE, *unused)  # a preface is not a call
        assert await unused[0].ended()
        assert relayed.relay.unused == 1
        await _call(*used, 3, answered=True)  # the one that completed a call stays


@pytest.mark.parametrize("engine", sorted(ENGINES))
async def test_past_the_fair_share_a_call_closes_the_busiest_connection(engine: str) -> None:
    async with bench(engine, fair_calls=3) as relayed:
        heavy, victim = await relayed.connect(), await relayed.connect()
        await passed(PREFACE, *heavy)
        await passed(PREFACE, *victim)
        for stream in (1, 3, 5):
            await _call(*heavy, stream, answered=False)
        await _call(*victim, 1, answered=False)  # the 4th call: past the share of 3
        assert await heavy[0].ended()
        assert relayed.relay.busiest == 1 and relayed.relay.calls == 1
        await passed(frame(HEADERS, 5, 1, 8), victim[1], victim[0])
        assert relayed.relay.calls == 0


@pytest.mark.parametrize("engine", sorted(ENGINES))
async def test_a_client_that_does_not_read_stops_its_own_connection_only(engine: str) -> None:
    async with bench(engine) as relayed:
        stalled, other = await relayed.connect(), await relayed.connect()
        await passed(PREFACE, *stalled)
        await passed(PREFACE, *other)
        sent = 0
        writer = stalled[1].writer
        while writer.transport.get_write_buffer_size() == 0:  # until the relay stops reading
            writer.write(frame(DATA, 0, 1, 16_000))
            sent += 16_009
            await asyncio.sleep(0)
            await asyncio.sleep(0.01)
        assert sent > 64 * 1024  # past the relay's own holding: the sockets' too
        await _call(*other, 1, answered=True)  # meanwhile another connection is relayed
        got = 0
        while got < sent:  # the stalled client reads at last: everything arrives
            got += len(await stalled[0].reader.read(65536))
        assert got == sent


def test_the_c_engine_takes_64_listening_sockets_and_refuses_the_65th(tmp_path: Path) -> None:
    """``MAX_LISTENERS`` of _relay.c: serve binds one per ``--cri-listen`` path, and takes
    at most ``MAX_CRI_LISTEN`` of them (a usage error past it, test_server)."""
    core = _relay.Core(str(tmp_path / "upstream.sock"), 8, 60.0, 100)
    made: list[socket.socket] = []
    try:
        for i in range(MAX_CRI_LISTEN + 1):
            listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            made.append(listening)
            listening.bind(str(tmp_path / f"{i}.sock"))
            listening.listen(1)
            if i < MAX_CRI_LISTEN:
                core.listen(listening.fileno())
        with pytest.raises(RuntimeError, match="no more listening sockets"):
            core.listen(made[-1].fileno())
        assert core.counts()["connections"] == 0
    finally:
        core.close()
        for listening in made:
            listening.close()
