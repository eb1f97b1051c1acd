"""The C list reader (``podcache.cri._wire``) against protobuf's decoder, on the same bytes.

``pods_from_wire`` reads the two list answers with the C extension; its results must be the
ones protobuf's own decoder followed by ``build_pods`` gives, for every input: the rule tables of
test_convert, listings hypothesis draws (merged items, unknown fields, fields of the wrong wire
type, which protobuf reads as unknown), and corrupted bytes, which both must reject alike.
"""

from __future__ import annotations

import os
import random

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri import convert
from podcache.cri.convert import (
    WIRE_READER,
    MalformedListingError,
    Memo,
    build_pods,
    pods_from_responses,
    pods_from_wire,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.model import PodList
from tests.unit.cri.test_convert import (
    CONTAINER_CASES,
    GROUP_CASES,
    RT,
    ContainerCase,
    GroupCase,
    only_pod,
    random_listing,
)

needs_c = pytest.mark.skipif(WIRE_READER != "c", reason="the C extension is not built here")


# -- a protobuf writer for hand-made wire bytes (test-only) -----------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def length_delimited(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


def listing_bytes(items: list[bytes]) -> bytes:
    """A list answer (either kind: the items are field 1 of both) of these item encodings."""
    return b"".join(length_delimited(1, item) for item in items)


def wire(messages: list[pb.PodSandbox] | list[pb.Container]) -> bytes:
    return listing_bytes([m.SerializeToString() for m in messages])


def through_protobuf(sandboxes: bytes, containers: bytes, memo: Memo | None = None) -> PodList:
    return pods_from_responses(
        RT,
        pb.ListPodSandboxResponse.FromString(sandboxes),
        pb.ListContainersResponse.FromString(containers),
        memo,
    )


# -- the rule tables, read from bytes -----------------------------------------------------------


@pytest.mark.parametrize("case", CONTAINER_CASES, ids=lambda c: c.name)
def test_container_rules_hold_for_wire_bytes(case: ContainerCase) -> None:
    pod = only_pod(pods_from_wire(RT, b"", wire([case.listed])))
    assert pod.containers == (() if case.expected is None else (case.expected,))


@pytest.mark.parametrize("case", GROUP_CASES, ids=lambda c: c.name)
def test_grouping_rules_hold_for_wire_bytes(case: GroupCase) -> None:
    assert list(pods_from_wire(RT, wire(case.sandboxes), wire(case.containers))) == case.expected


def test_the_memo_changes_nothing_for_wire_bytes() -> None:
    rng = random.Random(11)
    memo = Memo()
    for _ in range(100):
        sandboxes, containers = random_listing(rng)
        raw = (wire(sandboxes), wire(containers))
        assert pods_from_wire(RT, *raw, memo) == build_pods(RT, sandboxes, containers)


def test_the_protobuf_fallback_reads_bytes_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    listings = [random_listing(rng) for _ in range(30)]
    with_c = [pods_from_wire(RT, wire(s), wire(c)) for s, c in listings]
    monkeypatch.setattr(convert, "_WIRE", None)
    assert [pods_from_wire(RT, wire(s), wire(c)) for s, c in listings] == with_c
    with pytest.raises(MalformedListingError, match="ListContainersResponse"):
        pods_from_wire(RT, b"", b"\x0a\x05ab")


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="only CI insists on the C reader")
def test_ci_builds_the_c_reader() -> None:
    assert WIRE_READER == "c", "podcache.cri._wire did not compile: see scripts/setup's output"


# -- drawn listings: the C reader and protobuf agree ----------------------------------------------

_text = st.sampled_from(["", "a", "web", "u1", "u2", "ns", "é", "日本", "io.kubernetes.pod.x"])
_ids = st.sampled_from(["", "c1", "c2", "s1", "s2", "0123abcd"])
_uids = st.sampled_from(["", "u1", "u2"])
_labels = st.dictionaries(
    st.sampled_from(
        [
            "app",
            "io.kubernetes.pod.uid",
            "io.kubernetes.pod.name",
            "io.kubernetes.pod.namespace",
            "io.kubernetes.container.name",
            "tier",
            "日本",
        ]
    ),
    _text | _uids,
    max_size=5,
)
_hashes = st.sampled_from(["", "1f", "FFFFFFFFFFFFFFFF", "1" + "0" * 16, "0x1f", "g", " 1"])


@st.composite
def sandboxes(draw: st.DrawFn) -> pb.PodSandbox:
    s = pb.PodSandbox(
        id=draw(_ids),
        state=draw(st.sampled_from([0, 1, 7, -1])),  # type: ignore[arg-type]
        created_at=draw(st.sampled_from([0, 5, 100, -3, 2**62])),
        runtime_handler=draw(_text),
    )
    if draw(st.booleans()):
        s.metadata.SetInParent()
        s.metadata.name, s.metadata.uid = draw(_text), draw(_uids)
        s.metadata.namespace, s.metadata.attempt = draw(_text), draw(st.integers(0, 3))
    s.labels.update(draw(_labels))
    s.annotations.update(draw(_labels))
    return s


@st.composite
def containers(draw: st.DrawFn) -> pb.Container:
    c = pb.Container(
        id=draw(_ids),
        pod_sandbox_id=draw(_ids),
        image_ref=draw(_text),
        image_id=draw(_text),
        state=draw(st.sampled_from([0, 1, 2, 3, 9, -2])),  # type: ignore[arg-type]
        created_at=draw(st.sampled_from([0, 5, 100, -3, 2**62])),
    )
    if draw(st.booleans()):
        c.metadata.SetInParent()
        c.metadata.name, c.metadata.attempt = draw(_text), draw(st.integers(0, 3))
    if draw(st.booleans()):
        c.image.SetInParent()
        c.image.image, c.image.runtime_handler = draw(_text), draw(_text)
        c.image.user_specified_image = draw(_text)
        c.image.annotations.update(draw(_labels))
    c.labels.update(draw(_labels))
    c.annotations.update(draw(_labels))
    if draw(st.booleans()):
        c.annotations["io.kubernetes.container.hash"] = draw(_hashes)
    return c


# Fields no podcache message declares (or declared with another wire type), which decoders skip.
_fixed64 = st.binary(min_size=8, max_size=8)
_fixed32 = st.binary(min_size=4, max_size=4)
_unknown = st.one_of(
    st.builds(lambda f, n: tag(f, 0) + varint(n), st.sampled_from([11, 99, 1000]), st.integers(0)),
    st.builds(lambda f, b: tag(f, 1) + b, st.sampled_from([12, 3]), _fixed64),
    st.builds(length_delimited, st.sampled_from([13, 536870911]), st.binary()),
    st.builds(lambda f, b: tag(f, 5) + b, st.sampled_from([14, 1]), _fixed32),
    st.builds(lambda f, n: tag(f, 0) + varint(n), st.sampled_from([1, 3, 4, 8]), st.integers(0, 9)),
    st.builds(lambda f: tag(f, 3) + tag(2, 0) + b"\x01" + tag(f, 4), st.sampled_from([15, 2])),
)


@st.composite
def encodings(draw: st.DrawFn, items: st.SearchStrategy[pb.PodSandbox | pb.Container]) -> bytes:
    """One item's bytes: serialised, now and then split across two merged encodings, with
    unknown fields mixed in."""
    data = draw(items).SerializeToString()
    if draw(st.booleans()):
        data += draw(items).SerializeToString()  # a second encoding merges into the first
    for _ in range(draw(st.integers(0, 2))):
        data += draw(_unknown)
    return data


def agree(sandbox_bytes: bytes, container_bytes: bytes) -> None:
    """The C reader gives protobuf's result, or both reject the bytes."""
    try:
        expected: PodList | None = through_protobuf(sandbox_bytes, container_bytes)
    except DecodeError:
        expected = None
    if expected is None:
        with pytest.raises(MalformedListingError):
            pods_from_wire(RT, sandbox_bytes, container_bytes)
    else:
        assert pods_from_wire(RT, sandbox_bytes, container_bytes) == expected


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(encodings(sandboxes()), max_size=6),
    st.lists(encodings(containers()), max_size=8),
    st.lists(_unknown, max_size=2),
)
def test_drawn_listings_read_alike(
    sandbox_items: list[bytes], container_items: list[bytes], top_level: list[bytes]
) -> None:
    agree(listing_bytes(sandbox_items) + b"".join(top_level), listing_bytes(container_items))


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    st.lists(encodings(sandboxes()), min_size=1, max_size=3),
    st.lists(encodings(containers()), min_size=1, max_size=3),
    st.data(),
)
def test_corrupted_bytes_are_rejected_alike(
    sandbox_items: list[bytes], container_items: list[bytes], data: st.DataObject
) -> None:
    raw = [bytearray(listing_bytes(sandbox_items)), bytearray(listing_bytes(container_items))]
    for _ in range(data.draw(st.integers(1, 3))):
        target = raw[data.draw(st.integers(0, 1))]
        if not target:
            continue
        at = data.draw(st.integers(0, len(target) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "high"]))
        if action == "flip":
            target[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "cut":
            del target[at:]
        elif action == "insert":
            target[at:at] = data.draw(st.binary(min_size=1, max_size=3))
        else:
            target[at] |= 0x80  # a continuation bit: lengths and tags run on
    agree(bytes(raw[0]), bytes(raw[1]))


# -- hand-made edge cases ----------------------------------------------------------------------


def container_bytes(*fields: bytes) -> bytes:
    return listing_bytes([b"".join(fields)])


META = length_delimited(3, length_delimited(1, b"app"))
IMAGE = length_delimited(4, length_delimited(1, b"nginx"))
UID = length_delimited(
    8, length_delimited(1, b"io.kubernetes.pod.uid") + length_delimited(2, b"u1")
)


@needs_c
@pytest.mark.parametrize(
    "data",
    [
        pytest.param(container_bytes(length_delimited(1, b"c\xff"), META), id="bad UTF-8 in id"),
        pytest.param(
            container_bytes(length_delimited(2, b"\xc0\x80"), META), id="overlong in unread field"
        ),
        pytest.param(container_bytes(length_delimited(1, b"\xed\xa0\x80"), META), id="a surrogate"),
        pytest.param(listing_bytes([b"\x0a\x05ab"]), id="length past the end"),
        pytest.param(b"\x0a", id="a truncated length"),
        pytest.param(b"\x08" + b"\xff" * 10 + b"\x01", id="varint of 11 bytes"),
        pytest.param(b"\x0f", id="wire type 7"),
        pytest.param(b"\x00\x00", id="field number 0"),
        pytest.param(b"\x0c", id="end group without start"),
        pytest.param(b"\x0b\x08\x01", id="group without end"),
        pytest.param(b"\x0b\x14", id="end group of another field"),
    ],
)
def test_malformed_bytes_are_rejected_alike(data: bytes) -> None:
    with pytest.raises(DecodeError):
        pb.ListContainersResponse.FromString(data)
    with pytest.raises(MalformedListingError, match="malformed ListContainersResponse"):
        pods_from_wire(RT, b"", data)


@needs_c
@pytest.mark.parametrize(
    "data",
    [
        pytest.param(container_bytes(length_delimited(1, b"c1"), META, IMAGE, UID), id="plain"),
        pytest.param(
            container_bytes(tag(1, 0) + b"\x05", META, IMAGE, UID, length_delimited(1, b"c9")),
            id="id as a varint is unknown; a later id counts",
        ),
        pytest.param(
            container_bytes(length_delimited(1, b"c1"), META, IMAGE, UID, tag(6, 2) + b"\x00"),
            id="state as bytes is unknown",
        ),
        pytest.param(
            container_bytes(
                length_delimited(1, b"c1"),
                length_delimited(3, length_delimited(1, b"first")),
                IMAGE,
                UID,
                length_delimited(3, tag(2, 0) + b"\x01"),
            ),
            id="metadata merged: the name stays",
        ),
        pytest.param(
            container_bytes(
                length_delimited(1, b"c1"),
                META,
                IMAGE,
                UID,
                length_delimited(8, length_delimited(2, b"no key")),
                length_delimited(8, length_delimited(1, b"io.kubernetes.pod.uid")),
            ),
            id="map entries without a value or a key",
        ),
        pytest.param(
            container_bytes(
                length_delimited(1, b"c1"), META, IMAGE, UID, tag(7, 0) + b"\xff" * 9 + b"\x01"
            ),
            id="created_at of ten bytes",
        ),
        pytest.param(
            container_bytes(length_delimited(1, b"c1"), META, IMAGE, tag(9, 3) + tag(9, 4), UID),
            id="an empty group where a map was",
        ),
    ],
)
def test_edge_encodings_read_alike(data: bytes) -> None:
    agree(b"", data)


@needs_c
def test_many_labels_and_long_strings() -> None:
    s = pb.PodSandbox(id="s1", created_at=1)
    s.metadata.uid, s.metadata.name = "u1", "x" * 100_000
    s.labels.update({f"k{i:05d}": "é" * (i % 7) for i in range(3000)})
    raw = wire([s])
    pod = only_pod(pods_from_wire(RT, raw, b""))
    assert pod.name == "x" * 100_000
    assert pod.label_map() == dict(s.labels)
    agree(raw, b"")
