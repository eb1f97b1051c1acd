"""The simulator's PodSandboxStatus costs its pod, not the node.

A cold start asks thousands of sandbox statuses while the population churns; an answer built
from a view of the whole node (rebuilt for each new generation: a snapshot of every record, an
ID index, sorted IDs) made each call after a change O(n log n) with the GIL held. The test
counts the walks of the population (``Population.snapshot``, the only way to a view) instead of
timing anything, and holds the answers to the view's own (the reference: prefix resolution).
The servicer is CRI-O's with events on (its answers carry the containers' statuses, newest
first, and a timestamp);
containerd's answers the sandbox's status alone, as containerd 1.7 and 2.1 do.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.sim.faults import Faults
from podcache.sim.flavor import CONTAINERD, CRIO
from podcache.sim.population import Population, Snapshot
from podcache.sim.server import SimServicer, container_status_message, sandbox_status_message


class CountingPopulation(Population):
    """A population that counts its snapshots (each is a walk of every record)."""

    snapshots = 0

    def snapshot(self) -> Snapshot:
        self.snapshots += 1
        return super().snapshot()


class Aborted(Exception):
    pass


class FakeContext:
    """The part of ``grpc.ServicerContext`` the status handler uses."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


@pytest.fixture
def servicer() -> Iterator[tuple[SimServicer, CountingPopulation]]:
    population = CountingPopulation(300, seed=11)
    servicer = SimServicer(population, Faults(), threading.Event(), flavor=CRIO)
    yield servicer, population
    servicer.close()


def status(servicer: SimServicer, sandbox_id: str) -> Any:
    request = pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id)
    answer = servicer.PodSandboxStatus(request, FakeContext())  # type: ignore[arg-type]
    return pb.PodSandboxStatusResponse.FromString(answer)


def test_a_status_call_after_each_change_never_walks_the_population(
    servicer: tuple[SimServicer, CountingPopulation],
) -> None:
    sim, population = servicer
    asked = 0
    for _ in range(50):
        events = population.step()  # a new generation: a view would be rebuilt
        for event in events:
            if event.sandbox is not None and event.sandbox.id in {
                s.id for s in population.pod_records(event.sandbox.uid)[0]
            }:
                assert status(sim, event.sandbox.id).status.id == event.sandbox.id
                asked += 1
    assert asked >= 50
    assert population.snapshots == 0


def test_an_unknown_full_length_id_is_not_found_without_a_walk(
    servicer: tuple[SimServicer, CountingPopulation],
) -> None:
    sim, population = servicer
    with pytest.raises(Aborted) as raised:
        status(sim, "f" * 64)
    assert raised.value.args[0] == grpc.StatusCode.NOT_FOUND
    assert population.snapshots == 0


def test_each_status_answers_as_the_view_of_the_node_does(
    servicer: tuple[SimServicer, CountingPopulation],
) -> None:
    sim, population = servicer
    for _ in range(20):
        population.step()
    population.crash_container(population.pod_uids()[3])
    view = sim.view()
    for sandbox in view.sandboxes:
        answer = status(sim, sandbox.id)
        by_prefix = status(sim, view.resolve_sandbox(sandbox.id[:20]) or sandbox.id[:20])
        # CRI-O lists a sandbox's containers newest first (internal/oci's History)
        newest = sorted(view.containers_of(sandbox.id), key=lambda c: -c.created_at)
        expected = [c.id for c in newest]
        assert answer.status == by_prefix.status
        assert [c.id for c in answer.containers_statuses] == expected
        assert [c.id for c in by_prefix.containers_statuses] == expected


def test_a_status_answer_is_encoded_once_per_records_and_says_what_a_message_would(
    servicer: tuple[SimServicer, CountingPopulation],
) -> None:
    """The encoded answer is kept per records (and bad IPs): asked again it is the same bytes
    but the timestamp, and equal to the message built from the records; a change of the
    records or of the bad IPs is a new answer."""
    sim, population = servicer
    sandbox = population.snapshot().sandboxes[0]
    first, second = status(sim, sandbox.id), status(sim, sandbox.id)
    assert first.timestamp <= second.timestamp
    first.ClearField("timestamp")
    second.ClearField("timestamp")
    assert first == second
    records = population.sandbox_records(sandbox.id)
    assert records is not None
    expected = pb.PodSandboxStatusResponse(
        status=sandbox_status_message(records[0]),
        containers_statuses=[
            container_status_message(c) for c in sorted(records[1], key=lambda c: -c.created_at)
        ],
    )
    assert first == expected
    sim._faults.bad_ips = ("999.1.1.1",)
    bad = status(sim, sandbox.id)
    assert bad.status.network.ip == "999.1.1.1"


def _listed_by_id(sim: SimServicer, method: str, f: Any) -> list[bytes]:
    """The entries ``method`` answers for filter ``f``, through the servicer's own path."""
    return sim._sandboxes(f).entries if method == "sandboxes" else sim._containers(f).entries


def test_a_list_filtered_by_a_full_id_answers_as_the_view_does_without_a_walk(
    servicer: tuple[SimServicer, CountingPopulation],
) -> None:
    """An ``id`` filter of full length (an agent asking for a new pod by ID) is looked up in
    the population, O(1), as containerd looks an ID up; with a state or label filter, or for
    an unknown ID, its answer is the view's (the reference)."""
    sim, population = servicer
    for _ in range(20):
        population.step()
    population.crash_container(population.pod_uids()[3])
    snapshot = population.snapshot()
    view = sim.view()
    walks = population.snapshots
    cases: list[tuple[str, Any]] = []
    sandbox_states = [None, pb.PodSandboxStateValue(state=pb.SANDBOX_READY)]
    sandbox_states.append(pb.PodSandboxStateValue(state=pb.SANDBOX_NOTREADY))
    for sandbox in snapshot.sandboxes[:40]:
        for sandbox_state in sandbox_states:
            cases.append(("sandboxes", pb.PodSandboxFilter(id=sandbox.id, state=sandbox_state)))
        cases.append(("sandboxes", pb.PodSandboxFilter(id=sandbox.id, label_selector={"x": "y"})))
    container_states = [None, pb.ContainerStateValue(state=pb.CONTAINER_RUNNING)]
    container_states.append(pb.ContainerStateValue(state=pb.CONTAINER_EXITED))
    for container in snapshot.containers[:40]:
        for container_state in container_states:
            f = pb.ContainerFilter(id=container.id, state=container_state)
            cases.append(("containers", f))
    cases += [("sandboxes", pb.PodSandboxFilter(id="f" * 64))]
    cases += [("containers", pb.ContainerFilter(id="f" * 64))]
    for method, f in cases:
        expected = view.list_sandboxes(f) if method == "sandboxes" else view.list_containers(f)
        assert _listed_by_id(sim, method, f) == expected, f
    assert population.snapshots == walks
    population.step()  # a new generation: the view would be rebuilt for a filter it answers
    sandbox_id = population.snapshot().sandboxes[-1].id
    walks = population.snapshots
    (entry,) = _listed_by_id(sim, "sandboxes", pb.PodSandboxFilter(id=sandbox_id))
    assert pb.ListPodSandboxResponse.FromString(entry).items[0].id == sandbox_id
    assert population.snapshots == walks


def test_containerds_answer_is_the_status_alone_and_verbose_adds_its_info() -> None:
    population = Population(30, seed=5)
    sim = SimServicer(population, Faults(), threading.Event(), flavor=CONTAINERD)
    try:
        sandbox = population.snapshot().sandboxes[0]
        plain = status(sim, sandbox.id)
        assert plain == pb.PodSandboxStatusResponse(status=plain.status)
        assert plain.status.id == sandbox.id
        request = pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id, verbose=True)
        raw = sim.PodSandboxStatus(request, FakeContext())  # type: ignore[arg-type]
        verbose = pb.PodSandboxStatusResponse.FromString(raw)
        assert verbose.status == plain.status
        assert list(verbose.info) == ["info"]
        assert raw == sim.PodSandboxStatus(request, FakeContext())  # type: ignore[arg-type]
    finally:
        sim.close()
