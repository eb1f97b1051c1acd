"""Real endpoints for the CRI client tests: unix sockets that misbehave, and a canned gRPC runtime.

Every server here runs in this process, on a path the test gives (from the ``sock_dir``
fixture), and stops when its context manager exits.
"""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import Message

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.proto import api_pb2_grpc

CONTAINERD_VERSION = pb.VersionResponse(
    version="0.1.0",
    runtime_name="containerd",
    runtime_version="v1.7.20",
    runtime_api_version="v1",
)


@dataclass
class CannedRuntime(api_pb2_grpc.RuntimeServiceServicer):
    """A CRI runtime answering from fixed responses and recording every request it gets.

    ``stall``: Version waits until the test ends (a runtime that is up but does not answer).
    """

    version: pb.VersionResponse = field(default_factory=lambda: CONTAINERD_VERSION)
    sandboxes: pb.ListPodSandboxResponse = field(default_factory=pb.ListPodSandboxResponse)
    containers: pb.ListContainersResponse = field(default_factory=pb.ListContainersResponse)
    status: pb.StatusResponse = field(default_factory=pb.StatusResponse)
    stall: bool = False
    requests: list[tuple[str, Message]] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def Version(  # noqa: N802 (gRPC's method names)
        self, request: pb.VersionRequest, context: grpc.ServicerContext
    ) -> pb.VersionResponse:
        self.requests.append(("Version", request))
        if self.stall:
            self.released.wait(30)
        return self.version

    def Status(  # noqa: N802
        self, request: pb.StatusRequest, context: grpc.ServicerContext
    ) -> pb.StatusResponse:
        self.requests.append(("Status", request))
        return self.status

    def ListPodSandbox(  # noqa: N802
        self, request: pb.ListPodSandboxRequest, context: grpc.ServicerContext
    ) -> pb.ListPodSandboxResponse:
        self.requests.append(("ListPodSandbox", request))
        return self.sandboxes

    def ListContainers(  # noqa: N802
        self, request: pb.ListContainersRequest, context: grpc.ServicerContext
    ) -> pb.ListContainersResponse:
        self.requests.append(("ListContainers", request))
        return self.containers

    def methods(self) -> list[str]:
        return [method for method, _ in self.requests]


class SandboxesOnly(api_pb2_grpc.RuntimeServiceServicer):
    """A gRPC server that implements ListPodSandbox only: Version is UNIMPLEMENTED."""

    def ListPodSandbox(  # noqa: N802
        self, request: pb.ListPodSandboxRequest, context: grpc.ServicerContext
    ) -> pb.ListPodSandboxResponse:
        return pb.ListPodSandboxResponse()


@contextmanager
def grpc_runtime(servicer: api_pb2_grpc.RuntimeServiceServicer, path: str) -> Iterator[str]:
    """Serve ``servicer`` on the unix socket ``path``; yields the endpoint."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix:{path}")
    server.start()
    try:
        yield f"unix://{path}"
    finally:
        if isinstance(servicer, CannedRuntime):
            servicer.released.set()
        server.stop(grace=None).wait(5)


@contextmanager
def raw_listener(path: str, *, close_at_once: bool) -> Iterator[str]:
    """A unix listener that accepts and then either holds connections silently or closes them."""
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


def refused_socket(path: str) -> str:
    """A unix socket file that nobody listens on (a runtime that died and left its socket)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()
    return f"unix://{path}"
