"""What the CRI getters raise when the endpoint is wrong, over real sockets, both twins alike.

Each case checks the exception class, that the message names the endpoint and says what
happened, and when it came: errors a plain connect shows (no socket, not a socket, denied,
refused) and answers that are not CRI come without waiting for the deadline, as crictl's do
(long before a long one, ``FAIL_FAST``); the others come by the deadline (never before it),
then a short probe tells them apart.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.cri.caller import SyncCaller
from podcache.cri.channels import _CORE_READY
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import (
    CRIError,
    PodcacheError,
    RuntimeDeadlineError,
    RuntimeProtocolError,
    RuntimeUnavailableError,
)
from tests.unit.cri.servers import (
    CONTAINERD_VERSION,
    CannedRuntime,
    SandboxesOnly,
    grpc_runtime,
    http1_server,
    raw_listener,
    refused_socket,
)

TIMEOUT = 0.6  # the deadline of the cases that end by it (then a probe says what is wrong)
FAIL_FAST = 60.0
"""The deadline of the cases that must not wait for one: each ends long before it
(``elapsed < FAIL_FAST / 2``), which no load makes a refused connect miss, and a client that
waited for the deadline would raise a deadline error instead. No bound here is a number of
milliseconds a busy machine could exceed; the cases that end by the deadline are bounded
below by it (they cannot end sooner) and above by the test timeout."""
LONG_BEFORE = FAIL_FAST / 2

KINDS = ["sync", "async"]


async def failure(kind: str, endpoint: str, timeout: float = TIMEOUT) -> tuple[Exception, float]:
    """Build the getter of this kind, call get_pods(False); the exception and seconds taken."""
    start = time.monotonic()
    try:
        if kind == "sync":
            with CRIRuntime(endpoint, timeout=timeout) as runtime:
                runtime.get_pods(False)
        else:
            async with AsyncCRIRuntime(endpoint, timeout=timeout) as aruntime:
                await aruntime.get_pods(False)
    except Exception as e:
        return e, time.monotonic() - start
    raise AssertionError(f"get_pods on {endpoint} did not fail")


def check(error: Exception, expected: type[CRIError], endpoint: str, *phrases: str) -> CRIError:
    assert type(error) is expected, repr(error)
    assert isinstance(error, CRIError) and isinstance(error, PodcacheError)
    assert error.endpoint == endpoint
    message = str(error)
    assert endpoint in message
    for phrase in phrases:
        assert phrase in message, message
    return error


# -- the socket shows the problem: fail at once -----------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_missing_socket_is_not_reachable_at_once(kind: str, sock_dir: str) -> None:
    endpoint = f"unix://{sock_dir}/absent.sock"
    error, elapsed = await failure(kind, endpoint, timeout=FAIL_FAST)
    check(error, RuntimeUnavailableError, endpoint, "is not reachable", "socket does not exist")
    assert elapsed < LONG_BEFORE


@pytest.mark.parametrize("kind", KINDS)
async def test_path_that_is_not_a_socket_fails_at_once(kind: str, sock_dir: str) -> None:
    Path(sock_dir, "file.sock").write_text("")
    endpoint = f"unix://{sock_dir}/file.sock"
    error, elapsed = await failure(kind, endpoint, timeout=FAIL_FAST)
    check(error, RuntimeUnavailableError, endpoint, "not a socket")
    assert elapsed < LONG_BEFORE


@pytest.mark.parametrize("kind", KINDS)
async def test_socket_we_may_not_write_is_permission_denied_at_once(
    kind: str, sock_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = refused_socket(f"{sock_dir}/root-only.sock")
    # Tests may run as root, whom no file mode stops: deny through the access check itself.
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode: False if str(p).endswith("root-only.sock") else real_access(p, mode),
    )
    error, elapsed = await failure(kind, endpoint, timeout=FAIL_FAST)
    check(error, RuntimeUnavailableError, endpoint, "permission denied")
    assert elapsed < LONG_BEFORE


@pytest.mark.parametrize("kind", KINDS)
async def test_socket_nobody_listens_on_is_not_reachable_at_once(kind: str, sock_dir: str) -> None:
    endpoint = refused_socket(f"{sock_dir}/stale.sock")
    # A long deadline: only failing at once keeps this fast.
    error, elapsed = await failure(kind, endpoint, timeout=FAIL_FAST)
    check(error, RuntimeUnavailableError, endpoint, "is not reachable", "connection refused")
    assert not isinstance(error, TimeoutError)
    assert elapsed < LONG_BEFORE


@pytest.mark.parametrize("kind", KINDS)
async def test_loopback_port_nobody_listens_on_is_not_reachable_at_once(kind: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    error, elapsed = await failure(kind, endpoint, timeout=FAIL_FAST)
    check(error, RuntimeUnavailableError, endpoint, "connection refused")
    assert elapsed < LONG_BEFORE


# -- the socket takes connections: the deadline, then a probe says what is wrong ------------


@pytest.mark.parametrize("kind", KINDS)
async def test_listener_that_never_answers_is_a_deadline(kind: str, sock_dir: str) -> None:
    with raw_listener(f"{sock_dir}/hang.sock", close_at_once=False) as endpoint:
        error, elapsed = await failure(kind, endpoint)
    check(error, RuntimeDeadlineError, endpoint, "did not answer in time", f"{TIMEOUT:g} s")
    assert isinstance(error, TimeoutError)
    assert elapsed >= TIMEOUT  # by the deadline, never before it


@pytest.mark.parametrize("kind", KINDS)
async def test_listener_that_hangs_up_is_not_reachable(kind: str, sock_dir: str) -> None:
    with raw_listener(f"{sock_dir}/closer.sock", close_at_once=True) as endpoint:
        error, elapsed = await failure(kind, endpoint)
    check(error, RuntimeUnavailableError, endpoint, "closes them without answering")
    assert elapsed >= TIMEOUT  # by the deadline, then the probe


@pytest.mark.parametrize("kind", KINDS)
async def test_http1_server_is_a_protocol_error(kind: str, sock_dir: str) -> None:
    with http1_server(f"{sock_dir}/http.sock") as endpoint:
        error, elapsed = await failure(kind, endpoint)
    check(
        error, RuntimeProtocolError, endpoint, "does not speak CRI", "HTTP/1 server", "not a gRPC"
    )
    assert elapsed >= TIMEOUT  # by the deadline, then the probe


@pytest.mark.parametrize("kind", KINDS)
async def test_runtime_that_accepts_but_does_not_answer_is_a_deadline(
    kind: str, sock_dir: str
) -> None:
    with grpc_runtime(CannedRuntime(stall=True), f"{sock_dir}/slow.sock") as endpoint:
        error, elapsed = await failure(kind, endpoint)
    check(error, RuntimeDeadlineError, endpoint, "Version got no answer", "the runtime is up")
    assert elapsed >= TIMEOUT  # by the deadline, never before it


# -- gRPC answers, but not as a CRI runtime ---------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_grpc_server_without_version_is_not_a_cri_runtime(kind: str, sock_dir: str) -> None:
    with grpc_runtime(SandboxesOnly(), f"{sock_dir}/other.sock") as endpoint:
        error, elapsed = await failure(kind, endpoint, timeout=FAIL_FAST)
    check(
        error,
        RuntimeProtocolError,
        endpoint,
        "Version is UNIMPLEMENTED",
        "does not speak CRI runtime.v1",
        "not a CRI runtime",
    )
    assert isinstance(error.__cause__, grpc.RpcError)
    assert elapsed < LONG_BEFORE  # no deadline involved


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "empty", ["version", "runtime_name", "runtime_version", "runtime_api_version"]
)
async def test_version_with_an_empty_field_is_a_protocol_error(
    kind: str, empty: str, sock_dir: str
) -> None:
    version = pb.VersionResponse()
    version.CopyFrom(CONTAINERD_VERSION)
    setattr(version, empty, "")
    runtime = CannedRuntime(version=version)
    with grpc_runtime(runtime, f"{sock_dir}/odd.sock") as endpoint:
        error, _ = await failure(kind, endpoint, timeout=FAIL_FAST)
    check(error, RuntimeProtocolError, endpoint, f"empty {empty}")
    assert "ListPodSandbox" not in runtime.methods()


@pytest.mark.parametrize("kind", KINDS)
async def test_runtime_gone_after_a_success_is_not_reachable(kind: str, sock_dir: str) -> None:
    path = f"{sock_dir}/gone.sock"
    with grpc_runtime(CannedRuntime(), path) as endpoint:
        sync_runtime = CRIRuntime(endpoint, timeout=FAIL_FAST)
        async_runtime = AsyncCRIRuntime(endpoint, timeout=FAIL_FAST)
        if kind == "sync":
            sync_runtime.get_pods(False)
        else:
            await async_runtime.get_pods(False)
    if os.path.exists(path):
        os.unlink(path)
    # The channel has seen its connection end (on a loaded machine, later).
    _until_not_ready(sync_runtime._caller if kind == "sync" else async_runtime._lister()._caller)
    start = time.monotonic()
    with pytest.raises(RuntimeUnavailableError) as info:
        if kind == "sync":
            sync_runtime.get_pods(False)
        else:
            await async_runtime.get_pods(False)
    elapsed = time.monotonic() - start
    sync_runtime.close()
    await async_runtime.close()
    check(info.value, RuntimeUnavailableError, endpoint, "socket does not exist")
    assert elapsed < LONG_BEFORE


def _until_not_ready(caller: SyncCaller) -> None:
    """Wait until a getter's list channel has left READY: until then gRPC holds a call on the
    connection it believes live (waiting for it, up to the deadline), which is another case
    than the one tested. The bound is a safety net, not a measure."""
    line = caller.line
    deadline = time.monotonic() + 30
    while line.state(False) == _CORE_READY and time.monotonic() < deadline:
        time.sleep(0.01)


# -- the getter itself ------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf")])
def test_timeout_must_be_positive_and_finite(timeout: float, sock_dir: str) -> None:
    with pytest.raises(ValueError, match="timeout"):
        CRIRuntime(f"{sock_dir}/x.sock", timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        AsyncCRIRuntime(f"{sock_dir}/x.sock", timeout=timeout)


def test_malformed_endpoint_is_a_value_error_at_construction() -> None:
    with pytest.raises(ValueError, match=r"'relative\.sock'"):
        CRIRuntime("relative.sock")


async def test_closed_getter_refuses_calls(sock_dir: str) -> None:
    runtime = CRIRuntime(f"{sock_dir}/x.sock")
    runtime.close()
    runtime.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        runtime.get_pods(False)
    aruntime = AsyncCRIRuntime(f"{sock_dir}/x.sock")
    await aruntime.close()
    with pytest.raises(RuntimeError, match="closed"):
        await aruntime.get_pods(False)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RuntimeUnavailableError("unix:///x.sock", "socket does not exist"),
        lambda: RuntimeDeadlineError("unix:///x.sock", "Version got no answer within 2 s"),
        lambda: RuntimeProtocolError("unix:///x.sock", "Version is UNIMPLEMENTED"),
    ],
)
def test_errors_survive_pickling(make: Callable[[], CRIError]) -> None:
    error = make()
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.endpoint, copy.reason, str(copy)) == (
        type(error),
        error.endpoint,
        error.reason,
        str(error),
    )


def test_messages_read_as_plain_words() -> None:
    assert (
        str(RuntimeUnavailableError("unix:///x.sock", "socket does not exist"))
        == "runtime at unix:///x.sock is not reachable: socket does not exist"
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_answer_that_is_not_a_cri_message_is_a_protocol_error(
    kind: str, sock_dir: str
) -> None:
    def version(request: bytes, context: grpc.ServicerContext) -> bytes:
        return CONTAINERD_VERSION.SerializeToString()

    def garbage(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"\xff\xff\xff\xff"  # a truncated varint: no protobuf message parses from it

    handler = grpc.method_handlers_generic_handler(
        "runtime.v1.RuntimeService",
        {
            "Version": grpc.unary_unary_rpc_method_handler(version),
            "ListPodSandbox": grpc.unary_unary_rpc_method_handler(garbage),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    path = f"{sock_dir}/garbage.sock"
    server.add_insecure_port(f"unix:{path}")
    server.start()
    try:
        error, elapsed = await failure(kind, f"unix://{path}", timeout=FAIL_FAST)
    finally:
        server.stop(grace=None).wait(5)
    check(error, RuntimeProtocolError, f"unix://{path}", "ListPodSandbox answer is not a valid")
    assert elapsed < LONG_BEFORE
