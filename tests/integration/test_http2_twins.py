"""podcache's own HTTP/2 client and grpcio, held to one specification on the same runtime
(docs/architecture.md §7 rule 6): the simulated runtime, a real gRPC server on a unix socket.

- The filtered list calls of one pod (and of one ID) answer with the same bytes over either
  client, for every pod of a population with several attempts, exited containers, NotReady
  sandboxes and hostile IP strings.
- The GetContainerEvents stream gives the same events in the same order over either client,
  through creations, crashes and removals.
- Closing the getter ends a waiting stream with the error grpcio's closed channel gave.
- Status calls made together answer each sandbox as grpcio does; a failed one is its own.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from podcache.cri import CRIRuntime
from podcache.cri.eventstream import event_from_bytes
from podcache.cri.eventwire import status_fields
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import _id_requests, _pod_requests
from podcache.errors import CRIError, RuntimeUnavailableError
from podcache.model import ContainerEvent
from podcache.sim import PodShape, SimRuntime

_SERVICE = "/runtime.v1.RuntimeService/"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(40, seed=23) as runtime:
        yield runtime


def _grpc_bytes(channel: grpc.Channel, method: str, request: object) -> bytes:
    call = channel.unary_unary(
        _SERVICE + method,
        request_serializer=lambda r: r.SerializeToString(),
        response_deserializer=None,
    )
    answer: bytes = call(request, timeout=10)
    return answer


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
def test_filtered_list_calls_answer_the_same_bytes_over_either_client(
    sim: SimRuntime, all_: bool
) -> None:
    with sim.pause_churn(), CRIRuntime(sim.endpoint) as runtime:
        channel = grpc.insecure_channel(sim.endpoint.replace("unix://", "unix:"))
        pods = runtime.get_pods(True)
        assert len(pods) > 10
        for pod in pods:
            for sandboxes, containers in (
                _pod_requests(pod.id, all_),
                _id_requests(pod.sandboxes[0].id.id),
            ):
                ours = runtime._caller.pod_calls(
                    (("ListPodSandbox", sandboxes), ("ListContainers", containers))
                )
                theirs = [
                    _grpc_bytes(channel, "ListPodSandbox", sandboxes),
                    _grpc_bytes(channel, "ListContainers", containers),
                ]
                assert ours == theirs
        channel.close()


def _grpc_events(channel: grpc.Channel, into: list[ContainerEvent], url: str) -> None:
    stream = channel.unary_stream(
        _SERVICE + "GetContainerEvents",
        request_serializer=pb.GetEventsRequest.SerializeToString,
        response_deserializer=None,
    )(pb.GetEventsRequest())
    try:
        for message in stream:
            into.append(event_from_bytes(url, message))
    except grpc.RpcError:
        return


def _our_events(runtime: CRIRuntime, into: list[ContainerEvent]) -> None:
    with runtime.container_events() as stream, contextlib.suppress(RuntimeUnavailableError):
        for event in stream:  # until the getter is closed
            into.append(event)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def _has_pod(events: list[ContainerEvent], uid: str) -> bool:
    return any(event.pod_uid == uid for event in events)


def test_the_event_stream_gives_the_same_events_in_the_same_order_over_either_client(
    sim: SimRuntime,
) -> None:
    """Both subscribed (each has seen a marker pod's events), then creations, crashes and
    removals; from the first change on, both lists are the same events in the same order."""
    channel = grpc.insecure_channel(sim.endpoint.replace("unix://", "unix:"))
    theirs: list[ContainerEvent] = []
    ours: list[ContainerEvent] = []
    with sim.pause_churn(), CRIRuntime(sim.endpoint) as runtime:
        for target, args in (
            (_grpc_events, (channel, theirs, sim.endpoint)),
            (_our_events, (runtime, ours)),
        ):
            threading.Thread(target=target, args=args, daemon=True).start()
        while not (theirs and ours):  # the runtime acknowledges no subscription: a marker
            sim.population.create_pod(PodShape.RUNNING)
            time.sleep(0.02)
        made = []
        for _ in range(6):
            uid = sim.population.create_pod(PodShape.RUNNING)[0]
            made.append(uid)
            sim.population.crash_container(uid)
        for uid in made:
            sim.population.remove_pod(uid)
        last = sim.population.create_pod(PodShape.RUNNING)[0]
        for got in (theirs, ours):
            _until(functools.partial(_has_pod, got, last), "the last pod's event")
        time.sleep(0.05)  # the last pod's other events
    channel.close()

    def from_first_change(events: list[ContainerEvent]) -> list[ContainerEvent]:
        first = next(i for i, e in enumerate(events) if e.pod_uid == made[0])
        return [e for e in events[first:] if e.pod_uid in (*made, last)]

    assert len(from_first_change(ours)) > 20
    assert from_first_change(ours) == from_first_change(theirs)


def test_closing_the_getter_ends_a_waiting_stream_as_grpcios_closed_channel_did(
    sim: SimRuntime,
) -> None:
    runtime = CRIRuntime(sim.endpoint)
    stream = runtime.container_events()
    stream.open()
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            next(stream)
            outcome.append(None)
        except BaseException as error:  # the outcome is the test's subject
            outcome.append(error)

    with sim.pause_churn():
        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.1)
        runtime.close()
        reader.join(10)
    assert len(outcome) == 1
    assert isinstance(outcome[0], RuntimeUnavailableError)
    assert "client closed" in str(outcome[0])


def test_status_calls_made_together_answer_as_grpcio_each_failure_its_own(sim: SimRuntime) -> None:
    """A listing's status calls, made together on the own client (``SyncCaller.statuses``):
    each sandbox's fields are those of grpcio's answer to the same request, in order, and a
    call that fails (a sandbox the runtime does not know) is that call's error alone."""
    with sim.pause_churn(), CRIRuntime(sim.endpoint) as runtime:
        channel = grpc.insecure_channel(sim.endpoint.replace("unix://", "unix:"))
        ids = [sandbox.id.id for pod in runtime.get_pods(True) for sandbox in pod.sandboxes]
        asked = [*ids[:5], "0" * 64, *ids[5:]]
        outcomes = runtime._caller.statuses(asked)
        assert len(outcomes) == len(asked)
        for sandbox_id, outcome in zip(asked, outcomes, strict=True):
            if sandbox_id == "0" * 64:
                assert isinstance(outcome, CRIError)
                assert "PodSandboxStatus" in str(outcome)
                continue
            request = pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id)
            assert outcome == status_fields(_grpc_bytes(channel, "PodSandboxStatus", request))
        channel.close()
