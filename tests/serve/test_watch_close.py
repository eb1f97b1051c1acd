"""A watch client's close or half-close ends its connection and its watch in every state:
before the answer began (while the watch is being opened), after its head,
after its first chunk; with and without reading. Nothing stays open on the server, nothing
sits in CLOSE-WAIT, ``podcache_watchers`` returns to zero and no change-log cursor is left.

In process, over real loopback sockets: the application on podcache's HTTP server in a loop
thread, over a fake runtime the test can hold (``block``), so "while the answer is being
prepared" is a state the test waits for, not a race it hopes to hit.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from podcache.serve.app import App
from podcache.serve.http1 import State
from tests.serve.test_http1 import Served
from tests.serve.test_watch_stream import app_served
from tests.unit.cache.drivers import make_pod

WAIT = 10.0  # most seconds to wait for a state the server must reach (never a speed bound)
_CLOSE_WAIT = "08"  # /proc/net/tcp's code for TCP_CLOSE_WAIT


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _close_wait(port: int) -> int:
    """Server sockets on ``port`` in CLOSE-WAIT: the client closed, the server did not."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            count += local_port == port and fields[3] == _CLOSE_WAIT
    return count


def _request(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    client.sendall(f"GET /pods?watch=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return client


def _read_until(client: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        piece = client.recv(65536)
        assert piece, f"the server closed before sending {marker!r}: {data[:300]!r}"
        data += piece
    return data


def _read_to_eof(client: socket.socket) -> bytes:
    data = b""
    while piece := client.recv(65536):
        data += piece
    return data


def _nothing_left(served: Served, app: App) -> None:
    """The server holds no connection, no stream and no cursor, and the kernel no CLOSE-WAIT."""
    loop = served.loop
    _eventually(lambda: served.open_connections() == 0, "a connection is still open")
    _eventually(lambda: app.streams.counters.open == 0, "podcache_watchers is not back to 0")
    _eventually(lambda: loop.call(app.cache._core.changes.prune) == 0, "a cursor is left open")
    _eventually(lambda: _close_wait(served.port) == 0, "a server socket is in CLOSE-WAIT")
    # The broadcast holds no stream either (parked, or a pass or bookmark due).
    broadcast = app.streams.broadcast
    assert broadcast is not None
    assert not broadcast._parked and broadcast._pass is None and broadcast._timer is None


def _connections_in(served: Served, state: State) -> int:
    return served.loop.call(lambda: sum(c.state is state for c in served.http.connections))


def _client_eof_seen(served: Served) -> bool:
    return served.loop.call(lambda: any(c._eof for c in served.http.connections))


@pytest.mark.parametrize("half", [False, True], ids=["close", "half-close"])
def test_a_close_while_the_watch_is_being_opened_ends_it(half: bool) -> None:
    with app_served([make_pod(1), make_pod(2)]) as (served, app, fake):
        served.loop.call(fake.block)  # the watch's first listing waits: the answer is pending
        client = _request(served.port)
        _eventually(lambda: fake.calls >= 1, "the watch did not ask the runtime")
        assert _connections_in(served, State.ANSWERING) == 1
        client.shutdown(socket.SHUT_WR) if half else client.close()
        _eventually(lambda: _client_eof_seen(served), "the server did not see the client's EOF")
        served.loop.call(fake.release)
        if half:  # a half-closed client may still read: the stream begins and ends at once
            body = _read_to_eof(client)
            head, _, chunks = body.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert chunks == b"0\r\n\r\n"  # the last chunk: a clean end, no line
            client.close()
        _nothing_left(served, app)


@pytest.mark.parametrize("half", [False, True], ids=["close", "half-close"])
@pytest.mark.parametrize("read", ["nothing", "head", "first-chunk"])
def test_a_close_of_an_open_stream_ends_it(read: str, half: bool) -> None:
    with app_served([make_pod(n) for n in range(5)]) as (served, app, _fake):
        for _ in range(20):  # sequential clients, as in the attack
            client = _request(served.port)
            if read == "head":
                _read_until(client, b"\r\n\r\n")
            elif read == "first-chunk":
                _read_until(client, b'"BOOKMARK"')
            if half:
                client.shutdown(socket.SHUT_WR)
                rest = _read_to_eof(client)  # the server ends the stream cleanly, then closes
                assert rest.endswith(b"0\r\n\r\n") or read == "nothing", rest[-200:]
            client.close()
        _nothing_left(served, app)


def test_many_clients_that_close_at_once_leave_nothing() -> None:
    """50 clients open a watch and close without reading, several times over."""
    with app_served([make_pod(n) for n in range(5)]) as (served, app, _fake):
        for _ in range(5):
            clients = [_request(served.port) for _ in range(50)]
            for client in clients:
                client.close()
        _nothing_left(served, app)
        # And the server still answers: no connection slot was kept.
        probe = socket.create_connection(("127.0.0.1", served.port), timeout=WAIT)
        probe.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n\r\n".encode())
        assert _read_until(probe, b"\r\n\r\n").startswith(b"HTTP/1.1 200 ")
        probe.close()
