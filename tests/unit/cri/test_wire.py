"""The C list reader (``podcache.cri._wire``) against protobuf's decoder, on the same bytes.

``pods_from_wire`` reads the two list answers with the C extension; its results must be the
ones protobuf's own decoder followed by ``build_pods`` gives, for every input: the rule tables of
test_convert, listings hypothesis draws (merged items, unknown fields, fields of the wrong wire
type, which protobuf reads as unknown), and corrupted bytes, which both must reject alike.
"""

from __future__ import annotations

import ast
import os
import random
import types
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

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


def test_a_sandbox_with_more_labels_than_any_cap_is_read() -> None:
    """Any number of labels is read: a pod of one tenant carrying 4,100 labels
    must not make the node's listing fail for every other pod."""
    crowded = pb.PodSandbox(id="s1", created_at=2)
    crowded.metadata.uid, crowded.metadata.name = "u1", "crowded"
    crowded.labels.update({f"k{i:05d}": f"v{i}" for i in range(4_100)})
    plain = pb.PodSandbox(id="s2", created_at=1)
    plain.metadata.uid, plain.metadata.name = "u2", "plain"
    plain.labels["app"] = "web"
    raw = wire([crowded, plain])
    pods = pods_from_wire(RT, raw, b"")
    assert [pod.name for pod in pods] == ["crowded", "plain"]
    assert pods[0].label_map() == dict(crowded.labels)
    assert pods[1].labels == (("app", "web"),)
    agree(raw, b"")


# -- where the readers once disagreed: each case checked against protobuf -----------------------
# Hex of a ListContainersResponse unless the id says sandboxes; the expected outcome is
# protobuf's (upb's), asserted here so that a change of protobuf's mind shows as such.

_ACCEPTED, _REJECTED = True, False
_GROUPS_AT_TOP = "13" * 100 + "14" * 100


@pytest.mark.parametrize(
    ("hex_bytes", "accepted"),
    [
        pytest.param(
            "08ffffffffffffffffff02", _ACCEPTED, id="10-byte varint, high bits in byte 10"
        ),
        pytest.param("08ffffffffffffffffff7f", _ACCEPTED, id="10-byte varint, byte 10 is 0x7f"),
        pytest.param("08ffffffffffffffffff8001", _REJECTED, id="11-byte varint"),
        pytest.param("88808080800000", _REJECTED, id="tag of 6 bytes"),
        pytest.param("888080800f00", _ACCEPTED, id="tag of 5 bytes below 2^32"),
        pytest.param("888080807000", _REJECTED, id="tag of 5 bytes above 2^32"),
        pytest.param("0a808080808000", _REJECTED, id="length of 6 bytes"),
        pytest.param("0a8080808000", _ACCEPTED, id="length of 5 bytes"),
        pytest.param("0b0a808080808000" + "0c", _REJECTED, id="length of 6 bytes in a group"),
        pytest.param("0b888080808000000c", _REJECTED, id="tag of 6 bytes in a group"),
        pytest.param("0b00000c", _ACCEPTED, id="field 0 inside an unknown group"),
        pytest.param("0b03040c", _ACCEPTED, id="group of field 0 inside an unknown group"),
        pytest.param("0b040c", _REJECTED, id="end of group 0 inside group 1"),
        pytest.param("0304", _REJECTED, id="group of field 0 at the top"),
        pytest.param("04", _REJECTED, id="end of group 0 at the top"),
        pytest.param(_GROUPS_AT_TOP, _ACCEPTED, id="100 nested groups at the top"),
        pytest.param("13" + _GROUPS_AT_TOP + "14", _REJECTED, id="101 nested groups at the top"),
        pytest.param(
            "0a330a0263311a050a0361707022070a056e67696e78421d0a15696f2e6b756265726e657465732e706f"
            "642e756964120275311800",
            _ACCEPTED,
            id="a uid label entry holding an unknown field",
        ),
        pytest.param(
            "sandboxes:0a210a027331120d0a03776562120275311a026e732a0c0a0361707012037765621801",
            _ACCEPTED,
            id="sandboxes: a label entry holding an unknown field",
        ),
    ],
)
def test_cases_where_the_readers_disagreed(hex_bytes: str, accepted: bool) -> None:
    kind, _, text = hex_bytes.rpartition(":")
    data = bytes.fromhex(text)
    sandbox_bytes, container_bytes = (data, b"") if kind == "sandboxes" else (b"", data)
    message = pb.ListPodSandboxResponse if kind == "sandboxes" else pb.ListContainersResponse
    if accepted:
        message.FromString(data)
    else:
        with pytest.raises(DecodeError):
            message.FromString(data)
    agree(sandbox_bytes, container_bytes)


def test_a_map_entry_holding_another_field_is_left_out_of_the_map() -> None:
    """The entry goes to the item's unknown fields: an earlier entry of the key stays."""
    app_web = length_delimited(1, b"app") + length_delimited(2, b"web")
    app_db = length_delimited(1, b"app") + length_delimited(2, b"db")
    meta = length_delimited(2, length_delimited(2, b"u1"))
    entries = [
        app_db + tag(3, 0) + b"\x01",  # an unknown field
        length_delimited(1, b"app") + tag(2, 0) + b"\x01",  # the value as a varint
        app_db + tag(7, 3) + tag(7, 4),  # an empty unknown group
    ]
    for entry in entries:
        item = length_delimited(1, b"s1") + meta + length_delimited(5, app_web)
        raw = listing_bytes([item + length_delimited(5, entry)])
        assert dict(pb.ListPodSandboxResponse.FromString(raw).items[0].labels) == {"app": "web"}
        assert only_pod(pods_from_wire(RT, raw, b"")).labels == (("app", "web"),)


def _nested_groups(depth: int) -> bytes:
    return tag(99, 3) * depth + tag(99, 4) * depth


class GroupPlace(NamedTuple):
    """Where a run of nested unknown groups sits, and how deep that place already is: groups
    and messages together nest at most 100 deep below the list answer (depth 0)."""

    depth: int
    wrap: Callable[[bytes], bytes]
    sandboxes: bool = False


_GROUP_PLACES = {
    "the list answer": GroupPlace(0, lambda g: g),
    "an item": GroupPlace(1, lambda g: listing_bytes([g])),
    "container metadata": GroupPlace(2, lambda g: container_bytes(length_delimited(3, g))),
    "a label entry": GroupPlace(2, lambda g: container_bytes(length_delimited(8, g))),
    "an image annotation": GroupPlace(
        3, lambda g: container_bytes(length_delimited(4, length_delimited(2, g)))
    ),
    "sandbox metadata": GroupPlace(2, lambda g: listing_bytes([length_delimited(2, g)]), True),
}


@needs_c
@pytest.mark.parametrize("place", list(_GROUP_PLACES))
def test_nesting_is_limited_where_protobuf_limits_it(place: str) -> None:
    where = _GROUP_PLACES[place]
    message = pb.ListPodSandboxResponse if where.sandboxes else pb.ListContainersResponse
    deepest = 100 - where.depth
    for groups, accepted in ((deepest, True), (deepest + 1, False)):
        data = where.wrap(_nested_groups(groups))
        if accepted:
            message.FromString(data)
        else:
            with pytest.raises(DecodeError):
                message.FromString(data)
        agree(*((data, b"") if where.sandboxes else (b"", data)))


def test_the_row_fields_in_the_stub_are_the_c_readers() -> None:
    """_wire.pyi declares the rows' fields the C code defines, in its order."""
    wire_module = pytest.importorskip("podcache.cri._wire")
    stub = ast.parse((Path(convert.__file__).parent / "_wire.pyi").read_text())
    for node in stub.body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Row"):
            declared = [f.name for f in node.body if isinstance(f, ast.FunctionDef)]
            row_type = getattr(wire_module, node.name)
            members = [
                name
                for name, value in vars(row_type).items()
                if isinstance(value, types.MemberDescriptorType)
            ]
            assert declared == members, node.name


# -- drawn shapes: raw encodings protobuf's serialiser never makes ------------------------------
# Non-minimal varints, tags and lengths (some one byte too long), 10-byte varints with high
# bits in their last byte, map entries holding other fields, runs of nested unknown groups at
# every level, and sandboxes with thousands of labels.


@st.composite
def padded_varint(draw: st.DrawFn, n: int, limit: int = 10) -> bytes:
    """``n`` as a varint of its minimal length or longer: up to ``limit`` bytes, now and then
    one more (which both readers must reject)."""
    minimal = bytearray(varint(n))
    total = draw(st.one_of(st.just(len(minimal)), st.integers(len(minimal), limit + 1)))
    if total == len(minimal):
        return bytes(minimal)
    minimal[-1] |= 0x80
    return bytes(minimal) + b"\x80" * (total - len(minimal) - 1) + b"\x00"


_ten_byte_varints = st.builds(
    lambda low, last: bytes(b | 0x80 for b in low) + bytes([last]),
    st.binary(min_size=9, max_size=9),
    st.integers(0, 0x7F),
)


@st.composite
def raw_field(draw: st.DrawFn, field: int, wire_type: int, payload: bytes = b"") -> bytes:
    """One field: its tag (padded up to 5 bytes, or 6), then a varint value (padded up to 10
    bytes, or 11, or with high bits in byte 10) or a length-delimited payload (its length
    padded up to 5 bytes, or 6)."""
    head = draw(padded_varint(field << 3 | wire_type, limit=5))
    if wire_type == 0:
        number = int.from_bytes(payload or b"\x00", "little")
        return head + draw(st.one_of(padded_varint(number), _ten_byte_varints))
    return head + draw(padded_varint(len(payload), limit=5)) + payload


_deep_groups = st.builds(_nested_groups, st.sampled_from([1, 2, 96, 97, 98, 99, 100]))
_raw_unknown = st.one_of(_unknown, _deep_groups)


@st.composite
def raw_message(draw: st.DrawFn, fields: list[tuple[int, int, bytes]]) -> bytes:
    """A message of these fields (each maybe left out), plus maybe unknown fields, in a
    drawn order."""
    parts = [draw(raw_field(f, wt, payload)) for f, wt, payload in fields if draw(st.booleans())]
    parts += draw(st.lists(_raw_unknown, max_size=1))
    return b"".join(draw(st.permutations(parts)))


_label_keys = st.sampled_from(
    [
        b"app",
        b"tier",
        b"io.kubernetes.pod.uid",
        b"io.kubernetes.pod.name",
        b"io.kubernetes.pod.namespace",
        b"io.kubernetes.container.hash",
    ]
)
_label_values = st.sampled_from([b"", b"web", b"u1", b"u2", b"1f", "é".encode()])


@st.composite
def raw_entry(draw: st.DrawFn) -> bytes:
    """A map<string, string> entry: key and value each maybe missing, maybe twice, maybe of
    another wire type, and maybe another field beside them."""
    fields = [(1, 2, draw(_label_keys)), (2, 2, draw(_label_values))]
    if draw(st.integers(0, 3)) == 0:
        fields.append((draw(st.sampled_from([1, 2])), 0, b"\x01"))
    if draw(st.integers(0, 3)) == 0:
        fields.append((draw(st.sampled_from([1, 2, 3, 15])), 2, draw(_label_values)))
    parts = [draw(raw_field(f, wt, payload)) for f, wt, payload in fields if draw(st.booleans())]
    if draw(st.integers(0, 5)) == 0:
        parts.append(draw(_raw_unknown))
    return b"".join(draw(st.permutations(parts)))


def _text_bytes(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    return strategy.map(str.encode)


@st.composite
def raw_sandbox(draw: st.DrawFn) -> bytes:
    metadata = draw(
        raw_message(
            [
                (1, 2, draw(_text_bytes(_text))),
                (2, 2, draw(_text_bytes(_uids))),
                (3, 2, draw(_text_bytes(_text))),
                (4, 0, b"\x02"),
            ]
        )
    )
    fields = [
        (1, 2, draw(_text_bytes(_ids))),
        (2, 2, metadata),
        (3, 0, draw(st.sampled_from([b"", b"\x01", b"\x07"]))),
        (4, 0, draw(st.sampled_from([b"", b"\x05", b"\xff\xff"]))),
        (7, 2, draw(_text_bytes(_text))),
    ]
    fields += [
        (draw(st.sampled_from([5, 6])), 2, draw(raw_entry()))
        for _ in range(draw(st.integers(0, 4)))
    ]
    return draw(raw_message(fields))


@st.composite
def raw_container(draw: st.DrawFn) -> bytes:
    metadata = draw(raw_message([(1, 2, draw(_text_bytes(_text))), (2, 0, b"\x01")]))
    image_fields = [(1, 2, draw(_text_bytes(_text))), (19, 2, draw(_text_bytes(_text)))]
    image_fields += [(2, 2, draw(raw_entry())) for _ in range(draw(st.integers(0, 2)))]
    fields = [
        (1, 2, draw(_text_bytes(_ids))),
        (2, 2, draw(_text_bytes(_ids))),
        (3, 2, metadata),
        (4, 2, draw(raw_message(image_fields))),
        (5, 2, draw(_text_bytes(_text))),
        (6, 0, draw(st.sampled_from([b"", b"\x01", b"\x02", b"\x09"]))),
        (7, 0, draw(st.sampled_from([b"", b"\x05", b"\xff\xff"]))),
        (10, 2, draw(_text_bytes(_text))),
    ]
    fields += [
        (draw(st.sampled_from([8, 9])), 2, draw(raw_entry()))
        for _ in range(draw(st.integers(0, 5)))
    ]
    return draw(raw_message(fields))


@needs_c
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.lists(raw_sandbox(), max_size=4),
    st.lists(raw_container(), max_size=5),
    st.lists(_raw_unknown, max_size=1),
)
def test_raw_encodings_read_alike(
    sandbox_items: list[bytes], container_items: list[bytes], top_level: list[bytes]
) -> None:
    agree(listing_bytes(sandbox_items), listing_bytes(container_items) + b"".join(top_level))


@needs_c
@settings(max_examples=60, deadline=None)
@given(
    st.integers(1_000, 5_000),
    st.floats(0, 0.5),
    st.floats(0, 0.05),
    st.integers(0, 2**32),
)
def test_thousands_of_labels_read_alike(
    n_labels: int, repeated: float, odd: float, seed: int
) -> None:
    """A sandbox with thousands of label entries: some keys listed again (the last value
    wins), some kubelet keys, some entries holding another field (left out of the map)."""
    rng = random.Random(seed)
    entries = []
    for i in range(n_labels):
        key = f"k{rng.randrange(i + 1):05d}" if rng.random() < repeated else f"key-{i:05d}"
        if rng.random() < 0.01:
            key = "io.kubernetes.pod." + key
        entry = length_delimited(1, key.encode()) + length_delimited(2, f"v{i}".encode())
        if rng.random() < odd:
            entry += tag(3, 0) + b"\x01"
        entries.append(length_delimited(5, entry))
    rng.shuffle(entries)
    item = length_delimited(1, b"s1") + length_delimited(2, length_delimited(2, b"u1"))
    raw = listing_bytes([item + b"".join(entries)])
    agree(raw, b"")
