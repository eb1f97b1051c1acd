"""A Falco-pattern client (falcosecurity/plugins, container plugin, cri.go) on real containerd 1.7
and 2.1, through ``podcache serve --cri-listen`` and straight at containerd: at quiescence every
answer it gets is protobuf-equal on both paths, the verbose ``info`` included, at start (its
ListContainers, then each container's ContainerStatus(verbose) and its sandbox's
PodSandboxStatus) and again once containers were created, exited and removed under it.

``PodSandboxStatusResponse.timestamp`` is the time of the answer (two calls straight at
containerd differ in it), so it is left out of the comparison; the test shows first that
nothing else differs between two direct calls. The client's second round through the socket is
answered from the cache alone (``podcache_cri_status_answers_total{source="cache"}``). Every pod
made here is removed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from podcache.cri.proto import api_pb2 as pb
from tests.containerd.conftest import EVENT_VERSIONS, Containerd
from tests.containerd.harness import CRIHarness, SandboxRecord
from tests.containerd.test_crisock import Sides, Socket, serve_socket, until
from tests.serve.conftest import Client

pytestmark = [
    pytest.mark.containerd,
    pytest.mark.timeout(300),
    pytest.mark.parametrize("containerd", EVENT_VERSIONS, indirect=True),
]


@pytest.fixture
def sides(containerd: Containerd) -> Iterator[Sides]:
    """``podcache serve --cri-listen`` over the instance (a 60 s period: events keep it),
    once its event stream is open."""
    with serve_socket(containerd, "--cache-period", "60s") as served:
        yield served


def _metrics(http: Client) -> bytes:
    body: bytes = http.get("/metrics").body
    return body


def from_cache(sides: Sides) -> dict[str, float]:
    """The socket's status answers from the cache so far, by method."""
    found = {}
    for line in _metrics(sides.http).decode().splitlines():
        if line.startswith("podcache_cri_status_answers_total{") and 'source="cache"' in line:
            method = line.split('method="', 1)[1].split('"', 1)[0]
            found[method] = float(line.rsplit(" ", 1)[1])
    return found


def _containers(side: Socket) -> list[Any]:
    answer = pb.ListContainersResponse.FromString(side.call("ListContainers", b""))
    return sorted(answer.containers, key=lambda c: c.id)


def _listing(side: Socket) -> list[bytes]:
    return [c.SerializeToString(deterministic=True) for c in _containers(side)]


def falco_answers(side: Socket) -> dict[tuple[str, str, bool], bytes]:
    """What the plugin's start asks, by (method, ID, verbose): every listed container's
    ContainerStatus(verbose=true) and its sandbox's PodSandboxStatus (the plugin says
    verbose=false; verbose=true is asked too, for its ``info``); each answer serialized
    deterministically, a sandbox status's answer time cleared."""
    answers: dict[tuple[str, str, bool], bytes] = {}
    for container in _containers(side):
        request = pb.ContainerStatusRequest(container_id=container.id, verbose=True)
        data = side.call("ContainerStatus", request.SerializeToString())
        answers["ContainerStatus", container.id, True] = pb.ContainerStatusResponse.FromString(
            data
        ).SerializeToString(deterministic=True)
        for verbose in (False, True):
            sandbox = pb.PodSandboxStatusRequest(
                pod_sandbox_id=container.pod_sandbox_id, verbose=verbose
            )
            status = pb.PodSandboxStatusResponse.FromString(
                side.call("PodSandboxStatus", sandbox.SerializeToString())
            )
            status.ClearField("timestamp")
            key = ("PodSandboxStatus", container.pod_sandbox_id, verbose)
            answers[key] = status.SerializeToString(deterministic=True)
    return answers


def _at_rest(sides: Sides) -> dict[tuple[str, str, bool], bytes]:
    """Once the socket lists what containerd lists: containerd's answers, checked equal to a
    second round of its own and to two rounds through the socket (the second answered from
    the statuses the first left in the cache, every one of them)."""
    until(lambda: _listing(sides.proxy) == _listing(sides.direct))
    direct = falco_answers(sides.direct)
    assert falco_answers(sides.direct) == direct  # nothing but the timestamp varies
    assert falco_answers(sides.proxy) == direct
    before = from_cache(sides)
    assert falco_answers(sides.proxy) == direct
    after = from_cache(sides)
    for method in ("ContainerStatus", "PodSandboxStatus"):
        asked = sum(1 for key in direct if key[0] == method)
        if method == "PodSandboxStatus":
            asked = len(_containers(sides.direct)) * 2
        assert after.get(method, 0) - before.get(method, 0) == asked
    return direct


def test_a_falco_pattern_client_gets_containerds_answers_through_the_socket(
    sides: Sides, cri_harness: CRIHarness
) -> None:
    running = cri_harness.run_pod("falco-running", "agents", labels={"app": "web"})
    app = cri_harness.create_container(running, "app", envs={"MODE": "serve"})
    done = cri_harness.create_container(running, "done", command=("true",))
    cri_harness.wait_exited(done, timeout=120)
    stopped: SandboxRecord = cri_harness.run_pod("falco-stopped", "agents")
    cri_harness.create_container(stopped, "job")
    cri_harness.stop_pod(stopped)
    try:
        first = _at_rest(sides)
        verbose = pb.ContainerStatusResponse.FromString(first["ContainerStatus", app.id, True])
        assert verbose.info, "containerd gave no verbose info to compare"
        assert len([key for key in first if key[0] == "ContainerStatus"]) == 3

        late = cri_harness.create_container(running, "late", command=("true",))
        cri_harness.wait_exited(late, timeout=120)
        cri_harness.remove_container(done)
        cri_harness.stop_container(app)
        after = _at_rest(sides)
        assert ("ContainerStatus", late.id, True) in after
        assert ("ContainerStatus", done.id, True) not in after
        assert after["ContainerStatus", app.id, True] != first["ContainerStatus", app.id, True]
    finally:
        cri_harness.remove_all([running.id, stopped.id])
