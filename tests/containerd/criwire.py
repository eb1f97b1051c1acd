"""The CRI fields and RPCs a kubelet uses that podcache's proto subset leaves out, written and
read by hand in protobuf's wire format (for tests only).

podcache's ``api.proto`` declares only what podcache reads. Running the DaemonSet's pod as the
kubelet would needs more: on CreateContainer the mounts, users and groups, capabilities, seccomp
profile and resources; ExecSync for exec probes. Protobuf merges concatenated messages (a
message field that appears again is merged into the first, a repeated field appends), so a
request here is the subset's own serialized message followed by the extra fields. Field numbers
are those of k8s.io/cri-api ``pkg/apis/runtime/v1/api.proto``; the image tests check every
field's effect on the container's process, so a wrong number fails them.

Deliberately not a general protobuf codec: varints and length-delimited fields, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

CREATE_CONTAINER = "/runtime.v1.RuntimeService/CreateContainer"
EXEC_SYNC = "/runtime.v1.RuntimeService/ExecSync"

_VARINT = 0
_LENGTH_DELIMITED = 2


def varint(value: int) -> bytes:
    """Base-128 varint; a negative int64 as its 64-bit two's complement (10 bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def int_field(number: int, value: int) -> bytes:
    return varint(number << 3 | _VARINT) + varint(value)


def bytes_field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | _LENGTH_DELIMITED) + varint(len(data)) + data


def str_field(number: int, text: str) -> bytes:
    return bytes_field(number, text.encode())


def message_field(number: int, *parts: bytes) -> bytes:
    """A nested message (present even when empty: an empty SecurityProfile means RuntimeDefault)."""
    return bytes_field(number, b"".join(parts))


def read_fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Every field of one message by number, in order (varints as ints, the rest as bytes)."""
    fields: dict[int, list[int | bytes]] = {}
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, at = _read_varint(data, at)
        elif wire == _LENGTH_DELIMITED:
            size, at = _read_varint(data, at)
            if at + size > len(data):
                raise ValueError(f"field {number}: {size} bytes past the end of the message")
            value, at = data[at : at + size], at + size
        else:
            raise ValueError(f"field {number}: wire type {wire} is not read here")
        fields.setdefault(number, []).append(value)
    return fields


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


@dataclass(frozen=True)
class Mount:
    """CRI ``Mount``: container_path=1, host_path=2, readonly=3."""

    container_path: str
    host_path: str
    readonly: bool

    def encode(self) -> bytes:
        return (
            str_field(1, self.container_path)
            + str_field(2, self.host_path)
            + int_field(3, int(self.readonly))
        )


@dataclass(frozen=True)
class Security:
    """The parts of ``LinuxContainerSecurityContext`` the subset lacks: capabilities=1
    (Capability: add_capabilities=1, drop_capabilities=2), run_as_user=5 and run_as_group=12
    (Int64Value: value=1), supplemental_groups=8, seccomp=15 (SecurityProfile: profile_type=1,
    RuntimeDefault=0)."""

    run_as_user: int | None = None
    run_as_group: int | None = None
    supplemental_groups: tuple[int, ...] = ()
    add_capabilities: tuple[str, ...] = ()
    drop_capabilities: tuple[str, ...] = ()
    seccomp_runtime_default: bool = False

    def encode(self) -> bytes:
        caps = b"".join(str_field(1, c) for c in self.add_capabilities)
        caps += b"".join(str_field(2, c) for c in self.drop_capabilities)
        out = message_field(1, caps) if caps else b""
        if self.run_as_user is not None:
            out += message_field(5, int_field(1, self.run_as_user))
        if self.run_as_group is not None:
            out += message_field(12, int_field(1, self.run_as_group))
        out += b"".join(int_field(8, g) for g in self.supplemental_groups)
        if self.seccomp_runtime_default:
            out += message_field(15)
        return out


@dataclass(frozen=True)
class Resources:
    """``LinuxContainerResources``: cpu_period=1, cpu_quota=2, cpu_shares=3,
    memory_limit_in_bytes=4 (0 leaves a field out, as proto3 does)."""

    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit_in_bytes: int = 0

    def encode(self) -> bytes:
        values = (self.cpu_period, self.cpu_quota, self.cpu_shares, self.memory_limit_in_bytes)
        return b"".join(int_field(n, v) for n, v in enumerate(values, start=1) if v)


@dataclass(frozen=True)
class ContainerExtras:
    """What ``ContainerConfig`` gets beyond the subset: mounts=7, and in linux=15 resources=1
    and security_context=2."""

    mounts: tuple[Mount, ...] = ()
    security: Security = field(default_factory=Security)
    resources: Resources = field(default_factory=Resources)

    def encode(self) -> bytes:
        """The extra fields of a ``ContainerConfig``, to follow its serialized subset."""
        linux = message_field(1, self.resources.encode()) + message_field(2, self.security.encode())
        return b"".join(message_field(7, m.encode()) for m in self.mounts) + message_field(
            15, linux
        )


def create_request(subset: bytes, extras: ContainerExtras) -> bytes:
    """A serialized ``CreateContainerRequest`` (subset) with the extras merged into its config=2."""
    return subset + message_field(2, extras.encode())


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


def exec_sync(
    channel: grpc.Channel, container_id: str, command: list[str], timeout: int, deadline: float
) -> ExecResult:
    """ExecSync (ExecSyncRequest: container_id=1, cmd=2, timeout=3; ExecSyncResponse: stdout=1,
    stderr=2, exit_code=3), as the kubelet runs an exec probe: ``timeout`` seconds for the
    command, ``deadline`` for the call."""
    request = str_field(1, container_id) + b"".join(str_field(2, arg) for arg in command)
    request += int_field(3, timeout)
    call: Any = channel.unary_unary(EXEC_SYNC, request_serializer=None, response_deserializer=None)
    fields = read_fields(call(request, timeout=deadline, wait_for_ready=True))
    code = fields.get(3, [0])[-1]
    out, err = fields.get(1, [b""])[-1], fields.get(2, [b""])[-1]
    assert isinstance(code, int) and isinstance(out, bytes) and isinstance(err, bytes)
    return ExecResult(code - (1 << 64) if code >= 1 << 63 else code, out, err)  # int32 sign
