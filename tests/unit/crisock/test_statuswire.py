"""The status calls' hand-read bytes (``serve/crisock/statuswire.py``) against protobuf's own
reading: every event protobuf encodes reads to the same facts, and any bytes at all read to
facts or ``ProtobufError``, never another exception (the runtime's bytes are hostile)."""

from __future__ import annotations

import contextlib

from hypothesis import given
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.statuswire import (
    ProtobufError,
    answer_id,
    event_facts,
    sandbox_parts,
    sandbox_state,
    stamped,
    status_answer,
    status_request,
)

ids = st.text(alphabet="0123456789abcdef", min_size=0, max_size=64)
labels = st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)
container_statuses = st.builds(
    pb.ContainerStatus, id=ids, state=st.sampled_from([0, 1, 2, 3]), labels=labels
)
sandbox_statuses = st.builds(pb.PodSandboxStatus, id=ids, labels=labels)
events = st.builds(
    pb.ContainerEventResponse,
    container_id=ids,
    container_event_type=st.sampled_from([0, 1, 2, 3]),
    created_at=st.integers(-(2**63), 2**63 - 1),
    pod_sandbox_status=st.none() | sandbox_statuses,
    containers_statuses=st.lists(container_statuses, max_size=3),
)


@given(events)
def test_an_event_reads_as_protobuf_reads_it(event: pb.ContainerEventResponse) -> None:
    facts = event_facts(event.SerializeToString())
    assert facts.container_id == event.container_id
    assert facts.kind == event.container_event_type
    assert facts.created_at == event.created_at
    if event.HasField("pod_sandbox_status"):
        assert facts.sandbox_id == event.pod_sandbox_status.id
        assert facts.sandbox_status is not None
        assert pb.PodSandboxStatus.FromString(facts.sandbox_status) == event.pod_sandbox_status
    else:
        assert (facts.sandbox_id, facts.sandbox_status) == ("", None)
    assert [i for i, _ in facts.container_statuses] == [s.id for s in event.containers_statuses]
    for (_, data), status in zip(facts.container_statuses, event.containers_statuses, strict=True):
        answer = pb.ContainerStatusResponse.FromString(status_answer(data))
        assert answer == pb.ContainerStatusResponse(status=status)


@given(st.binary(max_size=200))
def test_any_bytes_read_to_facts_or_protobuf_error(data: bytes) -> None:
    for read in (event_facts, answer_id, sandbox_state):
        with contextlib.suppress(ProtobufError):
            read(data)
    status_request(data)  # None for what is not a request, never an exception


@given(ids, st.booleans())
def test_a_request_reads_as_protobuf_reads_it(ident: str, verbose: bool) -> None:
    for request in (
        pb.ContainerStatusRequest(container_id=ident, verbose=verbose).SerializeToString(),
        pb.PodSandboxStatusRequest(pod_sandbox_id=ident, verbose=verbose).SerializeToString(),
    ):
        asked = status_request(request)
        assert asked is not None
        assert (asked.ident, asked.verbose) == (ident, verbose)


sandbox_answers = st.builds(
    pb.PodSandboxStatusResponse,
    status=st.builds(pb.PodSandboxStatus, id=ids, state=st.sampled_from([0, 1]), labels=labels),
    info=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    containers_statuses=st.lists(container_statuses, max_size=2),
    timestamp=st.integers(0, 2**62),
)


@given(sandbox_answers)
def test_a_sandbox_answers_state_is_read_only_when_it_is_its_status_alone(
    answer: pb.PodSandboxStatusResponse,
) -> None:
    """The state protobuf reads, for an answer of the status alone (containerd's plain
    answer); None when it carries anything else (a verbose ``info``, CRI-O's
    ``containers_statuses`` or ``timestamp``), whose parts may change with no sandbox event."""
    alone = not (answer.info or answer.containers_statuses or answer.timestamp)
    expected = answer.status.state if alone else None
    assert sandbox_state(answer.SerializeToString()) == expected


crio_sandbox_answers = st.builds(
    pb.PodSandboxStatusResponse,
    status=sandbox_statuses,
    info=st.dictionaries(st.sampled_from(["info"]), st.text(max_size=20), max_size=1),
    containers_statuses=st.lists(container_statuses, max_size=3),
    timestamp=st.integers(-(2**63), 2**63 - 1),
)


@given(crio_sandbox_answers, st.integers(0, 2**63 - 1))
def test_a_sandbox_answer_reads_as_protobuf_reads_it_and_takes_a_new_time(
    answer: pb.PodSandboxStatusResponse, now: int
) -> None:
    """``sandbox_parts`` drops the timestamp and keeps every other field; ``stamped`` gives the
    same answer with the time it is given."""
    parts = sandbox_parts(answer.SerializeToString())
    assert parts.extras is bool(answer.containers_statuses or answer.timestamp)
    assert parts.container_ids == tuple(c.id for c in answer.containers_statuses)
    without = pb.PodSandboxStatusResponse()
    without.CopyFrom(answer)
    without.ClearField("timestamp")
    assert pb.PodSandboxStatusResponse.FromString(parts.body) == without
    without.timestamp = now
    assert pb.PodSandboxStatusResponse.FromString(stamped(parts.body, now)) == without


@given(st.binary(max_size=200))
def test_any_bytes_read_as_a_sandbox_answer_or_protobuf_error(data: bytes) -> None:
    with contextlib.suppress(ProtobufError):
        sandbox_parts(data)
