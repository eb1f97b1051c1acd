"""The simulator's records as CRI protobuf: the messages, and the bytes the server sends.

``sandbox_message`` / ``container_message`` are a list's items, ``sandbox_status_message`` /
``container_status_message`` the statuses, ``event_message`` a ``ContainerEventResponse``: the
reference encodings, built as protobuf messages. The server sends bytes: list items encoded
once per record (``entry``), and statuses and events joined from each record's status encoded
once (``StatusEncodings``), held to the messages by ``tests/unit/sim/test_event_bytes.py``.
Records are immutable, so an encoding stays valid while its record is the same object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.message import Message

from podcache.cri.proto import api_pb2 as pb
from podcache.sim.population import (
    SimContainer,
    SimContainerState,
    SimEvent,
    SimEventType,
    SimSandbox,
    SimSandboxState,
)

__all__ = [
    "STATUS_MEMO",
    "TIMESTAMP_TAG",
    "StatusEncodings",
    "container_info",
    "container_message",
    "container_status_message",
    "crio_container_info",
    "crio_sandbox_info",
    "entry",
    "event_message",
    "field",
    "info_entry",
    "sandbox_info",
    "sandbox_message",
    "sandbox_status_message",
    "varint",
]

_SANDBOX_STATES = {
    SimSandboxState.READY: pb.SANDBOX_READY,
    SimSandboxState.NOTREADY: pb.SANDBOX_NOTREADY,
}
_CONTAINER_STATES = {
    SimContainerState.CREATED: pb.CONTAINER_CREATED,
    SimContainerState.RUNNING: pb.CONTAINER_RUNNING,
    SimContainerState.EXITED: pb.CONTAINER_EXITED,
    SimContainerState.UNKNOWN: pb.CONTAINER_UNKNOWN,
}
_EVENT_TYPES = {
    SimEventType.CREATED: pb.CONTAINER_CREATED_EVENT,
    SimEventType.STARTED: pb.CONTAINER_STARTED_EVENT,
    SimEventType.STOPPED: pb.CONTAINER_STOPPED_EVENT,
    SimEventType.DELETED: pb.CONTAINER_DELETED_EVENT,
}


def _sandbox_fields(sandbox: SimSandbox) -> dict[str, Any]:
    """The fields a sandbox's list item and status share."""
    metadata = None
    if sandbox.has_metadata:
        metadata = pb.PodSandboxMetadata(
            name=sandbox.name, uid=sandbox.uid, namespace=sandbox.namespace, attempt=sandbox.attempt
        )
    return {
        "id": sandbox.id,
        "metadata": metadata,
        "state": _SANDBOX_STATES[sandbox.state],
        "created_at": sandbox.created_at,
        "labels": sandbox.labels,
        "annotations": sandbox.annotations,
        "runtime_handler": sandbox.runtime_handler,
    }


def sandbox_message(sandbox: SimSandbox) -> pb.PodSandbox:
    """The ``PodSandbox`` a list returns for this record."""
    return pb.PodSandbox(**_sandbox_fields(sandbox))


def _network_status(sandbox: SimSandbox, bad_ips: Sequence[str]) -> pb.PodSandboxNetworkStatus:
    """The sandbox's address as containerd reports it ("" on the host network), with the
    ``bad_ips`` fault's strings: the first as ``ip``, the own address after it."""
    if not bad_ips:
        return pb.PodSandboxNetworkStatus(ip=sandbox.ip)
    rest = [sandbox.ip, *bad_ips[1:]] if sandbox.ip else list(bad_ips[1:])
    return pb.PodSandboxNetworkStatus(
        ip=bad_ips[0], additional_ips=[pb.PodIP(ip=text) for text in rest]
    )


def sandbox_status_message(sandbox: SimSandbox, bad_ips: Sequence[str] = ()) -> pb.PodSandboxStatus:
    """The ``PodSandboxStatus`` of this record (``bad_ips``: see ``Faults.bad_ips``)."""
    mode = pb.NODE if sandbox.host_network else pb.POD
    return pb.PodSandboxStatus(
        **_sandbox_fields(sandbox),
        network=_network_status(sandbox, bad_ips),
        linux=pb.LinuxPodSandboxStatus(
            namespaces=pb.Namespace(options=pb.NamespaceOption(network=mode))
        ),
    )


def _container_fields(container: SimContainer) -> dict[str, Any]:
    """The fields a container's list item and status share."""
    metadata = image = None
    if container.has_metadata:
        metadata = pb.ContainerMetadata(name=container.name, attempt=container.attempt)
    if container.has_image:
        image = pb.ImageSpec(image=container.image, runtime_handler=container.image_runtime_handler)
    return {
        "id": container.id,
        "metadata": metadata,
        "image": image,
        "image_ref": container.image_ref,
        "state": _CONTAINER_STATES[container.state],
        "created_at": container.created_at,
        "labels": container.labels,
        "annotations": container.annotations,
        "image_id": container.image_id,
    }


def container_message(container: SimContainer) -> pb.Container:
    """The ``Container`` a list returns for this record."""
    return pb.Container(**_container_fields(container), pod_sandbox_id=container.pod_sandbox_id)


def container_status_message(container: SimContainer) -> pb.ContainerStatus:
    """The ``ContainerStatus`` of this record."""
    return pb.ContainerStatus(
        **_container_fields(container),
        started_at=container.started_at,
        finished_at=container.finished_at,
        exit_code=container.exit_code,
        reason=container.reason,
        log_path=container.log_path,
    )


_PID_SPAN = 4_000_000


def _compact(info: Mapping[str, object]) -> str:
    """``info`` as JSON without spaces, as the runtimes write it."""
    return json.dumps(info, separators=(",", ":"))


def _pid(ident: str, running: bool) -> int:
    """A running item's process ID, derived from its ID (0 once it stopped, as containerd)."""
    return 1000 + int(ident[:8] or "0", 16) % _PID_SPAN if running and ident.isalnum() else 0


def container_info(container: SimContainer, cgroup_path: str) -> str:
    """A verbose ContainerStatus's ``info`` value: containerd's JSON shape (its keys, in its
    order), from the record alone, so the same record always gives the same bytes."""
    running = container.state == SimContainerState.RUNNING
    info = {
        "sandboxID": container.pod_sandbox_id,
        "pid": _pid(container.id, running),
        "removing": False,
        "snapshotKey": container.id,
        "snapshotter": "overlayfs",
        "runtimeType": "io.containerd.runc.v2",
        "runtimeOptions": {"systemd_cgroup": False},
        "config": {
            "metadata": {"name": container.name, "attempt": container.attempt},
            "image": {"image": container.image},
            "envs": [{"key": "PODCACHE_SIM", "value": "1"}],
            "labels": dict(container.labels),
            "annotations": dict(container.annotations),
            "log_path": container.log_path,
        },
        "runtimeSpec": {
            "ociVersion": "1.1.0",
            "process": {"env": ["PATH=/usr/local/bin:/usr/bin:/bin", "PODCACHE_SIM=1"]},
            "linux": {"cgroupsPath": cgroup_path},
        },
    }
    return _compact(info)


def sandbox_info(sandbox: SimSandbox) -> str:
    """A verbose PodSandboxStatus's ``info`` value: containerd's JSON shape, from the record."""
    ready = sandbox.state == SimSandboxState.READY
    info = {
        "pid": _pid(sandbox.id, ready),
        "processStatus": "running" if ready else "stopped",
        "netNamespaceClosed": not ready,
        "image": "registry.k8s.io/pause:3.10",
        "snapshotKey": sandbox.id,
        "snapshotter": "overlayfs",
        "runtimeHandler": sandbox.runtime_handler,
        "runtimeType": "io.containerd.runc.v2",
        "config": {
            "metadata": {"name": sandbox.name, "uid": sandbox.uid, "namespace": sandbox.namespace},
            "labels": dict(sandbox.labels),
            "annotations": dict(sandbox.annotations),
        },
    }
    return _compact(info)


def _crio_spec(annotations: dict[str, str], cgroup_path: str) -> dict[str, object]:
    """A small OCI runtime spec as CRI-O's Go JSON writes one (``specs-go``'s field order;
    a map's keys sorted here, though json-iterator's default config writes them in Go's map
    order, which varies)."""
    return {
        "ociVersion": "1.1.0",
        "process": {"user": {"uid": 0, "gid": 0}, "env": ["PODCACHE_SIM=1"], "cwd": "/"},
        "root": {"path": "/var/lib/containers/storage/overlay/merged"},
        "annotations": dict(sorted(annotations.items())),
        "linux": {"cgroupsPath": cgroup_path},
    }


def crio_container_info(container: SimContainer, cgroup_path: str) -> str:
    """A verbose ContainerStatus's ``info`` value as CRI-O writes it (``containerInfo`` in
    ``server/container_status.go``: ``sandboxID``, ``pid``, ``runtimeSpec``, ``privileged``,
    in that order); ``pid`` is the container's init process from its creation on, kept after
    it exits (``InitPid``)."""
    annotations = {
        **container.annotations,
        "io.kubernetes.cri-o.ContainerID": container.id,
        "io.kubernetes.cri-o.SandboxID": container.pod_sandbox_id,
    }
    info = {
        "sandboxID": container.pod_sandbox_id,
        "pid": _pid(container.id, True),
        "runtimeSpec": _crio_spec(annotations, cgroup_path),
        "privileged": False,
    }
    return _compact(info)


def crio_sandbox_info(sandbox: SimSandbox, cgroup_path: str) -> str:
    """A verbose PodSandboxStatus's ``info`` value as CRI-O writes it with its default
    ``drop_infra_ctr = true``: the infra container is spoofed (no process), so ``info`` holds
    its ``runtimeSpec`` alone (``createSandboxInfo`` in ``server/sandbox_status.go``)."""
    annotations = {**sandbox.annotations, "io.kubernetes.cri-o.SandboxID": sandbox.id}
    return _compact({"runtimeSpec": _crio_spec(annotations, cgroup_path)})


def info_entry(value: str) -> bytes:
    """The ``info`` map's one entry (key ``info``), as field 2 of a status answer."""
    return field(2, field(1, b"info") + field(2, value.encode()))


def event_message(
    event: SimEvent,
    bad_ips: Sequence[str] = (),
    containers: Sequence[SimContainer] | None = None,
) -> pb.ContainerEventResponse:
    """The ``ContainerEventResponse`` for one population change; ``containers``: the
    statuses it carries (None: ``event.containers``, containerd's; ``Flavor.event_containers``
    says which)."""
    carried = event.containers if containers is None else containers
    return pb.ContainerEventResponse(
        container_id=event.container_id,
        container_event_type=_EVENT_TYPES[event.type],
        created_at=event.created_at,
        pod_sandbox_status=(
            sandbox_status_message(event.sandbox, bad_ips) if event.sandbox is not None else None
        ),
        containers_statuses=[container_status_message(c) for c in carried],
    )


TIMESTAMP_TAG = bytes([4 << 3])  # PodSandboxStatusResponse.timestamp: field 4, a varint
STATUS_MEMO = 20_000
"""Records' statuses kept encoded (``StatusEncodings``), for PodSandboxStatus answers and
events."""


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_EVENT_TYPE_TAG = bytes([2 << 3])  # ContainerEventResponse.container_event_type: a varint
_CREATED_AT_TAG = bytes([3 << 3])  # ContainerEventResponse.created_at: a varint (int64)
_INT64_MASK = (1 << 64) - 1
"""A negative int64 is encoded as its 64-bit two's complement (ten bytes)."""


def field(number: int, body: bytes) -> bytes:
    """``body`` as length-delimited field ``number`` (at most 15: a one-byte tag)."""
    return bytes([number << 3 | 2]) + varint(len(body)) + body


def entry(message: Message) -> bytes:
    """``message`` encoded as field 1 (length-delimited) of its enclosing response."""
    return field(1, message.SerializeToString())


class StatusEncodings:
    """Each record's PodSandboxStatus or ContainerStatus encoded once per record and bad IPs,
    and the answers and events joined from them. At most ``STATUS_MEMO`` kept (then it starts
    over). Shared by the server's threads: each step is one dictionary operation (the GIL's),
    and a race only encodes a status twice."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[tuple[int, tuple[str, ...]], tuple[object, bytes]] = {}

    def of(self, record: SimSandbox | SimContainer, bad_ips: tuple[str, ...]) -> bytes:
        """``record``'s status message, encoded."""
        key = (id(record), bad_ips)
        held = self._held.get(key)
        if held is not None and held[0] is record:  # an id names its record while it lives
            return held[1]
        message = (
            sandbox_status_message(record, bad_ips)
            if isinstance(record, SimSandbox)
            else container_status_message(record)
        )
        body = message.SerializeToString()
        if len(self._held) >= STATUS_MEMO:
            self._held.clear()
        self._held[key] = (record, body)
        return body

    def answer_body(
        self,
        sandbox: SimSandbox,
        containers: Sequence[SimContainer],
        bad_ips: tuple[str, ...],
        info: bytes = b"",
    ) -> bytes:
        """A PodSandboxStatusResponse's status (field 1), ``info`` (field 2's entries, as
        ``info_entry`` writes them) and container statuses (field 3), in field order as Go
        writes them; the caller appends the timestamp (``TIMESTAMP_TAG``)."""
        parts = [field(1, self.of(sandbox, bad_ips)), info]
        parts += [field(3, self.of(c, bad_ips)) for c in containers]
        return b"".join(parts)

    def event(
        self,
        event: SimEvent,
        bad_ips: tuple[str, ...],
        containers: Sequence[SimContainer] | None = None,
    ) -> bytes:
        """``event_message(event, bad_ips, containers)`` encoded: an equal message, as long
        (map entries in any order). A creation's dozen events repeat its sandbox's and
        containers' statuses; building them as messages took 26 us an event, joining them
        takes 7."""
        carried = event.containers if containers is None else containers
        parts = [field(1, event.container_id.encode())] if event.container_id else []
        if event.type:
            parts.append(_EVENT_TYPE_TAG + varint(int(event.type)))
        if event.created_at:
            parts.append(_CREATED_AT_TAG + varint(event.created_at & _INT64_MASK))
        if event.sandbox is not None:
            parts.append(field(4, self.of(event.sandbox, bad_ips)))
        parts += [field(5, self.of(c, bad_ips)) for c in carried]
        return b"".join(parts)
