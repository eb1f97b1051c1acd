"""Reading a list answer in pieces (``AsyncCRIRuntime``'s converter) is reading it whole.

``split_items`` cuts an answer between its top-level items so the reader holds the GIL for a
piece at a time; the pieces' rows joined in order must give exactly the whole answer's result
on every input, valid or not (differential, against the one-call read).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri import convert, converter
from podcache.cri.convert import (
    Listing,
    MalformedListingError,
    pods_from_listings,
    read_containers,
    read_sandboxes,
    split_items,
)
from podcache.errors import RuntimeProtocolError
from podcache.model import PodList
from tests.unit.cri.test_convert import RT
from tests.unit.cri.test_wire import _unknown, containers, encodings, listing_bytes, sandboxes

READERS = {"ListPodSandbox": read_sandboxes, "ListContainers": read_containers}


def pods_of(method: str, listing: Listing) -> PodList:
    if method == "ListPodSandbox":
        return pods_from_listings(RT, listing, read_containers(b""))
    empty = read_sandboxes(b"")
    return pods_from_listings(RT, empty, listing)


def whole(method: str, data: bytes) -> PodList | None:
    try:
        return pods_of(method, READERS[method](data))
    except MalformedListingError:
        return None


def in_pieces(method: str, data: bytes, piece: int, monkeypatch: pytest.MonkeyPatch) -> PodList:
    monkeypatch.setattr(converter, "READ_PIECE_BYTES", piece)
    return pods_of(method, converter._Converter("unix:///x.sock").read(method, data))


def agree(method: str, data: bytes, piece: int, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = whole(method, data)
    if expected is None:
        with pytest.raises(RuntimeProtocolError, match=f"{method} answer is not a valid"):
            in_pieces(method, data, piece, monkeypatch)
    else:
        assert in_pieces(method, data, piece, monkeypatch) == expected


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(["ListPodSandbox", "ListContainers"]),
    st.data(),
    st.integers(1, 200),
    st.lists(_unknown, max_size=1),
)
def test_drawn_answers_read_in_pieces_as_whole(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    data: st.DataObject,
    piece: int,
    top_level: list[bytes],
) -> None:
    items = sandboxes() if method == "ListPodSandbox" else containers()
    encoded = data.draw(st.lists(encodings(items), max_size=8))
    raw = bytearray(listing_bytes(encoded) + b"".join(top_level))
    if raw and data.draw(st.booleans()):  # now and then corrupted
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    agree(method, bytes(raw), piece, monkeypatch)


def test_pieces_are_whole_items_that_join_to_the_answer() -> None:
    items = [b"\x0a\x03abc", b"\x0a\x00", b"\x0a\x81\x01" + b"x" * 129, b"\x0a\x01z"]
    data = b"".join(items)
    pieces = split_items(data, 4)
    assert pieces is not None
    assert [bytes(piece) for piece in pieces] == [items[0], items[1] + items[2], items[3]]
    assert all(piece.obj is data for piece in pieces)  # views of the answer, not copies
    assert split_items(data, len(data)) is None  # small enough to read at once


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x03abc\x12\x00" + b"\x0a\x00" * 10,  # an unknown top-level field (2)
        b"\x0a\x03abc\x0b\x0c" + b"\x0a\x00" * 10,  # a top-level group
        b"\x0a\x00" * 10 + b"\x0a\x05ab",  # a truncated item
        b"\x0a\x00" * 10 + b"\x0a\x80",  # a truncated length
        b"\x0a\x00" * 10 + b"\x0a\x80\x80\x80\x80\x80\x00",  # a length longer than 5 bytes
    ],
)
def test_anything_but_plain_items_is_read_whole(data: bytes) -> None:
    assert split_items(data, 2) is None


# -- the C splitter against the Python reference ----------------------------------------------

needs_c = pytest.mark.skipif(convert._WIRE is None, reason="the C extension is not built here")

# Whole items with lengths of 1-6 bytes (non-minimal ones too), and now and then one part that
# is almost an item: a length cut short, a length past the end, another tag, arbitrary bytes.
_items = st.builds(
    lambda body, extra: b"\x0a" + _length(len(body), extra) + body,
    st.binary(max_size=40),
    st.integers(0, 5),
)
_almost_items = st.one_of(
    st.builds(lambda n: b"\x0a" + bytes([0x80] * n), st.integers(0, 7)),
    st.builds(lambda length: b"\x0a" + _length(length, 0), st.integers(0, 1 << 36)),
    st.binary(min_size=1, max_size=6),
)


def _length(value: int, extra: int) -> bytes:
    """``value`` as a varint padded with ``extra`` non-minimal continuation bytes."""
    out = bytearray()
    while True:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
        if not value:
            break
    out += b"\x80" * extra
    out[-1] &= 0x7F
    return bytes(out)


@needs_c
@settings(max_examples=1000, deadline=None)
@given(st.lists(_items, max_size=12), st.none() | _almost_items, st.data(), st.integers(-2, 120))
def test_c_splitter_is_the_python_reference(
    parts: list[bytes], odd: bytes | None, data_: st.DataObject, piece: int
) -> None:
    if odd is not None:
        parts.insert(data_.draw(st.integers(0, len(parts))), odd)
    data = b"".join(parts)
    assert convert._WIRE is not None
    expected = convert._item_cuts_python(data, piece)
    assert convert._WIRE.item_cuts(data, piece) == expected
    assert convert._WIRE.item_cuts(memoryview(data), piece) == expected


def test_without_the_extension_the_python_reference_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"\x0a\x03abc\x0a\x00\x0a\x01z"
    monkeypatch.setattr(convert, "_WIRE", None)
    pieces = split_items(data, 3)
    assert pieces is not None
    assert [bytes(piece) for piece in pieces] == [b"\x0a\x03abc", b"\x0a\x00\x0a\x01z"]
