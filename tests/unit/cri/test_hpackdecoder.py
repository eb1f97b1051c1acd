"""``cri.wire.headers`` against the ``hpack`` package, its reference: the same headers from
every block a real encoder makes (Huffman or not, indexed or not, the table resized), and a
failure on exactly the inputs the reference fails on (corrupted blocks, random bytes), block
after block on one decoder; its tables are RFC 7541's, and each bound holds at its limit and
fails past it."""

from __future__ import annotations

import hpack
import pytest
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hpack.table import HeaderTable
from hypothesis import example, given, settings
from hypothesis import strategies as st

from podcache.cri.wire.headers import (
    _STATIC_TABLE,
    MAX_INTEGER_BYTES,
    MAX_TABLE_SIZE,
    HPACKDecoder,
    HPACKError,
    _huffman_codes,
    huffman_decode,
)

LIST_LIMIT = 1024
"""A small header list bound, so that generated blocks reach it."""

Outcome = tuple[str, list[tuple[bytes, bytes]]]


def reference_outcomes(blocks: list[bytes], limit: int = LIST_LIMIT) -> list[Outcome]:
    """What ``hpack.Decoder`` makes of the blocks, one after another, until one fails."""
    decoder = hpack.Decoder(max_header_list_size=limit)
    out: list[Outcome] = []
    for block in blocks:
        try:
            headers = decoder.decode(block, raw=True)
        except Exception:  # any failure of the reference is a failure
            out.append(("error", []))
            break
        out.append(("ok", [(bytes(n), bytes(v)) for n, v in headers]))
    return out


def outcomes(blocks: list[bytes], limit: int = LIST_LIMIT) -> list[Outcome]:
    decoder = HPACKDecoder(max_header_list_size=limit)
    out: list[Outcome] = []
    for block in blocks:
        try:
            headers = decoder.decode(block)
        except HPACKError:
            out.append(("error", []))
            break
        out.append(("ok", headers))
    return out


def test_the_huffman_code_is_rfc_7541s() -> None:
    codes = _huffman_codes()
    assert len(codes) == 257
    for (length, code), symbol in codes.items():
        assert (REQUEST_CODES_LENGTH[symbol], REQUEST_CODES[symbol]) == (length, code)


def test_the_static_table_is_rfc_7541s() -> None:
    assert tuple(HeaderTable.STATIC_TABLE) == _STATIC_TABLE


header_names = st.one_of(
    st.sampled_from([b"content-type", b"grpc-status", b"grpc-message", b":status", b"date"]),
    st.binary(max_size=40),
)
header_values = st.one_of(
    st.sampled_from([b"application/grpc", b"0", b"14", b"200", b""]),
    st.binary(max_size=300),
)
headers_lists = st.lists(
    st.tuples(header_names, header_values, st.booleans()),  # the flag: never indexed
    max_size=12,
)


def _encode(
    encoder: hpack.Encoder, headers: list[tuple[bytes, bytes, bool]], huffman: bool
) -> bytes:
    fields = [
        hpack.NeverIndexedHeaderTuple(n, v) if never else hpack.HeaderTuple(n, v)
        for n, v, never in headers
    ]
    return encoder.encode(fields, huffman=huffman)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(headers_lists, st.booleans(), st.none() | st.integers(0, MAX_TABLE_SIZE)),
        min_size=1,
        max_size=6,
    )
)
def test_an_encoders_blocks_decode_as_the_reference_decodes_them(
    script: list[tuple[list[tuple[bytes, bytes, bool]], bool, int | None]],
) -> None:
    """Blocks of one encoder (its dynamic table carried from block to block, resized between
    them), decoded by one decoder each: the same headers, or the same failure (a list past
    the bound)."""
    encoder = hpack.Encoder()
    blocks = []
    for headers, huffman, table_size in script:
        if table_size is not None:
            encoder.header_table_size = table_size
        blocks.append(_encode(encoder, headers, huffman))
    assert outcomes(blocks) == reference_outcomes(blocks)


@st.composite
def corrupted_blocks(draw: st.DrawFn) -> list[bytes]:
    """A real encoder's blocks with bytes changed, cut, inserted or swapped for random ones."""
    encoder = hpack.Encoder()
    blocks = [
        _encode(encoder, draw(headers_lists), draw(st.booleans()))
        for _ in range(draw(st.integers(1, 4)))
    ]
    for _ in range(draw(st.integers(0, 4))):
        which = draw(st.integers(0, len(blocks) - 1))
        block = bytearray(blocks[which])
        kind = draw(st.sampled_from(["flip", "cut", "insert", "random"]))
        if kind == "random" or not block:
            block = bytearray(draw(st.binary(max_size=64)))
        elif kind == "flip":
            block[draw(st.integers(0, len(block) - 1))] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del block[draw(st.integers(0, len(block) - 1)) :]
        else:
            block.insert(draw(st.integers(0, len(block))), draw(st.integers(0, 255)))
        blocks[which] = bytes(block)
    return blocks


@settings(max_examples=600, deadline=None)
@given(corrupted_blocks())
@example([b"\x80"])  # index 0
@example([b"\xbe"])  # index 62, the table empty
@example([b"\x3f\xe1\x1f"])  # a table size update to 4096
@example([b"\x3f\xe2\x1f"])  # ... to 4097
@example([b"\x88\x20"])  # a table size update after a header
@example([b"\x00\x81\xff\x00"])  # a Huffman name of one byte of ones: padding of 8 bits
@example([b"\x00\x84\xff\xff\xff\xff\x00"])  # EOS in a Huffman name
@example([b"\x00\x81\x1f\x00"])  # "a" and a padding that is not all ones
@example([b"\xff\x80\x80\x80\x80\x00"])  # an integer of 6 bytes, an index outside the tables
@example([b"\x00\x7f\x80\x80\x80\x80\x80\x00"])  # an integer of 7 bytes
@example([b"\x00\x7f\x80\x80\x80\x80\x00" + b"x" * 127 + b"\x00"])  # a length of 6 bytes
def test_corrupted_blocks_fail_where_the_reference_fails(blocks: list[bytes]) -> None:
    assert outcomes(blocks) == reference_outcomes(blocks)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_huffman_strings_decode_as_the_reference_decodes_them(data: bytes) -> None:
    assert_huffman_decoded_as_the_reference(data)


def assert_huffman_decoded_as_the_reference(data: bytes) -> None:
    """Ours reads ``data`` as hpack's table reads it, or both refuse it."""
    try:
        expected: bytes | None = hpack.huffman_table.decode_huffman(data)
    except hpack.HPACKDecodingError:
        expected = None
    try:
        got: bytes | None = huffman_decode(data)
    except HPACKError:
        got = None
    assert got == expected


@given(st.binary(max_size=200))
def test_huffman_strings_round_trip(text: bytes) -> None:
    encoder = hpack.huffman.HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)
    assert huffman_decode(encoder.encode(text)) == text


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal without indexing, new name, no Huffman (lengths under 127)."""
    return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value


def test_the_header_list_bound_holds_at_its_limit_and_fails_past_it() -> None:
    name, value = b"n", b"v" * 50
    size = len(name) + len(value) + 32
    block = _literal(name, value) * 3
    assert len(HPACKDecoder(max_header_list_size=3 * size).decode(block)) == 3
    with pytest.raises(HPACKError, match="header list over"):
        HPACKDecoder(max_header_list_size=3 * size - 1).decode(block)


def test_the_table_holds_its_bound_and_evicts_the_oldest() -> None:
    decoder = HPACKDecoder(max_header_list_size=1 << 20)
    entry = (
        b"\x40\x0a" + b"n" * 10 + b"\x7f\x49" + b"v" * 200
    )  # indexed: a name of 10, a value of 200
    size = 10 + 200 + 32
    count = MAX_TABLE_SIZE // size
    decoder.decode(entry * count)
    assert decoder._table_size == count * size <= MAX_TABLE_SIZE
    decoder.decode(entry)
    assert decoder._table_size == count * size  # the oldest went
    assert len(decoder._table) == count
    decoder.decode(b"\x20")  # resized to 0: empty
    assert (decoder._table_size, len(decoder._table)) == (0, 0)


def test_an_integer_of_its_most_bytes_is_read_and_one_more_fails() -> None:
    longest = b"\x7f" + b"\x80" * (MAX_INTEGER_BYTES - 2) + b"\x00"  # 127, padded
    decoder = HPACKDecoder(1 << 20)
    name = b"x" * 127
    assert decoder.decode(b"\x00" + longest + name + b"\x00") == [(name, b"")]
    too_long = b"\x7f" + b"\x80" * (MAX_INTEGER_BYTES - 1) + b"\x00"
    with pytest.raises(HPACKError, match="integer of more than"):
        HPACKDecoder(1 << 20).decode(b"\x00" + too_long + name + b"\x00")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=60), st.integers(min_value=0), st.integers(min_value=0, max_value=8))
def test_huffman_strings_cut_or_flipped_fail_where_the_reference_fails(
    text: bytes, where: int, cut: int
) -> None:
    """Near-valid strings (a valid one with one bit flipped, then up to 8 bytes cut off) reach
    every path of the decoder: codes of every length, EOS, paddings long, short and wrong."""
    encoded = bytearray(
        hpack.huffman.HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH).encode(text)
    )
    if encoded:
        encoded[where % len(encoded)] ^= 1 << (where % 8)
    assert_huffman_decoded_as_the_reference(bytes(encoded[: max(0, len(encoded) - cut)]))
