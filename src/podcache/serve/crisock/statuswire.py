"""The status calls' bytes, read and written by hand; pure, no protobuf import
(docs/architecture.md §10 rule 8).

Every input is the runtime's or a client's: a field past the end, a varint past 10 bytes or a
wire type protobuf lacks is ``ProtobufError``, never an index error. Fields are kept as bytes
(no re-encoding): fields podcache's proto lacks (``resources``, ``mounts``, ``user``) stay.
"""

from __future__ import annotations

from typing import NamedTuple

from podcache.cri.wire.protobuf import ProtobufError, read_varint, varint

__all__ = [
    "EventFacts",
    "ProtobufError",
    "SandboxParts",
    "StatusRequest",
    "answer_id",
    "container_state",
    "event_facts",
    "info_fields",
    "message_fields",
    "plain_answer",
    "sandbox_parts",
    "sandbox_state",
    "stamped",
    "status_answer",
    "status_request",
    "text_of",
]

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
DELETED = 3
"""``ContainerEventType.CONTAINER_DELETED_EVENT``."""
_TIMESTAMP_TAG = 4 << 3 | _VARINT
"""``PodSandboxStatusResponse.timestamp``: field 4, an int64."""


class StatusRequest(NamedTuple):
    """A status request's known fields: the ID as asked (a prefix too) and ``verbose``."""

    ident: str
    verbose: bool


class EventFacts(NamedTuple):
    """One event: the ID it names (a container's, or the sandbox's for a sandbox event), its
    type, its time (ns since the epoch, 0 when unset), the sandbox status's ID and bytes (""
    and None when absent), and each container status as (ID, bytes)."""

    container_id: str
    kind: int
    created_at: int
    sandbox_id: str
    sandbox_status: bytes | None
    container_statuses: tuple[tuple[str, bytes], ...]


def message_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """Each field of one message as (number, wire type, value: an int, or a length-delimited
    body's bytes)."""
    found: list[tuple[int, int, int | bytes]] = []
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = read_varint(data, pos)
        number, kind = tag >> 3, tag & 7
        value: int | bytes
        if kind == _VARINT:
            value, pos = read_varint(data, pos)
        elif kind == _LEN:
            length, pos = read_varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif kind in (_I64, _I32):
            pos += 8 if kind == _I64 else 4
            value = 0
        else:
            raise ProtobufError(f"wire type {kind} in field {number}")
        if pos > end or number == 0:
            raise ProtobufError(f"field {number} runs past the message's end")
        found.append((number, kind, value))
    return found


def text_of(value: int | bytes, what: str) -> str:
    """A string field's value (``what`` names it in the error); ``ProtobufError`` for one that
    is not length-delimited or not UTF-8."""
    if not isinstance(value, bytes):
        raise ProtobufError(f"{what} is not a string")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise ProtobufError(f"{what} is not UTF-8") from None


def _id_of(status: bytes) -> str:
    """Field 1 (``id``) of a ContainerStatus or PodSandboxStatus ("" when absent): read at the
    start, where every runtime writes it (fields in number order), else found by a walk."""
    if status[:1] == b"\x0a":
        length, start = read_varint(status, 1)
        if start + length <= len(status) and _no_more_ids(status, start + length):
            return text_of(status[start : start + length], "a status's id")
    ident = ""
    for number, _, value in message_fields(status):
        if number == 1:
            ident = text_of(value, "a status's id")
    return ident


def _no_more_ids(status: bytes, after: int) -> bool:
    """Whether the field at ``after`` is numbered past 1 (fields in number order: no later
    ``id`` repeats the first, which protobuf's last-wins rule would make the one)."""
    if after >= len(status):
        return True
    tag, _ = read_varint(status, after)
    return tag >> 3 > 1


def status_request(data: bytes) -> StatusRequest | None:
    """The request's ID and verbose flag; None when ``data`` is not a well-formed request of
    those two fields (unknown fields are ignored, as the runtime ignores them)."""
    ident, verbose = "", False
    try:
        for number, kind, value in message_fields(data):
            if number == 1:
                ident = text_of(value, "the request's ID")
            elif number == 2 and kind == _VARINT:
                verbose = bool(value)
            elif number in (1, 2):
                return None
    except ProtobufError:
        return None
    return StatusRequest(ident, verbose)


def event_facts(data: bytes) -> EventFacts:
    """What the event ``data`` says (``ProtobufError`` for bytes that are not an event)."""
    container_id, kind, created_at = "", 0, 0
    sandbox_id, sandbox_status = "", None
    statuses: list[tuple[str, bytes]] = []
    for number, _, value in message_fields(data):
        if number == 1:
            container_id = text_of(value, "the event's container_id")
        elif number in (2, 3) and isinstance(value, int):
            if number == 2:
                kind = value
            else:
                created_at = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 4 and isinstance(value, bytes):
            sandbox_status, sandbox_id = value, _id_of(value)
        elif number == 5 and isinstance(value, bytes):
            statuses.append((_id_of(value), value))
    return EventFacts(container_id, kind, created_at, sandbox_id, sandbox_status, tuple(statuses))


def status_answer(status: bytes) -> bytes:
    """The non-verbose answer carrying ``status``: field 1 alone."""
    return b"\x0a" + varint(len(status)) + status


def plain_answer(answer: bytes) -> bytes:
    """The non-verbose answer of the same status as ``answer`` (its field 1 alone);
    ``ProtobufError`` when it carries no status."""
    for number, _, value in message_fields(answer):
        if number == 1 and isinstance(value, bytes):
            return status_answer(value)
    raise ProtobufError("the answer carries no status")


def sandbox_state(answer: bytes) -> int | None:
    """The ``PodSandboxState`` of a ``PodSandboxStatusResponse`` that is its status alone
    (field 1, nothing else); None for any other answer. ``ProtobufError`` for unreadable bytes."""
    fields = message_fields(answer)
    if len(fields) != 1:
        return None
    return container_state(answer)


def container_state(answer: bytes) -> int | None:
    """The state (field 3) of the status (field 1) a status answer carries, verbose or not;
    None when it carries no status or a state that is not a varint. ``ProtobufError`` for
    unreadable bytes."""
    statuses = [v for n, _, v in message_fields(answer) if n == 1]
    if len(statuses) != 1 or not isinstance(statuses[0], bytes):
        return None
    state = 0  # proto3's default
    for number, kind, value in message_fields(statuses[0]):
        if number == 3:
            if kind != _VARINT or not isinstance(value, int):
                return None
            state = value
    return state


def info_fields(answer: bytes) -> bytes:
    """The answer's ``info`` map (field 2: each entry's bytes with its tag), as it came."""
    parts: list[bytes] = []
    pos = 0
    while pos < len(answer):
        start = pos
        tag, pos = _field_end(answer, pos)
        if tag == 2 << 3 | _LEN:
            parts.append(answer[start:pos])
    return b"".join(parts)


def answer_id(answer: bytes) -> str:
    """The ID the answer's status (field 1) names; ``ProtobufError`` when it names none."""
    for number, _, value in message_fields(answer):
        if number == 1 and isinstance(value, bytes):
            ident = _id_of(value)
            if ident:
                return ident
    raise ProtobufError("the answer's status names no ID")


class SandboxParts(NamedTuple):
    """A ``PodSandboxStatus`` answer read for keeping: its bytes without ``timestamp``,
    whether it carried the evented fields (``containers_statuses`` or ``timestamp``: CRI-O with
    ``enable_pod_events``), and the IDs of the containers it lists, in its order."""

    body: bytes
    extras: bool
    container_ids: tuple[str, ...]


def _field_end(data: bytes, pos: int) -> tuple[int, int]:
    """The tag of the field at ``pos`` and where the field ends."""
    tag, pos = read_varint(data, pos)
    kind = tag & 7
    if kind == _LEN:
        length, pos = read_varint(data, pos)
        pos += length
    elif kind == _VARINT:
        _, pos = read_varint(data, pos)
    elif kind in (_I64, _I32):
        pos += 8 if kind == _I64 else 4
    else:
        raise ProtobufError(f"wire type {kind} in field {tag >> 3}")
    if pos > len(data):
        raise ProtobufError(f"field {tag >> 3} runs past the message's end")
    return tag, pos


def sandbox_parts(answer: bytes) -> SandboxParts:
    """``answer`` (a PodSandboxStatusResponse) read for keeping (``SandboxParts``)."""
    kept: list[bytes] = []
    ids: list[str] = []
    extras = False
    pos = 0
    while pos < len(answer):
        start = pos
        tag, pos = _field_end(answer, pos)
        if tag == _TIMESTAMP_TAG:
            extras = True
            continue
        if tag == 3 << 3 | _LEN:
            extras = True
            length, body = read_varint(answer, start + 1)
            ids.append(_id_of(answer[body : body + length]))
        kept.append(answer[start:pos])
    return SandboxParts(b"".join(kept), extras, tuple(ids))


def stamped(body: bytes, nanoseconds: int) -> bytes:
    """``body`` (``SandboxParts.body``) with ``timestamp`` = ``nanoseconds``, as the last
    field (fields in number order: a Go runtime writes it last too)."""
    return body + bytes([_TIMESTAMP_TAG]) + varint(nanoseconds & (1 << 64) - 1)
