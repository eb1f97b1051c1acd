"""The C event reader (``podcache.cri._wire.event_fields`` / ``status_fields``, what
``eventwire.event_fields`` / ``status_fields`` run where it is built) held to the Python reader
(``event_fields_python`` / ``status_fields_python``), eventwire's reference: on every input the
two give equal fields, or both refuse it with the same message. Inputs: hypothesis' protobuf
messages (test_eventwire's, where the Python reader is held to protobuf) and their corruptions,
raw wire data built token by token (every wire type, padded and over-long varints, nested
messages at the known field numbers, groups, bad UTF-8), and the adversarial cases by name:
every truncation of simulator events, over-long varints, huge lengths, deep groups, bad UTF-8
in each field read, many additional IPs, merged sandbox statuses, 16 MiB of labels. Then the
GIL: released while a large input of bytes is scanned, kept for a small or mutable one.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri import _wire
from podcache.cri.eventwire import (
    EVENT_READER,
    MAX_ADDITIONAL_IPS,
    MAX_DEPTH,
    MAX_EVENT_CONTAINERS,
    EventFields,
    EventWireError,
    event_fields,
    event_fields_python,
    status_fields,
    status_fields_python,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.sim.population import Population
from podcache.sim.server import event_message, sandbox_status_message
from tests.unit.cri.test_eventwire import (
    TEXT,
    _reference,
    _status_reference,
    sandbox_status,
    wire_message,
)

pytestmark = pytest.mark.skipif(EVENT_READER != "c", reason="the C extension is not built here")

Outcome = tuple[str, object]
"""("fields", the EventFields) or ("error", the EventWireError's message)."""


def _outcome(read: Callable[[bytes], EventFields], data: bytes) -> Outcome:
    try:
        return ("fields", read(data))
    except EventWireError as error:
        return ("error", str(error))


def _assert_alike(data: bytes) -> Outcome:
    """C and Python agree on ``data`` read as an event and as a status answer; the event's
    outcome."""
    event = _outcome(event_fields, data)
    assert event == _outcome(event_fields_python, data), data[:200]
    if event[0] == "fields":
        assert type(event[1]) is EventFields
    status = _outcome(status_fields, data)
    assert status == _outcome(status_fields_python, data), data[:200]
    return event


# -- a wire writer for hand-made bytes (test-only) ---------------------------------------------


def varint(value: int, padding: int = 0) -> bytes:
    """``value`` (mod 2^64) as a varint, with ``padding`` redundant zero groups (over-long
    encodings: protobuf reads up to 10 bytes)."""
    value &= (1 << 64) - 1
    groups = []
    while True:
        groups.append(value & 0x7F)
        value >>= 7
        if not value:
            break
    groups += [0] * padding
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def tag(field: int, wire: int, padding: int = 0) -> bytes:
    return varint(field << 3 | wire, padding)


def length_field(field: int, body: bytes) -> bytes:
    return tag(field, 2) + varint(len(body)) + body


def network(ip: bytes = b"", additional: list[bytes] | None = None) -> bytes:
    body = length_field(1, ip) if ip else b""
    for extra in additional or []:
        body += length_field(2, length_field(1, extra))
    return body


def status(sandbox_id: bytes = b"s", uid: bytes = b"u", net: bytes = b"", state: int = 0) -> bytes:
    """A PodSandboxStatus: id (1), metadata (2: uid 2), state (3), network (5)."""
    body = length_field(1, sandbox_id) + length_field(2, length_field(2, uid))
    body += tag(3, 0) + varint(state)
    return body + (length_field(5, net) if net else b"")


def event(container_id: bytes = b"c", sandbox: bytes | None = None, kind: int = 1) -> bytes:
    body = length_field(1, container_id) + tag(2, 0) + varint(kind) + tag(3, 0) + varint(7)
    return body + (length_field(4, sandbox) if sandbox is not None else b"")


# -- raw wire data, token by token -------------------------------------------------------------

BAD_UTF8 = [
    b"\xc3\x28",  # a lead byte without its continuation
    b"\x80",  # a lone continuation byte
    b"\xff",
    b"\xc0\xaf",  # overlong "/"
    b"\xe0\x80\xaf",  # overlong, 3 bytes
    b"\xf0\x80\x80\xaf",  # overlong, 4 bytes
    b"\xed\xa0\x80",  # a surrogate (U+D800)
    b"\xed\xbf\xbf",  # a surrogate (U+DFFF)
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf8\x88\x80\x80\x80",  # a 5-byte form
    b"\xe2\x82",  # cut short
    b"abc\xe2\x82",  # cut short at the end of ASCII
    b"12345678\xe2",  # cut short after a full 8-byte ASCII word
]
GOOD_UTF8 = [b"", b"10.0.0.1", "é".encode(), "€".encode(), "😀".encode(), "\uffff".encode()]

KNOWN_NUMBERS = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9])  # read at some level, or labels
_NUMBER_KINDS = {
    "known": KNOWN_NUMBERS,
    "other": st.integers(9, 2**29 - 1),
    "zero": st.just(0),
    "past": st.sampled_from([2**29, 2**31]),  # a key past 2^32-1
}
NUMBERS = st.sampled_from(["known"] * 50 + ["other"] * 5 + ["zero", "past"]).flatmap(
    _NUMBER_KINDS.__getitem__
)
"""Field numbers, mostly the known ones; rarely an invalid one."""
PADDING = st.sampled_from([0] * 60 + [1, 2, 3, 7, 9, 11])
"""Redundant varint bytes: mostly none, at times past the 10 bytes allowed."""
_PAYLOAD_KINDS = {
    "text": TEXT.map(str.encode),
    "binary": st.binary(max_size=6),
    "chosen": st.sampled_from(BAD_UTF8 + GOOD_UTF8),
}
PAYLOADS = st.sampled_from(["text"] * 12 + ["binary", "chosen"]).flatmap(_PAYLOAD_KINDS.__getitem__)
"""Strings: mostly text, at times random bytes or chosen bad and good UTF-8."""
LEAF_KINDS = st.sampled_from(["varint"] * 8 + ["fixed"] * 2 + ["bytes"] * 12 + ["junk"])


@st.composite
def leaf_field(draw: st.DrawFn) -> bytes:
    number, kind = draw(NUMBERS), draw(LEAF_KINDS)
    if kind == "varint":
        value = draw(st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([1, 2**31, 2**63])))
        return tag(number, 0, draw(PADDING)) + varint(value, draw(PADDING))
    if kind == "fixed":
        size = draw(st.sampled_from([4, 8]))
        return tag(number, 5 if size == 4 else 1) + draw(st.binary(min_size=size, max_size=size))
    if kind == "bytes":
        body = draw(PAYLOADS)
        return tag(number, 2, draw(PADDING)) + varint(len(body), draw(PADDING)) + body
    return draw(st.sampled_from([b"\x0e", b"\x0f", b"\x0c", b"\x00", b"\x80", b"\x22\x7f"]))


def _nested(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    bodies = st.lists(children, max_size=4).map(b"".join)
    message = st.tuples(NUMBERS, bodies).map(lambda nb: length_field(nb[0], nb[1]))
    matched = st.sampled_from([True] * 15 + [False])  # ended by another group's end: rarely
    group = st.tuples(NUMBERS, bodies, matched).map(
        lambda nbm: tag(nbm[0], 3) + nbm[1] + tag(nbm[0] if nbm[2] else nbm[0] + 1, 4)
    )
    return st.one_of([message] * 4 + [group])


FIELD = st.recursive(leaf_field(), _nested, max_leaves=12)
"""Any field: random numbers, wire types and nesting."""


def _varint_field(number: int) -> st.SearchStrategy[bytes]:
    values = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2, 2**31, 2**63]))
    return st.tuples(PADDING, values, PADDING).map(
        lambda pvp: tag(number, 0, pvp[0]) + varint(pvp[1], pvp[2])
    )


def _bytes_field(number: int, body: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.tuples(PADDING, body, PADDING).map(
        lambda pbp: tag(number, 2, pbp[0]) + varint(len(pbp[1]), pbp[2]) + pbp[1]
    )


def _message(*fields: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A message of the given fields in any order and number, with random fields among them
    (one in five)."""
    field = st.sampled_from([*fields] * 4 + [FIELD]).flatmap(lambda chosen: chosen)
    return st.lists(field, max_size=5).map(b"".join)


_LINUX = _message(_bytes_field(1, _message(_bytes_field(2, _message(_varint_field(1))))))
_NETWORK = _message(_bytes_field(1, PAYLOADS), _bytes_field(2, _message(_bytes_field(1, PAYLOADS))))
_LABEL = _message(_bytes_field(1, PAYLOADS), _bytes_field(2, PAYLOADS))
SANDBOX_STATUS = _message(
    _bytes_field(1, PAYLOADS),
    _bytes_field(2, _message(_bytes_field(2, PAYLOADS))),
    _varint_field(3),
    _bytes_field(5, _NETWORK),
    _bytes_field(6, _LINUX),
    _bytes_field(7, _LABEL),
    _bytes_field(8, _LABEL),
)
RAW_MESSAGE = st.one_of(
    _message(  # a ContainerEventResponse
        _bytes_field(1, PAYLOADS),
        _varint_field(2),
        _varint_field(3),
        _bytes_field(4, SANDBOX_STATUS),
    ),
    _message(_bytes_field(1, SANDBOX_STATUS)),  # a PodSandboxStatusResponse
)
"""Wire data shaped like the two messages read (their fields at their numbers, any number of
times, in any order), with random fields and encodings among them."""


# -- hypothesis: generated messages ------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(wire_message())
def test_on_protobufs_messages_c_reads_what_python_reads(data: bytes) -> None:
    assert _assert_alike(data) == ("fields", _reference(data))


@settings(max_examples=1500, deadline=None)
@given(wire_message(), st.data())
def test_on_corrupted_messages_c_and_python_agree_errors_included(
    data: bytes, draw: st.DataObject
) -> None:
    corrupted = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4)) if corrupted else 0):
        at = draw.draw(st.integers(0, len(corrupted) - 1))
        corrupted[at] = draw.draw(st.integers(0, 255))
    if draw.draw(st.booleans()):
        corrupted = corrupted[: draw.draw(st.integers(0, len(corrupted)))]
    _assert_alike(bytes(corrupted))


@settings(max_examples=800, deadline=None)
@given(RAW_MESSAGE)
def test_on_raw_wire_data_c_and_python_agree_errors_included(data: bytes) -> None:
    _assert_alike(data)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=64))
def test_on_random_bytes_c_and_python_agree_errors_included(data: bytes) -> None:
    _assert_alike(data)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=12), st.sampled_from(["container", "sandbox", "uid", "ip", "extra"]))
def test_any_bytes_in_a_field_read_give_the_same_text_or_the_same_error(
    text: bytes, where: str
) -> None:
    """Strict UTF-8 (the IDs) and loose (the IPs) alike in both readers, byte for byte."""
    net = network(ip=text if where == "ip" else b"1.2.3.4", additional=[text] * (where == "extra"))
    sandbox = status(
        sandbox_id=text if where == "sandbox" else b"s",
        uid=text if where == "uid" else b"u",
        net=net,
    )
    _assert_alike(event(container_id=text if where == "container" else b"c", sandbox=sandbox))


@settings(max_examples=300, deadline=None)
@given(st.lists(sandbox_status(), min_size=2, max_size=5), st.lists(TEXT, max_size=3))
def test_repeated_sandbox_statuses_merge_alike(
    statuses: list[pb.PodSandboxStatus], ids: list[str]
) -> None:
    """Several ``pod_sandbox_status`` fields (and container IDs) in one event: protobuf merges
    them (additional IPs accumulate, the last of each scalar wins); both readers do."""
    data = b"".join(length_field(4, s.SerializeToString()) for s in statuses)
    data += b"".join(length_field(1, i.encode()) for i in ids)
    assert _assert_alike(data) == ("fields", _reference(data))
    answer = b"".join(length_field(1, s.SerializeToString()) for s in statuses)
    merged = pb.PodSandboxStatusResponse.FromString(answer).status
    assert status_fields(answer) == status_fields_python(answer) == _status_reference(merged)


# -- adversarial inputs by name ----------------------------------------------------------------


def simulator_events() -> Iterator[bytes]:
    """Events of a simulated node's changes: created, started, crashed, stopped, removed."""
    population = Population(pods=3, seed=22)
    uid, events = population.create_pod()
    events += population.crash_container(uid)
    events += population.stop_pod(uid) + population.remove_pod(uid)
    for change in events:
        yield event_message(change).SerializeToString()


@pytest.mark.parametrize("data", list(simulator_events())[:4])
def test_every_truncation_and_every_byte_changed_of_a_simulator_event(data: bytes) -> None:
    assert _assert_alike(data)[0] == "fields"
    for end in range(len(data)):
        _assert_alike(data[:end])
    for at in range(len(data)):
        for byte in (0x00, 0x80, 0xFF, data[at] ^ 0x01):
            _assert_alike(data[:at] + bytes([byte]) + data[at + 1 :])


def test_every_truncation_of_a_status_answer() -> None:
    sandbox = Population(pods=1, seed=5).snapshot().sandboxes[0]
    data = pb.PodSandboxStatusResponse(status=sandbox_status_message(sandbox)).SerializeToString()
    assert status_fields(data) == status_fields_python(data)
    assert status_fields(data).sandbox_id == sandbox.id
    for end in range(len(data)):
        _assert_alike(data[:end])


@pytest.mark.parametrize("padding", range(12))
@pytest.mark.parametrize("where", ["tag", "type", "created", "state", "length", "mode"])
def test_padded_and_over_long_varints(padding: int, where: str) -> None:
    """Up to 10 bytes is a varint (bits past the 64th dropped); 11 is an error in both."""
    pad = {w: padding if w == where else 0 for w in ("tag", "type", "created", "state", "length")}
    options = length_field(2, tag(1, 0) + varint(2**32 + 2, padding if where == "mode" else 0))
    sandbox = length_field(1, b"s") + tag(3, 0) + varint(2**32 + 1, pad["state"])
    sandbox += length_field(6, length_field(1, options))
    data = tag(1, 2, pad["tag"]) + varint(1, pad["length"]) + b"c"
    data += tag(2, 0) + varint(2**63 + 3, pad["type"]) + tag(3, 0) + varint(-5, pad["created"])
    data += length_field(4, sandbox)
    outcome = _assert_alike(data)
    total = {"tag": 1, "length": 1, "type": 10, "created": 10, "state": 5, "mode": 5}[where]
    if total + padding > 10:
        assert outcome == ("error", "a varint is longer than 10 bytes")
    else:
        assert outcome == ("fields", EventFields(3, "c", -5, "s", "", 1, network_mode=2))


@pytest.mark.parametrize("value", [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1])
def test_int32_fields_keep_their_low_32_bits_signed_and_int64_its_64(value: int) -> None:
    low32 = value & 0xFFFFFFFF
    as_int32 = low32 - 2**32 if low32 >= 2**31 else low32
    as_int64 = value - 2**64 if value >= 2**63 else value
    options = length_field(2, tag(1, 0) + varint(value))
    sandbox = tag(3, 0) + varint(value) + length_field(6, length_field(1, options))
    data = tag(2, 0) + varint(value) + tag(3, 0) + varint(value) + length_field(4, sandbox)
    expected = EventFields(as_int32, "", as_int64, "", "", as_int32, network_mode=as_int32)
    assert _assert_alike(data) == ("fields", expected)
    assert _reference(data) == expected


def test_a_tenth_varint_byte_keeps_only_its_lowest_bit() -> None:
    data = tag(3, 0) + b"\xff" * 9 + b"\x7f"
    assert _assert_alike(data) == ("fields", EventFields(0, "", -1, "", ""))


@pytest.mark.parametrize("size", [2**64 - 1, 2**63, 2**32, 2**31, 2**31 - 1, 2**16, 4, 3, 2])
@pytest.mark.parametrize("where", ["top", "sandbox", "metadata", "network", "unknown"])
def test_huge_lengths_are_refused_alike(size: int, where: str) -> None:
    """Lengths past the end of their message (by 1 or by 2^64): refused, never wrapped."""
    body = tag(1, 2) + varint(size) + b"ab"  # at most 2 bytes follow the length
    if where == "top":
        data = body
    elif where == "unknown":
        data = tag(9, 2) + varint(size) + b"ab"
    else:
        inner = {
            "sandbox": body,
            "metadata": length_field(2, body),
            "network": length_field(5, body),
        }
        data = length_field(4, inner[where])
    outcome = _assert_alike(data)
    assert (outcome[0] == "error") == (size > 2)
    if size > 2:
        assert outcome[1] == "a length-delimited field runs past the end of its message"


@pytest.mark.parametrize("depth", [1, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 5])
@pytest.mark.parametrize("where", ["top", "sandbox", "network", "options"])
def test_deep_groups(depth: int, where: str) -> None:
    """Groups nested ``MAX_DEPTH`` deep are skipped; one more is an error, in every message."""
    groups = b"".join(tag(9 + n, 3) for n in range(depth)) + tag(1, 0) + varint(1)
    groups += b"".join(tag(9 + n, 4) for n in reversed(range(depth)))
    wrapped = {
        "top": groups,
        "sandbox": length_field(4, groups),
        "network": length_field(4, length_field(5, groups)),
        "options": length_field(4, length_field(6, length_field(1, length_field(2, groups)))),
    }[where]
    data = event() + wrapped
    outcome = _assert_alike(data)
    if depth > MAX_DEPTH:
        assert outcome == ("error", f"groups nested deeper than {MAX_DEPTH}")
    else:  # protobuf counts the messages around them too: only at the top is it as lenient
        assert outcome == ("fields", EventFields(1, "c", 7, "", ""))
        assert where != "top" or outcome[1] == _reference(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (tag(9, 3) + tag(10, 4), "group 9 ended by the end of group 10"),
        (tag(9, 3) + tag(1, 0) + varint(1), "group 9 is not ended"),
        (tag(9, 4), "a group end (field 9) with no group open"),
        (tag(9, 3) + tag(0, 0) + varint(1) + tag(9, 4), None),  # field 0 in a group: fine
        (tag(0, 2) + varint(0), "a field number of 0 is not valid"),
        (varint(2**32 | 2), "a field number of 536870912 is not valid"),
        (varint(2**64 - 1), "a field number of 2305843009213693951 is not valid"),
        (tag(9, 6), "wire type 6 does not exist"),
        (tag(9, 7), "wire type 7 does not exist"),
        (tag(9, 1) + b"1234567", "a fixed-size field runs past the end of its message"),
        (tag(9, 5) + b"123", "a fixed-size field runs past the end of its message"),
        (tag(3, 0) + b"\x80", "a varint runs past the end of its message"),
        (tag(3, 0) + b"\x80" * 10, "a varint is longer than 10 bytes"),
    ],
)
def test_each_malformation_gets_the_python_readers_message(
    data: bytes, message: str | None
) -> None:
    for where in (data, length_field(4, data), length_field(4, length_field(5, data))):
        outcome = _assert_alike(where)
        assert outcome[1] == message if message is not None else outcome[0] == "fields"


@pytest.mark.parametrize("bad", BAD_UTF8)
def test_bad_utf8_in_each_field_read(bad: bytes) -> None:
    """The IDs and the UID are refused, naming the field; IPs are read with U+FFFD."""
    named = {
        "container_id": event(container_id=bad),
        "pod_sandbox_status.id": event(sandbox=status(sandbox_id=bad)),
        "pod_sandbox_status.metadata.uid": event(sandbox=status(uid=bad)),
        "pod_sandbox_status.metadata.name": event(
            sandbox=status() + length_field(2, length_field(1, bad))
        ),
        "pod_sandbox_status.metadata.namespace": event(
            sandbox=status() + length_field(2, length_field(3, bad))
        ),
        "containers_statuses.id": event() + length_field(5, length_field(1, bad)),
        "containers_statuses.metadata.name": event()
        + length_field(5, length_field(2, length_field(1, bad))),
        "containers_statuses.image.image": event()
        + length_field(5, length_field(8, length_field(1, bad))),
        "containers_statuses.image_ref": event() + length_field(5, length_field(9, bad)),
    }
    for name, data in named.items():
        assert _assert_alike(data) == ("error", f"{name} is not UTF-8")
    loose = event(sandbox=status(net=network(ip=bad, additional=[bad, b"::1", bad])))
    outcome = _assert_alike(loose)
    text = bad.decode(errors="replace")
    assert outcome == ("fields", EventFields(1, "c", 7, "s", "u", 0, text, (text, "::1", text)))
    # a string it does not read (a label's value) is not checked, in both
    label = length_field(7, length_field(1, b"k") + length_field(2, bad))
    assert _assert_alike(event(sandbox=status() + label))[0] == "fields"


def test_the_last_text_read_wins_but_a_bad_one_before_it_is_still_refused() -> None:
    good_after_bad = length_field(1, b"\xff") + event(container_id=b"ok")
    assert _assert_alike(good_after_bad) == ("error", "container_id is not UTF-8")
    assert _assert_alike(event(b"one") + event(b"two"))[1] == EventFields(1, "two", 7, "", "")


@pytest.mark.parametrize("count", [0, 1, MAX_ADDITIONAL_IPS, MAX_ADDITIONAL_IPS + 1, 10_000])
def test_many_additional_ips_keep_the_first_and_count_the_rest(count: int) -> None:
    ips = [f"10.0.{n // 256}.{n % 256}".encode() for n in range(count)]
    half = count // 2  # split over two network fields and two sandbox statuses: they merge
    data = event(sandbox=status(net=network(b"1.1.1.1", ips[:half])))
    data += length_field(4, length_field(5, network(additional=ips[half:])))
    outcome = _assert_alike(data)
    kept = tuple(ip.decode() for ip in ips[:MAX_ADDITIONAL_IPS])
    dropped = max(0, count - MAX_ADDITIONAL_IPS)
    assert outcome == ("fields", EventFields(1, "c", 7, "s", "u", 0, "1.1.1.1", kept, dropped))
    assert outcome == ("fields", _reference(data))


@pytest.mark.parametrize("count", [0, 1, MAX_EVENT_CONTAINERS, MAX_EVENT_CONTAINERS + 1, 1_000])
def test_many_container_statuses_keep_the_first_and_count_the_rest(count: int) -> None:
    statuses = b"".join(
        length_field(5, length_field(1, f"c{n}".encode()) + length_field(9, b"r"))
        for n in range(count)
    )
    outcome = _assert_alike(event() + statuses)
    assert outcome == ("fields", _reference(event() + statuses))
    fields = outcome[1]
    assert isinstance(fields, EventFields)
    assert len(fields.containers) == min(count, MAX_EVENT_CONTAINERS)
    assert fields.containers_dropped == max(0, count - MAX_EVENT_CONTAINERS)


def test_a_dropped_container_status_is_still_read() -> None:
    """Past the kept ones, a malformed status is still an error (protobuf checks it too)."""
    kept = length_field(5, length_field(1, b"c")) * MAX_EVENT_CONTAINERS
    bad = length_field(5, length_field(1, b"\xff"))
    assert _assert_alike(event() + kept + bad) == ("error", "containers_statuses.id is not UTF-8")


def test_a_dropped_additional_ip_is_still_read() -> None:
    """Past the kept ones, a malformed PodIP is still an error (protobuf checks it too)."""
    ips = network(additional=[b"1.1.1.1"] * MAX_ADDITIONAL_IPS) + length_field(2, b"\x0a\x05")
    assert _assert_alike(event(sandbox=status(net=ips))) == (
        "error",
        "a length-delimited field runs past the end of its message",
    )


SIXTEEN_MIB = 16 * 1024 * 1024


def labels_of(size: int, value: bytes) -> bytes:
    """Label entries (field 7) of about ``size`` bytes, each of value ``value``."""
    entry = length_field(7, length_field(1, b"key") + length_field(2, value))
    return entry * (size // len(entry))


def test_a_16_mib_status_of_labels() -> None:
    labels = labels_of(SIXTEEN_MIB - 1024, b"v" * 100)
    sandbox = status(net=network(b"10.1.2.3")) + labels + length_field(1, b"last-id")
    data = event(container_id=b"c" * 64, sandbox=sandbox)
    assert SIXTEEN_MIB - 1024 < len(data) <= SIXTEEN_MIB
    expected = EventFields(1, "c" * 64, 7, "last-id", "u", 0, "10.1.2.3")
    assert _assert_alike(data) == ("fields", expected)
    assert _reference(data) == expected
    answer = length_field(1, sandbox)
    assert (
        status_fields(answer)
        == status_fields_python(answer)
        == expected._replace(container_event_type=0, container_id="", created_at=0)
    )
    for cut in (len(data) - 1, len(data) // 2, 40):
        _assert_alike(data[:cut])


def test_memoryview_and_bytearray_are_read_as_bytes_are() -> None:
    data = next(simulator_events())
    expected = event_fields(data)
    for form in (memoryview(data), memoryview(data)[0:], bytearray(data)):
        view = cast(Any, form)
        assert event_fields(view) == event_fields_python(view) == expected
    with pytest.raises(EventWireError, match="past the end"):
        event_fields(memoryview(data)[:-1])


def test_the_c_entry_points_check_their_arguments() -> None:
    with pytest.raises(TypeError, match="tuple subclass"):
        _wire.event_fields(b"", cast(Any, dict))
    with pytest.raises(TypeError, match="2 arguments"):
        cast(Any, _wire.status_fields)(b"")
    with pytest.raises(TypeError):
        event_fields(cast(Any, "text"))


# -- the GIL -----------------------------------------------------------------------------------


def _another_thread_ran_during(read: Callable[[], object]) -> bool:
    """Whether a thread woken just before ``read`` got the GIL before ``read`` returned. The
    switch interval is raised to 60 s meanwhile, so the GIL changes hands only where a thread
    gives it up itself: the watcher runs during ``read`` only if ``read`` releases the GIL."""
    state = {"inside": False}
    seen: list[bool] = []
    ready, go = threading.Event(), threading.Event()

    def watch() -> None:
        ready.set()
        go.wait()
        seen.append(state["inside"])

    watcher = threading.Thread(target=watch, name="gil-watcher")
    watcher.start()
    ready.wait()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        state["inside"] = True
        go.set()
        read()
        state["inside"] = False
    finally:
        sys.setswitchinterval(interval)
    watcher.join()
    return seen == [True]


BIG_EVENT = event(sandbox=status() + labels_of(SIXTEEN_MIB - 1024, b"v"))
"""16 MiB of small labels: a scan of about a million and a half fields."""


def test_a_big_event_is_scanned_with_the_gil_released() -> None:
    """Of ten reads, at least one lets the woken thread run (each read of BIG_EVENT leaves it
    its whole scan to be scheduled in; holding the GIL, none would)."""
    answer = length_field(1, status() + labels_of(SIXTEEN_MIB - 1024, b"v"))
    reads: list[Callable[[], object]] = [
        lambda: event_fields(BIG_EVENT),
        lambda: event_fields(memoryview(BIG_EVENT)),
        lambda: status_fields(answer),
    ]
    for read in reads:
        assert any(_another_thread_ran_during(read) for _ in range(10))


def _held_throughout(read: Callable[[], object]) -> bool:
    """Whether, of three reads, one let no woken thread run. A thread of an earlier test that
    was already waiting for the GIL under the old switch interval can be handed it once, and
    the watcher with it: noise a read that released the GIL would show on every try (a
    16 MiB scan leaves the watcher its whole length to run)."""
    return any(not _another_thread_ran_during(read) for _ in range(3))


def test_a_small_or_mutable_input_is_scanned_with_the_gil_held() -> None:
    """Below 64 KiB releasing the GIL would cost more than the scan; a bytearray could change
    under a scan without it."""
    small = next(simulator_events())
    assert _held_throughout(lambda: event_fields(small))
    mutable = bytearray(BIG_EVENT)
    assert _held_throughout(lambda: event_fields(cast(Any, mutable)))
    assert _held_throughout(lambda: event_fields(cast(Any, memoryview(mutable))))
