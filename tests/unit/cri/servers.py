"""Real endpoints for the CRI client tests: unix sockets that misbehave, and a canned gRPC runtime.

Every server here runs on a path the test gives (from the ``sock_dir`` fixture) and stops when
its context manager exits; all in this process, except ``killable_runtime``, a child process
that a test can SIGKILL the way a runtime dies.
"""

from __future__ import annotations

import http.server
import os
import queue
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf.message import Message

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.proto import services

CONTAINERD_VERSION = pb.VersionResponse(
    version="0.1.0",
    runtime_name="containerd",
    runtime_version="v1.7.20",
    runtime_api_version="v1",
)


@dataclass
class CannedRuntime:
    """A CRI runtime answering from fixed responses and recording every request it gets.

    ``stall``: Version waits until the test ends (a runtime that is up but does not answer).
    ``announce``: print each method's name on stdout as its request arrives (in a child process).
    """

    version: pb.VersionResponse = field(default_factory=lambda: CONTAINERD_VERSION)
    sandboxes: pb.ListPodSandboxResponse = field(default_factory=pb.ListPodSandboxResponse)
    containers: pb.ListContainersResponse = field(default_factory=pb.ListContainersResponse)
    status: pb.StatusResponse = field(default_factory=pb.StatusResponse)
    stall: bool = False
    announce: bool = False
    requests: list[tuple[str, Message]] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def _got(self, method: str, request: Message) -> None:
        self.requests.append((method, request))
        if self.announce:
            print(method, flush=True)

    def Version(  # noqa: N802 (gRPC's method names)
        self, request: pb.VersionRequest, context: grpc.ServicerContext
    ) -> pb.VersionResponse:
        self._got("Version", request)
        if self.stall:
            self.released.wait(30)
        return self.version

    def Status(  # noqa: N802 (gRPC's method names)
        self, request: pb.StatusRequest, context: grpc.ServicerContext
    ) -> pb.StatusResponse:
        self._got("Status", request)
        return self.status

    def ListPodSandbox(  # noqa: N802 (gRPC's method names)
        self, request: pb.ListPodSandboxRequest, context: grpc.ServicerContext
    ) -> pb.ListPodSandboxResponse:
        self._got("ListPodSandbox", request)
        return self.sandboxes

    def ListContainers(  # noqa: N802 (gRPC's method names)
        self, request: pb.ListContainersRequest, context: grpc.ServicerContext
    ) -> pb.ListContainersResponse:
        self._got("ListContainers", request)
        return self.containers

    def methods(self) -> list[str]:
        return [method for method, _ in self.requests]


class SandboxesOnly:
    """A gRPC server that implements ListPodSandbox only: Version is UNIMPLEMENTED."""

    def ListPodSandbox(  # noqa: N802 (gRPC's method names)
        self, request: pb.ListPodSandboxRequest, context: grpc.ServicerContext
    ) -> pb.ListPodSandboxResponse:
        return pb.ListPodSandboxResponse()


@contextmanager
def grpc_runtime(servicer: object, path: str) -> Iterator[str]:
    """Serve ``servicer`` on the unix socket ``path``; yields the endpoint."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    services.add_servicer(servicer, server)
    server.add_insecure_port(f"unix:{path}")
    server.start()
    try:
        yield f"unix://{path}"
    finally:
        if isinstance(servicer, CannedRuntime):
            servicer.released.set()
        server.stop(grace=None).wait(5)


@contextmanager
def raw_listener(
    path: str, *, close_at_once: bool, accepted: list[float] | None = None
) -> Iterator[str]:
    """A unix listener that accepts and then either holds connections silently or closes them.

    ``accepted`` gets the time (``time.monotonic()``) of every connection it accepts. The
    socket file stays when it stops, as a dead runtime's does.
    """
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if accepted is not None:
                accepted.append(time.monotonic())
            if close_at_once:
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)
        for conn in held:
            conn.close()


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def address_string(self) -> str:
        return "unix"

    def log_message(self, format: str, *args: object) -> None:
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextmanager
def http1_server(path: str) -> Iterator[str]:
    """An HTTP/1.1 server on a unix socket: something that answers, but not in gRPC."""
    server = _UnixHTTPServer(path, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def raw_peer(path: str, talk: Callable[[socket.socket], None]) -> Iterator[str]:
    """A peer of raw bytes on the unix socket ``path``: each connection accepted (in a thread,
    until the block ends) is given to ``talk`` (an OSError ends it quietly); yields the
    endpoint."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn, suppress(OSError):
                talk(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def refused_socket(path: str) -> str:
    """A unix socket file that nobody listens on (a runtime that died and left its socket)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()
    return f"unix://{path}"


# -- a runtime in a child process, for SIGKILL ------------------------------------------------

_REPO = Path(__file__).resolve().parents[3]
_CHILD = (
    "import sys; from tests.unit.cri.servers import serve_until_killed; "
    "serve_until_killed(sys.argv[1], stall=sys.argv[2] == 'stall')"
)


def serve_until_killed(path: str, *, stall: bool) -> None:
    """The child's main: an announcing CannedRuntime on ``path``; prints "serving" when up."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    runtime = CannedRuntime(stall=stall, announce=True)
    services.add_servicer(runtime, server)
    server.add_insecure_port(f"unix:{path}")
    server.start()
    print("serving", flush=True)
    server.wait_for_termination()


class ChildRuntime:
    """A CannedRuntime serving from a child process: ``kill()`` it, see what it was asked."""

    def __init__(self, path: str, *, stall: bool) -> None:
        self.endpoint = f"unix://{path}"
        self._lines: queue.Queue[str] = queue.Queue()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, path, "stall" if stall else "answer"],
            cwd=_REPO,
            env=dict(os.environ, PYTHONPATH=str(_REPO)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line.strip())

    def wait_for(self, line: str, timeout: float = 20.0) -> None:
        """Wait until the child prints ``line`` (a method name, or "serving")."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                if self._lines.get(timeout=remaining) == line:
                    return
            except queue.Empty:
                break
        raise TimeoutError(f"the child runtime did not print {line!r} in {timeout} s")

    def kill(self) -> None:
        """SIGKILL the child and reap it: its socket file stays behind, nobody listening."""
        self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(10)

    def close(self) -> None:
        if self._proc.poll() is None:
            self.kill()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._reader.join(5)


@contextmanager
def killable_runtime(path: str, *, stall: bool = False) -> Iterator[ChildRuntime]:
    """A CannedRuntime (empty lists) in a child process on ``path``, up when this yields."""
    child = ChildRuntime(path, stall=stall)
    try:
        child.wait_for("serving")
        yield child
    finally:
        child.close()


def canned() -> CannedRuntime:
    """A runtime with one ready pod (one running container) and one exited leftover."""
    sandboxes = pb.ListPodSandboxResponse()
    s = sandboxes.items.add(id="sb1", state=pb.SANDBOX_READY, created_at=2_000)
    s.metadata.name, s.metadata.uid, s.metadata.namespace = "web-0", "uid-1", "default"
    old = sandboxes.items.add(id="sb0", state=pb.SANDBOX_NOTREADY, created_at=1_000)
    old.metadata.name, old.metadata.uid, old.metadata.namespace = "job-0", "uid-0", "batch"
    containers = pb.ListContainersResponse()
    c = containers.containers.add(
        id="c1", pod_sandbox_id="sb1", state=pb.CONTAINER_RUNNING, created_at=2_500
    )
    c.metadata.name = "app"
    c.image.image = "nginx:1.27"
    c.image_ref = "docker.io/library/nginx@sha256:aa"
    c.labels.update(
        {
            "io.kubernetes.pod.uid": "uid-1",
            "io.kubernetes.pod.name": "web-0",
            "io.kubernetes.pod.namespace": "default",
        }
    )
    c.annotations["io.kubernetes.container.hash"] = "c0ffee"
    runtime = CannedRuntime(sandboxes=sandboxes, containers=containers)
    runtime.status.status.conditions.add(type="RuntimeReady", status=True)
    runtime.status.status.conditions.add(type="NetworkReady", status=False, reason="NoCNI")
    return runtime
