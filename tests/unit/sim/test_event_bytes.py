"""The simulator's event bytes against protobuf's: ``StatusEncodings.event`` (each record's
status encoded once, the event joined from the parts) is held to ``event_message``, over
generated churn, hostile IPs and edge values: the bytes parse to an equal message, and are
as long as protobuf's own encoding (only the order of map entries, which the wire format
leaves free, may differ)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.sim.encoding import (
    StatusEncodings,
    container_status_message,
    event_message,
    sandbox_status_message,
)
from podcache.sim.flavor import CRIO_ANSWERS
from podcache.sim.population import PodShape, Population, SimEvent, SimEventType


def assert_encodes(encodings: StatusEncodings, event: SimEvent, bad_ips: tuple[str, ...]) -> None:
    """As containerd fills an event (its sandbox's containers) and as CRI-O does (its pod's,
    the newest first)."""
    for carried in (None, CRIO_ANSWERS.event_containers(event)):
        ours = encodings.event(event, bad_ips, carried)
        message = event_message(event, bad_ips, carried)
        assert pb.ContainerEventResponse.FromString(ours) == message
        assert len(ours) == len(message.SerializeToString())


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    steps=st.integers(1, 12),
    bad_ips=st.lists(st.text(max_size=40), max_size=3).map(tuple),
)
def test_every_churned_event_is_encoded_as_protobuf_encodes_its_message(
    seed: int, steps: int, bad_ips: tuple[str, ...]
) -> None:
    population = Population(20, seed=seed)
    encodings = StatusEncodings()
    events: list[SimEvent] = []
    for shape in PodShape:
        events += population.create_pod(shape)[1]
    for _ in range(steps):
        events += population.step()
    assert events
    for event in events * 2:  # the second time from the memo
        assert_encodes(encodings, event, bad_ips)
    for sandbox in population.snapshot().sandboxes:  # PodSandboxStatus answers, joined alike
        containers = population.pod_records(sandbox.uid)[1]
        expected = pb.PodSandboxStatusResponse(
            status=sandbox_status_message(sandbox, bad_ips),
            containers_statuses=[container_status_message(c) for c in containers],
        )
        body = encodings.answer_body(sandbox, containers, bad_ips)
        assert pb.PodSandboxStatusResponse.FromString(body) == expected


def test_edge_values_are_encoded_as_protobuf_encodes_them() -> None:
    """No sandbox, no containers, the zero type and time (omitted), an empty ID, a negative
    time (a ten-byte varint) and both ends of int64."""
    encodings = StatusEncodings()
    for created_at in (0, 1, -1, -(2**63), 2**63 - 1):
        for container_id in ("", "c" * 64):
            for kind in SimEventType:
                assert_encodes(encodings, SimEvent(container_id, kind, created_at, None, ()), ())
