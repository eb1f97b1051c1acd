"""The simulator's CRI-O answers its status calls and fills its events as CRI-O 1.36's code does
(``podcache.sim.flavor``, each rule with the CRI-O file it was read from; docs/architecture.md
§4 "Two runtimes"), and its containerd answers as before.

Real parts: ``podcache sim --flavor crio`` in its own process (a grpcio client on its socket);
the changes a test must make (a crash loop, a pod of several sandboxes) through a
``SimRuntime`` serving from a thread of the test's process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.proto import services
from podcache.sim import SimRuntime
from podcache.sim.population import POD_UID_LABEL, SimContainerState, SimEventType

pytestmark = pytest.mark.timeout(120)

_MAIN = "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))"


def _serve(*argv: str) -> Iterator[Any]:
    """``podcache sim`` with ``argv`` in its own process, and a stub of its socket."""
    process = subprocess.Popen(
        [sys.executable, "-c", _MAIN, "--pods", "12", "--seed", "5", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        with grpc.insecure_channel(endpoint) as channel:
            yield services.stub(channel)
        process.terminate()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def crio() -> Iterator[Any]:
    yield from _serve("--flavor", "crio")


@pytest.fixture(scope="module")
def crio_churning() -> Iterator[Any]:
    yield from _serve("--flavor", "crio", "--churn", "20")


@pytest.fixture(scope="module")
def crio_without_events() -> Iterator[Any]:
    yield from _serve("--flavor", "crio", "--no-events")


def _not_found(call: Any, request: Any) -> str | None:
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=10)
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    details: str | None = raised.value.details()
    return details


def test_verbose_info_is_crios_json(crio: Any) -> None:
    """ContainerStatus: ``sandboxID``, ``pid``, ``runtimeSpec``, ``privileged``
    (server/container_status.go); PodSandboxStatus of a spoofed infra container (the default
    ``drop_infra_ctr``): ``runtimeSpec`` alone (server/sandbox_status.go)."""
    containers = crio.ListContainers(pb.ListContainersRequest(), timeout=10).containers
    container = containers[0]
    answer = crio.ContainerStatus(
        pb.ContainerStatusRequest(container_id=container.id, verbose=True), timeout=10
    )
    info = json.loads(answer.info["info"])
    assert list(info) == ["sandboxID", "pid", "runtimeSpec", "privileged"]
    assert info["sandboxID"] == container.pod_sandbox_id and info["pid"] > 0
    assert info["runtimeSpec"]["annotations"]["io.kubernetes.cri-o.SandboxID"] == (
        container.pod_sandbox_id
    )
    plain = crio.ContainerStatus(pb.ContainerStatusRequest(container_id=container.id), timeout=10)
    assert not plain.info
    sandbox = crio.PodSandboxStatus(
        pb.PodSandboxStatusRequest(pod_sandbox_id=container.pod_sandbox_id, verbose=True),
        timeout=10,
    )
    assert list(json.loads(sandbox.info["info"])) == ["runtimeSpec"]


def test_unknown_ids_are_crios_not_found(crio: Any) -> None:
    """``could not find container|pod %q: <the lookup's error>`` (GetContainerFromShortID,
    getPodSandboxFromRequest; truncindex's "ID does not exist", or its ambiguous prefix)."""
    unknown = "f" * 64
    container = crio.ContainerStatus
    sandbox = crio.PodSandboxStatus
    assert _not_found(container, pb.ContainerStatusRequest(container_id=unknown)) == (
        f'could not find container "{unknown}": container with ID starting with {unknown} '
        "not found: ID does not exist"
    )
    assert _not_found(sandbox, pb.PodSandboxStatusRequest(pod_sandbox_id=unknown)) == (
        f'could not find pod "{unknown}": PodSandbox with ID starting with {unknown} '
        "not found: ID does not exist"
    )
    assert _not_found(container, pb.ContainerStatusRequest()) == (
        'could not find container "": container ID should not be empty'
    )
    assert _not_found(sandbox, pb.PodSandboxStatusRequest()) == (
        'could not find pod "": PodSandboxId should not be empty'
    )
    ids = [c.id for c in crio.ListContainers(pb.ListContainersRequest(), timeout=10).containers]
    shared = next(p for p in "0123456789abcdef" if sum(i.startswith(p) for i in ids) > 1)
    assert _not_found(container, pb.ContainerStatusRequest(container_id=shared)) == (
        f'could not find container "{shared}": container with ID starting with {shared} '
        f"not found: Multiple IDs found with provided prefix: {shared}"
    )


def test_with_events_a_sandbox_lists_its_containers_newest_first_and_the_answers_time(
    crio: Any,
) -> None:
    sandboxes = crio.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items
    for sandbox in sandboxes[:6]:
        before = time.time_ns()
        answer = crio.PodSandboxStatus(
            pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id), timeout=10
        )
        after = time.time_ns()
        assert before <= answer.timestamp <= after
        listed = crio.ListContainers(
            pb.ListContainersRequest(filter=pb.ContainerFilter(pod_sandbox_id=sandbox.id)),
            timeout=10,
        ).containers
        created = [c.created_at for c in answer.containers_statuses]
        assert created == sorted(created, reverse=True)
        assert sorted(c.id for c in answer.containers_statuses) == sorted(c.id for c in listed)


def test_without_events_a_sandbox_answer_is_its_status_alone(crio_without_events: Any) -> None:
    """``containers_statuses`` and ``timestamp`` are filled only with ``enable_pod_events``."""
    sandbox = crio_without_events.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items[0]
    answer = crio_without_events.PodSandboxStatus(
        pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id), timeout=10
    )
    assert answer.status.id == sandbox.id
    assert not answer.containers_statuses and not answer.timestamp


def test_an_event_carries_the_plain_statuses_of_its_pods_containers_newest_first(
    crio_churning: Any,
) -> None:
    stream = crio_churning.GetContainerEvents(pb.GetEventsRequest(), timeout=30)
    try:
        received = [next(stream) for _ in range(20)]
    finally:
        stream.cancel()
    for event in received:
        uid = event.pod_sandbox_status.metadata.uid
        assert uid and event.created_at > 0
        assert event.container_event_type != pb.CONTAINER_DELETED_EVENT  # churn removes pods
        assert all(c.labels[POD_UID_LABEL] == uid for c in event.containers_statuses)
        created = [c.created_at for c in event.containers_statuses]
        assert created == sorted(created, reverse=True)


def test_an_event_lists_every_sandbox_of_its_pod_and_a_lone_removal_is_sent() -> None:
    """``generateCRIEvent`` lists the containers labelled with the pod's UID (every sandbox's);
    ``RemoveContainer`` (a crash loop's old attempt) sends DELETED, ``removePodSandbox``
    nothing; containerd's event lists its sandbox's containers and sends every removal."""
    for flavor in ("crio", "containerd"):
        with SimRuntime(40, seed=9, flavor=flavor) as sim, sim.pause_churn():
            channel = grpc.insecure_channel(sim.endpoint)
            stub: Any = services.stub(channel)
            stream = stub.GetContainerEvents(pb.GetEventsRequest(), timeout=30)
            sim.wait_for_event_subscribers(1)
            population = sim.population
            uid = next(
                u
                for u in population.pod_uids()
                if len(population.pod_records(u)[0]) > 1
                and any(
                    c.state is SimContainerState.RUNNING and not c.init
                    for c in population.pod_records(u)[1]
                )
            )
            crashes = [population.crash_container(uid) for _ in range(6)]
            sent = [e for crash in crashes for e in crash]
            got = [next(stream) for _ in sent]
            removed = population.remove_pod(uid)
            _, marker = population.create_pod()
            until_marker = []
            while (message := next(stream)).container_id not in {e.container_id for e in marker}:
                until_marker.append(message.container_event_type)
            stream.cancel()
            channel.close()
            records = population.snapshot()
        assert [(g.container_id, g.container_event_type) for g in got] == [
            (e.container_id, int(e.type)) for e in sent
        ]
        assert any(e.type is SimEventType.DELETED for e in sent)
        for event, message in zip(sent, got, strict=True):
            carried = event.all_pod_containers if flavor == "crio" else event.containers
            assert {c.id for c in message.containers_statuses} == {c.id for c in carried}
        assert any(e.pod_containers for e in sent)  # a pod of several sandboxes
        assert any(e.type is SimEventType.DELETED for e in removed)  # the population's truth
        assert (pb.CONTAINER_DELETED_EVENT in until_marker) is (flavor == "containerd")
        assert pb.CONTAINER_STOPPED_EVENT in until_marker  # the stop before it is sent
        assert uid not in records.pod_uids()
