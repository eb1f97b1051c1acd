"""Which runtime the simulator behaves like: containerd (the default) or CRI-O.

A ``Flavor`` holds only what differs between the two as a CRI client sees it; the population,
the faults and the RPCs are the same. What each CRI-O rule was read from, in CRI-O's own code
(cri-o/cri-o):

- **Chunking** (``server/server.go``, ``streamChunkSize``, as read in CRI-O 1.36;
  the copies of CRI-O's code searched here predate list streaming): a streamed list is sent
  3,000 items a message, whatever their size (containerd 2.4 sends 5,000; the simulator's
  containerd draws counts up to ``stream_items``, each message at most
  ``STREAM_MESSAGE_BYTES``). One CRI-O message can so be far past gRPC's 16 MiB default.
- **Events** (``server/container_events.go``, ``GetContainerEvents``): with
  ``enable_pod_events = false`` (CRI-O's default) the call returns at once, OK, having sent
  nothing. With events on, removals send nothing: ``removePodSandbox`` asks
  ``generateCRIEvent`` for DELETED only after the sandbox left the server's index
  (``server/sandbox_remove.go``), and ``generateCRIEvent`` (server package) returns without
  sending when ``HasSandbox`` is false; a sandbox's CREATED is asked for before the sandbox
  is added, so only its STARTED is sent (``server/sandbox_run_linux.go``).
  STOPPED is sent for containers (their exit) and the sandbox (``StopPodSandbox``).
- **Sandbox label** (``server/sandbox_run_linux.go``): every sandbox's labels gain
  ``io.kubernetes.container.name=POD`` (``leaky.PodInfraContainerName``).
- **Cgroup names** (``internal/config/cgmgr``): the cgroupfs manager puts a container at
  ``<cgroup parent>/crio-<id>`` (``cgroupfs_linux.go``, ``ContainerCgroupPath`` and
  ``containerCgroupPath``: ``CrioPrefix + "-" + id``, no ``.scope``) and conmon at
  ``<cgroup parent>/crio-conmon-<id>``; the systemd manager at
  ``<expanded slice>/crio-<id>.scope`` and conmon's unit ``crio-conmon-<id>.scope``
  (``systemd_linux.go``).
- **Version**: CRI version ``0.1.0`` (``server/version.go``), runtime API ``v1``, runtime name
  ``cri-o`` and version 1.36.3 as the issue's run of CRI-O answered them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from podcache.sim.population import SimEvent, SimEventType

__all__ = [
    "CONTAINERD",
    "CRIO",
    "CRIO_STREAM_ITEMS",
    "FLAVORS",
    "INFRA_CONTAINER_LABEL",
    "CgroupDriver",
    "Flavor",
    "flavor_named",
]

CRIO_STREAM_ITEMS = 3_000
"""CRI-O's items per streamed list message (``streamChunkSize``)."""
INFRA_CONTAINER_LABEL = ("io.kubernetes.container.name", "POD")
"""The label CRI-O puts on every sandbox (its infra container's name)."""

CgroupDriver = Literal["cgroupfs", "systemd"]


def _systemd_uid(uid: str) -> str:
    return uid.replace("-", "_")


@dataclass(frozen=True, slots=True)
class Flavor:
    """What a runtime shows a CRI client that the simulator imitates (see the module)."""

    name: str
    """``containerd`` or ``crio`` (``podcache sim --flavor``)."""
    runtime_name: str
    """Version's ``runtime_name``: the type of every ContainerID the client makes."""
    runtime_version: str
    fixed_stream_items: int | None
    """Items of every streamed list message, whatever their bytes (CRI-O); None: the
    simulator's seeded draws, each message capped in bytes (containerd)."""
    sends_removal_events: bool
    """DELETED for removed sandboxes and containers, CREATED for a new sandbox."""
    labels_infra_container: bool
    """Sandboxes carry ``INFRA_CONTAINER_LABEL``."""
    scope_prefix: str
    """A container's systemd scope and cgroupfs names: ``<prefix>-<id>``."""
    sandbox_status_extras: bool = False
    """PodSandboxStatus answers carry ``containers_statuses`` and a ``timestamp`` (the
    evented-PLEG fields). containerd 1.7 and 2.1 send neither (measured: the status alone)."""

    def sent(self, events: Sequence[SimEvent], sandbox_ids: frozenset[str]) -> list[SimEvent]:
        """The events of one change this runtime sends (``sandbox_ids``: the sandboxes the
        change touched, whose CREATED CRI-O never sends)."""
        if self.sends_removal_events:
            return list(events)
        return [
            event
            for event in events
            if event.type is not SimEventType.DELETED
            and not (event.type is SimEventType.CREATED and event.container_id in sandbox_ids)
        ]

    def sandbox_labels(self) -> dict[str, str]:
        """The labels this runtime adds to every sandbox."""
        return dict([INFRA_CONTAINER_LABEL]) if self.labels_infra_container else {}

    def cgroup_path(
        self, pod_uid: str, ident: str, driver: CgroupDriver = "cgroupfs", qos: str = "burstable"
    ) -> str:
        """The cgroup (v2 path) of the process of container or sandbox ``ident`` in pod
        ``pod_uid``, as this runtime makes it under the kubelet's cgroup parent."""
        if driver == "systemd":
            slice_ = f"kubepods-{qos}-pod{_systemd_uid(pod_uid)}.slice"
            return (
                f"/kubepods.slice/kubepods-{qos}.slice/{slice_}/{self.scope_prefix}-{ident}.scope"
            )
        if self.name == "crio":
            return f"/kubepods/{qos}/pod{pod_uid}/crio-{ident}"
        return f"/kubepods/{qos}/pod{pod_uid}/{ident}"

    def monitor_cgroup_path(
        self, pod_uid: str, ident: str, driver: CgroupDriver = "cgroupfs", qos: str = "burstable"
    ) -> str | None:
        """The cgroup of the runtime's per-container monitor (CRI-O's conmon: in the pod's
        cgroup, in no container), or None when it has none there (containerd's shim)."""
        if self.name != "crio":
            return None
        container = self.cgroup_path(pod_uid, ident, driver, qos)
        return container.replace(f"crio-{ident}", f"crio-conmon-{ident}")


CONTAINERD = Flavor(
    name="containerd",
    runtime_name="podcache-sim",
    runtime_version="",
    fixed_stream_items=None,
    sends_removal_events=True,
    labels_infra_container=False,
    scope_prefix="cri-containerd",
)
"""The default: containerd's behaviour (its runtime name the simulator's own, as ever)."""

CRIO = Flavor(
    name="crio",
    runtime_name="cri-o",
    runtime_version="1.36.3",
    fixed_stream_items=CRIO_STREAM_ITEMS,
    sends_removal_events=False,
    labels_infra_container=True,
    sandbox_status_extras=True,
    scope_prefix="crio",
)
"""CRI-O 1.36's behaviour."""

FLAVORS: dict[str, Flavor] = {flavor.name: flavor for flavor in (CONTAINERD, CRIO)}
"""The flavours by name (``podcache sim --flavor``)."""


def flavor_named(name: str) -> Flavor:
    """The flavour called ``name``; ValueError naming the ones there are."""
    try:
        return FLAVORS[name]
    except KeyError:
        raise ValueError(
            f"unknown simulator flavor {name!r}: one of {', '.join(FLAVORS)}"
        ) from None
