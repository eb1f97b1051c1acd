"""Protobuf's wire format for the few CRI messages written by hand (no protobuf import): varints,
string fields, the requests the own wire sends, and Version's answer.

Each request is the bytes ``SerializeToString`` gives its message (a test holds them to the
generated module's: tests/unit/cri/test_wire.py). Deliberately not here: the list and status
answers' readers (``cri.convert``, ``cri.eventwire`` and their C core).
"""

from __future__ import annotations

__all__ = [
    "CRI_VERSION",
    "ProtobufError",
    "events_request",
    "list_requests",
    "read_varint",
    "status_request",
    "varint",
    "version_fields",
    "version_request",
]

CRI_VERSION = "0.1.0"
"""The version a Version request sends: the kubelet's."""
_MAX_VARINT_BYTES = 10


class ProtobufError(ValueError):
    """Bytes that are not the message they should be (the text names what is wrong)."""


def varint(n: int) -> bytes:
    """``n`` (at least 0) as a base-128 varint."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and where it ends; ``ProtobufError`` for one cut short or longer
    than 10 bytes."""
    value = shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        if pos >= len(data):
            break
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise ProtobufError("a malformed varint")


def _string_field(number: int, text: str) -> bytes:
    data = text.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def version_request() -> bytes:
    """``VersionRequest{version: CRI_VERSION}``."""
    return _string_field(1, CRI_VERSION)


def list_requests(all: bool) -> tuple[bytes, bytes]:
    """The ListPodSandbox and ListContainers requests of a node's listing: the kubelet's
    filters, READY sandboxes and RUNNING containers (the state values' wrappers present;
    SANDBOX_READY is 0, so its wrapper is empty), or none (``all``: no sandbox filter, an
    empty container filter)."""
    if all:
        return b"", b"\x0a\x00"
    return b"\x0a\x02\x12\x00", b"\x0a\x04\x12\x02\x08\x01"


def status_request(sandbox_id: str) -> bytes:
    """``PodSandboxStatusRequest{pod_sandbox_id: sandbox_id}``."""
    return _string_field(1, sandbox_id)


def events_request() -> bytes:
    """``GetEventsRequest{}``."""
    return b""


def version_fields(data: bytes) -> tuple[str, str, str, str]:
    """The four strings of a ``VersionResponse`` (fields 1-4: version, runtime name, runtime
    version, runtime API version); other fields skipped; ``ProtobufError`` for bytes that are
    not one."""
    fields = ["", "", "", ""]
    pos, end = 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = read_varint(data, pos)
            if pos + length > end:
                raise ProtobufError("a truncated Version answer")
            if 1 <= number <= 4:
                fields[number - 1] = data[pos : pos + length].decode()
            pos += length
        elif wire == 0:
            _, pos = read_varint(data, pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ProtobufError(f"a Version answer with wire type {wire}")
    if pos != end:
        raise ProtobufError("a truncated Version answer")
    return fields[0], fields[1], fields[2], fields[3]
