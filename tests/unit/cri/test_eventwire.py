"""``eventwire.event_fields`` held to protobuf's decoder, both of its readers (the
Python one and, where it is built, the C extension's): on generated ``ContainerEventResponse``
messages (merged repeats, unknown fields and groups, every int range, non-ASCII text, big label
maps and container statuses) each reads the fields protobuf decodes; on corrupted and truncated
bytes each is never stricter than protobuf, and whenever both accept they agree. Its one
documented leniency (strings it does not read are not decoded) is tested by name.
test_eventwire_c.py holds the C reader to the Python one, error messages included.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri import eventwire
from podcache.cri.eventstream import _checked, event_from_bytes
from podcache.cri.eventwire import (
    EVENT_READER,
    MAX_ADDITIONAL_IPS,
    MAX_DEPTH,
    MAX_EVENT_CONTAINERS,
    ContainerFields,
    EventFields,
    EventWireError,
    event_fields,
    event_fields_python,
    status_fields,
    status_fields_python,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import RuntimeProtocolError

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(max_size=12)
LABELS = st.dictionaries(TEXT, TEXT, max_size=6)
IP_TEXT = st.one_of(st.ip_addresses().map(str), TEXT)

Reader = Callable[[bytes], EventFields]
EVENT_READERS: dict[str, Reader] = {"python": event_fields_python}
STATUS_READERS: dict[str, Reader] = {"python": status_fields_python}
if EVENT_READER == "c":  # eventwire's own functions are the C reader's then
    EVENT_READERS["c"] = event_fields
    STATUS_READERS["c"] = status_fields


def _container_reference(status: pb.ContainerStatus) -> ContainerFields:
    return (
        status.id,
        status.metadata.name,
        status.metadata.attempt,
        status.state,
        status.created_at,
        status.image.image,
        status.image_ref,
    )


def _status_reference(
    status: pb.PodSandboxStatus,
    event_type: int = 0,
    container_id: str = "",
    created_at: int = 0,
    containers: Sequence[pb.ContainerStatus] = (),
) -> EventFields:
    additional = [p.ip for p in status.network.additional_ips]
    return EventFields(
        event_type,
        container_id,
        created_at,
        status.id,
        status.metadata.uid,
        status.state,
        status.network.ip,
        tuple(additional[:MAX_ADDITIONAL_IPS]),
        max(0, len(additional) - MAX_ADDITIONAL_IPS),
        status.linux.namespaces.options.network,
        status.metadata.name,
        status.metadata.namespace,
        status.created_at,
        tuple(_container_reference(c) for c in containers[:MAX_EVENT_CONTAINERS]),
        max(0, len(containers) - MAX_EVENT_CONTAINERS),
    )


def _reference(data: bytes) -> EventFields:
    message = pb.ContainerEventResponse.FromString(data)
    return _status_reference(
        message.pod_sandbox_status,
        message.container_event_type,
        message.container_id,
        message.created_at,
        message.containers_statuses,
    )


@st.composite
def sandbox_status(draw: st.DrawFn) -> pb.PodSandboxStatus:
    status = pb.PodSandboxStatus(
        id=draw(TEXT),
        state=cast(Any, draw(st.sampled_from([0, 1]))),
        created_at=draw(INT64),
        labels=draw(LABELS),
        annotations=draw(LABELS),
        runtime_handler=draw(TEXT),
    )
    if draw(st.booleans()):
        status.network.ip = draw(IP_TEXT)
        for _ in range(draw(st.integers(0, MAX_ADDITIONAL_IPS + 2))):
            status.network.additional_ips.add(ip=draw(IP_TEXT))
    if draw(st.booleans()):
        status.linux.namespaces.options.network = cast(Any, draw(st.integers(0, 3)))
        status.linux.namespaces.options.pid = cast(Any, draw(st.integers(0, 3)))
    if draw(st.booleans()):
        status.metadata.CopyFrom(
            pb.PodSandboxMetadata(
                name=draw(TEXT),
                uid=draw(TEXT),
                namespace=draw(TEXT),
                attempt=draw(st.integers(0, 2**32 - 1)),
            )
        )
    return status


@st.composite
def event_message(draw: st.DrawFn) -> bytes:
    message = pb.ContainerEventResponse(
        container_id=draw(TEXT),
        container_event_type=cast(Any, draw(INT32)),
        created_at=draw(INT64),
    )
    if draw(st.booleans()):
        message.pod_sandbox_status.CopyFrom(draw(sandbox_status()))
    for _ in range(draw(st.integers(0, 3))):
        message.containers_statuses.add().CopyFrom(draw(container_status()))
    if draw(st.integers(0, 9)) == 0:  # past the bound: the rest are read and counted
        for _ in range(MAX_EVENT_CONTAINERS):
            message.containers_statuses.add(id=draw(TEXT))
    return message.SerializeToString()


@st.composite
def container_status(draw: st.DrawFn) -> pb.ContainerStatus:
    status = pb.ContainerStatus(
        id=draw(TEXT),
        state=cast(Any, draw(st.integers(0, 3))),
        created_at=draw(INT64),
        image_ref=draw(TEXT),
        labels=draw(LABELS),
        annotations=draw(LABELS),
        log_path=draw(TEXT),
    )
    if draw(st.booleans()):
        status.metadata.CopyFrom(
            pb.ContainerMetadata(name=draw(TEXT), attempt=draw(st.integers(0, 2**32 - 1)))
        )
    if draw(st.booleans()):
        status.image.CopyFrom(pb.ImageSpec(image=draw(TEXT), annotations=draw(LABELS)))
    return status


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@st.composite
def unknown_field(draw: st.DrawFn) -> bytes:
    """A field podcache does not read: an unknown number, or a known one with another type."""
    field = draw(st.one_of(st.integers(1, 5), st.integers(6, 2**29 - 1)))
    wire = draw(st.sampled_from([0, 1, 2, 3, 5]))
    tag = _varint(field << 3 | wire)
    if wire == 0:
        return tag + _varint(draw(st.integers(0, 2**64 - 1)))
    if wire == 1:
        return tag + draw(st.binary(min_size=8, max_size=8))
    if wire == 5:
        return tag + draw(st.binary(min_size=4, max_size=4))
    if wire == 2:
        body = draw(st.binary(max_size=20))
        if field == 1:  # the known length-delimited fields: keep them valid
            body = draw(TEXT).encode()
        elif field == 4:
            body = draw(sandbox_status()).SerializeToString()
        elif field == 5:
            body = pb.ContainerStatus(id=draw(TEXT), labels=draw(LABELS)).SerializeToString()
        return tag + _varint(len(body)) + body
    inner = _varint(7 << 3 | 0) + _varint(draw(st.integers(0, 300)))  # a group holding a varint
    return tag + inner + _varint(field << 3 | 4)


@st.composite
def wire_message(draw: st.DrawFn) -> bytes:
    """Messages concatenated (protobuf merges them) with unknown fields between them."""
    parts = [draw(event_message()) for _ in range(draw(st.integers(1, 3)))]
    extras = [draw(unknown_field()) for _ in range(draw(st.integers(0, 3)))]
    pieces = parts + extras
    order = draw(st.permutations(range(len(pieces))))
    return b"".join(pieces[i] for i in order)


@settings(max_examples=600, deadline=None)
@given(wire_message())
def test_the_reader_reads_what_protobuf_decodes(data: bytes) -> None:
    expected = _reference(data)
    for name, read in EVENT_READERS.items():
        assert read(data) == expected, name


@settings(max_examples=1500, deadline=None)
@given(wire_message(), st.data())
def test_on_corrupted_bytes_the_reader_is_never_stricter_and_agrees(
    data: bytes, draw: st.DataObject
) -> None:
    corrupted = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        if not corrupted:
            break
        at = draw.draw(st.integers(0, len(corrupted) - 1))
        corrupted[at] = draw.draw(st.integers(0, 255))
    if draw.draw(st.booleans()):
        corrupted = corrupted[: draw.draw(st.integers(0, len(corrupted)))]
    raw = bytes(corrupted)
    try:
        expected = _reference(raw)
    except DecodeError:
        expected = None
    for name, read in EVENT_READERS.items():
        try:
            got = read(raw)
        except EventWireError:
            assert expected is None, f"protobuf accepts {raw!r}, the {name} reader refused it"
            continue
        if expected is not None:
            assert got == expected, name


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x0a\x05abc", "past the end"),
        (b"\x18" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\x00\x01", "field number of 0"),
        (b"\x0e\x01", "wire type 6"),
        (b"\x0c", "no group open"),
        (b"\x0b\x18\x01", "not ended"),
        (b"\x0b\x14", "ended by the end of group 2"),
        (b"\x0a\x02\xc3\x28", "container_id is not UTF-8"),
        (b"\x22\x05\x12\x03\x12\x01\x80", "metadata.uid is not UTF-8"),
        (b"\x0b" * (MAX_DEPTH + 2), "nested deeper"),
    ],
)
def test_malformed_wire_data_is_refused_naming_the_problem(data: bytes, words: str) -> None:
    for read in EVENT_READERS.values():
        with pytest.raises(EventWireError, match=words):
            read(data)
    with pytest.raises(DecodeError):
        pb.ContainerEventResponse.FromString(data)


def test_field_number_0_is_allowed_inside_an_unknown_group_as_protobuf_allows_it() -> None:
    data = b"\x0a\x01c\x10\x01" + b"\x33" + b"\x00\x05" + b"\x34"  # group 6 holding field 0
    for read in EVENT_READERS.values():
        assert read(data) == _reference(data) == EventFields(1, "c", 0, "", "")


def test_strings_it_does_not_read_are_not_decoded() -> None:
    """The one leniency: a label that is not UTF-8 (protobuf refuses the message)."""
    entry = b"\x0a\x01k\x12\x02\xc3\x28"  # key "k", value b"\xc3\x28"
    status = b"\x0a\x01s" + b"\x3a" + bytes([len(entry)]) + entry
    data = b"\x0a\x01c\x10\x01" + b"\x22" + bytes([len(status)]) + status
    with pytest.raises(DecodeError):
        pb.ContainerEventResponse.FromString(data)
    for read in EVENT_READERS.values():
        assert read(data) == EventFields(1, "c", 0, "s", "")


def test_a_big_sandbox_status_is_read_without_its_labels_being_built() -> None:
    status = pb.PodSandboxStatus(id="s" * 64, labels={f"k{n}": "v" * 100 for n in range(20_000)})
    status.metadata.uid = "u-1"
    message = pb.ContainerEventResponse(
        container_id="c" * 64,
        container_event_type=cast(Any, 1),
        created_at=5,
        pod_sandbox_status=status,
    )
    message.containers_statuses.add(id="c" * 64, annotations={"a": "b" * 1_000_000})
    data = message.SerializeToString()
    assert len(data) > 3_000_000
    for read in EVENT_READERS.values():
        read_fields = read(data)
        assert read_fields[:5] == (1, "c" * 64, 5, "s" * 64, "u-1")
        assert read_fields.containers == (("c" * 64, "", 0, 0, 0, "", ""),)
    assert event_from_bytes("fake://", data) == _checked("fake://", _reference(data))


def test_the_checks_of_event_from_hold_on_bytes_too() -> None:
    data = pb.ContainerEventResponse(container_id="bad id!", container_event_type=cast(Any, 1))
    with pytest.raises(RuntimeProtocolError, match="container_id that is not"):
        event_from_bytes("fake://", data.SerializeToString())
    with pytest.raises(RuntimeProtocolError, match="malformed event: a varint"):
        event_from_bytes("fake://", b"\x18\xff")


@settings(max_examples=300, deadline=None)
@given(sandbox_status(), st.lists(st.binary(max_size=8), max_size=2))
def test_a_status_answer_is_read_as_an_events_sandbox_status(
    status: pb.PodSandboxStatus, infos: list[bytes]
) -> None:
    """``status_fields`` over a PodSandboxStatusResponse: its status as protobuf decodes it,
    its info and container statuses skipped."""
    answer = pb.PodSandboxStatusResponse(
        status=status, info={f"k{i}": v.hex() for i, v in enumerate(infos)}, timestamp=7
    )
    answer.containers_statuses.add(id="c", labels={"a": "b"})
    data = answer.SerializeToString()
    expected = _status_reference(pb.PodSandboxStatusResponse.FromString(data).status)
    for name, read in STATUS_READERS.items():
        assert read(data) == expected, name


def test_an_ip_that_is_not_utf8_is_kept_as_text_to_be_dropped_not_a_broken_answer() -> None:
    network = b"\x0a\x02\xc3\x28"  # ip = b"\xc3\x28"
    status = b"\x0a\x01s" + b"\x2a" + bytes([len(network)]) + network
    data = b"\x0a" + bytes([len(status)]) + status
    for read in STATUS_READERS.values():
        fields = read(data)
        assert fields.sandbox_id == "s" and fields.ip == "\ufffd("


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="only CI insists on the C reader")
def test_ci_reads_events_with_the_c_reader() -> None:
    assert EVENT_READER == "c", "podcache.cri._wire did not compile: see scripts/setup's output"


def test_without_the_c_extension_eventwire_reads_with_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status = pb.PodSandboxStatus(id="s", metadata=pb.PodSandboxMetadata(uid="u"))
    data = pb.ContainerEventResponse(
        container_id="c", pod_sandbox_status=status
    ).SerializeToString()
    answer = pb.PodSandboxStatusResponse(status=status).SerializeToString()
    monkeypatch.setattr(eventwire, "_C_READER", None)
    assert event_fields(data) == event_fields_python(data) == EventFields(0, "c", 0, "s", "u")
    assert status_fields(answer) == EventFields(0, "", 0, "s", "u")
    with pytest.raises(EventWireError, match="past the end"):
        event_fields(b"\x0a\x05abc")
