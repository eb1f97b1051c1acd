"""HPACK (RFC 7541) for the CRI client: the request header block (literals never indexed, so
it does not depend on the table), and the decoder of the blocks a runtime answers with, which
both drivers use (``cri.http2``, ``cri.oneshot``); no I/O.

Why podcache's own and not the ``hpack`` package: docs/architecture.md §4, "One HPACK
decoder".

``HPACKDecoder.decode(block)`` gives a block's headers as ``(name, value)`` byte pairs, in
order, and keeps the dynamic table between blocks, as ``hpack.Decoder.decode(block,
raw=True)`` does; the ``hpack`` package is its reference (``tests/unit/cri/test_hpackdecoder.py``
holds the two to the same headers, and to failing on the same inputs, on generated blocks and
on corrupted bytes). Every input is hostile:

- an integer of more than ``MAX_INTEGER_BYTES`` bytes, a string or an integer cut short, an
  index outside the static and the dynamic table, a table size update past
  ``MAX_TABLE_SIZE`` (the size HTTP/2 gives a peer that was sent no
  SETTINGS_HEADER_TABLE_SIZE) or after a header, and a Huffman string that contains EOS, ends
  in a padding of 8 bits or more or in one that is not EOS's leading ones: each is an
  ``HPACKError`` (a ``ValueError``), and the decoder must not be used again;
- bounds: a block's headers count at most ``max_header_list_size`` bytes (each its name, its
  value and 32, as SETTINGS_MAX_HEADER_LIST_SIZE counts), and the dynamic table
  ``MAX_TABLE_SIZE`` bytes (the same count), so what a block can make this decoder hold is
  at most about twice the bytes of the block plus those two bounds.

The scans ``keeps_table`` and ``leading_size_updates`` read a block without decoding it (the
pooled connection's memo of decoded blocks, and its bound on size updates).

Deliberately not here: header names' or values' validity for HTTP (the caller judges the
values it reads), Huffman encoding, and indexing what is sent.
"""

from __future__ import annotations

from collections import deque

from podcache.cri.wire.protobuf import varint

__all__ = [
    "MAX_INTEGER_BYTES",
    "MAX_SIZE_UPDATES",
    "MAX_TABLE_SIZE",
    "HPACKDecoder",
    "HPACKError",
    "authority",
    "grpc_timeout",
    "keeps_table",
    "leading_size_updates",
    "literal",
    "request_headers",
]

MAX_TABLE_SIZE = 4096
"""The dynamic table's bound (HTTP/2's default SETTINGS_HEADER_TABLE_SIZE, never changed)."""
MAX_INTEGER_BYTES = 6
"""Most bytes an integer takes: its prefix and five more (as ``hpack``; enough for 32 bits)."""
MAX_SIZE_UPDATES = 2
"""Most dynamic table size updates a block may open with (RFC 7541 §4.2: the smallest size,
then the final one)."""
_ENTRY_OVERHEAD = 32  # RFC 7541 §4.1: an entry's size is its name, its value and 32

_STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)
"""RFC 7541 Appendix A: index 1 is the first entry."""

# RFC 7541 Appendix B: the Huffman code's length in bits of each symbol 0-255 and EOS (256),
# one letter each ("A" is 5 bits ... "Z" 30). The code is canonical: codes are assigned in
# order of length, then of symbol, so the lengths alone give them (a test holds the codes
# to the hpack package's table).
_HUFFMAN_LENGTHS = (
    "ISXXXXXXXTZXXZXXXXXXXXZXXXXXXXXXBFFHIBDGFFDGDBBBAAABBBBBBBCDKBHFIBCCCCCCCCCCCCCCCCCCCCCC"
    "DCDIOIJBKABABABBBACCBBBABCBAABCCCCCKGJIXPRPPRRRSRSSSSSTSTTRSTSSSSQRSRSSTRQPRRSSQSRRTQRSSQ"
    "QRQSRSSPRRRSRRSVVPORSRUVVVWWVTUOQVWWVWTQQVVXWWWPTPQRQQSRRUUTTVSVWVVWWWWWXWWWWWVZ"
)
_EOS = 256


class HPACKError(ValueError):
    """A header block this decoder cannot read (module rules); the decoder is then unusable."""


def _huffman_codes() -> dict[tuple[int, int], int]:
    """(length, code) -> symbol, assigned canonically from ``_HUFFMAN_LENGTHS``."""
    lengths = [ord(letter) - ord("A") + 5 for letter in _HUFFMAN_LENGTHS]
    codes: dict[tuple[int, int], int] = {}
    code, previous = -1, min(lengths)
    for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code = (code + 1) << (lengths[symbol] - previous)
        previous = lengths[symbol]
        codes[lengths[symbol], code] = symbol
    return codes


_MAX_CODE_BITS = 30
_PEEK_BITS = 8
"""Codes of at most this many bits (every octet a header string usually holds: letters, digits,
``/ - . _ :``) are found by one look at the next 8 bits; longer ones by their length."""


class _HuffmanTables:
    """The code as two lookups, made once on the first Huffman string: ``short[next 8 bits]``
    is ``(symbol, length)`` of the code they begin with when it has at most 8 bits (else
    ``None``), and ``long`` maps ``(length, code)`` of every code to its symbol."""

    def __init__(self) -> None:
        self.long = _huffman_codes()
        self.short: list[tuple[int, int] | None] = [None] * (1 << _PEEK_BITS)
        for (length, code), symbol in self.long.items():
            if length <= _PEEK_BITS:
                spare = _PEEK_BITS - length
                for low in range(1 << spare):
                    self.short[code << spare | low] = (symbol, length)


_TABLES: _HuffmanTables | None = None


def huffman_decode(data: bytes) -> bytes:
    """The octets a Huffman-coded string holds (RFC 7541 §5.2); ``HPACKError`` for EOS in
    it, or a padding that is 8 bits or more, or not the leading bits of EOS (all ones).

    The string is one integer; each code is read where it starts, from the next 8 bits (the
    bits past the end read as ones, EOS's), or bit by bit past 8. Bits left that begin no
    whole code are the padding. Cost: O(octets) lookups."""
    global _TABLES  # tables made once, on first need
    if _TABLES is None:
        _TABLES = _HuffmanTables()
    tables = _TABLES
    left = len(data) * 8
    bits = int.from_bytes(data, "big")
    out = bytearray()
    while left:
        ahead = _bits_ahead(bits, left)
        found = tables.short[ahead]
        if found is None:
            found = _long_code(tables.long, bits, left)
        if found is None or found[1] > left:  # what is left begins no code: the padding
            break
        symbol, length = found
        out.append(symbol)
        left -= length
    if left >= 8 or bits & ((1 << left) - 1) != (1 << left) - 1:
        raise HPACKError("a Huffman string with an invalid padding")
    return bytes(out)


def _bits_ahead(bits: int, left: int) -> int:
    """The next 8 of the ``left`` low bits of ``bits``, ones past the end."""
    if left >= _PEEK_BITS:
        return (bits >> (left - _PEEK_BITS)) & 0xFF
    spare = _PEEK_BITS - left
    return ((bits & ((1 << left) - 1)) << spare) | ((1 << spare) - 1)


def _long_code(codes: dict[tuple[int, int], int], bits: int, left: int) -> tuple[int, int] | None:
    """``(symbol, length)`` of the code of more than 8 bits at the next of ``left`` bits, or
    ``None`` when the bits left end before any code does; ``HPACKError`` for EOS."""
    for length in range(_PEEK_BITS + 1, min(left, _MAX_CODE_BITS) + 1):
        symbol = codes.get((length, (bits >> (left - length)) & ((1 << length) - 1)))
        if symbol == _EOS:
            raise HPACKError("EOS in a Huffman string")
        if symbol is not None:
            return symbol, length
    return None


class HPACKDecoder:
    """One connection's decoder of the header blocks it receives (module rules)."""

    def __init__(self, max_header_list_size: int) -> None:
        self._max_list = max_header_list_size
        self._table: deque[tuple[bytes, bytes]] = deque()  # newest first (index 62 is [0])
        self._table_size = 0
        self._table_max = MAX_TABLE_SIZE

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The headers of one complete header block, in order."""
        headers: list[tuple[bytes, bytes]] = []
        listed = pos = 0
        end = len(block)
        while pos < end:
            first = block[pos]
            if first & 0x80:  # indexed field
                index, pos = _integer(block, pos, 7)
                header = self._entry(index)
            elif first & 0x40:  # literal, with incremental indexing
                header, pos = self._literal(block, pos, 6)
                self._add(header)
            elif first & 0x20:  # dynamic table size update
                if headers:
                    raise HPACKError("a table size update after a header")
                size, pos = _integer(block, pos, 5)
                self._resize(size)
                continue
            else:  # literal, without indexing or never indexed
                header, pos = self._literal(block, pos, 4)
            headers.append(header)
            listed += len(header[0]) + len(header[1]) + _ENTRY_OVERHEAD
            if listed > self._max_list:
                raise HPACKError(f"a header list over {self._max_list} bytes")
        return headers

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 1 <= index <= len(_STATIC_TABLE):
            return _STATIC_TABLE[index - 1]
        dynamic = index - len(_STATIC_TABLE) - 1
        if 0 <= dynamic < len(self._table):
            return self._table[dynamic]
        raise HPACKError(f"an index outside the tables: {index}")

    def _literal(self, block: bytes, pos: int, prefix: int) -> tuple[tuple[bytes, bytes], int]:
        index, after = _integer(block, pos, prefix)
        if index:
            name = self._entry(index)[0]
        else:
            name, after = _string(block, after)
        value, after = _string(block, after)
        return (name, value), after

    def _add(self, header: tuple[bytes, bytes]) -> None:
        size = len(header[0]) + len(header[1]) + _ENTRY_OVERHEAD
        if size > self._table_max:  # RFC 7541 §4.4: the table ends up empty
            self._table.clear()
            self._table_size = 0
            return
        self._table.appendleft(header)
        self._table_size += size
        self._evict()

    def _resize(self, size: int) -> None:
        if size > MAX_TABLE_SIZE:
            raise HPACKError(f"a table size update to {size} bytes, over {MAX_TABLE_SIZE}")
        self._table_max = size
        self._evict()

    def _evict(self) -> None:
        while self._table_size > self._table_max:
            name, value = self._table.pop()
            self._table_size -= len(name) + len(value) + _ENTRY_OVERHEAD


def _integer(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """The integer at ``pos`` with a ``prefix``-bit prefix (RFC 7541 §5.1), and where it ends."""
    limit = (1 << prefix) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    for _ in range(MAX_INTEGER_BYTES - 1):  # the bytes after the prefix
        if pos >= len(block):
            raise HPACKError("an integer cut short")
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise HPACKError(f"an integer of more than {MAX_INTEGER_BYTES} bytes")


def _string(block: bytes, pos: int) -> tuple[bytes, int]:
    """The string literal at ``pos`` (RFC 7541 §5.2), and where it ends."""
    if pos >= len(block):
        raise HPACKError("a string literal cut short")
    huffman = block[pos] & 0x80
    length, pos = _integer(block, pos, 7)
    end = pos + length
    if end > len(block):
        raise HPACKError("a string literal cut short")
    text = block[pos:end]
    return (huffman_decode(text) if huffman else text), end


# -- what is sent -------------------------------------------------------------------------------


def _encoded_integer(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) in a first byte holding ``first``'s high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    return bytes((first | limit,)) + varint(value - limit)  # the rest: base-128, as protobuf's


def literal(name: str | int, value: str) -> bytes:
    """A header as a literal without indexing (RFC 7541 §6.2.2); ``name``: a static table
    index, or the name itself. No Huffman coding."""
    encoded = value.encode("ascii")
    if isinstance(name, int):
        head = _encoded_integer(name, 4, 0x00)
    else:
        raw = name.encode("ascii")
        head = b"\x00" + _encoded_integer(len(raw), 7, 0x00) + raw
    return head + _encoded_integer(len(encoded), 7, 0x00) + encoded


_REQUEST_HEADERS: dict[tuple[str, str], bytes] = {}


def request_headers(path: str, authority: str) -> bytes:
    """The header block of a gRPC call but its deadline: POST (static 3), http (static 6),
    its path and authority, gRPC's content type, te and user-agent (made once per path and
    authority: literals not indexed do not depend on the table)."""
    block = _REQUEST_HEADERS.get((path, authority))
    if block is None:
        block = _REQUEST_HEADERS[path, authority] = b"".join(
            (
                b"\x83\x86",
                literal(4, path),
                literal(1, authority),
                literal(31, "application/grpc"),
                literal("te", "trailers"),
                literal("user-agent", "podcache"),
            )
        )
    return block


def authority(address: tuple[str, int] | None) -> str:
    """The :authority of a call to a runtime at TCP ``address`` (an IPv6 host bracketed), or
    ``localhost`` on a unix socket (None), as grpcio sends it."""
    if address is None:
        return "localhost"
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def grpc_timeout(seconds: float) -> bytes:
    """The grpc-timeout header of a deadline ``seconds`` away (milliseconds, at least 1)."""
    return literal("grpc-timeout", f"{min(99_999_999, max(1, int(seconds * 1000)))}m")


# -- scans of a received block ------------------------------------------------------------------


def _integer_end(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """(value, position after) of an integer at ``pos``; (-1, end) when it runs past."""
    limit = (1 << prefix_bits) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while pos < len(block):
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, len(block)


def keeps_table(block: bytes) -> bool:
    """Whether decoding a header block leaves the dynamic table as it is: it holds indexed
    fields (1xxxxxxx) and literals not indexed (0000xxxx, 0001xxxx) only, no literal with
    incremental indexing (01xxxxxx) and no table size update (001xxxxx), RFC 7541 §6."""
    pos, end = 0, len(block)
    while pos < end:
        first = block[pos]
        if first >= 0x80:
            pos = _integer_end(block, pos, 7)[1]
            continue
        if first >= 0x20:
            return False
        index, pos = _integer_end(block, pos, 4)
        for _ in range(2 if index == 0 else 1):  # the name when not indexed, then the value
            if pos >= end:
                return False
            size, pos = _integer_end(block, pos, 7)
            pos += max(size, end) if size < 0 else size
        if index < 0 or pos > end:
            return False
    return True


def leading_size_updates(block: bytes) -> int:
    """How many dynamic table size updates (001xxxxx) open ``block``, counted up to one more
    than ``MAX_SIZE_UPDATES``."""
    count, pos = 0, 0
    while pos < len(block) and block[pos] & 0xE0 == 0x20:
        count += 1
        if count > MAX_SIZE_UPDATES:
            break
        pos = _integer_end(block, pos, 5)[1]
    return count
