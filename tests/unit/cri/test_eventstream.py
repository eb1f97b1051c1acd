"""Every field of a GetContainerEvents response is checked before it becomes a ContainerEvent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podcache import ContainerEvent, ContainerEventType
from podcache.cri.eventstream import event_from_bytes
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import RuntimeProtocolError
from podcache.model import MAX_ID_LENGTH

URL = "unix:///run/x.sock"
CID = "a" * 64
SID = "b" * 64


def response(**kw: object) -> pb.ContainerEventResponse:
    fields: dict[str, object] = {
        "container_id": CID,
        "container_event_type": pb.CONTAINER_STARTED_EVENT,
        "created_at": 1_700_000_000_000_000_000,
        "pod_sandbox_status": pb.PodSandboxStatus(id=SID),
    }
    fields.update(kw)
    return pb.ContainerEventResponse(**fields)  # type: ignore[arg-type]


def event_from(url: str, message: pb.ContainerEventResponse) -> ContainerEvent:
    """The event of ``message`` as a getter reads it: from its wire bytes."""
    return event_from_bytes(url, message.SerializeToString())


def test_a_well_formed_event() -> None:
    assert event_from(URL, response()) == ContainerEvent(
        type=ContainerEventType.STARTED,
        container_id=CID,
        pod_sandbox_id=SID,
        created_at=1_700_000_000_000_000_000,
    )


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (pb.CONTAINER_CREATED_EVENT, ContainerEventType.CREATED),
        (pb.CONTAINER_STARTED_EVENT, ContainerEventType.STARTED),
        (pb.CONTAINER_STOPPED_EVENT, ContainerEventType.STOPPED),
        (pb.CONTAINER_DELETED_EVENT, ContainerEventType.DELETED),
    ],
)
def test_every_cri_event_type(value: int, kind: ContainerEventType) -> None:
    assert event_from(URL, response(container_event_type=value)).type is kind


GO_ZERO_TIME = -6_795_364_578_871_345_152
"""Go's zero time.Time in Unix nanoseconds: containerd 2.x's sandbox DELETED event carries it
as ``pod_sandbox_status.created_at``."""


@pytest.mark.parametrize(
    "kind", [pb.CONTAINER_CREATED_EVENT, pb.CONTAINER_DELETED_EVENT], ids=["created", "deleted"]
)
def test_a_containerd_2_sandbox_event_is_an_event_of_the_sandbox(kind: int) -> None:
    """containerd 2.x (and 1.7) send a sandbox's own events with its ID as ``container_id``;
    2.x's DELETED one has no container statuses and a sandbox created_at of Go's zero time,
    which is no reason to reject the event (only its own created_at is checked)."""
    r = response(
        container_id=SID,
        container_event_type=kind,
        pod_sandbox_status=pb.PodSandboxStatus(
            id=SID, created_at=GO_ZERO_TIME, metadata=pb.PodSandboxMetadata(uid="u", name="p")
        ),
    )
    event = event_from(URL, r)
    assert (event.container_id, event.pod_sandbox_id) == (SID, SID)


def test_no_sandbox_status_is_an_empty_sandbox_id() -> None:
    r = response()
    r.ClearField("pod_sandbox_status")
    assert event_from(URL, r).pod_sandbox_id == ""


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"container_event_type": 4}, "unknown event type 4"),
        ({"container_event_type": -1}, "unknown event type -1"),
        ({"container_id": ""}, "empty container_id"),
        ({"container_id": "a" * (MAX_ID_LENGTH + 1)}, "257 characters"),
        ({"container_id": "ab/../c"}, "not [A-Za-z0-9_.+-]"),
        ({"container_id": "é" * 4}, "not [A-Za-z0-9_.+-]"),
        ({"container_id": "a\nb"}, "not [A-Za-z0-9_.+-]"),
        ({"pod_sandbox_status": pb.PodSandboxStatus(id="x y")}, "pod_sandbox_status.id"),
        ({"created_at": -5}, "negative created_at"),
    ],
)
def test_malformed_fields_are_protocol_errors_naming_the_endpoint(
    fields: dict[str, object], said: str
) -> None:
    with pytest.raises(RuntimeProtocolError) as caught:
        event_from(URL, response(**fields))
    assert URL in str(caught.value)
    assert said in str(caught.value)


def test_ids_at_the_length_limit_pass() -> None:
    at_limit = "f" * MAX_ID_LENGTH
    event = event_from(URL, response(container_id=at_limit))
    assert event.container_id == at_limit


@given(
    cid=st.text(max_size=300),
    sid=st.text(max_size=300),
    kind=st.integers(-3, 8),
    created=st.integers(-(2**63), 2**63 - 1),
)
def test_any_response_is_an_event_or_a_protocol_error(
    cid: str, sid: str, kind: int, created: int
) -> None:
    r = response(
        container_id=cid,
        container_event_type=kind,
        created_at=created,
        pod_sandbox_status=pb.PodSandboxStatus(id=sid),
    )
    try:
        event = event_from(URL, r)
    except RuntimeProtocolError:
        return
    assert 0 < len(event.container_id) <= MAX_ID_LENGTH and event.container_id.isascii()
    assert len(event.pod_sandbox_id) <= MAX_ID_LENGTH and event.created_at >= 0
