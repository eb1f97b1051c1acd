"""CRI list streaming, shown through the socket: a 1,000-pod node with 16 KiB of annotations per
pod (both list answers past gRPC's 16 MiB message limit) is listed by the library's
``CRIRuntime`` pointed at ``podcache serve --cri-listen`` (docs/architecture.md §10 rule 3).

The library asks the socket for ``StreamPodSandboxes``/``StreamContainers`` (the socket offers
them), and the pods equal the node read from the runtime's own unary answers (received here
with a larger limit than a client has). ``podcache serve`` itself lists the node through the
runtime's streaming calls. The unary calls through the socket fail past the limit, as the
runtime's own would for a client with gRPC's default limit.

Real parts: the sim's gRPC server on a unix socket, ``podcache serve`` in its own process,
the library's grpcio client on the socket.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from podcache.cri import CRIRuntime
from podcache.sim import SimRuntime
from tests.integration.test_list_streaming import (
    ANNOTATION_BYTES,
    LIMIT,
    PODS,
    TIMEOUT,
    unary_pods,
    without_ips,
)
from tests.serve.conftest import ServeProcess, free_port
from tests.serve.test_crisock import Socket

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def big_node() -> Iterator[SimRuntime]:
    """1,000 pods, 16 KiB of annotations on each sandbox and container."""
    with SimRuntime(PODS, seed=31, annotation_bytes=ANNOTATION_BYTES) as sim:
        yield sim


@pytest.fixture(scope="module")
def socket_path(big_node: SimRuntime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``podcache serve --cri-listen`` over the big node (events on: a long period)."""
    path = str(tmp_path_factory.mktemp("cri") / "cri.sock")
    server = ServeProcess(
        [
            *("-r", big_node.endpoint, "--listen", f"127.0.0.1:{free_port()}"),
            *("--cache-period", "600s", "--cri-listen", path),
        ]
    )
    with server:
        yield path
    # Not its exit code: with a 600 s period this serve takes ~18 s to stop on SIGTERM, past
    # ServeProcess's 10 s (2 s periods stop in under 1 s).
    assert "Traceback" not in server.stderr, server.stderr


def test_the_library_lists_the_big_node_through_the_socket_by_streaming(
    big_node: SimRuntime, socket_path: str
) -> None:
    with CRIRuntime(f"unix://{socket_path}", timeout=TIMEOUT) as runtime:
        pods = runtime.get_pods(all=True)
        assert runtime.list_streaming is True
    # serve read the node by the runtime's streaming calls, never by a unary list past 16 MiB
    counts = big_node.call_counts()
    for method in ("StreamPodSandboxes", "StreamContainers"):
        assert counts[method]["unfiltered"]["calls"] >= 1, counts
    for method in ("ListPodSandbox", "ListContainers"):
        assert counts[method]["unfiltered"]["calls"] == 0, counts
    # a second listing is the cache's: the runtime is not listed again
    big_node.reset_call_counts()
    with CRIRuntime(f"unix://{socket_path}", timeout=TIMEOUT) as runtime:
        assert without_ips(runtime.get_pods(all=True)) == without_ips(pods)
    calls = big_node.calls()
    assert calls["StreamPodSandboxes"] == calls["StreamContainers"] == 0, calls
    assert len(pods) == PODS
    assert without_ips(pods) == without_ips(unary_pods(big_node))


@pytest.mark.parametrize("method", ["ListPodSandbox", "ListContainers"])
def test_a_unary_list_of_the_big_node_through_the_socket_is_refused_past_the_limit(
    socket_path: str, method: str
) -> None:
    socket = Socket(socket_path, options=[("grpc.max_receive_message_length", 4 * LIMIT)])
    try:
        with pytest.raises(grpc.RpcError) as raised:
            socket.call(f"/runtime.v1.RuntimeService/{method}", b"", timeout=TIMEOUT)
    finally:
        socket.close()
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
