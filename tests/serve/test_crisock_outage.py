"""The CRI socket through a runtime outage and under hostile names (docs/architecture.md §10
rules 4 and 7): crictl's first calls (Version, then the lists) keep working while the cache
serves; every other failure is podcache's, naming the runtime; a client's method name never
becomes a metric label, and its denial stays small.

Real parts: the simulator's gRPC server on a unix socket (stopped mid-test: the outage),
``podcache serve`` in its own process, grpcio clients, HTTP for /metrics.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.sim import SimRuntime
from tests.crisocket import Subscriptions, subscriptions
from tests.serve.conftest import Client, ServeProcess, free_port

pytestmark = pytest.mark.timeout(300)

RUNTIME = "/runtime.v1.RuntimeService/"


class Node(NamedTuple):
    sim: SimRuntime
    socket: str
    http: Client


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """serve over a simulator it may outlive: stale answers allowed for 10 minutes."""
    sim = SimRuntime(8, seed=5, socket=tmp_path / "runtime.sock").start()
    path = str(tmp_path / "cri.sock")
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cri-listen", path]
    try:
        with ServeProcess([*args, "--max-stale", "600s", "--events", "off"]) as served:
            yield Node(sim, path, Client(port=port))
        assert "Traceback" not in served.stderr, served.stderr
    finally:
        sim.stop()


def call(path: str, method: str, request: bytes = b"") -> bytes:
    with grpc.insecure_channel(f"unix://{path}") as channel:
        unary = channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
        answer: bytes = unary(request, timeout=30)
        return answer


def crictl_pods(path: str) -> list[str]:
    """What ``crictl pods`` asks, in its order: Version, then ListPodSandbox."""
    version = pb.VersionResponse.FromString(call(path, RUNTIME + "Version"))
    assert version.runtime_name
    listed = pb.ListPodSandboxResponse.FromString(call(path, RUNTIME + "ListPodSandbox"))
    return sorted(item.id for item in listed.items)


def test_crictl_pods_works_through_an_outage_while_the_cache_serves(node: Node) -> None:
    before = crictl_pods(node.socket)
    version = call(node.socket, RUNTIME + "Version")
    node.sim.stop()
    assert call(node.socket, RUNTIME + "Version") == version  # what the runtime last said
    assert crictl_pods(node.socket) == before
    with pytest.raises(grpc.RpcError) as caught:
        call(node.socket, RUNTIME + "Status")
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    details = str(caught.value.details())
    assert details.startswith(f"podcache: the runtime at {node.sim.endpoint} cannot be reached")
    assert "failed to connect to all addresses" not in details


def _samples(text: str, name: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        if line.startswith(name):
            labels, _, value = line.rpartition(" ")
            found[labels] = float(value)
    return found


def test_a_long_method_name_is_denied_in_a_bounded_message_and_labelled_other(
    node: Node,
) -> None:
    name = RUNTIME + "x" * 60_000
    for index in range(20):
        with pytest.raises(grpc.RpcError) as caught:
            call(node.socket, f"{name}{index}")
        assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert len(str(caught.value.details())) < 400
    text = node.http.get("/metrics").body.decode()
    requests = _samples(text, "podcache_cri_requests_total")
    assert requests['podcache_cri_requests_total{code="PERMISSION_DENIED",method="other"}'] == 20
    assert all(len(labels) < 200 for labels in requests)


def test_metrics_count_cache_answers_as_saved_time_each_call_and_count_connections(
    node: Node,
) -> None:
    for _ in range(3):
        crictl_pods(node.socket)
    with grpc.insecure_channel(f"unix://{node.socket}") as held:
        grpc.channel_ready_future(held).result(timeout=30)
        text = node.http.get("/metrics").body.decode()
    saved = _samples(text, "podcache_cri_upstream_calls_saved_total")
    assert saved['podcache_cri_upstream_calls_saved_total{method="ListPodSandbox"}'] == 3
    assert saved['podcache_cri_upstream_calls_saved_total{method="Version"}'] == 2
    durations = _samples(text, "podcache_cri_request_duration_seconds_count")
    assert durations['podcache_cri_request_duration_seconds_count{method="ListPodSandbox"}'] == 3
    assert durations['podcache_cri_request_duration_seconds_count{method="Version"}'] == 3
    (connections,) = _samples(text, "podcache_cri_connections ").values()
    assert connections >= 1
    assert re.search(r"^# HELP podcache_cri_connections ", text, re.MULTILINE)


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for ``check`` (the timeout is a safety net, never the property tested)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _said(served: ServeProcess, view: str, words: str = "") -> list[str]:
    """serve's lines about ``view``'s subscription (its endpoint) that say ``words``."""
    return [
        line
        for line in served.stderr_lines
        if f"GetContainerEvents at {view}" in line and words in line
    ]


def test_a_runtime_down_at_start_ends_with_the_first_subscription_and_a_restart_is_one_more(
    tmp_socket_dir: Path,
) -> None:
    """The runtime comes only after serve --cri-listen started (as when it restarts while
    serve's first stream is still being confirmed): its first subscription ends that outage,
    said without "again" and counted as no resubscription, the hub's first stream; a restart
    after it is one resubscription, the hub's second stream (docs/architecture.md §7)."""
    runtime = str(tmp_socket_dir / "runtime.sock")
    port = free_port()
    args = ["-r", f"unix://{runtime}", "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
    args += ["--cri-listen", str(tmp_socket_dir / "cri.sock"), "--max-stale", "600s"]
    view = f"unix://{runtime}: "  # the default view's lines (the all view's say "?all=1 view")
    sim: SimRuntime | None = None
    try:
        with ServeProcess(args) as served:
            client = Client(port=port)
            _until(lambda: subscriptions(client).state == "reconnecting", "never tried")
            sim = SimRuntime(5, seed=5, socket=runtime).start()
            _until(lambda: subscriptions(client).state == "subscribed", "never subscribed")
            first = subscriptions(client)
            _until(lambda: bool(_said(served, view, ": subscribed")), "the subscription unsaid")
            said_first = _said(served, view)
            sim.stop()
            _until(lambda: subscriptions(client).state == "reconnecting", "the loss unseen")
            sim = SimRuntime(5, seed=5, socket=runtime).start()
            _until(lambda: subscriptions(client).resubscriptions >= 1, "never resubscribed")
            again = subscriptions(client)
            _until(
                lambda: bool(_said(served, view, "subscribed again")), "the resubscription unsaid"
            )
    finally:
        if sim is not None:
            sim.stop()
    assert first == Subscriptions("subscribed", 0, 1)
    assert again == Subscriptions("subscribed", 1, 2)
    assert [("cannot subscribe" in line, "subscribed after" in line) for line in said_first] == [
        (True, False),
        (False, True),
    ], said_first
    assert "Traceback" not in served.stderr, served.stderr
