"""The simulator's event bytes against protobuf's: ``SimServicer._event_bytes`` (each record's
status encoded once, the event joined from the parts) is held to ``event_message``, over
generated churn, hostile IPs and edge values: the bytes parse to an equal message, and are
as long as protobuf's own encoding (only the order of map entries, which the wire format
leaves free, may differ)."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.sim.faults import Faults
from podcache.sim.population import PodShape, Population, SimEvent, SimEventType
from podcache.sim.server import SimServicer, event_message


def servicer_over(population: Population, bad_ips: tuple[str, ...] = ()) -> SimServicer:
    faults = Faults()
    faults.bad_ips = bad_ips
    return SimServicer(population, faults, threading.Event())


def assert_encodes(sim: SimServicer, event: SimEvent, bad_ips: tuple[str, ...]) -> None:
    ours = sim._event_bytes(event)
    message = event_message(event, bad_ips)
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
    sim = servicer_over(population, bad_ips)
    try:
        events: list[SimEvent] = []
        for shape in PodShape:
            events += population.create_pod(shape)[1]
        for _ in range(steps):
            events += population.step()
        assert events
        for event in events * 2:  # the second time from the memo
            assert_encodes(sim, event, bad_ips)
    finally:
        sim.close()


def test_edge_values_are_encoded_as_protobuf_encodes_them() -> None:
    """No sandbox, no containers, the zero type and time (omitted), an empty ID, a negative
    time (a ten-byte varint), a time past 2**63 wrapped as an int64 would not be (masked)."""
    population = Population(3, seed=1)
    sim = servicer_over(population)
    try:
        for created_at in (0, 1, -1, -(2**63), 2**63 - 1):
            for container_id in ("", "c" * 64):
                for kind in SimEventType:
                    assert_encodes(sim, SimEvent(container_id, kind, created_at, None, ()), ())
    finally:
        sim.close()
