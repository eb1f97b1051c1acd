"""``ContainerStatus`` and ``PodSandboxStatus`` on ``serve --cri-listen``, answered from the
cache (docs/architecture.md §10 rules 8 and 9), against the simulator's own answers, as
containerd and as CRI-O with ``enable_pod_events`` (``podcache.sim.flavor``: CRI-O's sandbox
answers list its containers and carry the time of the answer).

Real parts: the simulator's gRPC server in its own process' thread, ``podcache serve`` in its
own process, grpcio clients on both sockets, serve's /metrics over HTTP. The simulator counts
the calls it answers per method: the tests count what reached the runtime.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.departedstatus import rfc3339
from podcache.sim import SimRuntime
from podcache.sim.population import SimEvent, SimEventType
from tests.crisocket import EventWatcher
from tests.serve.conftest import Client, ServeProcess, free_port
from tests.serve.test_crisock import Socket, until

pytestmark = pytest.mark.timeout(300)

CONTAINER = "/runtime.v1.RuntimeService/ContainerStatus"
SANDBOX = "/runtime.v1.RuntimeService/PodSandboxStatus"
DELETED = pb.CONTAINER_DELETED_EVENT


class Served(NamedTuple):
    path: str
    client: Client
    sim: SimRuntime
    keeps: bool

    @property
    def crio(self) -> bool:
        return self.sim.flavor.name == "crio"


@pytest.fixture(
    scope="module",
    params=[(f, k) for f in ("containerd", "crio") for k in ("off", "5m")],
    ids=lambda p: f"{p[0]}-{'plain' if p[1] == 'off' else 'keep-departed'}",
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A simulator as containerd or CRI-O (churn paused: the tests make every change) and
    ``podcache serve`` over it with a CRI socket; with ``--cri-keep-departed 5m`` for the
    second parameter."""
    flavor, keep = request.param
    path = str(tmp_path_factory.mktemp("cri") / "cri.sock")
    port = free_port()
    with SimRuntime(30, seed=7, flavor=flavor) as sim, sim.pause_churn():
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
        args += ["--cri-listen", path]
        if keep != "off":
            args += ["--cri-keep-departed", keep]
        server = ServeProcess(args)
        with server:
            client = Client(port=port)
            # The caches follow the socket's one stream: subscribed, it is open (rule 8).
            until(lambda: b'podcache_events_state{state="subscribed"} 1.0' in _metrics(client))
            yield Served(path, client, sim, keep != "off")
        assert server.returncode == 0, server.stderr
        assert "Traceback" not in server.stderr, server.stderr


@pytest.fixture
def proxy(served: Served) -> Iterator[Socket]:
    socket = Socket(served.path)
    yield socket
    socket.close()


@pytest.fixture
def direct(served: Served) -> Iterator[Socket]:
    socket = Socket(served.sim.endpoint.removeprefix("unix://"))
    yield socket
    socket.close()


def _request(path: str, ident: str, verbose: bool) -> bytes:
    if path == CONTAINER:
        return pb.ContainerStatusRequest(container_id=ident, verbose=verbose).SerializeToString()
    return pb.PodSandboxStatusRequest(pod_sandbox_id=ident, verbose=verbose).SerializeToString()


def _parsed(path: str, data: bytes) -> Any:
    kind = pb.ContainerStatusResponse if path == CONTAINER else pb.PodSandboxStatusResponse
    return kind.FromString(data)


class Timed(NamedTuple):
    """An answer and the wall clock (ns) read before the call and after it."""

    answer: Any
    before: int
    after: int


def _timed(socket: Socket, path: str, data: bytes) -> Timed:
    before = time.time_ns()
    answer = _parsed(path, socket.call(path, data))
    return Timed(answer, before, time.time_ns())


def _assert_same(path: str, mine: Timed, theirs: Timed) -> None:
    """``mine`` is protobuf-equal to ``theirs``, but a ``timestamp`` (CRI-O's sandbox answer):
    each is the time of its own answer, taken while its call ran."""
    for each in (mine, theirs):
        if path == SANDBOX and each.answer.timestamp:
            assert each.before <= each.answer.timestamp <= each.after
    if path == SANDBOX:
        assert bool(mine.answer.timestamp) is bool(theirs.answer.timestamp)
        mine.answer.ClearField("timestamp")
        theirs.answer.ClearField("timestamp")
    assert mine.answer == theirs.answer


def _metrics(client: Client) -> bytes:
    body: bytes = client.get("/metrics").body
    return body


def _answers(served: Served, method: str, source: str) -> float:
    body = _metrics(served.client).decode()
    wanted = f'podcache_cri_status_answers_total{{method="{method}",source="{source}"}} '
    for line in body.splitlines():
        if line.startswith(wanted):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {wanted.strip()} in /metrics")


class Watcher(EventWatcher):
    """A GetContainerEvents client of the socket (``EventWatcher``)."""

    def __init__(self, socket: Socket) -> None:
        super().__init__(socket.events())

    def wait_for(self, events: list[SimEvent]) -> None:
        """Until the last of ``events`` (the simulator's) has come."""
        last = events[-1]
        until(lambda: self.got(last.container_id, int(last.type)) is not None)


@pytest.fixture
def watcher(proxy: Socket, served: Served) -> Iterator[Watcher]:
    watching = Watcher(Socket(served.path))
    until(lambda: _subscribed(served))
    yield watching
    watching.close()


def _subscribed(served: Served) -> bool:
    return b"podcache_cri_event_subscribers 1.0" in served.client.get("/metrics").body


# -- rule 8: equality ------------------------------------------------------------------------------
@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
@pytest.mark.parametrize("path", [CONTAINER, SANDBOX], ids=["container", "sandbox"])
def test_a_status_is_the_runtimes_own_and_asked_again_comes_from_the_cache(
    proxy: Socket, direct: Socket, served: Served, path: str, verbose: bool
) -> None:
    snapshot = served.sim.population.snapshot()
    items = snapshot.containers if path == CONTAINER else snapshot.sandboxes
    method = path.rsplit("/", 1)[1]
    for item in items[:5]:
        data = _request(path, item.id, verbose)
        first = _timed(proxy, path, data)
        before = _answers(served, method, "cache")
        again = _timed(proxy, path, data)
        assert _answers(served, method, "cache") == before + 1
        theirs = _timed(direct, path, data)
        assert bool(theirs.answer.info) is verbose
        assert path == CONTAINER or bool(theirs.answer.timestamp) is served.crio
        _assert_same(path, first, _timed(direct, path, data))
        _assert_same(path, again, theirs)


def test_a_prefix_is_answered_as_the_runtime_answers_it(
    proxy: Socket, direct: Socket, served: Served
) -> None:
    container = served.sim.population.snapshot().containers[0].id
    data = _request(CONTAINER, container[:16], True)
    assert _parsed(CONTAINER, proxy.call(CONTAINER, data)) == _parsed(
        CONTAINER, direct.call(CONTAINER, data)
    )


def test_an_unknown_id_is_the_runtimes_not_found(proxy: Socket, direct: Socket) -> None:
    data = _request(CONTAINER, "f" * 64, False)
    failures = []
    for socket in (proxy, direct):
        with pytest.raises(grpc.RpcError) as caught:
            socket.call(CONTAINER, data)
        failures.append((caught.value.code(), caught.value.details()))
    assert failures[0] == failures[1]
    assert failures[0][0] is grpc.StatusCode.NOT_FOUND


# -- rule 8: one upstream call per change --------------------------------------------------------
def test_agents_asking_after_an_event_cost_at_most_one_runtime_call_between_them(
    proxy: Socket, direct: Socket, served: Served, watcher: Watcher
) -> None:
    """A container crashes (a STOPPED event carrying its status): 8 agents each ask its plain
    and its verbose status at once. The plain one is the event's (no runtime call); the
    verbose ones share one runtime call; every answer is the runtime's own."""
    sim = served.sim
    uid = sim.population.pod_uids()[2]
    events = sim.population.crash_container(uid)
    watcher.wait_for(events)
    stopped = next(e for e in events if e.type is SimEventType.STOPPED and e.containers)
    target = stopped.container_id
    sim.reset_call_counts()
    sim.faults.latency = 0.3  # the verbose calls overlap: each waits this long at the runtime
    answers: dict[bool, list[bytes]] = {False: [], True: []}

    def ask(verbose: bool) -> None:
        answers[verbose].append(proxy.call(CONTAINER, _request(CONTAINER, target, verbose)))

    try:
        _at_once([partial(ask, verbose) for verbose in (False, True) for _ in range(8)])
    finally:
        sim.faults.latency = 0.0
    assert sim.calls().get("ContainerStatus", 0) == 1
    for verbose, got in answers.items():
        assert len(got) == 8
        theirs = _parsed(CONTAINER, direct.call(CONTAINER, _request(CONTAINER, target, verbose)))
        assert all(_parsed(CONTAINER, each) == theirs for each in got)
        assert theirs.status.state == pb.CONTAINER_EXITED


def _at_once(calls: list[Callable[[], object]]) -> None:
    """Each of ``calls`` in a thread of its own, all started before any is joined."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_agents_asking_a_sandbox_id_as_a_container_cost_one_runtime_call_between_them(
    proxy: Socket, direct: Socket, served: Served, watcher: Watcher
) -> None:
    """Falco asks ContainerStatus of a sandbox event's ID: the runtime answers NOT_FOUND. After
    one event, 8 agents asking it cost one runtime call, each answered as the runtime answers."""
    sim = served.sim
    uid = sim.population.pod_uids()[4]
    events = sim.population.crash_container(uid)
    watcher.wait_for(events)
    sandbox = next(e.sandbox for e in events if e.sandbox is not None)
    request = _request(CONTAINER, sandbox.id, False)
    sim.reset_call_counts()
    failures: list[tuple[grpc.StatusCode, str | None]] = []

    def ask() -> None:
        with pytest.raises(grpc.RpcError) as caught:
            proxy.call(CONTAINER, request)
        failures.append((caught.value.code(), caught.value.details()))

    ask()  # the first agent's call reaches the runtime; the 7 after it find its answer
    _at_once([ask] * 7)
    assert sim.calls().get("ContainerStatus", 0) == 1
    with pytest.raises(grpc.RpcError) as theirs:
        direct.call(CONTAINER, request)
    assert failures == [(theirs.value.code(), theirs.value.details())] * 8
    assert theirs.value.code() is grpc.StatusCode.NOT_FOUND
    metrics = _metrics(served.client).decode()
    kept = _gauge(metrics, 'podcache_cri_status_kept{store="not_found"}')
    assert kept >= 1  # this ID's NOT_FOUND, and any an earlier test left
    assert _gauge(metrics, 'podcache_cri_status_kept_bytes{store="not_found"}') >= len(
        theirs.value.details() or ""
    )


def _gauge(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in /metrics")


def test_an_event_ends_the_kept_answer_of_what_it_names(
    proxy: Socket, direct: Socket, served: Served, watcher: Watcher
) -> None:
    sim = served.sim
    uid, created = sim.population.create_pod()
    watcher.wait_for(created)
    container = sim.population.pod_records(uid)[1][0].id
    data = _request(CONTAINER, container, True)
    before = _parsed(CONTAINER, proxy.call(CONTAINER, data))
    assert before.status.state == pb.CONTAINER_RUNNING
    watcher.wait_for(sim.population.stop_pod(uid))
    after = _parsed(CONTAINER, proxy.call(CONTAINER, data))
    assert after.status.state == pb.CONTAINER_EXITED
    assert after == _parsed(CONTAINER, direct.call(CONTAINER, data))


def test_a_sandbox_answer_follows_its_containers(
    proxy: Socket, direct: Socket, served: Served, watcher: Watcher
) -> None:
    """A sandbox's answer kept, then one of its containers crashes and is made again: the
    socket's answer is the runtime's own again (on CRI-O it lists the new attempt, newest
    first, with the time of the answer), and asked twice it comes from the cache with a
    later time."""
    sim = served.sim
    uid, created = sim.population.create_pod()
    watcher.wait_for(created)
    sandbox = sim.population.pod_records(uid)[0][-1].id
    data = _request(SANDBOX, sandbox, False)
    _assert_same(SANDBOX, _timed(proxy, SANDBOX, data), _timed(direct, SANDBOX, data))
    crash = sim.population.crash_container(uid)
    watcher.wait_for(crash)
    newest = next(e.container_id for e in reversed(crash) if e.type is SimEventType.CREATED)
    first = _timed(proxy, SANDBOX, data)
    before = _answers(served, "PodSandboxStatus", "cache")
    again = _timed(proxy, SANDBOX, data)
    assert _answers(served, "PodSandboxStatus", "cache") == before + 1
    if served.crio:
        assert first.answer.containers_statuses[0].id == newest
        assert first.answer.timestamp < again.answer.timestamp  # each answer's own time
    _assert_same(SANDBOX, first, _timed(direct, SANDBOX, data))
    _assert_same(SANDBOX, again, _timed(direct, SANDBOX, data))


# -- rule 9: --cri-keep-departed -------------------------------------------------------------------
def test_a_removed_attempt_is_not_found_or_its_last_status_with_when_it_left(
    proxy: Socket, direct: Socket, served: Served, watcher: Watcher
) -> None:
    """A crash loop's older attempt is removed alone (the kubelet's RemoveContainer): both
    runtimes send its DELETED (CRI-O too: its sandbox stays)."""
    sim = served.sim
    uid, created = sim.population.create_pod()
    watcher.wait_for(created)
    first_crash = sim.population.crash_container(uid)
    watcher.wait_for(first_crash)
    victim = next(e.container_id for e in first_crash if e.type is SimEventType.STOPPED)
    data = _request(CONTAINER, victim, False)
    last = _parsed(CONTAINER, direct.call(CONTAINER, data))
    assert last.status.state == pb.CONTAINER_EXITED
    for _ in range(len(sim.population.pod_records(uid)[1])):  # until its name crashes again
        crash = sim.population.crash_container(uid)
        watcher.wait_for(crash)
        if (victim, SimEventType.DELETED) in {(e.container_id, e.type) for e in crash}:
            break
    else:
        raise AssertionError("the crash loop never removed the first attempt")
    with pytest.raises(grpc.RpcError) as theirs:
        direct.call(CONTAINER, data)
    if not served.keeps:
        with pytest.raises(grpc.RpcError) as mine:
            proxy.call(CONTAINER, data)
        assert mine.value.code() is theirs.value.code() is grpc.StatusCode.NOT_FOUND
        assert mine.value.details() == theirs.value.details()
        return
    answer, call = proxy.channel.unary_unary(
        CONTAINER, request_serializer=lambda b: b, response_deserializer=lambda b: b
    ).with_call(data, timeout=10)
    assert _parsed(CONTAINER, answer) == last
    deleted = next(
        e for e in watcher.events if e.container_id == victim and e.container_event_type == DELETED
    )
    assert dict(call.trailing_metadata())["podcache-departed"] == rfc3339(deleted.created_at)


def test_a_deleted_container_is_not_found_or_its_last_status_with_when_it_left(
    proxy: Socket, direct: Socket, served: Served, watcher: Watcher
) -> None:
    if served.crio:
        pytest.skip("CRI-O sends no event for a removed pod (its containers go with it)")
    sim = served.sim
    uid, created = sim.population.create_pod()
    watcher.wait_for(created)
    containers = sim.population.pod_records(uid)[1]
    sandbox = sim.population.pod_records(uid)[0][-1].id
    running_info = {  # what an agent asked while they ran (crictl inspect)
        c.id: _parsed(CONTAINER, proxy.call(CONTAINER, _request(CONTAINER, c.id, True))).info
        for c in containers
    }
    watcher.wait_for(sim.population.stop_pod(uid))
    last = {
        c.id: _parsed(CONTAINER, direct.call(CONTAINER, _request(CONTAINER, c.id, False)))
        for c in containers
    }
    last_sandbox = _parsed(SANDBOX, direct.call(SANDBOX, _request(SANDBOX, sandbox, False)))
    removal = sim.population.remove_pod(uid)
    watcher.wait_for(removal)
    assert any(e.type is SimEventType.DELETED for e in removal)
    for ident, path, expected in [
        *((c.id, CONTAINER, last[c.id]) for c in containers),
        (sandbox, SANDBOX, last_sandbox),
    ]:
        data = _request(path, ident, False)
        with pytest.raises(grpc.RpcError) as theirs:
            direct.call(path, data)
        if not served.keeps:
            with pytest.raises(grpc.RpcError) as mine:
                proxy.call(path, data)
            assert mine.value.code() is theirs.value.code() is grpc.StatusCode.NOT_FOUND
            assert mine.value.details() == theirs.value.details()
            continue
        answer, call = proxy.channel.unary_unary(
            path, request_serializer=lambda b: b, response_deserializer=lambda b: b
        ).with_call(data, timeout=10)
        assert _parsed(path, answer) == expected
        deleted = next(
            e
            for e in watcher.events
            if e.container_id == ident and e.container_event_type == DELETED
        )
        assert dict(call.trailing_metadata())["podcache-departed"] == rfc3339(deleted.created_at)
        if path == CONTAINER:  # verbose: the last status, with the info last asked
            verbose = _parsed(path, proxy.call(path, _request(path, ident, True)))
            assert verbose.status == expected.status
            assert verbose.info == running_info[ident]


# -- rule 8: without an event stream, forwarded with sharing ------------------------------------
def test_with_events_off_and_no_subscriber_every_status_is_asked_of_the_runtime(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    path = str(tmp_path_factory.mktemp("cri") / "cri.sock")
    port = free_port()
    with SimRuntime(10, seed=3) as sim, sim.pause_churn():
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--events", "off"]
        with ServeProcess([*args, "--cri-listen", path]) as server:
            served = Served(path, Client(port=port), sim, False)
            proxy, direct = Socket(path), Socket(sim.endpoint.removeprefix("unix://"))
            try:
                container = sim.population.snapshot().containers[0].id
                data = _request(CONTAINER, container, True)
                sim.reset_call_counts()
                answers = [proxy.call(CONTAINER, data) for _ in range(3)]
                assert sim.calls().get("ContainerStatus", 0) == 3
                theirs = _parsed(CONTAINER, direct.call(CONTAINER, data))
                assert all(_parsed(CONTAINER, each) == theirs for each in answers)
                assert _answers(served, "ContainerStatus", "upstream") == 3
                assert _answers(served, "ContainerStatus", "cache") == 0
            finally:
                proxy.close()
                direct.close()
        assert "Traceback" not in server.stderr, server.stderr
