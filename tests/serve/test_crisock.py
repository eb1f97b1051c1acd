"""``podcache serve --cri-listen``: the read-only CRI socket over the simulator, against the
simulator's own answers (docs/architecture.md §10).

Real parts: the sim's gRPC server on a unix socket, ``podcache serve`` in its own process,
grpcio clients on both sockets.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.sim import SimRuntime
from tests.serve.conftest import Client, ServeProcess, free_port
from tests.unit.crisock.test_routes import WRITES, _all_methods

pytestmark = pytest.mark.timeout(900)

LIST_TYPES: dict[str, tuple[Any, Any, str]] = {
    "ListPodSandbox": (pb.ListPodSandboxRequest, pb.ListPodSandboxResponse, "items"),
    "ListContainers": (pb.ListContainersRequest, pb.ListContainersResponse, "containers"),
}


class Socket:
    """A grpcio client of one CRI socket, raw bytes in and out."""

    def __init__(self, path: str, options: list[tuple[str, Any]] | None = None) -> None:
        self.channel = grpc.insecure_channel(f"unix://{path}", options=options)

    def call(self, path: str, request: bytes, timeout: float = 10.0) -> bytes:
        method = self.channel.unary_unary(
            path, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        answer: bytes = method(request, timeout=timeout)
        return answer

    def listed(self, method: str, request: Any) -> list[bytes]:
        """The items of a list answer, each re-encoded deterministically (order free)."""
        _, response_type, field = LIST_TYPES[method]
        answer = response_type.FromString(
            self.call(f"/runtime.v1.RuntimeService/{method}", request.SerializeToString())
        )
        return sorted(item.SerializeToString(deterministic=True) for item in getattr(answer, field))

    def events(self) -> Any:
        method = self.channel.unary_stream(
            "/runtime.v1.RuntimeService/GetContainerEvents",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        return method(b"")

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(40, seed=11) as runtime:
        yield runtime


class Served(NamedTuple):
    path: str
    client: Client


@pytest.fixture(scope="module")
def crisock(sim: SimRuntime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``podcache serve`` over ``sim`` with a CRI socket (a 60 s period: events keep it)."""
    path = str(tmp_path_factory.mktemp("cri") / "cri.sock")
    port = free_port()
    server = ServeProcess(
        [
            "-r",
            sim.endpoint,
            "--listen",
            f"127.0.0.1:{port}",
            "--cache-period",
            "60s",
            "--cri-listen",
            path,
            "--cri-event-buffer",
            "50,16MiB",
        ]
    )
    with server:
        sim.wait_for_event_subscribers(1, timeout=30)
        yield Served(path, Client(port=port))
    assert server.returncode == 0, server.stderr
    assert "Traceback" not in server.stderr, server.stderr


@pytest.fixture
def proxy(crisock: Served) -> Iterator[Socket]:
    socket = Socket(crisock.path)
    yield socket
    socket.close()


@pytest.fixture
def direct(sim: SimRuntime) -> Iterator[Socket]:
    socket = Socket(sim.endpoint.removeprefix("unix://"))
    yield socket
    socket.close()


def until(condition: Callable[[], bool], timeout: float = 240.0) -> None:
    """Wait until ``condition()`` holds (the timeout is a safety net, not a bound: on a loaded
    machine the relist budget alone spaces one pod's relists by ten times their duration)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within the safety timeout")
        time.sleep(0.01)


def test_the_socket_is_born_0600(crisock: Served) -> None:
    mode = os.stat(crisock.path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


# -- docs/architecture.md §10 rule 2: denial --------------------------------------------------
def test_every_write_is_denied_and_never_reaches_the_runtime(
    proxy: Socket, sim: SimRuntime
) -> None:
    denied = [p for p in _all_methods() if p.rsplit("/", 1)[-1] in WRITES]
    for path in [*denied, "/runtime.v1.RuntimeService/SomeFutureCall"]:
        with pytest.raises(grpc.RpcError) as caught:
            proxy.call(path, b"")
        assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED, path
        assert path.lstrip("/") in str(caught.value.details())
        assert "read-only" in str(caught.value.details())
    assert not any(p.rsplit("/", 1)[-1] in WRITES for p in sim.unimplemented_calls())


def test_a_method_of_another_service_is_unimplemented(proxy: Socket) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        proxy.call("/grpc.health.v1.Health/Check", b"")
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_a_forwarded_method_the_runtime_lacks_is_its_unimplemented(
    proxy: Socket, sim: SimRuntime
) -> None:
    path = "/runtime.v1.RuntimeService/ListPodSandboxStats"
    before = sim.unimplemented_calls().get(path, 0)
    with pytest.raises(grpc.RpcError) as caught:
        proxy.call(path, b"")
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert sim.unimplemented_calls()[path] == before + 1


# -- docs/architecture.md §10 rule 3: lists from the cache, equal to the runtime's ------------
def _filters(sim: SimRuntime) -> st.SearchStrategy[tuple[str, Any]]:
    snapshot = sim.population.snapshot()
    sandbox_ids = [s.id for s in snapshot.sandboxes]
    container_ids = [c.id for c in snapshot.containers]
    labels = sorted({pair for item in snapshot.sandboxes for pair in item.labels.items()})
    labels += sorted({pair for item in snapshot.containers for pair in item.labels.items()})
    ids = st.one_of(
        st.just(""),
        st.sampled_from(sandbox_ids + container_ids),
        st.sampled_from(sandbox_ids + container_ids).map(lambda i: i[: len(i) // 3]),
        # Any prefix: the short ones name several items (of one kind or both), or one.
        st.sampled_from(sandbox_ids + container_ids).flatmap(
            lambda i: st.integers(1, len(i)).map(lambda n: i[:n])
        ),
        st.just("no-such-id"),
    )
    selector = st.lists(st.sampled_from(labels), max_size=2).map(dict)
    sandbox_filter = st.builds(
        pb.PodSandboxFilter,
        id=ids,
        state=st.none() | st.builds(pb.PodSandboxStateValue, state=st.sampled_from([0, 1])),
        label_selector=selector,
    )
    container_filter = st.builds(
        pb.ContainerFilter,
        id=ids,
        state=st.none() | st.builds(pb.ContainerStateValue, state=st.sampled_from([0, 1, 2, 3])),
        pod_sandbox_id=ids,
        label_selector=selector,
    )
    return st.one_of(
        st.tuples(
            st.just("ListPodSandbox"), st.builds(pb.ListPodSandboxRequest, filter=sandbox_filter)
        ),
        st.tuples(
            st.just("ListContainers"), st.builds(pb.ListContainersRequest, filter=container_filter)
        ),
    )


def test_unfiltered_lists_equal_the_runtimes_with_notready_and_exited_items(
    proxy: Socket, direct: Socket
) -> None:
    for method, (request_type, _, _) in LIST_TYPES.items():
        mine, theirs = proxy.listed(method, request_type()), direct.listed(method, request_type())
        assert mine == theirs
    sandboxes = [
        pb.PodSandbox.FromString(b)
        for b in proxy.listed("ListPodSandbox", pb.ListPodSandboxRequest())
    ]
    assert {s.state for s in sandboxes} == {pb.SANDBOX_READY, pb.SANDBOX_NOTREADY}


def test_filtered_lists_equal_the_runtimes(proxy: Socket, direct: Socket, sim: SimRuntime) -> None:
    @settings(max_examples=300, suppress_health_check=list(HealthCheck))
    @given(case=_filters(sim))
    def check(case: tuple[str, Any]) -> None:
        method, request = case
        assert proxy.listed(method, request) == direct.listed(method, request), request

    check()


def test_a_change_on_the_runtime_shows_through_the_socket_after_its_event(
    proxy: Socket, direct: Socket, sim: SimRuntime
) -> None:
    sim.churn_step(3)
    request = pb.ListPodSandboxRequest()

    def same() -> bool:
        return proxy.listed("ListPodSandbox", request) == direct.listed("ListPodSandbox", request)

    until(same)  # the cache period is 60 s: only the events make it
    for method, (request_type, _, _) in LIST_TYPES.items():
        assert proxy.listed(method, request_type()) == direct.listed(method, request_type())


# -- docs/architecture.md §10 rule 4: forwarded --------------------------------------------------
def test_status_calls_are_the_runtimes_own_answers(
    proxy: Socket, direct: Socket, sim: SimRuntime
) -> None:
    snapshot = sim.population.snapshot()
    sandbox = snapshot.sandboxes[0].id
    container = snapshot.containers[0].id
    for path, request in [
        ("/runtime.v1.RuntimeService/Version", pb.VersionRequest(version="0.1.0")),
        ("/runtime.v1.RuntimeService/Status", pb.StatusRequest(verbose=True)),
        (
            "/runtime.v1.RuntimeService/ContainerStatus",
            pb.ContainerStatusRequest(container_id=container, verbose=True),
        ),
    ]:
        data = request.SerializeToString()
        assert proxy.call(path, data) == direct.call(path, data), path
    path = "/runtime.v1.RuntimeService/PodSandboxStatus"
    data = pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox).SerializeToString()
    mine = pb.PodSandboxStatusResponse.FromString(proxy.call(path, data))
    theirs = pb.PodSandboxStatusResponse.FromString(direct.call(path, data))
    mine.timestamp = theirs.timestamp = 0
    assert mine == theirs


def test_a_runtime_error_is_passed_on(proxy: Socket) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        proxy.call(
            "/runtime.v1.RuntimeService/ContainerStatus",
            pb.ContainerStatusRequest(container_id="no-such-container").SerializeToString(),
        )
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert "no-such-container" in str(caught.value.details())


def test_identical_calls_in_flight_share_one_runtime_call(proxy: Socket, sim: SimRuntime) -> None:
    container = sim.population.snapshot().containers[0].id
    data = pb.ContainerStatusRequest(container_id=container).SerializeToString()
    path = "/runtime.v1.RuntimeService/ContainerStatus"
    sim.reset_call_counts()
    sim.faults.latency = 0.5  # the calls overlap: each waits this long at the runtime
    try:
        answers: list[bytes] = []
        threads = [
            threading.Thread(target=lambda: answers.append(proxy.call(path, data)))
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sim.faults.latency = 0.0
    assert len(answers) == 8 and len(set(answers)) == 1
    assert sim.calls()["ContainerStatus"] < 8


# -- docs/architecture.md §10 rule 5: one subscription, fanned out --------------------------------
def test_every_subscriber_gets_every_event_in_order_while_one_never_reads(
    proxy: Socket, crisock: Served, sim: SimRuntime
) -> None:
    readers = [Socket(crisock.path) for _ in range(3)]
    # Its HTTP/2 window stays 64 KiB (no BDP probing): once that is full, the socket can send
    # it nothing more, and its queue grows until the bound.
    stalled = Socket(crisock.path, options=[("grpc.http2.bdp_probe", 0)])
    streams = [r.events() for r in readers]
    stalled_stream = stalled.events()
    try:
        until(lambda: _subscribers(crisock) == 4)
        assert sim.event_subscribers == 1
        count = 200  # events: far more than the stalled client's buffer (50)
        got, threads = _readers(streams, count)
        sent = _churn_in_steps(sim, got, count)
        for thread in threads:
            thread.join(60)
        for into in got:
            assert into == sent[:count]
        stalled_got: list[str] = []
        with pytest.raises(grpc.RpcError) as caught:
            for data in stalled_stream:  # what it was sent before the cut, then the cut
                stalled_got.append(pb.ContainerEventResponse.FromString(data).container_id)
        assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert stalled_got == sent[: len(stalled_got)]
        assert sim.event_subscribers == 1
        assert (
            _metric(crisock, "podcache_cri_event_subscribers_cut_off_total", '{reason="slow"}') >= 1
        )
    finally:
        for stream in [*streams, stalled_stream]:
            stream.cancel()
        for socket in [*readers, stalled]:
            socket.close()


def _readers(streams: list[Any], count: int) -> tuple[list[list[str]], list[threading.Thread]]:
    """A thread per stream reading ``count`` events' container IDs into its list."""
    got: list[list[str]] = [[] for _ in streams]

    def read(stream: Any, into: list[str]) -> None:
        for data in stream:
            into.append(pb.ContainerEventResponse.FromString(data).container_id)
            if len(into) == count:
                return

    threads = [
        threading.Thread(target=read, args=(stream, into))
        for stream, into in zip(streams, got, strict=True)
    ]
    for thread in threads:
        thread.start()
    return got, threads


def _churn_in_steps(sim: SimRuntime, got: list[list[str]], count: int) -> list[str]:
    """At least ``count`` events, a pod at a time, each step once every reader has read the
    last (so only a client that does not read falls behind); their container IDs."""
    sent: list[str] = []
    while len(sent) < count:
        sent += [event.container_id for event in sim.churn_step(1)]
        done = min(len(sent), count)
        until(lambda: all(len(into) >= done for into in got))  # noqa: B023 -- used at once
    return sent


def _subscribers(served: Served) -> int:
    return int(_metric(served, "podcache_cri_event_subscribers"))


def _metric(served: Served, name: str, labels: str = "") -> float:
    """One sample of serve's /metrics (0 when absent)."""
    body = served.client.get("/metrics").body.decode()
    for line in body.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- KEP-5825: the streamed lists, from the cache too ----------------------------------------------
STREAMS: dict[str, tuple[Any, Any, str]] = {
    "StreamPodSandboxes": (
        pb.StreamPodSandboxesRequest,
        pb.StreamPodSandboxesResponse,
        "ListPodSandbox",
    ),
    "StreamContainers": (pb.StreamContainersRequest, pb.StreamContainersResponse, "ListContainers"),
}


def _streamed(socket: Socket, method: str, request: Any) -> list[bytes]:
    _, response_type, _ = STREAMS[method]
    call = socket.channel.unary_stream(
        f"/runtime.v1.RuntimeService/{method}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response_type.FromString,
    )
    items = [
        item
        for answer in call(request, timeout=10)
        for field in answer.ListFields()
        for item in field[1]
    ]
    return sorted(item.SerializeToString(deterministic=True) for item in items)


@pytest.mark.parametrize("method", sorted(STREAMS))
def test_streamed_lists_equal_the_runtimes_list(proxy: Socket, direct: Socket, method: str) -> None:
    request_type, _, unary = STREAMS[method]
    for state in (None, 0):
        f = {} if state is None else {"state": {"state": state}}
        request = request_type(filter=f)
        unary_request = LIST_TYPES[unary][0](filter=f)

        # Earlier tests changed the pods: once their events are in (quiescence), equal.
        def settled(request: Any = request, unary_request: Any = unary_request) -> bool:
            return _streamed(proxy, method, request) == direct.listed(unary, unary_request)

        until(settled)
        assert _streamed(proxy, method, request) == proxy.listed(unary, unary_request)


# -- podcache's own CLI uses the socket as an endpoint ---------------------------------------------
def test_podcache_pods_reads_the_socket_as_it_reads_the_runtime(
    crisock: Served, sim: SimRuntime
) -> None:
    exe = str(Path(sys.executable).parent / "podcache")
    env = {k: v for k, v in os.environ.items() if k != "CONTAINER_RUNTIME_ENDPOINT"}

    def pods(endpoint: str) -> Any:
        done = subprocess.run(
            [exe, "pods", "-a", "-r", endpoint, "-o", "json"],
            capture_output=True, text=True, env=env, timeout=60, check=True,
        )  # fmt: skip
        return json.loads(done.stdout)

    through_socket = f"unix://{crisock.path}"
    until(lambda: pods(through_socket) == pods(sim.endpoint))


# -- docs/architecture.md §10 rule 5: through a resubscription ------------------------------------
class _Subscriber:
    """A socket subscriber read by a thread: the container IDs it got, and how it ended."""

    def __init__(self, path: str) -> None:
        self.socket = Socket(path)
        self.ids: list[str] = []
        self.end: grpc.RpcError | None = None
        self._stream = self.socket.events()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for data in self._stream:
                self.ids.append(pb.ContainerEventResponse.FromString(data).container_id)
        except grpc.RpcError as error:
            self.end = error

    def close(self) -> None:
        self._stream.cancel()
        self._thread.join(10)
        self.socket.close()


def _subscriptions(served: Served) -> float:
    return _metric(served, "podcache_cri_event_subscriptions_total")


def test_a_subscriber_keeps_its_stream_through_a_resubscription_that_lost_nothing(
    crisock: Served, sim: SimRuntime, direct: Socket
) -> None:
    until(lambda: _subscribers(crisock) == 0)
    subscriber = _Subscriber(crisock.path)
    lister = Socket(crisock.path)
    try:
        until(lambda: _subscribers(crisock) == 1)
        # The socket shows the node as it is before the outage: earlier tests' changes have
        # all been relisted (a change told before the outage and listed only after it would
        # count as one the outage may have hidden).
        until(
            lambda: all(
                lister.listed(m, t()) == direct.listed(m, t())
                for m, (t, _, _) in LIST_TYPES.items()
            )
        )
        opened = _subscriptions(crisock)
        sim.cut_event_streams()  # the runtime's stream ends; nothing changes meanwhile
        until(lambda: _subscriptions(crisock) == opened + 1 and sim.event_subscribers == 1)
        until(lambda: _metric(crisock, "podcache_cri_event_held") == 0)  # the listing judged
        sent = [event.container_id for event in sim.churn_step(1)]
        until(lambda: subscriber.ids[-len(sent) :] == sent or subscriber.end is not None)
        assert subscriber.end is None
    finally:
        lister.close()
        subscriber.close()


def test_a_subscriber_is_told_unavailable_when_events_were_lost(
    crisock: Served, sim: SimRuntime
) -> None:
    until(lambda: _subscribers(crisock) == 0)
    subscriber = _Subscriber(crisock.path)
    try:
        until(lambda: _subscribers(crisock) == 1)
        sim.cut_event_streams()
        sim.churn_step(1)  # made while the stream is cut: its events reach nobody
        until(lambda: subscriber.end is not None)
        assert subscriber.end is not None
        assert subscriber.end.code() is grpc.StatusCode.UNAVAILABLE
        assert sim.event_subscribers <= 1
    finally:
        subscriber.close()


# -- docs/architecture.md §10 rule 6: bounds ----------------------------------------------------
def _request_of(size: int) -> bytes:
    """A ListPodSandboxRequest of exactly ``size`` bytes (an ID filter of the right length)."""
    for length in range(size, 0, -1):
        data = pb.ListPodSandboxRequest(filter=pb.PodSandboxFilter(id="x" * length))
        encoded = data.SerializeToString()
        if len(encoded) == size:
            return encoded
    raise AssertionError(f"no request of {size} bytes")


def test_a_request_of_64_kib_is_served_and_one_byte_more_is_refused(proxy: Socket) -> None:
    path = "/runtime.v1.RuntimeService/ListPodSandbox"
    limit = 64 * 1024
    assert proxy.call(path, _request_of(limit)) == b""  # no such sandbox: an empty list
    with pytest.raises(grpc.RpcError) as caught:
        proxy.call(path, _request_of(limit + 1))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_list_request_that_is_not_one_is_refused_every_time(proxy: Socket) -> None:
    # A memo hit sends the bytes kept without decoding the request: only a request that was
    # decoded once is ever kept, so a malformed one is refused on every call.
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as raised:
            proxy.call("/runtime.v1.RuntimeService/ListPodSandbox", b"\xff")
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "ListPodSandbox" in str(raised.value.details())


def test_over_crio_without_events_a_subscriber_gets_the_runtimes_empty_stream(
    tmp_path: Path,
) -> None:
    """CRI-O with ``enable_pod_events = false`` ends GetContainerEvents at once with OK and
    no event; through the socket a subscriber sees the same, and podcache's logs name the
    runtime's endpoint, not an internal class."""
    path = str(tmp_path / "cri.sock")
    port = free_port()
    with SimRuntime(5, seed=2, flavor="crio", pod_events=False) as sim:
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cri-listen", path]
        with ServeProcess(args) as server:
            Client(port=port).get("/pods")
            socket = Socket(path)
            try:
                assert list(socket.events()) == []  # ended with OK: grpcio raises otherwise
            finally:
                socket.close()
        said = [line for line in server.stderr.splitlines() if "sends no container events" in line]
        assert said and all(sim.endpoint in line for line in said), server.stderr
        assert "HubGetter" not in server.stderr
