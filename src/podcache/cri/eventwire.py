"""A ``ContainerEventResponse`` read from its wire bytes: the fields podcache uses, the rest
skipped by its length without being decoded; no protobuf, no I/O (docs/architecture.md §7:
read off the event loop, never holding the GIL for long). Its cost is one step per field at
the top level, in the sandbox status (each label is a field there) and in each container
status (whose labels and annotations are skipped whole). Two implementations, one result:

- the C extension's (``podcache.cri._wire``, when built: ``EVENT_READER == "c"``): a scan that
  touches no Python object, then the strs are built. The scan runs with the GIL released for
  an input of at least 64 KiB of bytes (or a memoryview of bytes); a smaller one keeps it
  (retaking it can cost a switch interval), and so does a mutable buffer (a bytearray), which
  could change under a scan without the GIL;
- the Python one (``event_fields_python``, ``status_fields_python``): the fallback where the
  extension is not built, and the reference the C one is held to (tests/unit/cri/
  test_eventwire_c.py: equal results and equal error messages).

``event_fields(data)`` returns ``EventFields`` as protobuf would decode them from ``data``:

- ``container_id`` (1), ``container_event_type`` (2, int32), ``created_at`` (3, int64),
  ``pod_sandbox_status`` (4): its ``id`` (1), ``metadata`` (2: ``name`` (1), ``uid`` (2),
  ``namespace`` (3)), ``state`` (3), ``created_at`` (4), ``network`` (5: ``ip`` (1),
  ``additional_ips`` (2, repeated ``PodIP``: ``ip`` (1))) and ``linux`` (6) ``namespaces`` (1)
  ``options`` (2) ``network`` (1, the ``NamespaceMode``); ``containers_statuses`` (5): of each,
  the fields ``ContainerFields`` names (docs/architecture.md §7, "Events are facts");
- of ``containers_statuses`` the first ``MAX_EVENT_CONTAINERS`` are kept, the others read
  (checked) and counted (``containers_dropped``);
- ``status_fields(data)`` reads a ``PodSandboxStatusResponse`` the same way: its ``status``
  (1) is read as an event's sandbox status is; the event's own fields stay unset;
- of ``additional_ips`` the first ``MAX_ADDITIONAL_IPS`` are kept, the others only counted
  (``additional_ips_dropped``); an IP string that is not UTF-8 is kept with its bad bytes
  replaced (U+FFFD), so that it is dropped as an invalid address, not as a broken event;
- the last value of a scalar wins; a message field given several times is merged; a known
  field with another wire type is an unknown field, skipped, as protobuf does; unknown fields
  (groups too) are skipped;
- malformed wire data anywhere (a truncated or over-long varint, a length past the end, a
  field number 0 outside an unknown group, wire type 6 or 7, an unmatched group end, groups
  nested past ``MAX_DEPTH``) and a field it reads that is not UTF-8 are an
  ``EventWireError``. Where protobuf is stricter still (a tag or length of more than 5
  bytes) this reader accepts: it is never stricter than protobuf.

The one difference from protobuf, by design: a string podcache does not read (a label, a
container status) is never decoded, so one that is not valid UTF-8 is not noticed.
tests/unit/cri/test_eventwire.py holds both readers to protobuf on generated messages and
corrupted bytes. Both take bytes or a memoryview (the C one any contiguous buffer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

__all__ = [
    "EVENT_READER",
    "MAX_ADDITIONAL_IPS",
    "MAX_DEPTH",
    "MAX_EVENT_CONTAINERS",
    "ContainerFields",
    "EventFields",
    "EventWireError",
    "event_fields",
    "event_fields_python",
    "status_fields",
    "status_fields_python",
]

MAX_DEPTH = 100
"""Most nested groups skipped (protobuf's recursion limit)."""

MAX_ADDITIONAL_IPS = 8
"""Additional IP strings of one sandbox status kept (Kubernetes gives a pod at most one per IP
family); the rest are counted, not read."""

MAX_EVENT_CONTAINERS = 16
"""Container statuses of one event kept (a pod's containers, init and ephemeral ones too, each
once); the rest are read and counted (``containers_dropped``), not kept."""

_VARINT, _FIXED64, _LENGTH, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5
_INT32_MASK = 0xFFFFFFFF
_UINT64 = 1 << 64


class EventWireError(ValueError):
    """The bytes are not a valid ``ContainerEventResponse``."""


ContainerFields = tuple[str, str, int, int, int, str, str]
"""One ``ContainerStatus`` of an event as read: its ``id`` (1), ``metadata`` (2) ``name`` (1)
and ``attempt`` (2, uint32), ``state`` (3, int32), ``created_at`` (4, int64), ``image`` (8)
``image`` (1) and ``image_ref`` (9), in that order (a plain tuple: the C reader builds it)."""


class EventFields(NamedTuple):
    """What podcache uses of one event, as protobuf would decode it (unset: 0 or "").

    ``sandbox_state``: ``PodSandboxState`` (0 READY, 1 NOTREADY); ``network_mode``: the
    sandbox's network ``NamespaceMode`` (2 is NODE: the host network); ``pod_name``,
    ``pod_namespace``: the sandbox metadata's ``name`` (1) and ``namespace`` (3);
    ``sandbox_created_at``: the sandbox status's ``created_at`` (4); ``containers``: the
    event's ``containers_statuses`` (5), the first ``MAX_EVENT_CONTAINERS`` of them."""

    container_event_type: int
    container_id: str
    created_at: int
    sandbox_id: str
    pod_uid: str
    sandbox_state: int = 0
    ip: str = ""
    additional_ips: tuple[str, ...] = ()
    additional_ips_dropped: int = 0
    network_mode: int = 0
    pod_name: str = ""
    pod_namespace: str = ""
    sandbox_created_at: int = 0
    containers: tuple[ContainerFields, ...] = ()
    containers_dropped: int = 0


def _varint(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise EventWireError("a varint runs past the end of its message")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & (_UINT64 - 1), pos
        shift += 7
        if shift >= 70:
            raise EventWireError("a varint is longer than 10 bytes")


def _tag(
    data: bytes | memoryview, pos: int, end: int, *, in_group: bool = False
) -> tuple[int, int, int]:
    """(field number, wire type, position after the tag). Field number 0 is an error but
    inside an unknown group, as protobuf (upb) has it."""
    key, pos = _varint(data, pos, end)
    field, wire = key >> 3, key & 7
    if (field == 0 and not in_group) or key > _INT32_MASK:
        raise EventWireError(f"a field number of {field} is not valid")
    if wire in (6, 7):
        raise EventWireError(f"wire type {wire} does not exist")
    return field, wire, pos


def _length(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """(start, end) of a length-delimited value that begins at ``pos``."""
    size, pos = _varint(data, pos, end)
    if size > end - pos:
        raise EventWireError("a length-delimited field runs past the end of its message")
    return pos, pos + size


def _skip(
    data: bytes | memoryview, field: int, wire: int, pos: int, end: int, *, depth: int
) -> int:
    """The position after the value of a field not read."""
    if wire == _VARINT:
        return _varint(data, pos, end)[1]
    if wire == _LENGTH:
        return _length(data, pos, end)[1]
    if wire in (_FIXED64, _FIXED32):
        size = 8 if wire == _FIXED64 else 4
        if end - pos < size:
            raise EventWireError("a fixed-size field runs past the end of its message")
        return pos + size
    if wire == _END_GROUP:
        raise EventWireError(f"a group end (field {field}) with no group open")
    return _skip_group(data, field, pos, end, depth + 1)


def _skip_group(data: bytes | memoryview, group: int, pos: int, end: int, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise EventWireError(f"groups nested deeper than {MAX_DEPTH}")
    while pos < end:
        field, wire, pos = _tag(data, pos, end, in_group=True)
        if wire == _END_GROUP:
            if field != group:
                raise EventWireError(f"group {group} ended by the end of group {field}")
            return pos
        pos = _skip(data, field, wire, pos, end, depth=depth)
    raise EventWireError(f"group {group} is not ended")


def _text(data: bytes | memoryview, start: int, stop: int, what: str) -> str:
    try:
        return bytes(data[start:stop]).decode("utf-8")
    except UnicodeDecodeError:
        raise EventWireError(f"{what} is not UTF-8") from None


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


_LABEL_TAGS = (0x3A, 0x42)  # fields 7 (labels) and 8 (annotations), length-delimited


def _skip_labels(data: bytes | memoryview, pos: int, end: int) -> int:
    """Past a run of label and annotation entries of a sandbox status (most of its bytes), in
    one tight loop: a one-byte tag and a length of at most three bytes each, the common shape
    of every entry; anything else is left to the general loop. The same result as reading them
    field by field (they are skipped either way)."""
    while pos + 1 < end and data[pos] in _LABEL_TAGS:
        size = data[pos + 1]
        if size < 0x80:
            pos += 2
        elif pos + 2 < end and data[pos + 2] < 0x80:
            size = (size & 0x7F) | (data[pos + 2] << 7)
            pos += 3
        elif pos + 3 < end and data[pos + 3] < 0x80:
            size = (size & 0x7F) | ((data[pos + 2] & 0x7F) << 7) | (data[pos + 3] << 14)
            pos += 4
        else:
            return pos
        if size > end - pos:
            raise EventWireError("a length-delimited field runs past the end of its message")
        pos += size
    return pos


def _loose_text(data: bytes | memoryview, start: int, stop: int) -> str:
    """A string read for what it says, not trusted: bad UTF-8 is replaced, not an error."""
    return bytes(data[start:stop]).decode("utf-8", errors="replace")


def _one_field(
    data: bytes | memoryview, pos: int, end: int, wanted: int, wire_type: int
) -> tuple[int, int] | None:
    """The (start, end) of the last ``wanted`` field of wire type ``wire_type`` in a message
    (a varint's value and its end for ``_VARINT``); None when it is absent."""
    found: tuple[int, int] | None = None
    while pos < end:
        field, wire, pos = _tag(data, pos, end)
        if field == wanted and wire == wire_type:
            if wire == _VARINT:
                found = _varint(data, pos, end)
                pos = found[1]
            else:
                found = _length(data, pos, end)
                pos = found[1]
        else:
            pos = _skip(data, field, wire, pos, end, depth=0)
    return found


class _Reading:
    """The fields read so far (the last of each wins; messages merge)."""

    __slots__ = (
        "additional_ips",
        "container_id",
        "containers",
        "containers_dropped",
        "created_at",
        "dropped",
        "event_type",
        "ip",
        "name",
        "namespace",
        "network_mode",
        "sandbox_created_at",
        "sandbox_id",
        "state",
        "uid",
    )

    def __init__(self) -> None:
        self.event_type = 0
        self.container_id = ""
        self.created_at = 0
        self.sandbox_id = ""
        self.uid = ""
        self.state = 0
        self.ip = ""
        self.additional_ips: list[str] = []
        self.dropped = 0
        self.network_mode = 0
        self.name = ""
        self.namespace = ""
        self.sandbox_created_at = 0
        self.containers: list[ContainerFields] = []
        self.containers_dropped = 0

    def fields(self) -> EventFields:
        return EventFields(
            self.event_type,
            self.container_id,
            self.created_at,
            self.sandbox_id,
            self.uid,
            self.state,
            self.ip,
            tuple(self.additional_ips),
            self.dropped,
            self.network_mode,
            self.name,
            self.namespace,
            self.sandbox_created_at,
            tuple(self.containers),
            self.containers_dropped,
        )

    def network(self, data: bytes | memoryview, pos: int, end: int) -> None:
        """``PodSandboxNetworkStatus``: ip (1), additional_ips (2, repeated PodIP)."""
        while pos < end:
            field, wire, pos = _tag(data, pos, end)
            if field in (1, 2) and wire == _LENGTH:
                start, pos = _length(data, pos, end)
                if field == 1:
                    self.ip = _loose_text(data, start, pos)
                elif len(self.additional_ips) < MAX_ADDITIONAL_IPS:
                    found = _one_field(data, start, pos, 1, _LENGTH)
                    self.additional_ips.append("" if found is None else _loose_text(data, *found))
                else:
                    _one_field(data, start, pos, 1, _LENGTH)  # still checked, as protobuf does
                    self.dropped += 1
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)

    def linux(self, data: bytes | memoryview, pos: int, end: int) -> None:
        """``LinuxPodSandboxStatus``: namespaces (1) -> options (2) -> network (1)."""
        while pos < end:
            field, wire, pos = _tag(data, pos, end)
            if field == 1 and wire == _LENGTH:
                start, pos = _length(data, pos, end)
                self.namespaces(data, start, pos)
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)

    def namespaces(self, data: bytes | memoryview, pos: int, end: int) -> None:
        while pos < end:
            field, wire, pos = _tag(data, pos, end)
            if field == 2 and wire == _LENGTH:
                start, pos = _length(data, pos, end)
                found = _one_field(data, start, pos, 1, _VARINT)
                if found is not None:
                    self.network_mode = _signed(found[0], 32)
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)

    def metadata(self, data: bytes | memoryview, pos: int, end: int) -> None:
        """``PodSandboxMetadata``: name (1), uid (2), namespace (3)."""
        while pos < end:
            field, wire, pos = _tag(data, pos, end)
            if field in (1, 2, 3) and wire == _LENGTH:
                start, pos = _length(data, pos, end)
                if field == 1:
                    self.name = _text(data, start, pos, "pod_sandbox_status.metadata.name")
                elif field == 2:
                    self.uid = _text(data, start, pos, "pod_sandbox_status.metadata.uid")
                else:
                    text = _text(data, start, pos, "pod_sandbox_status.metadata.namespace")
                    self.namespace = text
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)

    def container(self, data: bytes | memoryview, pos: int, end: int) -> None:
        """One ``ContainerStatus`` of ``containers_statuses``: kept while fewer than
        ``MAX_EVENT_CONTAINERS`` are, else read (and so checked) and counted."""
        status = _ContainerReading()
        status.read(data, pos, end)
        if len(self.containers) < MAX_EVENT_CONTAINERS:
            self.containers.append(status.fields())
        else:
            self.containers_dropped += 1

    def sandbox(self, data: bytes | memoryview, pos: int, end: int) -> None:
        while pos < end:
            pos = _skip_labels(data, pos, end)
            if pos >= end:
                return
            field, wire, pos = _tag(data, pos, end)
            if wire == _LENGTH and field in (1, 2, 5, 6):
                start, pos = _length(data, pos, end)
                self._sandbox_part(field, data, start, pos)
            elif wire == _VARINT and field in (3, 4):
                value, pos = _varint(data, pos, end)
                if field == 3:
                    self.state = _signed(value, 32)
                else:
                    self.sandbox_created_at = _signed(value, 64)
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)

    def _sandbox_part(self, field: int, data: bytes | memoryview, start: int, end: int) -> None:
        """A length-delimited field of the sandbox's status: its ID (1), metadata (2),
        network (5) or Linux part (6)."""
        if field == 1:
            self.sandbox_id = _text(data, start, end, "pod_sandbox_status.id")
        elif field == 2:
            self.metadata(data, start, end)
        elif field == 5:
            self.network(data, start, end)
        else:
            self.linux(data, start, end)

    def top(self, data: bytes | memoryview, pos: int, end: int) -> None:
        while pos < end:
            field, wire, pos = _tag(data, pos, end)
            if field in (2, 3) and wire == _VARINT:
                value, pos = _varint(data, pos, end)
                if field == 2:
                    self.event_type = _signed(value, 32)
                else:
                    self.created_at = _signed(value, 64)
            elif field in (1, 4, 5) and wire == _LENGTH:
                start, pos = _length(data, pos, end)
                if field == 1:
                    self.container_id = _text(data, start, pos, "container_id")
                elif field == 4:
                    self.sandbox(data, start, pos)
                else:
                    self.container(data, start, pos)
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)


class _ContainerReading:
    """The fields of one ``ContainerStatus`` read so far (the last of each wins; its
    ``metadata`` and ``image`` merge)."""

    __slots__ = ("attempt", "created_at", "id", "image", "image_ref", "name", "state")

    def __init__(self) -> None:
        self.id = self.name = self.image = self.image_ref = ""
        self.attempt = self.state = self.created_at = 0

    def fields(self) -> ContainerFields:
        return (
            self.id,
            self.name,
            self.attempt,
            self.state,
            self.created_at,
            self.image,
            self.image_ref,
        )

    def read(self, data: bytes | memoryview, pos: int, end: int) -> None:
        """id (1), metadata (2), state (3), created_at (4), image (8), image_ref (9)."""
        while pos < end:
            field, wire, pos = _tag(data, pos, end)
            if field in (3, 4) and wire == _VARINT:
                value, pos = _varint(data, pos, end)
                if field == 3:
                    self.state = _signed(value, 32)
                else:
                    self.created_at = _signed(value, 64)
            elif field in (1, 2, 8, 9) and wire == _LENGTH:
                start, pos = _length(data, pos, end)
                self.message(field, data, start, pos)
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)

    def message(self, field: int, data: bytes | memoryview, start: int, end: int) -> None:
        if field == 1:
            self.id = _text(data, start, end, "containers_statuses.id")
        elif field == 9:
            self.image_ref = _text(data, start, end, "containers_statuses.image_ref")
        else:
            self.named(field, data, start, end)

    def named(self, message: int, data: bytes | memoryview, pos: int, end: int) -> None:
        """``ContainerMetadata`` (``message`` 2): name (1), attempt (2, uint32); or
        ``ImageSpec`` (8): image (1)."""
        while pos < end:
            field, wire, pos = _tag(data, pos, end)
            if field == 1 and wire == _LENGTH:
                start, pos = _length(data, pos, end)
                if message == 2:
                    self.name = _text(data, start, pos, "containers_statuses.metadata.name")
                else:
                    self.image = _text(data, start, pos, "containers_statuses.image.image")
            elif field == 2 and wire == _VARINT and message == 2:
                value, pos = _varint(data, pos, end)
                self.attempt = value & _INT32_MASK
            else:
                pos = _skip(data, field, wire, pos, end, depth=0)


def event_fields_python(data: bytes | memoryview) -> EventFields:
    """``event_fields`` in Python: the fallback and the reference."""
    reading = _Reading()
    reading.top(data, 0, len(data))
    return reading.fields()


def status_fields_python(data: bytes | memoryview) -> EventFields:
    """``status_fields`` in Python: the fallback and the reference."""
    reading = _Reading()
    pos, end = 0, len(data)
    while pos < end:
        field, wire, pos = _tag(data, pos, end)
        if field == 1 and wire == _LENGTH:
            start, pos = _length(data, pos, end)
            reading.sandbox(data, start, pos)
        else:
            pos = _skip(data, field, wire, pos, end, depth=0)
    return reading.fields()


class _CReader(NamedTuple):
    """The C extension's entry points for events."""

    event_fields: Callable[[bytes | memoryview, type[EventFields]], EventFields]
    status_fields: Callable[[bytes | memoryview, type[EventFields]], EventFields]
    error: type[ValueError]


def _load_c_reader() -> _CReader | None:
    try:
        from podcache.cri import _wire  # noqa: PLC0415 -- optional: built only with a C compiler
    except ImportError:  # not compiled here: the Python reader reads events
        return None
    return _CReader(_wire.event_fields, _wire.status_fields, _wire.MalformedError)


_C_READER = _load_c_reader()

EVENT_READER: Literal["c", "python"] = "python" if _C_READER is None else "c"
"""Which reader ``event_fields`` and ``status_fields`` use: the C extension's, or the Python
one (an install without a C compiler). Public as ``podcache.cri.EVENT_DECODER``; ``podcache
version`` (``EventDecoder:``) and ``/metrics`` (``podcache_build_info{event_decoder}``) report
it."""


def event_fields(data: bytes | memoryview) -> EventFields:
    """The fields podcache uses of the ``ContainerEventResponse`` in ``data`` (see the module
    docstring); ``EventWireError`` when ``data`` is not a valid message."""
    if _C_READER is None:
        return event_fields_python(data)
    try:
        return _C_READER.event_fields(data, EventFields)
    except _C_READER.error as error:
        raise EventWireError(str(error)) from None


def status_fields(data: bytes | memoryview) -> EventFields:
    """The sandbox fields of the ``PodSandboxStatusResponse`` in ``data``, read as an event's
    ``pod_sandbox_status`` is (its ``info`` and container statuses skipped); ``EventWireError``
    when ``data`` is not a valid message."""
    if _C_READER is None:
        return status_fields_python(data)
    try:
        return _C_READER.status_fields(data, EventFields)
    except _C_READER.error as error:
        raise EventWireError(str(error)) from None
