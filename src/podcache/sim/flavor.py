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
  nothing. With events on, a pod's removal sends nothing: ``removePodSandbox`` removes the
  sandbox's containers without an event and asks ``generateCRIEvent`` for the sandbox's
  DELETED only after the sandbox left the server's index (``server/sandbox_remove.go``), and
  ``generateCRIEvent`` (``server/server.go``) returns without sending when ``HasSandbox`` is
  false; a sandbox's CREATED is asked for before the sandbox is added, so only its STARTED is
  sent (``server/sandbox_run_linux.go``).
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
- **Status answers** (``StatusAnswers``, a table per flavour; docs/architecture.md §4 "Two
  runtimes"): the verbose ``info`` JSON of ``ContainerStatus`` (``server/container_status.go``,
  ``createContainerInfo``) and ``PodSandboxStatus`` (``server/sandbox_status.go``,
  ``createSandboxInfo``, the infra container spoofed by the default ``drop_infra_ctr``), the
  NOT_FOUND details (``GetContainerFromShortID`` in ``internal/lib/container_server.go``,
  ``getPodSandboxFromRequest`` in ``server/server.go``, truncindex's "ID does not exist"),
  ``PodSandboxStatus``'s ``containers_statuses`` and ``timestamp`` (set only with
  ``enable_pod_events``: the sandbox's containers, newest first as ``internal/oci``'s
  ``History`` sorts them, and the time of the answer), and what an event carries
  (``generateCRIEvent`` in ``server/server.go``: the sandbox's plain status and the plain
  status of every container labelled with the pod's UID, newest first). A container's
  DELETED is sent by ``RemoveContainer`` while its sandbox stays; ``removePodSandbox`` removes
  the sandbox's containers without an event (``server/sandbox_remove.go``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from podcache.sim.encoding import container_info, crio_container_info, crio_sandbox_info
from podcache.sim.encoding import sandbox_info as containerd_sandbox_info
from podcache.sim.population import SimContainer, SimEvent, SimEventType, SimSandbox

__all__ = [
    "CONTAINERD",
    "CONTAINERD_ANSWERS",
    "CRIO",
    "CRIO_ANSWERS",
    "CRIO_STREAM_ITEMS",
    "FLAVORS",
    "INFRA_CONTAINER_LABEL",
    "CgroupDriver",
    "Flavor",
    "StatusAnswers",
    "flavor_named",
]

CRIO_STREAM_ITEMS = 3_000
"""CRI-O's items per streamed list message (``streamChunkSize``)."""
INFRA_CONTAINER_LABEL = ("io.kubernetes.container.name", "POD")
"""The label CRI-O puts on every sandbox (its infra container's name)."""

CgroupDriver = Literal["cgroupfs", "systemd"]


def _systemd_uid(uid: str) -> str:
    return uid.replace("-", "_")


def _containerd_missing(kind: str, wanted: str, ambiguous: bool) -> str:
    return f"an error occurred when try to find {kind} {wanted!r}: not found"


def _crio_missing(kind: str, wanted: str, ambiguous: bool) -> str:
    """CRI-O's NOT_FOUND details: ``could not find <container|pod> %q: <the lookup's error>``
    (Go's %q: JSON's quoting for the printable IDs asked), the lookup's error truncindex's
    for a prefix of no ID or of several."""
    why = f"Multiple IDs found with provided prefix: {wanted}" if ambiguous else "ID does not exist"
    if kind == "container":
        lookup = "container ID should not be empty"
        if wanted:
            lookup = f"container with ID starting with {wanted} not found: {why}"
        return f"could not find container {json.dumps(wanted)}: {lookup}"
    lookup = "PodSandboxId should not be empty"
    if wanted:
        lookup = f"PodSandbox with ID starting with {wanted} not found: {why}"
    return f"could not find pod {json.dumps(wanted)}: {lookup}"


def _containerd_sandbox_info(sandbox: SimSandbox, cgroup_path: str) -> str:
    return containerd_sandbox_info(sandbox)


@dataclass(frozen=True, slots=True)
class StatusAnswers:
    """How a runtime answers the status calls and what its events carry (one row per
    flavour: ``CONTAINERD_ANSWERS``, ``CRIO_ANSWERS``)."""

    missing: Callable[[str, str, bool], str]
    """NOT_FOUND details for ("container" or "sandbox", the ID asked, whether it is a prefix
    of several IDs)."""
    container_info: Callable[[SimContainer, str], str]
    """A verbose ContainerStatus's ``info["info"]`` from the record and its cgroup."""
    sandbox_info: Callable[[SimSandbox, str], str]
    """A verbose PodSandboxStatus's ``info["info"]`` from the record and its cgroup."""
    sandbox_extras: bool
    """PodSandboxStatus carries ``containers_statuses`` and ``timestamp`` (the time of the
    answer) while the runtime sends events."""
    newest_first: bool
    """Lists of container statuses (the extras, an event's) are by creation time, the newest
    first."""
    pod_wide_events: bool
    """An event carries the statuses of every container of its pod (by the pod UID label),
    not only those of its sandbox."""

    def sandbox_containers(self, containers: Sequence[SimContainer]) -> Sequence[SimContainer]:
        """A PodSandboxStatus's ``containers_statuses`` (``containers``: the records' order)."""
        return _newest_first(containers) if self.newest_first else containers

    def event_containers(self, event: SimEvent) -> Sequence[SimContainer]:
        """The container statuses ``event`` carries, in this runtime's order."""
        carried = event.all_pod_containers if self.pod_wide_events else event.containers
        return _newest_first(carried) if self.newest_first else carried


def _newest_first(containers: Sequence[SimContainer]) -> list[SimContainer]:
    """By creation time, the newest first (a tie in the records' order)."""
    return sorted(containers, key=lambda c: c.created_at, reverse=True)


CONTAINERD_ANSWERS = StatusAnswers(
    missing=_containerd_missing,
    container_info=container_info,
    sandbox_info=_containerd_sandbox_info,
    sandbox_extras=False,  # containerd 1.7 and 2.1: the status alone (measured)
    newest_first=False,
    pod_wide_events=False,
)
CRIO_ANSWERS = StatusAnswers(
    missing=_crio_missing,
    container_info=crio_container_info,
    sandbox_info=crio_sandbox_info,
    sandbox_extras=True,
    newest_first=True,
    pod_wide_events=True,
)


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
    answers: StatusAnswers = CONTAINERD_ANSWERS
    """Its status answers and what its events carry (``StatusAnswers``)."""
    events_service: bool = False
    """containerd's own Events service (``Subscribe``) on the same socket (``taskevents``)."""

    def sent(self, events: Sequence[SimEvent], sandbox_ids: frozenset[str]) -> list[SimEvent]:
        """The events of one change this runtime sends (``sandbox_ids``: the sandboxes the
        change touched, whose CREATED CRI-O never sends). Without removal events (CRI-O), a
        sandbox's DELETED is not sent, nor the DELETED of a container removed with its
        sandbox in the same change (``removePodSandbox``); a container removed alone
        (``RemoveContainer``: a crash loop's old attempt) is."""
        if self.sends_removal_events:
            return list(events)
        removed = {e.container_id for e in events if e.type is SimEventType.DELETED}
        return [
            event
            for event in events
            if event.container_id not in sandbox_ids
            or event.type not in (SimEventType.CREATED, SimEventType.DELETED)
            if not (
                event.type is SimEventType.DELETED
                and event.sandbox is not None
                and event.sandbox.id in removed
            )
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
    events_service=True,
)
"""The default: containerd's behaviour (its runtime name the simulator's own, as ever)."""

CRIO = Flavor(
    name="crio",
    runtime_name="cri-o",
    runtime_version="1.36.3",
    fixed_stream_items=CRIO_STREAM_ITEMS,
    sends_removal_events=False,
    labels_infra_container=True,
    scope_prefix="crio",
    answers=CRIO_ANSWERS,
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
