"""Status answers past the period on ``serve --cri-listen`` (docs/architecture.md §10 rule 8):
a container's come from the cache while containerd's own events are followed and the listing
shows it unchanged (else they are asked of the runtime again), a sandbox's plain one comes from
the cache while a listing within the period shows the sandbox in the state the answer gives,
and a container's plain answer comes from its verbose one.

Each test runs over the simulator as containerd and as CRI-O with events on, whose sandbox
answer lists its containers (whose statuses change with no change of the sandbox's state): it
is asked of the runtime again past the period.

Real parts: the simulator in its own process' thread (it counts the calls it answers),
``podcache serve`` in its own process with a short period, grpcio clients on both sockets.
The simulator's events are dropped to make a change that no event reports (as containerd
drops events for a subscriber that falls behind): only the listing can show it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.sim import SimRuntime
from podcache.sim.population import SimSandboxState
from tests.crisocket import task_events
from tests.serve.conftest import Client, ServeProcess, free_port
from tests.serve.test_crisock import Socket, until
from tests.serve.test_crisock_status import (
    CONTAINER,
    SANDBOX,
    Served,
    _answers,
    _assert_same,
    _request,
    _timed,
)

pytestmark = pytest.mark.timeout(300)

PERIOD = 1.0
"""serve's period in the tests that let it pass; the others' is 60 s, never passed."""


@pytest.fixture(params=["containerd", "crio"])
def flavor(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def served(tmp_path: object, request: pytest.FixtureRequest, flavor: str) -> Iterator[Served]:
    """A simulator as ``flavor`` (churn paused) and serve over it with a CRI socket and a
    period of ``PERIOD``, or of the seconds a test's indirect parameter gives."""
    path = f"{tmp_path}/cri.sock"
    port = free_port()
    period = getattr(request, "param", PERIOD)
    with SimRuntime(10, seed=11, flavor=flavor) as sim, sim.pause_churn():
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}"]
        args += ["--cache-period", f"{period:g}s", "--cri-listen", path]
        with ServeProcess(args) as server:
            client = Client(port=port)
            until(lambda: b'podcache_events_state{state="subscribed"} 1.0' in _metrics(client))
            yield Served(path, client, sim, False)
        assert "Traceback" not in server.stderr, server.stderr


@pytest.fixture
def sockets(served: Served) -> Iterator[tuple[Socket, Socket]]:
    proxy, direct = Socket(served.path), Socket(served.sim.endpoint.removeprefix("unix://"))
    yield proxy, direct
    proxy.close()
    direct.close()


def _metrics(client: Client) -> bytes:
    body: bytes = client.get("/metrics").body
    return body


def _past_the_period(since: float) -> None:
    until(lambda: time.monotonic() - since > PERIOD)


def _ready_pod(sim: SimRuntime) -> tuple[str, str, str]:
    """A pod's UID, its READY sandbox's ID and a container of it."""
    snapshot = sim.population.snapshot()
    for sandbox in snapshot.sandboxes:
        if sandbox.state is SimSandboxState.READY:
            uid = sandbox.uid
            containers = [c.id for c in snapshot.containers if c.pod_sandbox_id == sandbox.id]
            if containers:
                return uid, sandbox.id, containers[0]
    raise AssertionError("the simulator has no READY sandbox with a container")


def test_a_sandbox_answer_past_the_period_comes_from_the_cache_while_listed_so(
    served: Served, sockets: tuple[Socket, Socket]
) -> None:
    proxy, direct = sockets
    _, sandbox, _ = _ready_pod(served.sim)
    asked = _request(SANDBOX, sandbox, False)
    proxy.call(SANDBOX, asked)
    _past_the_period(time.monotonic())  # it was learnt before its answer came
    cached = _answers(served, "PodSandboxStatus", "cache")
    upstream = _answers(served, "PodSandboxStatus", "upstream")
    again = _timed(proxy, SANDBOX, asked)
    from_cache = 0 if served.crio else 1  # CRI-O's lists its containers: asked again
    assert _answers(served, "PodSandboxStatus", "cache") == cached + from_cache
    assert _answers(served, "PodSandboxStatus", "upstream") == upstream + 1 - from_cache
    _assert_same(SANDBOX, again, _timed(direct, SANDBOX, asked))


@pytest.mark.parametrize("flavor", ["crio"])
def test_on_cri_o_a_containers_answer_past_the_period_is_asked_of_the_runtime(
    served: Served, sockets: tuple[Socket, Socket]
) -> None:
    """CRI-O has no Events service of containerd's, and a container's status may change
    with no CRI event: past the period its answer is asked of the runtime again."""
    proxy, _ = sockets
    until(lambda: task_events(served.client).state == "unimplemented")
    _, _, container = _ready_pod(served.sim)
    asked = [_request(CONTAINER, container, verbose) for verbose in (False, True)]
    for request in asked:
        proxy.call(CONTAINER, request)
    _past_the_period(time.monotonic())
    for request in asked:
        upstream = _answers(served, "ContainerStatus", "upstream")
        proxy.call(CONTAINER, request)
        assert _answers(served, "ContainerStatus", "upstream") == upstream + 1


def test_a_sandbox_stopped_without_an_event_is_asked_once_the_listing_shows_it(
    served: Served, sockets: tuple[Socket, Socket]
) -> None:
    proxy, direct = sockets
    sim = served.sim
    uid, sandbox, _ = _ready_pod(sim)
    asked = _request(SANDBOX, sandbox, False)
    proxy.call(SANDBOX, asked)
    sim.faults.event_drop_rate = 1.0  # the stop's events never come
    stopped = time.monotonic()
    sim.population.stop_pod(uid)
    _past_the_period(stopped)  # the listing the next answer waits for began after the stop
    upstream = _answers(served, "PodSandboxStatus", "upstream")
    answer = _timed(proxy, SANDBOX, asked)
    assert answer.answer.status.state == pb.SANDBOX_NOTREADY
    assert _answers(served, "PodSandboxStatus", "upstream") == upstream + 1
    _assert_same(SANDBOX, answer, _timed(direct, SANDBOX, asked))


@pytest.mark.parametrize("served", [60.0], indirect=True)
def test_a_containers_plain_answer_is_its_verbose_answers_status(
    served: Served, sockets: tuple[Socket, Socket]
) -> None:
    proxy, direct = sockets
    sim = served.sim
    _, _, container = _ready_pod(sim)
    proxy.call(CONTAINER, _request(CONTAINER, container, True))
    cached = _answers(served, "ContainerStatus", "cache")
    plain = proxy.call(CONTAINER, _request(CONTAINER, container, False))
    assert _answers(served, "ContainerStatus", "cache") == cached + 1
    theirs = direct.call(CONTAINER, _request(CONTAINER, container, False))
    assert pb.ContainerStatusResponse.FromString(plain) == (
        pb.ContainerStatusResponse.FromString(theirs)
    )
    assert not pb.ContainerStatusResponse.FromString(plain).info


@pytest.mark.parametrize("flavor", ["containerd"])
@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
def test_a_containers_answer_past_the_period_comes_from_the_cache_while_task_events_follow(
    served: Served, sockets: tuple[Socket, Socket], verbose: bool
) -> None:
    """With containerd's own events followed (the containerd flavour), a container's kept
    answer outlives the period while the listing shows it in the same state; an event there
    naming it (a resize, an OOM kill inside it) ends it, and the runtime is asked again."""
    proxy, direct = sockets
    sim = served.sim
    until(lambda: task_events(served.client).state == "following")
    _past_the_period(time.monotonic())  # the subscription's settle (taskevents rule 1)
    _, _, container = _ready_pod(sim)
    asked = _request(CONTAINER, container, verbose)
    proxy.call(CONTAINER, asked)
    _past_the_period(time.monotonic())
    cached = _answers(served, "ContainerStatus", "cache")
    upstream = _answers(served, "ContainerStatus", "upstream")
    again = proxy.call(CONTAINER, asked)
    assert _answers(served, "ContainerStatus", "cache") == cached + 1
    assert _answers(served, "ContainerStatus", "upstream") == upstream
    assert pb.ContainerStatusResponse.FromString(again) == (
        pb.ContainerStatusResponse.FromString(direct.call(CONTAINER, asked))
    )
    seen = task_events(served.client).events
    assert sim.send_task_events("/containers/update", [container]) == 1
    until(lambda: task_events(served.client).events == seen + 1)
    proxy.call(CONTAINER, asked)
    assert _answers(served, "ContainerStatus", "upstream") == upstream + 1
