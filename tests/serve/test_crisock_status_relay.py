"""Status calls answered by the C relay's table (docs/architecture.md §10 rule 8, the status
store's invariant 8): with the C engine, an answer the store keeps is copied to the relay,
which answers the next call for that exact key without gRPC or Python; an event naming the
item ends the copy before any socket client is sent the event.

Real parts: the simulator (as containerd) in its own thread, two ``podcache serve`` processes
over it, one relaying with C and one with Python (``PODCACHE_CRI_RELAY``), grpcio clients on
each socket and on the simulator's, serve's /metrics over HTTP. The relay's answers are
counted apart (``podcache_cri_relay_status_answers_total``) and within the socket's.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import NamedTuple

import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.sim import SimRuntime
from tests.crisocket import SUBSCRIBED
from tests.serve.conftest import Client, ServeProcess, free_port
from tests.serve.test_crisock import Socket, until
from tests.serve.test_crisock_status import CONTAINER, SANDBOX, Watcher, _parsed, _request

pytestmark = pytest.mark.timeout(300)

ENGINES = ("c", "python")


class Serving(NamedTuple):
    sim: SimRuntime
    sockets: dict[str, str]
    clients: dict[str, Client]


def _subscribed(client: Client) -> bool:
    return SUBSCRIBED in client.get("/metrics").body


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    """The simulator (churn paused: the tests make every change) and a serve of each engine."""
    directory = tmp_path_factory.mktemp("relay")
    with SimRuntime(20, seed=3) as sim, sim.pause_churn():
        processes, sockets, clients = [], {}, {}
        for engine in ENGINES:
            port, path = free_port(), str(directory / f"{engine}.sock")
            args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
            args += ["--cri-listen", path]
            process = ServeProcess(args, env={"PODCACHE_CRI_RELAY": engine})
            processes.append(process.start())
            sockets[engine], clients[engine] = path, Client(port=port)
        try:
            for client in clients.values():
                until(partial(_subscribed, client))
            yield Serving(sim, sockets, clients)
        finally:
            for process in processes:
                process.stop()
        for process in processes:
            assert process.returncode == 0, process.stderr
            assert "Traceback" not in process.stderr, process.stderr


@pytest.fixture
def sockets(serving: Serving) -> Iterator[dict[str, Socket]]:
    opened = {engine: Socket(path) for engine, path in serving.sockets.items()}
    opened["direct"] = Socket(serving.sim.endpoint.removeprefix("unix://"))
    yield opened
    for each in opened.values():
        each.close()


def _sample(client: Client, line: str) -> float:
    for each in client.get("/metrics").body.decode().splitlines():
        if each.startswith(line + " "):
            return float(each.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line} in /metrics")


class Counts(NamedTuple):
    """What serve's /metrics says of one method's calls."""

    relay: float
    cache: float
    ok: float
    timed: float
    saved: float


def _counts(client: Client, method: str) -> Counts:
    def sample(line: str) -> float:
        try:
            return _sample(client, line)
        except AssertionError:
            return 0.0  # a series not made yet

    return Counts(
        sample(f'podcache_cri_relay_status_answers_total{{method="{method}"}}'),
        sample(f'podcache_cri_status_answers_total{{method="{method}",source="cache"}}'),
        sample(f'podcache_cri_requests_total{{code="OK",method="{method}"}}'),
        sample(f'podcache_cri_request_duration_seconds_count{{method="{method}"}}'),
        sample(f'podcache_cri_upstream_calls_saved_total{{method="{method}"}}'),
    )


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
@pytest.mark.parametrize("path", [CONTAINER, SANDBOX], ids=["container", "sandbox"])
def test_a_status_asked_again_is_the_c_relays_answer_counted_as_the_sockets(
    serving: Serving, sockets: dict[str, Socket], path: str, verbose: bool
) -> None:
    snapshot = serving.sim.population.snapshot()
    items = snapshot.containers if path == CONTAINER else snapshot.sandboxes
    method = path.rsplit("/", 1)[1]
    client = serving.clients["c"]
    for item in items[:3]:
        data = _request(path, item.id, verbose)
        first = sockets["c"].call(path, data)
        serving.sim.reset_call_counts()
        before = _counts(client, method)
        again = sockets["c"].call(path, data)
        after = _counts(client, method)
        assert after == Counts(*(each + 1 for each in before)), item.id
        assert serving.sim.calls().get(method, 0) == 0
        assert again == first == sockets["direct"].call(path, data)


def test_an_event_naming_a_container_ends_the_c_relays_answer(
    serving: Serving, sockets: dict[str, Socket]
) -> None:
    sim, client, socket = serving.sim, serving.clients["c"], sockets["c"]
    watcher = Watcher(Socket(serving.sockets["c"]))
    until(lambda: _sample(client, "podcache_cri_event_subscribers") == 1)
    try:
        uid, created = sim.population.create_pod()
        watcher.wait_for(created)
        container = sim.population.pod_records(uid)[1][0].id
        data = _request(CONTAINER, container, True)
        socket.call(CONTAINER, data)
        before = _counts(client, "ContainerStatus").relay
        assert _parsed(CONTAINER, socket.call(CONTAINER, data)).status.state == (
            pb.CONTAINER_RUNNING
        )
        assert _counts(client, "ContainerStatus").relay == before + 1
        watcher.wait_for(sim.population.stop_pod(uid))
    finally:
        watcher.close()
    sim.reset_call_counts()
    after = socket.call(CONTAINER, data)  # serve read the event before the watcher got it
    assert _counts(client, "ContainerStatus").relay == before + 1  # not the relay's
    assert sim.calls().get("ContainerStatus", 0) == 1  # the runtime's
    assert _parsed(CONTAINER, after).status.state == pb.CONTAINER_EXITED
    assert after == sockets["direct"].call(CONTAINER, data)
    assert socket.call(CONTAINER, data) == after
    assert _counts(client, "ContainerStatus").relay == before + 2  # kept again: the relay's


def test_answers_are_byte_equal_through_either_engine_and_direct(
    serving: Serving, sockets: dict[str, Socket]
) -> None:
    snapshot = serving.sim.population.snapshot()
    for path, items in ((CONTAINER, snapshot.containers), (SANDBOX, snapshot.sandboxes)):
        for item in items[3:8]:
            for verbose in (True, False):
                data = _request(path, item.id, verbose)
                theirs = sockets["direct"].call(path, data)
                for engine in ENGINES:
                    assert [sockets[engine].call(path, data) for _ in range(3)] == [theirs] * 3
    assert _counts(serving.clients["c"], "ContainerStatus").relay > 0
    assert _counts(serving.clients["python"], "ContainerStatus").relay == 0
