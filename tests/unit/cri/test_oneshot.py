"""``OneShotRuntime`` (the CLI's one-shot reads) against ``CRIRuntime``, its reference, over real
sockets: the same listing (IPs included) and Version on the simulator, requests byte for byte
the generated module's, every failure read again by ``CRIRuntime`` (so its errors are the
reference's), and no grpcio, protobuf or asyncio imported on the way to a listing."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from podcache.cri import CRIRuntime
from podcache.cri.oneshot import OneShotRuntime, list_requests, status_request, version_request
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import CRI_VERSION, _list_requests
from podcache.errors import CRIError, RuntimeProtocolError, RuntimeUnavailableError
from podcache.model import Pod
from podcache.sim import SimRuntime
from tests.unit.cri.servers import CannedRuntime, SandboxesOnly, grpc_runtime, refused_socket

HEAVY = ("grpc", "google.protobuf", "asyncio", "yaml", "rich", "concurrent.futures")
"""What a one-shot listing must not import (each costs the CLI's start-up)."""


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(60, seed=5, churn=0.0) as runtime:
        yield runtime


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
def test_the_listing_is_the_reference_clients(sim: SimRuntime, all_: bool) -> None:
    oneshot = OneShotRuntime(sim.endpoint, timeout=5.0)
    with CRIRuntime(sim.endpoint, timeout=5.0) as reference:
        assert oneshot.get_pods(all_) == reference.get_pods(all_)
        assert oneshot.version() == reference.version()
    assert oneshot.fallbacks == 0  # read by itself, not by the fallback
    assert sum(bool(pod.ips) for pod in oneshot.get_pods(all_)) > 30  # with their IPs


def test_without_ips_only_the_ips_differ(sim: SimRuntime) -> None:
    without = OneShotRuntime(sim.endpoint, timeout=5.0, ips=False).get_pods(True)
    with CRIRuntime(sim.endpoint, timeout=5.0) as reference:
        listed = reference.get_pods(True)
    assert [p.id for p in without] == [p.id for p in listed]
    assert all(not pod.ips and not pod.host_network for pod in without)
    for pod, same in zip(without, listed, strict=True):
        assert (pod.containers, pod.sandboxes, pod.labels) == (
            same.containers,
            same.sandboxes,
            same.labels,
        )


def test_requests_are_the_generated_modules() -> None:
    assert version_request() == pb.VersionRequest(version=CRI_VERSION).SerializeToString()
    for all_ in (False, True):
        sandboxes, containers = _list_requests(all_)
        assert list_requests(all_) == (
            sandboxes.SerializeToString(),
            containers.SerializeToString(),
        )
    sid = "ab" * 32 + "é" * 70  # a length past one varint byte
    assert status_request(sid) == pb.PodSandboxStatusRequest(pod_sandbox_id=sid).SerializeToString()


def test_a_failed_read_is_made_again_by_the_reference_client(tmp_path: object) -> None:
    """A runtime with ListPodSandbox only: the one-shot read fails (Version UNIMPLEMENTED), the
    reference client reads again and raises its own error."""
    path = f"{tmp_path}/cri.sock"
    with grpc_runtime(SandboxesOnly(), path) as endpoint:
        oneshot = OneShotRuntime(endpoint, timeout=2.0)
        with pytest.raises(Exception) as caught:
            oneshot.get_pods(False)
        with CRIRuntime(endpoint, timeout=2.0) as reference, pytest.raises(Exception) as expected:
            reference.get_pods(False)
        oneshot.close()
    assert type(caught.value) is type(expected.value)
    assert str(caught.value) == str(expected.value)
    assert oneshot.fallbacks == 1


def test_nothing_listening_is_the_reference_clients_error(tmp_path: object) -> None:
    endpoint = refused_socket(f"{tmp_path}/refused.sock")
    oneshot = OneShotRuntime(endpoint, timeout=2.0)
    with pytest.raises(RuntimeUnavailableError, match="refused") as caught:
        oneshot.get_pods(False)
    assert endpoint in str(caught.value)
    with pytest.raises(RuntimeUnavailableError):
        oneshot.version()
    oneshot.close()


def test_an_empty_version_field_is_a_protocol_error(tmp_path: object) -> None:
    path = f"{tmp_path}/cri.sock"
    canned = CannedRuntime(version=pb.VersionResponse(version="0.1.0", runtime_name=""))
    with grpc_runtime(canned, path) as endpoint:
        oneshot = OneShotRuntime(endpoint, timeout=2.0)
        with pytest.raises(RuntimeProtocolError, match="runtime_name"):
            oneshot.version()
        oneshot.close()


def test_the_cli_lists_without_grpc_protobuf_or_asyncio(sim: SimRuntime) -> None:
    """``podcache pods``, ``ps``, ``which IP``, ``inspect`` and ``version`` in a fresh
    interpreter: none of the heavy modules is imported (start-up time, without a clock)."""
    ip = next(ip for pod in sim_pods(sim) for ip in pod.ips)
    script = (
        "import contextlib, io, json, sys\n"
        "from podcache.cli import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    status = run(sys.argv[1:])\n"
        f"print(json.dumps([status, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    for args in (
        ["pods"],
        ["pods", "-o", "json"],
        ["ps", "-a"],
        ["which", ip],
        ["inspect", ip.replace(".", "-")],  # nothing matches: exit 3, still a listing
        ["version"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", script, *args, "-r", sim.endpoint],
            capture_output=True,
            text=True,
            check=True,
        )
        status, heavy = json.loads(done.stdout.splitlines()[-1])
        assert status in (0, 3), (args, done.stderr)
        assert heavy == [], (args, heavy)


def sim_pods(sim: SimRuntime) -> list[Pod]:
    with CRIRuntime(sim.endpoint) as runtime:
        return list(runtime.get_pods(False))


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 400 Bad Request\r\n\r\n",  # not HTTP/2
        b"\x00\x00\x04\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff",  # a HEADERS block hpack rejects
        b"\x00\x40\x00\x00\x00\x00\x00\x00\x01" + b"\x00" * 16_384,  # a frame over its bound
    ],
    ids=["http1", "bad-hpack", "big-frame"],
)
def test_an_answer_that_is_not_clean_is_read_again_by_the_reference(
    tmp_path: object, answer: bytes
) -> None:
    """A hostile or broken peer: whatever the one-shot client meets, its caller gets the
    reference client's error (a podcache error naming the endpoint), never a traceback of
    the one-shot reader."""
    path = f"{tmp_path}/hostile.sock"
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
            with conn, contextlib.suppress(OSError):
                conn.sendall(answer)
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        oneshot = OneShotRuntime(f"unix://{path}", timeout=1.0)
        with pytest.raises(CRIError) as caught:
            oneshot.get_pods(False)
        oneshot.close()
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert f"unix://{path}" in str(caught.value)
    assert oneshot.fallbacks == 1
