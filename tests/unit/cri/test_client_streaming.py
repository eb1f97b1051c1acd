"""The getters' list streaming (KEP-5825) against scripted runtimes: fallback, deadline, bounds.

Both getters (``CRIRuntime``, ``AsyncCRIRuntime``) list a node with ``StreamPodSandboxes`` and
``StreamContainers`` while the runtime may stream lists; the first UNIMPLEMENTED marks the
channel, and the unary call is made at once within the same deadline, as the kubelet's CRI
client does (one flag for both lists). The runtime here is a real gRPC server whose answers
are scripted (``FakeStreamingRuntime``): empty messages, malformed ones, slow refusals, a
runtime that streams one list only. The simulator's end-to-end cases are in
``tests/integration/test_list_streaming.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime, channels, liststream
from podcache.cri.convert import pods_from_responses
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import CRIError, RuntimeDeadlineError, RuntimeProtocolError
from podcache.model import PodList
from tests.unit.cri.servers import CONTAINERD_VERSION

KINDS = ["sync", "async"]
SERVICE = "runtime.v1.RuntimeService"


def sandbox(n: int) -> pb.PodSandbox:
    """A NOTREADY sandbox (no PodSandboxStatus call is made for it) of pod ``u<n>``."""
    return pb.PodSandbox(
        id=f"s{n:03d}",
        metadata=pb.PodSandboxMetadata(name=f"p{n}", uid=f"u{n}", namespace="ns"),
        state=pb.SANDBOX_NOTREADY,
        created_at=1_000 + n,
    )


def container(n: int) -> pb.Container:
    return pb.Container(
        id=f"c{n:03d}",
        pod_sandbox_id=f"s{n:03d}",
        metadata=pb.ContainerMetadata(name="app"),
        image=pb.ImageSpec(image="img"),
        state=pb.CONTAINER_EXITED,
        created_at=2_000 + n,
        labels={"io.kubernetes.pod.uid": f"u{n}"},
    )


SANDBOXES = [sandbox(n) for n in range(7)]
CONTAINERS = [container(n) for n in range(7)]
EXPECTED = pods_from_responses(
    "containerd",
    pb.ListPodSandboxResponse(items=SANDBOXES),
    pb.ListContainersResponse(containers=CONTAINERS),
)

Messages = Callable[[list[bytes]], list[bytes]]
"""How a scripted stream cuts the encoded items into messages (None: UNIMPLEMENTED)."""


def entries(items: list[Any]) -> list[bytes]:
    return [
        pb.ListPodSandboxResponse(items=[i]).SerializeToString()
        if isinstance(i, pb.PodSandbox)
        else pb.ListContainersResponse(containers=[i]).SerializeToString()
        for i in items
    ]


def in_pairs_with_empty_messages(encoded: list[bytes]) -> list[bytes]:
    out = [b""]
    for start in range(0, len(encoded), 2):
        out += [b"".join(encoded[start : start + 2]), b""]
    return out


@dataclass
class FakeStreamingRuntime:
    """A real gRPC server answering Version, the two list calls and (when scripted) their
    streaming twins; ``delay``: seconds every list call (or refusal) waits first."""

    sandbox_stream: Messages | None = None
    container_stream: Messages | None = None
    delay: float = 0.0
    calls: list[str] = field(default_factory=list)

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        def version(request: bytes, context: grpc.ServicerContext) -> bytes:
            return CONTAINERD_VERSION.SerializeToString()

        table: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Version": grpc.unary_unary_rpc_method_handler(version),
            "ListPodSandbox": grpc.unary_unary_rpc_method_handler(
                self._unary("ListPodSandbox", SANDBOXES)
            ),
            "ListContainers": grpc.unary_unary_rpc_method_handler(
                self._unary("ListContainers", CONTAINERS)
            ),
            "StreamPodSandboxes": grpc.unary_stream_rpc_method_handler(
                self._stream("StreamPodSandboxes", SANDBOXES, self.sandbox_stream)
            ),
            "StreamContainers": grpc.unary_stream_rpc_method_handler(
                self._stream("StreamContainers", CONTAINERS, self.container_stream)
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE, table)

    def _unary(self, method: str, items: list[Any]) -> Callable[[bytes, Any], bytes]:
        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            self.calls.append(method)
            time.sleep(self.delay)
            return b"".join(entries(items))

        return answer

    def _stream(
        self, method: str, items: list[Any], cut: Messages | None
    ) -> Callable[[bytes, Any], Iterator[bytes]]:
        def answer(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            self.calls.append(method)
            time.sleep(self.delay)
            if cut is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {method}")
            return iter(cut(entries(items)))

        return answer


@contextmanager
def serving(runtime: FakeStreamingRuntime, sock_dir: str) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[runtime.handler()])
    path = f"{sock_dir}/streaming.sock"
    server.add_insecure_port(f"unix:{path}")
    server.start()
    try:
        yield f"unix://{path}"
    finally:
        server.stop(grace=None).wait(5)


async def listings(
    kind: str, endpoint: str, times: int = 1, timeout: float = 10.0
) -> tuple[list[PodList], bool | None]:
    """``times`` listings (all) on one getter of this kind; the pods and its list_streaming."""
    if kind == "sync":
        with CRIRuntime(endpoint, timeout=timeout) as runtime:
            assert runtime.list_streaming is None  # nothing asked yet
            pods = [runtime.get_pods(all=True) for _ in range(times)]
            return pods, runtime.list_streaming
    async with AsyncCRIRuntime(endpoint, timeout=timeout) as aruntime:
        assert aruntime.list_streaming is None
        pods = [await aruntime.get_pods(all=True) for _ in range(times)]
        return pods, aruntime.list_streaming


@pytest.mark.parametrize("kind", KINDS)
async def test_a_streamed_listing_with_empty_messages_is_the_items_in_order(
    kind: str, sock_dir: str
) -> None:
    runtime = FakeStreamingRuntime(in_pairs_with_empty_messages, in_pairs_with_empty_messages)
    with serving(runtime, sock_dir) as endpoint:
        (pods,), streaming = await listings(kind, endpoint)
    assert pods == EXPECTED
    assert streaming is True
    assert runtime.calls == ["StreamPodSandboxes", "StreamContainers"]


@pytest.mark.parametrize("kind", KINDS)
async def test_streaming_is_asked_once_per_channel_and_unimplemented_means_unary_at_once(
    kind: str, sock_dir: str
) -> None:
    runtime = FakeStreamingRuntime()
    with serving(runtime, sock_dir) as endpoint:
        (first, second), streaming = await listings(kind, endpoint, times=2)
    assert first == second == EXPECTED
    assert streaming is False
    # One flag for both lists, as the kubelet's: StreamContainers is never asked.
    assert runtime.calls == [
        "StreamPodSandboxes",
        "ListPodSandbox",
        "ListContainers",
        "ListPodSandbox",
        "ListContainers",
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_runtime_streaming_sandboxes_only_is_listed_and_then_listed_unary(
    kind: str, sock_dir: str
) -> None:
    runtime = FakeStreamingRuntime(sandbox_stream=in_pairs_with_empty_messages)
    with serving(runtime, sock_dir) as endpoint:
        (first, second), streaming = await listings(kind, endpoint, times=2)
    assert first == second == EXPECTED
    assert streaming is False
    assert runtime.calls == [
        "StreamPodSandboxes",
        "StreamContainers",
        "ListContainers",
        "ListPodSandbox",
        "ListContainers",
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_the_unary_call_after_a_refusal_has_what_is_left_of_the_same_deadline(
    kind: str, sock_dir: str
) -> None:
    """Each call waits 0.6 s; the deadline is 1 s. A fresh deadline for the unary call would
    let the listing succeed; the kubelet's rule (one deadline for the listing) fails it."""
    runtime = FakeStreamingRuntime(delay=0.6)
    deadline = pytest.raises(RuntimeDeadlineError, match="ListPodSandbox got no answer within 1 s")
    with serving(runtime, sock_dir) as endpoint, deadline:
        await listings(kind, endpoint, timeout=1.0)
    assert runtime.calls[:2] == ["StreamPodSandboxes", "ListPodSandbox"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_message_that_is_not_a_list_answer_fails_naming_the_streaming_call(
    kind: str, sock_dir: str
) -> None:
    def truncated(encoded: list[bytes]) -> list[bytes]:
        return [encoded[0], encoded[1][:-2]]

    runtime = FakeStreamingRuntime(truncated, in_pairs_with_empty_messages)
    refused = pytest.raises(RuntimeProtocolError, match="its StreamPodSandboxes answer is not a")
    with serving(runtime, sock_dir) as endpoint, refused:
        await listings(kind, endpoint)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_streamed_answer_past_the_bound_fails_and_names_it(
    kind: str, sock_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def one_each(encoded: list[bytes]) -> list[bytes]:
        return encoded

    def size(items: list[Any]) -> int:
        return sum(len(e) + liststream.FRAME_BYTES for e in entries(items))

    at_most = max(size(SANDBOXES), size(CONTAINERS))
    monkeypatch.setattr(liststream, "MAX_STREAMED_LIST_BYTES", at_most)  # at the bound: taken
    runtime = FakeStreamingRuntime(one_each, one_each)
    with serving(runtime, sock_dir) as endpoint:
        (pods,), _ = await listings(kind, endpoint)
        assert pods == EXPECTED
        past = size(SANDBOXES) - 1  # the sandboxes' answer is one byte past it
        monkeypatch.setattr(liststream, "MAX_STREAMED_LIST_BYTES", past)
        with pytest.raises(CRIError, match="its StreamPodSandboxes answer passed") as raised:
            await listings(kind, endpoint)
    assert "MAX_STREAMED_LIST_BYTES" in str(raised.value)
    assert endpoint in str(raised.value)


@pytest.mark.parametrize("kind", KINDS)
async def test_one_streamed_message_past_16_mib_is_read_and_past_its_bound_refused(
    kind: str, sock_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime that chunks by item count (CRI-O: 3,000) may send one message far past gRPC's
    16 MiB: read; one past ``MAX_STREAMED_MESSAGE_BYTES`` is refused."""

    def one_huge(encoded: list[bytes]) -> list[bytes]:
        heavy = sandbox(99)
        heavy.annotations["big"] = "x" * (17 * 1024 * 1024)
        return [pb.ListPodSandboxResponse(items=[heavy]).SerializeToString()]

    runtime = FakeStreamingRuntime(one_huge, in_pairs_with_empty_messages)
    with serving(runtime, sock_dir) as endpoint:
        (pods,), _ = await listings(kind, endpoint)
        assert "u99" in {p.id for p in pods}
        monkeypatch.setattr(channels, "MAX_STREAMED_MESSAGE_BYTES", 16 * 1024 * 1024)
        with pytest.raises(CRIError, match="a message of its StreamPodSandboxes answer is over"):
            await listings(kind, endpoint)
