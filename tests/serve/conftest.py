"""Harness for ``podcache serve`` tests: real server processes, HTTP over TCP and unix sockets.

``ServeProcess`` runs ``python -m podcache.serve`` as a subprocess, waits until it says it
listens, and stops it with SIGTERM, recording the exit status; ``Client`` speaks HTTP/1.1 to
it with the standard library. Nothing here knows the API's routes.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from podcache.sim import SimRuntime

STARTUP_TIMEOUT = 20.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Reply:
    """One HTTP answer: status, headers (lower-case names), body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Reply {self.status} {self.body[:200]!r}>"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class Client:
    """HTTP/1.1 to ``host:port`` or to a unix socket ``path``; one connection per request."""

    def __init__(self, *, port: int | None = None, path: str | None = None) -> None:
        self.port = port
        self.path = path

    def connection(self, timeout: float = 15.0) -> http.client.HTTPConnection:
        if self.path is not None:
            return _UnixConnection(self.path, timeout)
        assert self.port is not None
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(
        self,
        target: str,
        *,
        method: str = "GET",
        headers: dict[str, str] | Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
    ) -> Reply:
        conn = self.connection()
        try:
            conn.putrequest(method, target, skip_accept_encoding=True)
            items = headers.items() if isinstance(headers, dict) else headers
            for name, value in items:
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
        finally:
            conn.close()

    def get(self, target: str, **headers: str) -> Reply:
        return self.request(target, headers={k.replace("_", "-"): v for k, v in headers.items()})

    def raw(self, data: bytes, timeout: float = 10.0) -> bytes:
        """Send raw bytes, return everything read until the server closes or stops sending."""
        if self.path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(self.path)
        else:
            sock = socket.create_connection(("127.0.0.1", self.port or 0), timeout=timeout)
        with sock:
            sock.sendall(data)
            chunks = []
            try:
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
                    if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                        break
            except (TimeoutError, ConnectionResetError):
                pass
            return b"".join(chunks)


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return True


class ServeProcess:
    """``python -m podcache.serve ARGS`` in a subprocess: started, then SIGTERM-stopped."""

    def __init__(
        self, args: Sequence[str], env: dict[str, str] | None = None, prefix: Sequence[str] = ()
    ) -> None:
        """``prefix``: a command that runs serve (e.g. under other ids)."""
        self.args = list(args)
        self.prefix = list(prefix)
        self.env = {**os.environ, **(env or {})}
        self.env.pop("CONTAINER_RUNTIME_ENDPOINT", None)
        self.process: subprocess.Popen[bytes] | None = None
        self.stderr_lines: list[str] = []
        self.returncode: int | None = None
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def start(self) -> ServeProcess:
        self.process = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "podcache.serve", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self.env,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self._listening.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"podcache serve did not start: {self.stderr}")
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode(errors="replace")
            self.stderr_lines.append(line)
            if "listening on" in line:
                self._listening.set()

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.process is not None
        self.returncode = self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return self.returncode

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM, then the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.wait_exit(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.wait_exit(5)
        else:
            self.wait_exit(5)

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_serve(args: Sequence[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Run ``python -m podcache.serve ARGS`` expecting it to exit by itself."""
    env = dict(os.environ)
    env.pop("CONTAINER_RUNTIME_ENDPOINT", None)
    return subprocess.run(
        [sys.executable, "-m", "podcache.serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    """A simulated runtime in the test process (so tests can change its pods), no churn."""
    with SimRuntime(40, seed=7) as runtime:
        yield runtime


@contextmanager
def _served(sim: SimRuntime, *extra: str) -> Iterator[tuple[ServeProcess, Client]]:
    """``podcache serve`` over ``sim`` on TCP loopback with a 60 s cache period and ``extra``
    arguments; it must end cleanly (status 0, no traceback)."""
    port = free_port()
    server = ServeProcess(
        ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s", *extra]
    )
    with server:
        yield server, Client(port=port)
    assert server.returncode == 0, server.stderr
    assert "Traceback" not in server.stderr, server.stderr


@pytest.fixture(scope="module")
def served(sim: SimRuntime) -> Iterator[tuple[ServeProcess, Client]]:
    """``podcache serve`` over ``sim``, its event subscription open and settled."""
    with _served(sim) as (server, client):
        settle_subscription(client)
        yield server, client


@pytest.fixture(scope="module")
def served_polling(sim: SimRuntime) -> Iterator[tuple[ServeProcess, Client]]:
    """``podcache serve`` over ``sim`` with ``--events off``: nothing but a caller's freshness
    demand refreshes it within the period, so a test can hold an old snapshot while the pods
    change (with events on, a change's relist may land before the next request)."""
    with _served(sim, "--events", "off") as (server, client):
        client.get("/pods?fresh=1")
        yield server, client


def settle_subscription(client: Client, timeout: float = 60.0) -> None:
    """Wait until serve's event subscription is open and the refresh it starts has ended, so
    tests that compare two answers see no refresh of its own in between."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = client.get("/metrics").body.decode()
        if 'podcache_events_state{state="subscribed"} 1.0' in text:
            # Every refresh an event or the subscription started or queued has ended: the
            # first fill, then one per event refresh (none when it found the cache empty).
            ended = _counter(text, "podcache_cache_refreshes_total") + _counter(
                text, "podcache_cache_refresh_errors_total"
            )
            if ended >= 1 + _counter(text, "podcache_event_refreshes_total"):
                return
        time.sleep(0.02)
    raise AssertionError("podcache serve did not subscribe and settle: " + text[-2000:])


def _counter(metrics: str, name: str) -> float:
    """The value of an unlabelled counter in a text exposition."""
    for line in metrics.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


@pytest.fixture
def tmp_socket_dir() -> Iterator[Path]:
    """A short directory for unix sockets (their paths are limited to 107 bytes)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pcs-", dir="/tmp") as directory:
        yield Path(directory)
