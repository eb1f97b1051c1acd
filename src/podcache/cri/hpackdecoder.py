"""An HPACK decoder (RFC 7541) for the header blocks a CRI runtime answers with: the one-shot
reads' (``oneshot``), so that a CLI command imports neither the ``hpack`` package nor
``logging`` with it; no encoder, no I/O.

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

Deliberately not here: header names' or values' validity for HTTP (the caller judges the
values it reads), and Huffman encoding.
"""

from __future__ import annotations

from collections import deque

__all__ = ["MAX_INTEGER_BYTES", "MAX_TABLE_SIZE", "HPACKDecoder", "HPACKError"]

MAX_TABLE_SIZE = 4096
"""The dynamic table's bound (HTTP/2's default SETTINGS_HEADER_TABLE_SIZE, never changed)."""
MAX_INTEGER_BYTES = 6
"""Most bytes an integer takes: its prefix and five more (as ``hpack``; enough for 32 bits)."""
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


_HUFFMAN: dict[tuple[int, int], int] | None = None  # made on the first Huffman string
_MAX_CODE_BITS = 30


def huffman_decode(data: bytes) -> bytes:
    """The octets a Huffman-coded string holds (RFC 7541 §5.2); ``HPACKError`` for EOS in
    it, or a padding that is 8 bits or more, or not the leading bits of EOS (all ones)."""
    global _HUFFMAN  # a table made once, on first need
    if _HUFFMAN is None:
        _HUFFMAN = _huffman_codes()
    table = _HUFFMAN
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = code << 1 | (byte >> shift) & 1
            length += 1
            symbol = table.get((length, code))
            if symbol is None:
                if length >= _MAX_CODE_BITS:  # pragma: no cover - every 30-bit code is one
                    raise HPACKError("an invalid Huffman code")
                continue
            if symbol == _EOS:
                raise HPACKError("EOS in a Huffman string")
            out.append(symbol)
            code = length = 0
    if length >= 8 or code != (1 << length) - 1:
        raise HPACKError("a Huffman string with an invalid padding")
    return bytes(out)


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
