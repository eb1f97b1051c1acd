"""The HTTP/1.1 server (``podcache.serve.http1``) over real sockets, with raw-socket clients so
malformed input can be sent: keep-alive, pipelining, closing rules, HEAD and 304, refusals,
limits, timeouts, flow control, disconnects and shutdown.

The server runs in-process on a uvloop loop in a thread, with short timeouts where time is the
point; the responder is a small fake (``Recorder``) except where the real App's cache matters.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import uvloop

from podcache import AsyncFakeRuntime, Pod
from podcache.serve import App, http1
from podcache.serve.http1 import MAX_PIPELINE, HTTPServer, Responder, State
from podcache.serve.response import STREAM_MAX_UNSENT, Response

T = TypeVar("T")

BIG = bytes(range(256)) * 4096  # 1 MiB
DATE = re.compile(r"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT")


# -- harness ----------------------------------------------------------------------------------
TIMER_SLACK = 0.002
"""How much earlier than asked a uvloop timer may end, read with time.monotonic (its clock is
libuv's cached loop time, in milliseconds)."""


class LoopThread:
    """A uvloop event loop running on a daemon thread."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run ``coroutine`` in the loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function: Callable[[], T]) -> T:
        """Call ``function`` in the loop's thread and return its result."""

        async def call() -> T:
            return function()

        return self.run(call())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@dataclass
class Served:
    port: int
    http: HTTPServer
    loop: LoopThread

    def client(self, **options: Any) -> RawClient:
        return RawClient(self.port, **options)

    def open_connections(self) -> int:
        return self.loop.call(lambda: len(self.http))


@contextmanager
def serving(respond: Responder, **options: Any) -> Iterator[Served]:
    """An HTTPServer for ``respond`` on a free loopback port (a ``Recorder`` brings its
    ``respond_now`` when it has one)."""
    loop = LoopThread()
    if isinstance(respond, Recorder) and respond.sync:
        options.setdefault("respond_now", respond.respond_now)

    if "sndbuf" in options:
        options["send_buffer"] = options.pop("sndbuf")

    async def start() -> tuple[HTTPServer, asyncio.Server]:
        http = HTTPServer(respond, **options)
        http.start()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4096)
        listener.setblocking(False)
        server = await asyncio.get_running_loop().create_server(http.connection, sock=listener)
        return http, server

    http, server = loop.run(start())
    try:
        yield Served(server.sockets[0].getsockname()[1], http, loop)
    finally:

        async def stop() -> None:
            server.close()
            await http.shutdown(1.0)

        loop.run(stop())
        loop.close()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    head: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class RawClient:
    """A socket that writes raw bytes and reads HTTP/1.1 answers (Content-Length only)."""

    def __init__(self, port: int, timeout: float = 5.0, *, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def get(self, target: str, *extra: str, version: str = "1.1", method: str = "GET") -> None:
        lines = [f"{method} {target} HTTP/{version}", "Host: test", *extra]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode())

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 20)
        self.buffer += chunk
        return bool(chunk)

    def answer(self, *, head_only: bool = False) -> Answer:
        """The next answer; its body by Content-Length (none when ``head_only``)."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before an answer; got {self.buffer[:200]!r}")
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        assert lines[0].startswith("HTTP/1.1 "), lines[0]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            assert name.lower() not in headers, f"{name} repeated"
            headers[name.lower()] = value.strip()
        length = 0 if head_only else int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            if not self._fill():
                raise ConnectionError("closed in the middle of a body")
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Answer(status, headers, body, head)

    def chunks(self) -> list[bytes]:
        """A chunked body, chunk by chunk, up to and without the last (empty) chunk."""
        found: list[bytes] = []
        while True:
            while b"\r\n" not in self.buffer:
                if not self._fill():
                    raise ConnectionError(f"closed inside a chunked body after {len(found)}")
            size_line, _, self.buffer = self.buffer.partition(b"\r\n")
            size = int(size_line, 16)
            while len(self.buffer) < size + 2:
                if not self._fill():
                    raise ConnectionError("closed inside a chunk")
            chunk, self.buffer = self.buffer[:size], self.buffer[size:]
            assert self.buffer.startswith(b"\r\n")
            self.buffer = self.buffer[2:]
            if size == 0:
                return found
            found.append(chunk)

    def closed_by_server(self) -> bool:
        """True when the server closes (EOF or reset) with nothing more sent."""
        try:
            while self._fill():
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            return False
        assert self.buffer == b"", self.buffer[:200]
        return True

    def close(self) -> None:
        self.sock.close()


class Recorder:
    """The fake responder. ``/echo...`` answers the request as JSON; ``/slow?S`` first sleeps
    S seconds; ``/block`` waits for ``release()``; ``/big`` answers 1 MiB; ``/not-modified``
    304; ``/boom`` raises, ``/boom-later`` raises after a sleep. Every request is recorded.

    ``sync``: it also answers through ``respond_now`` what needs no waiting (all but
    ``/slow``, ``/block`` and ``/boom-later``), as App does on a cache hit."""

    WAITS = frozenset({"/slow", "/block", "/boom-later"})

    def __init__(self, *, sync: bool = True) -> None:
        self.sync = sync
        self.requests: list[tuple[str, str, str, list[tuple[str, str]]]] = []
        self.gate: asyncio.Event | None = None
        self.streams_closed = 0
        """Streams whose generator was closed (ended, cut off, or stopped)."""

    async def _chunks(self, count: int, interval: float, size: int) -> AsyncIterator[bytes]:
        """``count`` chunks (0: without end) of ``size`` bytes, ``interval`` s apart."""
        try:
            sent = 0
            while count == 0 or sent < count:
                await asyncio.sleep(interval)
                yield b"%d\n" % sent + b"x" * max(size - 8, 0)
                sent += 1
        finally:
            self.streams_closed += 1

    def respond_now(
        self, method: str, path: str, query: str, headers: list[tuple[str, str]]
    ) -> Response | Coroutine[Any, Any, Response]:
        if path in self.WAITS:
            return self(method, path, query, headers)  # the coroutine that answers, as App's
        self.requests.append((method, path, query, list(headers)))
        return self._answer(method, path, query, list(headers))

    async def __call__(
        self, method: str, path: str, query: str, headers: Iterable[tuple[str, str]]
    ) -> Response:
        items = list(headers)
        self.requests.append((method, path, query, items))
        if path == "/slow":
            await asyncio.sleep(float(query or "0.2"))
        elif path == "/block":
            if self.gate is None:
                self.gate = asyncio.Event()
            await self.gate.wait()
        elif path == "/boom-later":
            await asyncio.sleep(0.01)
            raise RuntimeError("boom")
        return self._answer(method, path, query, items)

    def _answer(self, method: str, path: str, query: str, items: list[tuple[str, str]]) -> Response:
        if path == "/big":
            return Response(200, [("content-type", "application/octet-stream")], BIG)
        if path == "/stream":  # ?count,interval,size[,max_unsent]
            count, interval, size, *bound = query.split(",")
            chunks = self._chunks(int(count), float(interval), int(size))
            limit = int(bound[0]) if bound else STREAM_MAX_UNSENT
            return Response(
                200, [("content-type", "application/x-ndjson")], stream=chunks, max_unsent=limit
            )
        if path == "/bytes":
            return Response(200, [("content-type", "application/octet-stream")], b"b" * int(query))
        if path == "/not-modified":
            return Response(304, [("etag", '"x"')])
        if path in ("/boom", "/boom-later"):
            raise RuntimeError("boom")
        document = {"method": method, "path": path, "query": query, "headers": items}
        return Response(200, [("content-type", "application/json")], json.dumps(document).encode())

    def release(self) -> None:
        if self.gate is not None:
            self.gate.set()


@pytest.fixture(params=["respond-now", "task-only"])
def recorder(request: pytest.FixtureRequest) -> Recorder:
    """Every test runs both ways the server answers: at once through ``respond_now`` where
    the responder can, and with every answer in a task."""
    return Recorder(sync=request.param == "respond-now")


@pytest.fixture
def served(recorder: Recorder) -> Iterator[Served]:
    with serving(recorder) as served:
        yield served


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


GRACE = 30.0
"""The shutdown grace of the tests that end before it: "at once" is "long before the grace",
which no load makes them miss (a sub-second bound would)."""


# -- keep-alive and closing ----------------------------------------------------------------
def test_keep_alive_answers_several_requests_on_one_connection(served: Served) -> None:
    client = served.client()
    for n in range(3):
        client.get(f"/echo?n={n}")
        answer = client.answer()
        assert answer.status == 200
        assert answer.json()["query"] == f"n={n}"
        assert "connection" not in answer.headers
    client.close()


def test_every_answer_has_content_length_server_and_date(served: Served) -> None:
    client = served.client()
    client.get("/echo")
    answer = client.answer()
    assert answer.headers["content-length"] == str(len(answer.body))
    assert answer.headers["server"] == "podcache"
    assert DATE.fullmatch(answer.headers["date"]), answer.headers["date"]
    assert answer.head.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")


def test_pipelined_requests_are_answered_in_order(served: Served) -> None:
    client = served.client()
    targets = ["/slow?0.2", "/echo?b", "/slow?0.05", "/echo?d", "/not-modified", "/echo?f"]
    client.send(b"".join(f"GET {t} HTTP/1.1\r\nHost: test\r\n\r\n".encode() for t in targets))
    answers = [client.answer() for _ in targets]
    assert [a.status for a in answers] == [200, 200, 200, 200, 304, 200]
    bodies = [a.json()["path"] + "?" + a.json()["query"] for a in answers if a.status == 200]
    assert bodies == [t for t in targets if t != "/not-modified"]


def test_http10_closes_after_the_answer(served: Served) -> None:
    client = served.client()
    client.get("/echo", version="1.0")
    answer = client.answer()
    assert answer.status == 200
    assert answer.headers["connection"] == "close"
    assert client.closed_by_server()


def test_http10_keep_alive_keeps_the_connection(served: Served) -> None:
    client = served.client()
    for _ in range(2):
        client.get("/echo", "Connection: keep-alive", version="1.0")
        answer = client.answer()
        assert answer.status == 200
        assert answer.headers["connection"] == "keep-alive"


def test_connection_close_closes_after_the_answer(served: Served, recorder: Recorder) -> None:
    client = served.client()
    client.send(
        b"GET /echo HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
        b"GET /echo?never HTTP/1.1\r\nHost: test\r\n\r\n"
    )
    answer = client.answer()
    assert answer.status == 200
    assert answer.headers["connection"] == "close"
    assert client.closed_by_server()
    assert [r[2] for r in recorder.requests] == [""]  # the request after it is not read


def test_a_client_that_half_closes_still_gets_its_answers(served: Served) -> None:
    client = served.client()
    client.send(
        b"GET /slow?0.1 HTTP/1.1\r\nHost: test\r\n\r\nGET /echo HTTP/1.1\r\nHost: test\r\n\r\n"
    )
    client.sock.shutdown(socket.SHUT_WR)
    assert [client.answer().status, client.answer().status] == [200, 200]
    assert client.closed_by_server()


def test_the_module_tables_name_every_state_and_nothing_else() -> None:
    doc = http1.__doc__ or ""
    states_table = doc.split("state  ", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"^``([A-Z]+)``", states_table, re.MULTILINE))
    assert named == {state.name for state in State}
    mentioned = set(re.findall(r"``([A-Z]{4,})``", doc))
    assert mentioned <= {state.name for state in State} | {"MAX_PIPELINE"}


def test_the_connection_moves_through_the_states_of_the_table(recorder: Recorder) -> None:
    with serving(recorder) as served:
        client = served.client()
        wait_until(lambda: served.open_connections() == 1)
        (connection,) = served.loop.call(lambda: list(served.http.connections))

        def reaches(state: State) -> None:
            wait_until(lambda: served.loop.call(lambda: connection.state) is state)

        reaches(State.IDLE)
        client.send(b"GET /echo HTTP/1.1\r\nHost: test\r\n")
        reaches(State.HEAD)
        client.send(b"\r\n")
        assert client.answer().status == 200
        reaches(State.IDLE)
        client.get("/block")
        reaches(State.ANSWERING)
        served.loop.call(recorder.release)
        assert client.answer().status == 200
        reaches(State.IDLE)
        client.send(b"GET /big HTTP/1.1\r\nHost: test\r\n\r\n" * 40)  # 40 MiB, unread
        reaches(State.BLOCKED)
        for _ in range(40):
            assert len(client.answer().body) == len(BIG)
        reaches(State.IDLE)
        client.get("/echo", "Connection: close")
        assert client.answer().headers["connection"] == "close"
        reaches(State.ENDING)
        client.close()
        wait_until(lambda: served.open_connections() == 0)
        assert served.loop.call(lambda: connection.state) is State.CLOSED


# -- HEAD and 304 ------------------------------------------------------------------------------
def test_head_has_the_get_content_length_and_no_body(served: Served) -> None:
    client = served.client()
    client.send(b"HEAD /big HTTP/1.1\r\nHost: test\r\n\r\nGET /echo HTTP/1.1\r\nHost: test\r\n\r\n")
    head = client.answer(head_only=True)
    assert head.status == 200
    assert head.headers["content-length"] == str(len(BIG))
    after = client.answer()  # starts right after the head: no body bytes in between
    assert after.status == 200
    assert after.json()["method"] == "GET"


def test_304_has_no_body_and_no_content_length(served: Served) -> None:
    client = served.client()
    client.send(
        b"GET /not-modified HTTP/1.1\r\nHost: test\r\n\r\nGET /echo HTTP/1.1\r\nHost: test\r\n\r\n"
    )
    answer = client.answer(head_only=True)
    assert answer.status == 304
    assert "content-length" not in answer.headers
    assert answer.headers["etag"] == '"x"'
    assert client.answer().status == 200


# -- what reaches the responder ------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "path", "query"),
    [
        ("/echo/a%20b", "/echo/a b", ""),
        ("/echo/%2Fx%3A", "/echo//x:", ""),
        ("/echo/caf%C3%A9", "/echo/café", ""),
        ("/echo/%FF", "/echo/\ufffd", ""),
        ("/echo/a%zz%2", "/echo/a%zz%2", ""),
        ("/echo/a+b", "/echo/a+b", ""),
        ("/echo?x=%20&y=a+b", "/echo", "x=%20&y=a+b"),
        ("/echo?", "/echo", ""),
        ("/echo#frag", "/echo", ""),
        ("/echo?q=1#frag", "/echo", "q=1"),
        ("http://example.org:80/echo/%41?q=2", "/echo/A", "q=2"),
        ("http://example.org", "/", ""),
        ("*", "*", ""),
    ],
)
def test_the_responder_gets_the_path_decoded_and_the_query_as_sent(
    served: Served, recorder: Recorder, target: str, path: str, query: str
) -> None:
    client = served.client()
    client.get(target)
    assert client.answer().status == 200
    assert recorder.requests[-1][1:3] == (path, query)


def test_repeated_and_changed_requests_on_one_connection_each_get_their_own_parts(
    served: Served, recorder: Recorder
) -> None:
    client = served.client()
    for extra in [(), (), ("X-A: 1",), ("X-A: 1",), ("X-A: 2",), ()]:
        client.get("/echo?q", *extra)
        assert client.answer().status == 200
    client.get("/echo?r")
    client.get("/echo?q", method="HEAD")
    assert client.answer().status == 200
    assert client.answer(head_only=True).status == 200
    seen = [(m, p, q, [v for k, v in h if k == "x-a"]) for m, p, q, h in recorder.requests]
    assert seen == [
        ("GET", "/echo", "q", []),
        ("GET", "/echo", "q", []),
        ("GET", "/echo", "q", ["1"]),
        ("GET", "/echo", "q", ["1"]),
        ("GET", "/echo", "q", ["2"]),
        ("GET", "/echo", "q", []),
        ("GET", "/echo", "r", []),
        ("HEAD", "/echo", "q", []),
    ]


def test_a_body_is_refused_even_after_the_same_request_without_one(served: Served) -> None:
    client = served.client()
    client.get("/echo")
    assert client.answer().status == 200
    client.get("/echo", "Content-Length: 2")
    client.send(b"xx")
    refused(client, 413)


def test_header_names_are_lower_case_and_values_trimmed_and_latin_1(
    served: Served, recorder: Recorder
) -> None:
    client = served.client()
    client.send(
        b"GET /echo HTTP/1.1\r\nHost: test\r\nX-Value:  a b \t\r\nX-Bytes: caf\xc3\xa9\r\n\r\n"
    )
    assert client.answer().status == 200
    assert recorder.requests[-1][3] == [
        ("host", "test"),
        ("x-value", "a b"),
        ("x-bytes", "caf\xc3\xa9"),
    ]


# -- the server's own answers: JSON, then the connection ends -------------------------------
def refused(client: RawClient, status: int) -> dict[str, Any]:
    """The next answer is the server's own JSON error with ``status``, and the server closes."""
    answer = client.answer()
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["connection"] == "close"
    body: dict[str, Any] = answer.json()
    assert body["status"] == status and body["error"]
    assert client.closed_by_server()
    return body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello",
        b"GET /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
        b"HEAD /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 1\r\n\r\nx",
    ],
)
def test_a_get_with_a_body_is_413_and_the_body_is_not_read(
    served: Served, recorder: Recorder, request_bytes: bytes
) -> None:
    client = served.client()
    client.send(request_bytes)
    body = refused(client, 413)
    assert body == {
        "error": "request bodies are not accepted (GET and HEAD take none)",
        "status": 413,
    }
    assert recorder.requests == []


def test_another_method_with_a_body_goes_to_the_responder_then_the_connection_ends(
    served: Served, recorder: Recorder
) -> None:
    client = served.client()
    client.send(
        b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000
    )
    answer = client.answer()  # the fake answers 200; App answers 405
    assert answer.headers["connection"] == "close"
    assert recorder.requests[-1][0] == "POST"
    client.send(b"x" * 99_000)  # the rest of the body, discarded
    assert client.closed_by_server()


def test_after_its_own_answer_the_server_half_closes_and_discards_input_until_the_client_closes(
    served: Served,
) -> None:
    client = served.client()
    client.send(b"GET /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 300000\r\n\r\n" + b"x" * 1000)
    refused(client, 413)  # the answer, then EOF: a half-close
    client.send(b"x" * 200_000)  # the rest of the body still arrives: read and dropped
    assert served.loop.call(lambda: len(served.http)) == 1
    client.close()
    wait_until(lambda: served.loop.call(lambda: len(served.http)) == 0)


def test_a_client_that_never_closes_is_reset_after_the_linger_timeout(recorder: Recorder) -> None:
    with serving(recorder, linger_timeout=0.3) as served:
        client = served.client()
        client.get("/echo", "Connection: close")
        assert client.answer().headers["connection"] == "close"
        started = time.monotonic()
        wait_until(lambda: served.loop.call(lambda: len(served.http)) == 0)
        assert time.monotonic() - started >= 0.2  # reset by the linger timer, never before it


def test_a_connection_zero_length_body_is_no_body(served: Served) -> None:
    client = served.client()
    client.get("/echo", "Content-Length: 0")
    client.get("/echo", "Content-Length: 000")
    assert [client.answer().status, client.answer().status] == [200, 200]


@pytest.mark.parametrize(
    "garbage",
    [
        b"NOT HTTP\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS client hello
        b"GET /echo HTTP/1.1\r\nHost: test\r\nBad Header: x\r\n\r\n",
        b"GET /echo HTTP/1.1\nHost: test\n\n",
        b"GET /echo\x00 HTTP/1.1\r\nHost: test\r\n\r\n",
        b"get /echo HTTP/1.1\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ],
)
def test_malformed_requests_are_400_json(served: Served, garbage: bytes) -> None:
    client = served.client()
    client.send(garbage)
    body = refused(client, 400)
    assert body["error"].startswith("malformed request: ")


def test_pipelined_requests_before_a_malformed_one_are_answered_first(served: Served) -> None:
    client = served.client()
    client.send(
        b"GET /slow?0.1 HTTP/1.1\r\nHost: test\r\n\r\n"
        b"GET /echo HTTP/1.1\r\nHost: test\r\n\r\nBAD\r\n\r\n"
    )
    assert [client.answer().status, client.answer().status] == [200, 200]
    refused(client, 400)


def test_a_target_that_is_not_a_path_is_400(served: Served) -> None:
    client = served.client()
    client.send(b"CONNECT example.org:443 HTTP/1.1\r\nHost: test\r\n\r\n")
    assert "neither a path nor a URL" in refused(client, 400)["error"]


def test_a_request_line_without_a_version_is_400_not_505(served: Served) -> None:
    client = served.client()
    client.send(b"GET /echo?a=\r\nHost: test\r\n\r\n")  # llhttp reads this as HTTP/0.9
    assert refused(client, 400)["error"] == "request line has no HTTP version: speak HTTP/1.1"


def test_http_2_is_505(served: Served) -> None:
    client = served.client()
    client.get("/echo", version="2.0")
    assert refused(client, 505)["error"] == "HTTP/2.0 is not supported: speak HTTP/1.1"


def test_an_upgrade_is_answered_as_plain_http_and_the_connection_ends(served: Served) -> None:
    client = served.client()
    client.get("/echo", "Upgrade: websocket", "Connection: Upgrade")
    answer = client.answer()
    assert answer.status == 200
    assert answer.headers["connection"] == "close"
    assert client.closed_by_server()


def test_a_head_over_64_kib_is_431(served: Served, recorder: Recorder) -> None:
    client = served.client()
    client.send(b"GET /echo HTTP/1.1\r\nHost: test\r\nX-Big: " + b"v" * 70_000 + b"\r\n\r\n")
    assert refused(client, 431)["error"] == "request head is larger than 65536 bytes"
    assert recorder.requests == []


def test_many_small_headers_over_64_kib_are_431(served: Served) -> None:
    client = served.client()
    client.send(b"GET /echo HTTP/1.1\r\nHost: test\r\n" + b"X-A: b\r\n" * 10_000 + b"\r\n")
    assert refused(client, 431)["status"] == 431


def test_more_than_256_header_fields_is_431(served: Served) -> None:
    client = served.client()
    client.send(b"GET /echo HTTP/1.1\r\nHost: test\r\n" + b"X-A: b\r\n" * 257 + b"\r\n")
    assert refused(client, 431)["error"] == "more than 256 request header fields"


def test_a_target_over_16_kib_is_414(served: Served) -> None:
    client = served.client()
    client.send(b"GET /echo?" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n")
    assert refused(client, 414)["error"] == "request target is longer than 16384 bytes"


@pytest.mark.parametrize("target", ["/boom", "/boom-later"])
def test_a_responder_failure_is_a_500_without_traceback(
    served: Served, caplog: pytest.LogCaptureFixture, target: str
) -> None:
    client = served.client()
    with caplog.at_level(logging.ERROR, "podcache.serve"):
        client.get(target)
        body = refused(client, 500)
    assert body == {"error": "internal server error (logged by the server)", "status": 500}
    assert f"the responder failed on GET {target}" in caplog.text
    other = served.client()  # the server lives on
    other.get("/echo")
    assert other.answer().status == 200


# -- timeouts --------------------------------------------------------------------------------
def test_a_slow_head_is_cut_off_with_408_after_the_head_timeout(recorder: Recorder) -> None:
    with serving(recorder, head_timeout=0.5) as served:
        client = served.client()
        started = time.monotonic()
        client.send(b"GET /echo HTTP/1.1\r\nHost: test\r\n")  # and never the blank line
        body = refused(client, 408)
        elapsed = time.monotonic() - started
    assert elapsed >= 0.35, elapsed  # cut by the head timer (a tick early at most), never sooner
    assert body["error"] == "the request head took longer than 0.5 s"
    assert recorder.requests == []


def test_a_head_sent_a_byte_at_a_time_is_cut_off_too(recorder: Recorder) -> None:
    with serving(recorder, head_timeout=0.5) as served:
        client = served.client()
        started = time.monotonic()
        for byte in b"GET /echo HTTP/1.1\r\nHost: test\r\nX-Slow: " + b"a" * 100:
            client.send(bytes([byte]))
            if select.select([client.sock], [], [], 0.05)[0]:
                break  # the server answered
        body = refused(client, 408)
        assert time.monotonic() - started >= 0.35  # progress does not reset the head timer
        assert body["status"] == 408


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    recorder: Recorder,
) -> None:
    with serving(recorder, idle_timeout=0.5) as served:
        client = served.client()
        client.get("/echo")
        assert client.answer().status == 200
        started = time.monotonic()
        assert client.closed_by_server()
        assert time.monotonic() - started >= 0.35  # by the idle timer, never sooner


@pytest.mark.parametrize(("size", "idle"), [(30_000, 2.0), (4 * 1024 * 1024, 1.0)])
def test_a_client_that_never_reads_is_gone_within_idle_and_linger_timeouts(
    recorder: Recorder, size: int, idle: float
) -> None:
    """30,000 bytes stay
    below the transport's high-water mark (the connection looks idle), 4 MiB above it."""
    with serving(recorder, idle_timeout=idle, linger_timeout=1.0, sndbuf=4096) as served:
        client = served.client(rcvbuf=4096)
        client.get(f"/bytes?{size}")
        started = time.monotonic()
        wait_until(lambda: served.open_connections() == 0)
        elapsed = time.monotonic() - started
        assert elapsed >= idle - 0.1, elapsed  # by the timers, never sooner
        client.close()


def test_a_slow_reader_is_not_cut_off_while_it_reads(recorder: Recorder) -> None:
    with serving(recorder, idle_timeout=0.6, linger_timeout=0.6, sndbuf=4096) as served:
        client = served.client(rcvbuf=4096)
        client.get("/bytes?400000", "Connection: close")
        received = 0
        while chunk := client.sock.recv(4096):  # about 1.5 s at 256 KiB/s: over both timeouts
            received += len(chunk)
            time.sleep(0.01)
        assert received > 400_000


def test_a_connection_busy_answering_is_not_idle(recorder: Recorder) -> None:
    with serving(recorder, idle_timeout=0.3) as served:
        client = served.client()
        client.get("/slow?0.8")
        assert client.answer().status == 200


# -- disconnects -------------------------------------------------------------------------------
def test_a_client_that_disconnects_mid_request_breaks_nothing(
    served: Served, recorder: Recorder
) -> None:
    for partial in (
        b"GET /echo HTTP/1.1\r\nHost: te",
        b"GET /slow?0.2 HTTP/1.1\r\nHost: test\r\n\r\n",
    ):
        client = served.client()
        client.send(partial)
        time.sleep(0.05)
        client.close()
    time.sleep(0.3)
    client = served.client()
    client.get("/echo?after")
    assert client.answer().json()["query"] == "after"
    assert served.loop.call(lambda: len(served.http)) == 1


def test_a_disconnect_during_a_cache_refresh_does_not_cancel_the_refresh() -> None:
    runtime = AsyncFakeRuntime([Pod(id="uid-1", name="web", namespace="default")])
    runtime.block()
    app = App(runtime, 60.0)
    with serving(app.respond, respond_now=app.respond_now) as served:
        client = served.client()
        client.get("/pods")
        wait_until(lambda: runtime.calls == 1)
        client.close()  # gone while its request waits for the refresh
        time.sleep(0.1)
        served.loop.call(runtime.release)
        wait_until(lambda: app.cache.cache_time is not None)  # the refresh completed
        client = served.client()
        client.get("/pods")
        answer = client.answer()
        assert answer.status == 200
        assert [pod["id"] for pod in answer.json()["items"]] == ["uid-1"]
        assert runtime.calls == 1  # from the refreshed cache


# -- flow control --------------------------------------------------------------------------
def test_a_client_that_does_not_read_stops_getting_answers_built(
    served: Served, recorder: Recorder
) -> None:
    client = served.client()
    count = 300  # 300 MiB of answers if nothing pushed back
    client.send(b"GET /big HTTP/1.1\r\nHost: test\r\n\r\n" * count)
    time.sleep(0.5)
    built = len(recorder.requests)
    assert built < 60, built  # socket buffers, the transport's high-water mark, the queue
    for _ in range(count):
        answer = client.answer()
        assert answer.status == 200 and len(answer.body) == len(BIG)
    assert len(recorder.requests) == count


def test_reading_stops_while_the_pipeline_is_full(served: Served, recorder: Recorder) -> None:
    client = served.client()
    client.get("/block")
    wait_until(lambda: len(recorder.requests) == 1)
    for n in range(MAX_PIPELINE + 20):
        client.get(f"/echo?{n}")
        time.sleep(0.005)  # separate reads
    time.sleep(0.3)
    connection = next(iter(served.loop.call(lambda: list(served.http.connections))))
    assert served.loop.call(lambda: connection.queued) == MAX_PIPELINE
    served.loop.call(recorder.release)
    answers = [client.answer() for _ in range(MAX_PIPELINE + 21)]
    assert [a.json()["query"] for a in answers[1:]] == [str(n) for n in range(MAX_PIPELINE + 20)]


# -- shutdown ----------------------------------------------------------------------------------
def test_shutdown_finishes_requests_in_progress_and_closes_idle_connections(
    recorder: Recorder,
) -> None:
    with serving(recorder) as served:
        idle = served.client()
        idle.get("/echo")
        assert idle.answer().status == 200
        busy = served.client()
        busy.get("/slow?0.3")
        wait_until(lambda: len(recorder.requests) == 2)
        started = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(served.http.shutdown(GRACE), served.loop.loop)
        assert idle.closed_by_server()
        assert time.monotonic() - started < GRACE / 2  # at once, not at the grace
        answer = busy.answer()
        assert answer.status == 200
        assert answer.headers["connection"] == "close"
        assert busy.closed_by_server()
        busy.close()  # as clients do on the server's end of the connection
        future.result(GRACE)
        assert time.monotonic() - started < GRACE / 2  # once the request ended, not at the grace


def test_shutdown_resets_what_is_still_busy_after_the_grace(recorder: Recorder) -> None:
    with serving(recorder) as served:
        busy = served.client()
        busy.get("/slow?10")
        wait_until(lambda: len(recorder.requests) == 1)
        started = time.monotonic()
        served.loop.run(served.http.shutdown(0.3))
        # At the grace, not when /slow?10 ends. uvloop's timers count whole milliseconds from
        # the loop time it read when it last woke, so one may end up to TIMER_SLACK early by
        # time.monotonic (CI saw 0.29999 s).
        assert 0.3 - TIMER_SLACK <= time.monotonic() - started < 5.0
        assert busy.closed_by_server()


# -- the connection cap --------------------------------------------------------------------
def test_connections_past_the_cap_get_a_503_and_are_closed(recorder: Recorder) -> None:
    with serving(recorder, max_connections=3) as served:
        clients = [served.client() for _ in range(3)]  # at the cap: all served
        for client in clients:
            client.get("/echo")
            assert client.answer().status == 200
        over = served.client()
        body = refused(over, 503)
        assert body["error"] == "the server has 3 connections: try again"
        clients.pop().close()
        wait_until(lambda: served.open_connections() == 2)
        again = served.client()  # under the cap again
        again.get("/echo")
        assert again.answer().status == 200


def test_refusals_themselves_are_bounded(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("podcache.serve.http1.connection._REFUSING", 1)
    with serving(recorder, max_connections=1) as served:
        first = served.client()
        first.get("/echo")
        assert first.answer().status == 200
        second = served.client()  # refused with a 503, and kept until it closes
        assert second.answer().status == 503
        third = served.client()  # past both bounds: reset at once, no answer
        assert third.closed_by_server()
        assert served.open_connections() == 2


def test_a_stream_holds_a_connection_of_the_cap(recorder: Recorder) -> None:
    with serving(recorder, max_connections=1) as served:
        streaming = served.client()
        streaming.get("/stream?0,0.05,16")
        assert streaming.answer(head_only=True).status == 200
        refused(served.client(), 503)


# -- the byte budget -------------------------------------------------------------------------
def unsent(served: Served) -> int:
    return served.loop.call(lambda: served.http.buffered)


def test_past_the_byte_budget_the_connection_holding_most_is_dropped_first(
    recorder: Recorder,
) -> None:
    budget = 2 * 1024 * 1024
    with serving(recorder, max_buffered=budget, sndbuf=4096) as served:
        big, small = served.client(rcvbuf=4096), served.client(rcvbuf=4096)
        big.get("/bytes?1500000")
        wait_until(lambda: unsent(served) > 1_400_000)
        small.get("/bytes?400000")
        wait_until(lambda: unsent(served) > 1_800_000)  # under the budget: both kept
        assert served.open_connections() == 2
        third = served.client(rcvbuf=4096)
        third.get("/bytes?500000")  # past it: the 1.5 MB one goes
        wait_until(lambda: served.open_connections() == 2)
        assert unsent(served) <= budget
        with pytest.raises(ConnectionError):
            big.answer()
        assert len(small.answer().body) == 400_000
        assert len(third.answer().body) == 500_000
        other = served.client()
        other.get("/echo")
        assert other.answer().status == 200


def test_many_clients_that_never_read_stay_within_the_budget_and_leave_nothing(
    recorder: Recorder,
) -> None:
    budget = 8 * 1024 * 1024
    with serving(recorder, max_buffered=budget, sndbuf=4096) as served:
        flood = [served.client(rcvbuf=4096) for _ in range(200)]
        for client in flood:
            client.send(b"GET /bytes?200000 HTTP/1.1\r\nHost: test\r\n\r\n" * 4)
        peak = 0
        for _ in range(20):
            peak = max(peak, unsent(served))
            other = served.client()
            other.get("/echo")
            assert other.answer().status == 200  # others are still answered
            other.close()
            time.sleep(0.02)
        assert 0 < peak <= budget
        assert served.open_connections() < 200  # some were dropped
        for client in flood:
            client.close()
        wait_until(lambda: served.open_connections() == 0)
        assert served.loop.call(lambda: (served.http.buffered, served.http.unsent)) == (0, {})


def test_a_stream_counts_against_the_byte_budget(recorder: Recorder) -> None:
    with serving(recorder, max_buffered=512 * 1024, sndbuf=4096) as served:
        streaming = served.client(rcvbuf=4096)
        streaming.get("/stream?0,0,65536")
        assert streaming.answer(head_only=True).status == 200
        wait_until(lambda: served.open_connections() == 0)
        assert served.loop.call(lambda: recorder.streams_closed) == 1


# -- streaming answers -------------------------------------------------------------------------
def test_a_stream_is_sent_chunk_by_chunk_and_the_connection_kept(recorder: Recorder) -> None:
    with serving(recorder) as served:
        client = served.client()
        client.get("/stream?5,0.02,16")
        client.get("/echo?after")
        answer = client.answer(head_only=True)
        assert answer.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in answer.headers
        chunks = client.chunks()
        assert [chunk.split(b"\n")[0] for chunk in chunks] == [b"0", b"1", b"2", b"3", b"4"]
        assert client.answer().json()["query"] == "after"  # pipelined behind the stream
        assert served.loop.call(lambda: recorder.streams_closed) == 1


def test_a_stream_to_http10_is_ended_by_closing(recorder: Recorder) -> None:
    with serving(recorder) as served:
        client = served.client()
        client.get("/stream?3,0.01,16", version="1.0")
        answer = client.answer(head_only=True)
        assert answer.headers["connection"] == "close"
        assert "transfer-encoding" not in answer.headers
        while client._fill():  # the body runs to the server's close
            pass
        assert client.buffer == b"".join(b"%d\n" % n + b"x" * 8 for n in range(3))


def test_a_stream_whose_client_falls_behind_is_cut_off(recorder: Recorder) -> None:
    with serving(recorder, sndbuf=4096) as served:
        client = served.client(rcvbuf=4096)
        client.get("/stream?0,0,32768,100000")  # max_unsent 100,000 bytes
        wait_until(lambda: served.open_connections() == 0)
        assert served.loop.call(lambda: recorder.streams_closed) == 1


def test_shutdown_ends_a_stream_cleanly(recorder: Recorder) -> None:
    with serving(recorder) as served:
        client = served.client()
        client.get("/stream?0,0.02,16")
        assert client.answer(head_only=True).status == 200
        wait_until(lambda: b"\n" in client.buffer or client._fill())
        stopping = asyncio.run_coroutine_threadsafe(served.http.shutdown(GRACE), served.loop.loop)
        chunks = client.chunks()  # ends with the last chunk: a complete body
        assert chunks and all(chunk.endswith(b"x" * 8) for chunk in chunks)
        assert client.closed_by_server()
        client.close()
        started = time.monotonic()
        stopping.result(GRACE)
        assert (
            time.monotonic() - started < GRACE / 2
        )  # done once the client closed, not at the grace
        assert served.loop.call(lambda: recorder.streams_closed) == 1


# -- the Host header -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "error"),
    [
        (b"GET /echo HTTP/1.1\r\n\r\n", "no Host header"),
        (b"GET /echo HTTP/1.0\r\n\r\n", "no Host header"),
        (b"GET /echo HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", "more than one Host header"),
        (b"GET /echo HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", "more than one Host header"),
    ],
)
def test_a_missing_or_repeated_host_is_400(
    served: Served, recorder: Recorder, head: bytes, error: str
) -> None:
    client = served.client()
    client.send(head)
    assert refused(client, 400)["error"] == error
    assert recorder.requests == []


ALLOWED = frozenset({"localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:8080"})


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:8080"])
def test_a_host_the_server_names_is_served(recorder: Recorder, host: str) -> None:
    with serving(recorder, allowed_hosts=ALLOWED) as served:
        client = served.client()
        client.send(f"GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert client.answer().status == 200


@pytest.mark.parametrize("host", ["evil.example", "localhost:80", "localhost.", "127.0.0.2", ""])
def test_any_other_host_is_421(recorder: Recorder, host: str) -> None:
    with serving(recorder, allowed_hosts=ALLOWED) as served:
        client = served.client()
        client.send(f"GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        body = refused(client, 421)
        assert "does not name this server" in body["error"]
        assert recorder.requests == []


def test_head_of_a_stream_sends_the_head_only_and_keeps_the_connection(
    recorder: Recorder,
) -> None:
    with serving(recorder) as served:
        client = served.client()
        client.get("/stream?3,0.01,16", method="HEAD")
        client.get("/echo?after")
        head = client.answer(head_only=True)
        assert head.status == 200 and head.headers["transfer-encoding"] == "chunked"
        assert client.answer().json()["query"] == "after"  # no chunk came in between
