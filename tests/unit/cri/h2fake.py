"""A fake runtime for podcache's own HTTP/2 client (cri/http2.py): the runtime's side of each
connection to a real unix socket, in raw HTTP/2 frames, driven by a test's script in a thread of
its own. ``FakePeer`` is one connection; ``fake_runtime`` the socket whose every connection runs
the script (a script's failure is re-raised when the test's block exits).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import hpack

__all__ = [
    "CONT",
    "DATA",
    "GOAWAY",
    "HEADERS",
    "OK_HEADERS",
    "PING",
    "PREFACE",
    "RST",
    "SETTINGS",
    "WINDOW",
    "FakePeer",
    "drain",
    "fake_runtime",
    "frame",
    "message",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW, CONT = 0, 1, 3, 4, 6, 7, 8, 9
OK_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3) + bytes((kind, flags)) + stream.to_bytes(4) + payload


def message(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4) + body


@dataclass
class FakePeer:
    """A fake runtime's side of one connection: frames in and out, its own HPACK encoder."""

    sock: socket.socket
    encoder: hpack.Encoder = field(default_factory=hpack.Encoder)
    decoder: hpack.Decoder = field(default_factory=hpack.Decoder)
    inbox: bytearray = field(default_factory=bytearray)
    seen: list[tuple[int, int, int, bytes]] = field(default_factory=list)

    def _need(self, size: int) -> None:
        while len(self.inbox) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the client closed the connection")
            self.inbox += chunk

    def preface(self) -> None:
        self._need(len(PREFACE))
        assert bytes(self.inbox[: len(PREFACE)]) == PREFACE
        del self.inbox[: len(PREFACE)]

    def frame(self) -> tuple[int, int, int, bytes]:
        self._need(9)
        length = int.from_bytes(self.inbox[:3])
        self._need(9 + length)
        got = (
            self.inbox[3],
            self.inbox[4],
            int.from_bytes(self.inbox[5:9]) & 0x7FFFFFFF,
            bytes(self.inbox[9 : 9 + length]),
        )
        del self.inbox[: 9 + length]
        self.seen.append(got)
        return got

    def request(self) -> tuple[int, dict[str, str], bytes]:
        """The next call: its stream, headers and request message (after the preface)."""
        headers: dict[str, str] = {}
        body = b""
        while True:
            kind, flags, stream, payload = self.frame()
            if kind == HEADERS:
                headers = {
                    k.decode(): v.decode() for k, v in self.decoder.decode(payload, raw=True)
                }
            elif kind == DATA:
                body += payload
                if flags & 1:
                    return stream, headers, body[5:]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def headers(self, stream: int, pairs: list[tuple[str, str]], end: bool = False) -> None:
        self.send(frame(HEADERS, 0x4 | (1 if end else 0), stream, self.encoder.encode(pairs)))

    def answer(self, stream: int, body: bytes, status: int = 0, details: str = "") -> None:
        self.headers(stream, OK_HEADERS)
        self.send(frame(DATA, 0, stream, message(body)))
        trailers = [("grpc-status", str(status))] + ([("grpc-message", details)] if details else [])
        self.headers(stream, trailers, end=True)


@contextmanager
def fake_runtime(sock_dir: str, script: Callable[[FakePeer], None]) -> Iterator[list[str]]:
    """A unix socket whose every connection runs ``script``; yields the endpoint and records
    each script's failure (re-raised at exit)."""
    path = str(Path(sock_dir) / "h2.sock")
    Path(path).unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    failures: list[BaseException] = []
    stop = threading.Event()
    connections: list[socket.socket] = []

    def serve(conn: socket.socket) -> None:
        conn.settimeout(20)  # a client that stalls the fake fails the test, never hangs it
        try:
            script(FakePeer(conn))
        except TimeoutError as error:
            failures.append(error)
        except (EOFError, OSError):
            pass
        except BaseException as error:  # reported to the test
            failures.append(error)
        finally:
            conn.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(conn)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield [f"unix://{path}"]
    finally:
        stop.set()
        listener.close()
        for conn in connections:
            _with_suppressed_shutdown(conn)
    if failures:
        raise failures[0]


def _with_suppressed_shutdown(conn: socket.socket) -> None:
    with suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def drain(peer: FakePeer) -> list[tuple[int, int, int, bytes]]:
    """Every frame the client sent until it closed the connection."""
    try:
        while True:
            peer.frame()
    except EOFError:
        pass
    return peer.seen
