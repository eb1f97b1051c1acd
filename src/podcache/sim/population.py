"""The simulated node's pods as plain records, and their churn; pure data, no gRPC, no threads.

A ``Population`` holds the sandboxes and containers a CRI runtime would report for a node the
kubelet manages: sandbox metadata, labels and annotations exactly as the kubelet writes them,
64-hex IDs, nanosecond timestamps, several containers per pod, init containers that exited,
sandboxes that were re-created (attempt 0 NOTREADY beside attempt 1 READY), pods stopped
entirely. Everything is drawn from one seeded ``random.Random``: the same seed, size,
namespaces and clock give the same population and the same churn, record for record.

Invariants (held under one lock, checked by the unit tests):
- every container's ``pod_sandbox_id`` names a sandbox of the same pod, and its pod labels
  name that sandbox's pod; every ID is unique and 64 lower-case hex digits;
- a READY sandbox is the newest of its pod; a NOTREADY sandbox holds no running container;
- records are immutable: a change replaces the record, so a ``Snapshot`` never changes after
  it was taken, and ``generation`` grows by one for every change that emits events.

Deliberate ties: some pods share their sandbox's ``created_at`` with the pod listed before
them, and in some pods all main containers share one ``created_at``, so a client's "newest
first, ties by ID" order is exercised. What this module does not do: serve gRPC, run a
thread, sleep, inject faults (see ``server``, ``churn`` and ``faults``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from podcache.sim.addresses import DEFAULT_POD_CIDR, AddressPool

__all__ = [
    "CONTAINER_HASH_ANNOTATION",
    "CONTAINER_NAME_LABEL",
    "DEFAULT_EPOCH_NS",
    "DEFAULT_HOST_NETWORK",
    "DEFAULT_NAMESPACES",
    "LAST_APPLIED_ANNOTATION",
    "POD_NAMESPACE_LABEL",
    "POD_NAME_LABEL",
    "POD_UID_LABEL",
    "RESTART_COUNT_ANNOTATION",
    "EventListener",
    "LogicalClock",
    "PodShape",
    "Population",
    "SimContainer",
    "SimContainerState",
    "SimEvent",
    "SimEventType",
    "SimSandbox",
    "SimSandboxState",
    "Snapshot",
]

POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
CONTAINER_HASH_ANNOTATION = "io.kubernetes.container.hash"
RESTART_COUNT_ANNOTATION = "io.kubernetes.container.restartCount"
TERMINATION_MESSAGE_PATH_ANNOTATION = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY_ANNOTATION = "io.kubernetes.container.terminationMessagePolicy"
GRACE_PERIOD_ANNOTATION = "io.kubernetes.pod.terminationGracePeriod"
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
"""The annotation ``annotation_bytes`` sizes (kubectl's copy of the applied object, often the
largest annotation a pod has)."""

DEFAULT_NAMESPACES: tuple[str, ...] = ("default", "kube-system", "monitoring", "payments")
DEFAULT_HOST_NETWORK = 0.05
"""Fraction of pods on the host network (node agents, CNI and kube-proxy pods)."""
DEFAULT_EPOCH_NS = 1_735_689_600 * 1_000_000_000
"""Where the default logical clock starts: 2025-01-01T00:00:00Z, in ns since the epoch."""

_SECOND = 1_000_000_000
_K8S_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand
_APPS = (
    "web",
    "api",
    "worker",
    "cache",
    "gateway",
    "ingest",
    "search",
    "billing",
    "auth",
    "frontend",
    "scheduler",
    "metrics",
)
_SIDECARS = ("istio-proxy", "log-shipper", "metrics-exporter")
_INITS = ("init-config", "migrate-db")
_TIERS = ("frontend", "backend", "data")


class SimSandboxState(enum.IntEnum):
    """A sandbox's state; values are the CRI ``PodSandboxState`` numbers."""

    READY = 0
    NOTREADY = 1


class SimContainerState(enum.IntEnum):
    """A container's state; values are the CRI ``ContainerState`` numbers."""

    CREATED = 0
    RUNNING = 1
    EXITED = 2
    UNKNOWN = 3


class SimEventType(enum.IntEnum):
    """A container event's type; values are the CRI ``ContainerEventType`` numbers."""

    CREATED = 0
    STARTED = 1
    STOPPED = 2
    DELETED = 3


class PodShape(enum.Enum):
    """What a generated pod looks like; the first pods of a population cycle through all."""

    RUNNING = "running"
    """One READY sandbox, 1-4 RUNNING containers."""
    WITH_INIT = "with-init"
    """Like RUNNING, plus 1-2 init containers that EXITED with code 0 before the others."""
    RESTARTED_SANDBOX = "restarted-sandbox"
    """Attempt 0 NOTREADY (its containers EXITED) and attempt 1 READY (containers RUNNING)."""
    RESTARTED_CONTAINER = "restarted-container"
    """One container's attempt 0 EXITED beside its attempt 1 RUNNING (restartCount 1)."""
    STARTING = "starting"
    """A READY sandbox whose last container is CREATED, not yet started."""
    UNKNOWN_CONTAINER = "unknown-container"
    """A READY sandbox with one container in state UNKNOWN."""
    STOPPED = "stopped"
    """Stopped entirely: one NOTREADY sandbox, every container EXITED."""


_SHAPE_WEIGHTS: dict[PodShape, int] = {
    PodShape.RUNNING: 50,
    PodShape.WITH_INIT: 15,
    PodShape.RESTARTED_SANDBOX: 10,
    PodShape.RESTARTED_CONTAINER: 8,
    PodShape.STARTING: 5,
    PodShape.UNKNOWN_CONTAINER: 4,
    PodShape.STOPPED: 8,
}
_SHAPES = tuple(_SHAPE_WEIGHTS)
_WEIGHTS = tuple(_SHAPE_WEIGHTS.values())


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    """A record's own copy of ``mapping``, read-only by its type: an exact dict of strings is
    never tracked by the cyclic garbage collector (a ``MappingProxyType`` is, and at 5,000
    pods the records' 40,000 proxies made each full collection of a process that runs the
    simulator take about 80 ms, on whichever thread triggered it, the event loop's
    included)."""
    return dict(mapping)


class SimSandbox(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One pod sandbox as the runtime reports it (``PodSandbox`` / ``PodSandboxStatus``).

    ``has_metadata=False`` makes the server send it without metadata (a malformed item).
    """

    id: str
    name: str
    uid: str
    namespace: str
    attempt: int
    state: SimSandboxState
    created_at: int
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    runtime_handler: str = ""
    ip: str = ""
    host_network: bool = False
    has_metadata: bool = True


class SimContainer(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One container as the runtime reports it (``Container`` / ``ContainerStatus``).

    ``image`` is the ``ImageSpec.image``; ``image_ref`` and ``image_id`` are the list fields
    (``image_id`` empty emulates a runtime older than CRI of Kubernetes 1.30).
    ``has_metadata=False`` / ``has_image=False`` make the server leave those messages unset.
    """

    id: str
    pod_sandbox_id: str
    name: str
    attempt: int
    state: SimContainerState
    created_at: int
    image: str
    image_ref: str
    image_id: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    image_runtime_handler: str = ""
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    log_path: str = ""
    init: bool = False
    has_metadata: bool = True
    has_image: bool = True

    @property
    def pod_uid(self) -> str:
        """The ``io.kubernetes.pod.uid`` label, or "" when it is missing."""
        return self.labels.get(POD_UID_LABEL, "")


class Snapshot(msgspec.Struct, frozen=True):
    """The whole population at one instant: records in creation order, and its generation."""

    generation: int
    sandboxes: tuple[SimSandbox, ...]
    containers: tuple[SimContainer, ...]

    def pod_uids(self) -> frozenset[str]:
        """The UIDs of every pod that has a sandbox in this snapshot."""
        return frozenset(sandbox.uid for sandbox in self.sandboxes)


class SimEvent(msgspec.Struct, frozen=True):
    """One change, as a CRI ``ContainerEventResponse`` carries it.

    ``container_id`` is the container's ID, or the sandbox's ID for a sandbox event (like
    containerd). ``sandbox`` and ``containers`` are the pod sandbox and all containers in it
    right after the change (a deleted item is no longer among them); ``pod_containers`` the
    containers of every sandbox of its pod then, in creation order (None: the same as
    ``containers``, the pod has one sandbox), which CRI-O's events carry.
    """

    container_id: str
    type: SimEventType
    created_at: int
    sandbox: SimSandbox | None
    containers: tuple[SimContainer, ...]
    pod_containers: tuple[SimContainer, ...] | None = None

    @property
    def all_pod_containers(self) -> tuple[SimContainer, ...]:
        """The containers of every sandbox of its pod, in creation order."""
        return self.containers if self.pod_containers is None else self.pod_containers


EventListener = Callable[[Sequence[SimEvent]], None]
"""Called under the population lock with the events of one change, in order; must not block."""


class LogicalClock:
    """A deterministic clock for populations: each read returns ``step_ns`` more than the last."""

    def __init__(self, start_ns: int = DEFAULT_EPOCH_NS, step_ns: int = 1_000_000) -> None:
        self._now = start_ns
        self._step = step_ns
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self._now += self._step
            return self._now


@dataclass(slots=True)
class _Planned:
    """A container while a pod is being generated (relative times, ns)."""

    name: str
    sandbox: int
    attempt: int
    state: SimContainerState
    created: int
    started: int = 0
    finished: int = 0
    exit_code: int = 0
    reason: str = ""
    init: bool = False


class _Pod(msgspec.Struct, gc=False):
    """A pod's identity and its records' IDs, in creation order (tuples of strings: nothing
    here is tracked by the cyclic garbage collector, see ``_frozen``)."""

    uid: str
    name: str
    namespace: str
    sandbox_ids: tuple[str, ...]
    container_ids: tuple[str, ...]


class _ImageFlavour(enum.Enum):
    """How a runtime reports a container's image (drawn per pod; shares as in the wild)."""

    CONTAINERD = "containerd"  # image_ref is the config digest, image_id too
    CRIO = "cri-o"  # image_ref is the repository digest, image_id the config digest
    OLD_CRI = "old"  # a runtime older than CRI of Kubernetes 1.30: no image_id

    def ref_and_id(self, config_id: str, manifest_ref: str) -> tuple[str, str]:
        """``(image_ref, image_id)`` as this runtime reports them."""
        if self is _ImageFlavour.CRIO:
            return manifest_ref, config_id
        if self is _ImageFlavour.OLD_CRI:
            return config_id, ""
        return config_id, config_id


def _image_flavour(draw: float) -> _ImageFlavour:
    """70% containerd, 20% CRI-O, 10% an old runtime, from a uniform draw in [0, 1)."""
    if draw < 0.7:
        return _ImageFlavour.CONTAINERD
    return _ImageFlavour.CRIO if draw < 0.9 else _ImageFlavour.OLD_CRI


@dataclass(frozen=True, slots=True)
class _Identity:
    """What a new pod is, before its history is laid out: names, labels, containers."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    """The pod's own labels (its newest sandbox's; older sandboxes lack ``tier``)."""
    grace: str
    version: str
    image_flavour: _ImageFlavour
    mains: tuple[str, ...]
    inits: tuple[str, ...]
    hashes: dict[str, int]
    """Container name -> the kubelet's hash of its spec."""

    def kubelet_labels(self) -> dict[str, str]:
        """The labels the kubelet puts on every sandbox and container of the pod."""
        return {
            POD_NAME_LABEL: self.name,
            POD_NAMESPACE_LABEL: self.namespace,
            POD_UID_LABEL: self.uid,
        }

    def large_annotations(self, size: int) -> dict[str, str]:
        """``LAST_APPLIED_ANNOTATION`` with a value of exactly ``size`` characters (ASCII, from
        the pod's names alone: no random draw), or nothing for 0."""
        if size <= 0:
            return {}
        metadata = json.dumps(
            {"name": self.name, "namespace": self.namespace, "uid": self.uid}, separators=(",", ":")
        )
        head = f'{{"apiVersion":"v1","kind":"Pod","metadata":{metadata},"spec":{{"padding":"'

        tail = '"}}'
        filler = max(0, size - len(head) - len(tail))
        return {LAST_APPLIED_ANNOTATION: (head + "x" * filler + tail)[:size]}


class _Timeline:
    """A pod's history being laid out: ``t`` ns after its first sandbox, moved by random steps."""

    __slots__ = ("rng", "t")

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.t = 0

    def advance(self, low: int, high: int) -> int:
        """Move forward by a random ``[low, high)`` ns; returns the new time."""
        self.t += self.rng.randrange(low, high)
        return self.t


_STARTED_AFTER = 50_000
"""ns between a container's creation and its start."""


def _plan_history(
    rng: random.Random, shape: PodShape, inits: tuple[str, ...], mains: tuple[str, ...]
) -> tuple[list[tuple[int, SimSandboxState]], list[_Planned]]:
    """A pod's sandboxes ``(created, state)`` (index = attempt) and containers, relative times.

    One attempt per sandbox (two for RESTARTED_SANDBOX); each runs its init containers one after
    the other, then its main containers; only the last attempt of a pod not STOPPED is alive.
    """
    sandboxes: list[tuple[int, SimSandboxState]] = []
    planned: list[_Planned] = []
    timeline = _Timeline(rng)
    attempts = 2 if shape is PodShape.RESTARTED_SANDBOX else 1
    tie_mains = rng.random() < 0.25  # main containers created in the same nanosecond
    for attempt in range(attempts):
        last = attempt == attempts - 1
        alive = last and shape is not PodShape.STOPPED
        sandboxes.append((timeline.t, SimSandboxState.READY if alive else SimSandboxState.NOTREADY))
        timeline.advance(1, 3 * _SECOND)
        for init_name in inits:
            planned.append(_plan_init(timeline, init_name, attempt))
        base = timeline.t
        for position, main in enumerate(mains):
            state = _main_state(
                shape, alive, first=position == 0, newest=position == len(mains) - 1
            )
            created = base if tie_mains else timeline.t
            item = _Planned(main, attempt, attempt, state, created)
            crashes = shape is PodShape.RESTARTED_CONTAINER and position == 0
            planned += _plan_main(timeline, item, crashes=crashes, completed=last)
        timeline.advance(_SECOND, 600 * _SECOND)
    return sandboxes, planned


def _plan_init(timeline: _Timeline, name: str, attempt: int) -> _Planned:
    """An init container that ran to completion."""
    created = timeline.t
    finished = timeline.advance(_SECOND, 20 * _SECOND)
    timeline.advance(1, _SECOND)
    return _Planned(
        name,
        attempt,
        attempt,
        SimContainerState.EXITED,
        created,
        started=created + _STARTED_AFTER,
        finished=finished,
        reason="Completed",
        init=True,
    )


def _main_state(shape: PodShape, alive: bool, *, first: bool, newest: bool) -> SimContainerState:
    """A main container's state: the sandbox's fate first, then the shape's one odd container."""
    if not alive:
        return SimContainerState.EXITED
    if shape is PodShape.STARTING and newest:
        return SimContainerState.CREATED
    if shape is PodShape.UNKNOWN_CONTAINER and first:
        return SimContainerState.UNKNOWN
    return SimContainerState.RUNNING


def _plan_main(
    timeline: _Timeline, item: _Planned, *, crashes: bool, completed: bool
) -> list[_Planned]:
    """A main container's times (and, when it ``crashes`` first, the remains of that crash).

    An exited container of the pod's last attempt ``completed`` (exit 0); one of an earlier,
    dead sandbox was killed (137).
    """
    timeline.advance(1, _SECOND)
    if item.state is not SimContainerState.CREATED:
        item.started = item.created + _STARTED_AFTER
    remains: list[_Planned] = []
    if crashes:
        # Attempt 0 crashed; attempt 1 (restartCount 1) runs beside its remains.
        crashed_at = timeline.advance(_SECOND, 30 * _SECOND)
        crashed = dataclasses.replace(
            item, state=SimContainerState.EXITED, finished=crashed_at, exit_code=1
        )
        crashed.reason = "Error"
        remains.append(crashed)
        restarted = timeline.advance(1, _SECOND)
        item.attempt, item.created, item.started = 1, restarted, restarted + _STARTED_AFTER
    if item.state is SimContainerState.EXITED:
        item.finished = timeline.advance(_SECOND, 60 * _SECOND)
        item.exit_code, item.reason = (0, "Completed") if completed else (137, "Error")
    return [*remains, item]


def _check_arguments(
    pods: int, annotation_bytes: int, host_network: float, namespaces: Sequence[str]
) -> None:
    """``Population``'s arguments, each a ValueError naming it when out of range."""
    if pods < 0:
        raise ValueError(f"pods must be >= 0, not {pods}")
    if isinstance(annotation_bytes, bool) or annotation_bytes < 0:
        raise ValueError(f"annotation_bytes must be >= 0, not {annotation_bytes!r}")
    if not 0 <= host_network <= 1:
        raise ValueError(f"host_network must be a fraction in [0, 1], not {host_network}")
    if not namespaces:
        raise ValueError("namespaces must not be empty")


class Population:
    """A deterministic, churnable set of pods, safe to read and change from any thread.

    ``clock`` returns nanoseconds since the epoch and stamps new records and events; the
    default is a ``LogicalClock`` so that the seed alone fixes every timestamp. The initial
    pods were created during the hour before the first clock read. ``annotation_bytes``: every
    sandbox and container of a pod also carries ``LAST_APPLIED_ANNOTATION`` with a value that
    long (0: none), so both list answers grow with it (1,000 pods at 16 KiB pass gRPC's 16 MiB
    message limit in each); it draws nothing, so a seed's pods are otherwise the same.
    """

    def __init__(
        self,
        pods: int = 100,
        *,
        seed: int = 0,
        namespaces: Sequence[str] = DEFAULT_NAMESPACES,
        clock: Callable[[], int] | None = None,
        pod_cidr: str = DEFAULT_POD_CIDR,
        host_network: float = DEFAULT_HOST_NETWORK,
        annotation_bytes: int = 0,
        sandbox_labels: Mapping[str, str] | None = None,
    ) -> None:
        _check_arguments(pods, annotation_bytes, host_network, namespaces)
        self._annotation_bytes = int(annotation_bytes)
        self._sandbox_labels = dict(sandbox_labels or {})  # the runtime's own, on every sandbox
        self._addresses = AddressPool(pod_cidr)
        self._host_network = host_network
        # Networking draws from a generator of its own: the other draws (and so every
        # population a seed gave before pods had addresses) are unchanged.
        self._net_rng = random.Random(f"{seed}/network")
        self._rng = random.Random(seed)
        self._seed = seed
        self._namespaces = tuple(namespaces)
        self._clock: Callable[[], int] = clock if clock is not None else LogicalClock()
        self._lock = threading.RLock()
        self._sandboxes: dict[str, SimSandbox] = {}
        self._containers: dict[str, SimContainer] = {}
        self._pods: dict[str, _Pod] = {}
        self._names: set[tuple[str, str]] = set()
        self._ids: set[str] = set()
        self._images: dict[tuple[str, str], tuple[str, str, str]] = {}
        self._listeners: list[EventListener] = []
        self._generation = 0
        self._generate(pods)

    def _generate(self, pods: int) -> None:
        """The first ``pods`` pods, drawn from the seed."""
        now = self._clock()
        previous: _Pod | None = None
        for index in range(pods):
            shape = _SHAPES[index] if index < len(_SHAPES) else self._pick_shape()
            end = now - self._rng.randrange(3600 * _SECOND)
            # Every tenth pod ties its created_at with the pod generated before it.
            tie = self._created_at(previous) if previous and index % 10 == 9 else 0
            previous = self._add_pod(shape, end, tie)

    # -- reading ----------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """How many changes were applied since the population was generated."""
        return self._generation

    def __len__(self) -> int:
        """The number of pods (stopped pods included)."""
        return len(self._pods)

    @property
    def addresses(self) -> AddressPool:
        """The pod IP pool (read-only by convention)."""
        return self._addresses

    def snapshot(self) -> Snapshot:
        """Every sandbox and container, consistently, with the generation they belong to."""
        with self._lock:
            return Snapshot(
                self._generation,
                tuple(self._sandboxes.values()),
                tuple(self._containers.values()),
            )

    def pod_records(self, uid: str) -> tuple[tuple[SimSandbox, ...], tuple[SimContainer, ...]]:
        """The sandboxes and containers of pod ``uid`` (none when there is no such pod),
        consistently and in the order a snapshot lists them: a pod's records are created (and
        put in the tables) in the order of its ID lists. O(that pod)."""
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None:
                return (), ()
            sandboxes, containers = self._sandboxes, self._containers
            return (
                tuple(sandboxes[i] for i in pod.sandbox_ids if i in sandboxes),
                tuple(containers[i] for i in pod.container_ids if i in containers),
            )

    def sandbox_records(
        self, sandbox_id: str
    ) -> tuple[SimSandbox, tuple[SimContainer, ...]] | None:
        """The sandbox with exactly this ID and its containers (in the order a snapshot lists
        them), or None: what a PodSandboxStatus answers. O(that pod): two dict lookups and its
        pod's containers, never a walk of the node."""
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
            if sandbox is None:
                return None
            pod = self._pods.get(sandbox.uid)
            if pod is None:
                return sandbox, ()
            containers = self._containers
            return sandbox, tuple(
                c
                for c in (containers.get(i) for i in pod.container_ids)
                if c is not None and c.pod_sandbox_id == sandbox_id
            )

    def pod_uids(self) -> list[str]:
        """The UIDs of the pods, in creation order."""
        with self._lock:
            return list(self._pods)

    def sandbox(self, sandbox_id: str) -> SimSandbox | None:
        """The sandbox with exactly this ID, if any."""
        return self._sandboxes.get(sandbox_id)

    def container(self, container_id: str) -> SimContainer | None:
        """The container with exactly this ID, if any."""
        return self._containers.get(container_id)

    # -- listening --------------------------------------------------------------------------
    def subscribe(self, listener: EventListener) -> Callable[[], None]:
        """Call ``listener`` with the events of every later change; returns an unsubscribe."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    # -- changing ---------------------------------------------------------------------------
    def step(self) -> list[SimEvent]:
        """One unit of churn: remove a random pod (stopping what runs), then create one.

        The new pod's shape is drawn like the initial ones; a STOPPED one is emitted as a pod
        that ran and then stopped (a finished job). The pod count stays the same.
        """
        with self._lock:
            events: list[SimEvent] = []
            if self._pods:
                victim = self._rng.choice(list(self._pods))
                events += self._remove(victim)
            events += self._create(self._pick_shape())[1]
            self._publish(events)
            return events

    def create_pod(self, shape: PodShape | None = None) -> tuple[str, list[SimEvent]]:
        """Create one pod now (a random shape when None); returns its UID and the events."""
        with self._lock:
            uid, events = self._create(shape if shape is not None else self._pick_shape())
            self._publish(events)
            return uid, events

    def stop_pod(self, uid: str) -> list[SimEvent]:
        """Stop a pod: its containers that run exit (code 137), its READY sandbox NOTREADY."""
        with self._lock:
            events = self._stop(self._pod(uid))
            self._publish(events)
            return events

    def remove_pod(self, uid: str) -> list[SimEvent]:
        """Stop a pod, then delete its containers and sandboxes."""
        with self._lock:
            events = self._remove(uid)
            self._publish(events)
            return events

    def crash_container(self, uid: str) -> list[SimEvent]:
        """One turn of a crash loop in pod ``uid``: its first running main container exits
        (code 1, "Error"), and the next attempt of it is created and started in the same
        sandbox, as the kubelet restarts it. Like the kubelet's garbage collection, only the
        newest exited attempt of that container is kept: older ones are deleted. KeyError for
        an unknown pod, ValueError when no main container of it runs."""
        with self._lock:
            pod = self._pod(uid)
            running = [
                self._containers[cid]
                for cid in pod.container_ids
                if self._containers[cid].state is SimContainerState.RUNNING
                and not self._containers[cid].init
            ]
            if not running:
                raise ValueError(f"no main container runs in pod {uid!r}")
            events = self._crash(pod, running[0])
            self._publish(events)
            return events

    # -- internals (all called with the lock held) ---------------------------------------------
    def _crash(self, pod: _Pod, victim: SimContainer) -> list[SimEvent]:
        now = self._clock()
        sandbox_id = victim.pod_sandbox_id
        events: list[SimEvent] = []
        for cid in list(pod.container_ids):  # the older exited attempts go
            old = self._containers[cid]
            if old.name == victim.name and old.state is SimContainerState.EXITED:
                events.append(self._delete_container(pod, cid, now))
        self._containers[victim.id] = msgspec.structs.replace(
            victim, state=SimContainerState.EXITED, finished_at=now, exit_code=1, reason="Error"
        )
        events.append(self._event(victim.id, SimEventType.STOPPED, now, sandbox_id, pod))
        attempt = victim.attempt + 1
        cid = self._new_id()
        self._containers[cid] = msgspec.structs.replace(
            victim,
            id=cid,
            attempt=attempt,
            created_at=now,
            started_at=now,
            annotations=_frozen(
                dict(victim.annotations) | {RESTART_COUNT_ANNOTATION: str(attempt)}
            ),
            log_path=victim.log_path.rsplit("/", 1)[0] + f"/{attempt}.log",
        )
        pod.container_ids += (cid,)
        events.append(self._event(cid, SimEventType.CREATED, now, sandbox_id, pod))
        events.append(self._event(cid, SimEventType.STARTED, now, sandbox_id, pod))
        return events

    def _delete_container(self, pod: _Pod, cid: str, now: int) -> SimEvent:
        """Delete container ``cid`` of ``pod``; its DELETED event."""
        sandbox_id = self._containers.pop(cid).pod_sandbox_id
        self._ids.discard(cid)
        pod.container_ids = tuple(i for i in pod.container_ids if i != cid)
        return self._event(cid, SimEventType.DELETED, now, sandbox_id, pod)

    def _pod(self, uid: str) -> _Pod:
        try:
            return self._pods[uid]
        except KeyError:
            raise KeyError(f"no pod with UID {uid!r} in the population") from None

    def _publish(self, events: list[SimEvent]) -> None:
        if not events:
            return
        self._generation += 1
        for listener in list(self._listeners):
            listener(events)

    def _pick_shape(self) -> PodShape:
        return self._rng.choices(_SHAPES, _WEIGHTS)[0]

    def _new_id(self) -> str:
        while True:
            ident = f"{self._rng.getrandbits(256):064x}"
            if ident not in self._ids:
                self._ids.add(ident)
                return ident

    def _suffix(self, length: int) -> str:
        return "".join(self._rng.choices(_K8S_ALPHABET, k=length))

    def _event(
        self, ident: str, kind: SimEventType, now: int, sandbox_id: str, pod: _Pod
    ) -> SimEvent:
        containers = self._containers
        of_pod = tuple(containers[cid] for cid in pod.container_ids)
        return SimEvent(
            ident,
            kind,
            now,
            self._sandboxes.get(sandbox_id),
            tuple(c for c in of_pod if c.pod_sandbox_id == sandbox_id),
            of_pod if len(pod.sandbox_ids) > 1 else None,
        )

    def _created_at(self, pod: _Pod) -> int:
        return max(self._sandboxes[sid].created_at for sid in pod.sandbox_ids)

    def _create(self, shape: PodShape) -> tuple[str, list[SimEvent]]:
        now = self._clock()
        pod = self._add_pod(shape, now)
        events: list[SimEvent] = []
        # (created_at, id, sandbox id, started, stopped) of every record, in creation order.
        items: list[tuple[int, str, str, bool, bool]] = []
        for sid in pod.sandbox_ids:
            sb = self._sandboxes[sid]
            items.append((sb.created_at, sid, sid, True, sb.state is SimSandboxState.NOTREADY))
        for cid in pod.container_ids:
            ct = self._containers[cid]
            items.append(
                (
                    ct.created_at,
                    cid,
                    ct.pod_sandbox_id,
                    ct.started_at > 0,
                    ct.state is SimContainerState.EXITED,
                )
            )
        items.sort()
        for _, ident, sandbox_id, started, stopped in items:
            events.append(self._event(ident, SimEventType.CREATED, now, sandbox_id, pod))
            if started:
                events.append(self._event(ident, SimEventType.STARTED, now, sandbox_id, pod))
            if stopped:
                events.append(self._event(ident, SimEventType.STOPPED, now, sandbox_id, pod))
        return pod.uid, events

    def _stop(self, pod: _Pod) -> list[SimEvent]:
        now = self._clock()
        events: list[SimEvent] = []
        for cid in pod.container_ids:
            ct = self._containers[cid]
            if ct.state is SimContainerState.EXITED:
                continue
            self._containers[cid] = msgspec.structs.replace(
                ct,
                state=SimContainerState.EXITED,
                started_at=ct.started_at or now,
                finished_at=now,
                exit_code=137,
                reason="Error",
            )
            events.append(self._event(cid, SimEventType.STOPPED, now, ct.pod_sandbox_id, pod))
        for sid in pod.sandbox_ids:
            sb = self._sandboxes[sid]
            if sb.state is SimSandboxState.READY:
                # Its network is torn down: the address is free (the status still shows it).
                self._addresses.release(sb.ip)
                self._sandboxes[sid] = msgspec.structs.replace(sb, state=SimSandboxState.NOTREADY)
                events.append(self._event(sid, SimEventType.STOPPED, now, sid, pod))
        return events

    def _remove(self, uid: str) -> list[SimEvent]:
        pod = self._pod(uid)
        events = self._stop(pod)
        now = self._clock()
        events += [self._delete_container(pod, cid, now) for cid in list(pod.container_ids)]
        for sid in pod.sandbox_ids:
            sb = self._sandboxes.pop(sid)
            self._ids.discard(sid)
            events.append(SimEvent(sid, SimEventType.DELETED, now, sb, ()))
        del self._pods[uid]
        self._names.discard((pod.namespace, pod.name))
        return events

    def _image(self, repository: str, version: str) -> tuple[str, str, str]:
        """(image, config digest id, manifest digest ref) for a repository: stable per seed."""
        key = (repository, version)
        found = self._images.get(key)
        if found is None:
            image = f"registry.example/{repository}:{version}"
            config = hashlib.sha256(f"{self._seed}/config/{image}".encode()).hexdigest()
            manifest = hashlib.sha256(f"{self._seed}/manifest/{image}".encode()).hexdigest()
            found = (image, f"sha256:{config}", f"registry.example/{repository}@sha256:{manifest}")
            self._images[key] = found
        return found

    def _add_pod(self, shape: PodShape, end: int, tie_with: int = 0) -> _Pod:
        """Generate one pod whose newest record is created at ``end``.

        Timestamps are laid out forward from 0 and then shifted so the newest equals ``end``;
        with ``tie_with``, shifted instead so the pod's ``created_at`` (its newest sandbox)
        equals it, when that keeps every record at or before ``end``. The random draws happen
        in a fixed order (identity, then history), so a seed always gives the same pods.
        """
        identity = self._draw_identity(shape)
        host_network = self._net_rng.random() < self._host_network
        sandboxes, planned = _plan_history(self._rng, shape, identity.inits, identity.mains)
        newest_sandbox = max(created for created, _ in sandboxes)
        newest = max(newest_sandbox, *(max(p.created, p.started, p.finished) for p in planned))
        shift = end - newest
        if tie_with:  # only when the tie keeps every record at or before ``end``
            shift = min(shift, tie_with - newest_sandbox)
        sandbox_ids = [
            self._add_sandbox(
                identity,
                attempt,
                created + shift,
                state,
                newest=attempt == len(sandboxes) - 1,
                host_network=host_network,
            )
            for attempt, (created, state) in enumerate(sandboxes)
        ]
        container_ids = [self._add_container(identity, p, sandbox_ids, shift) for p in planned]
        ids = (tuple(sandbox_ids), tuple(container_ids))
        pod = _Pod(identity.uid, identity.name, identity.namespace, *ids)
        self._pods[identity.uid] = pod
        return pod

    def _draw_identity(self, shape: PodShape) -> _Identity:
        """A new pod's names, labels and containers, its name unique in its namespace."""
        rng = self._rng
        namespace = rng.choice(self._namespaces)
        app = rng.choice(_APPS)
        template_hash = self._suffix(10)
        while True:
            name = f"{app}-{template_hash}-{self._suffix(5)}"
            if (namespace, name) not in self._names:
                break
        self._names.add((namespace, name))
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        labels = {"app": app, "pod-template-hash": template_hash, "tier": rng.choice(_TIERS)}
        grace = rng.choice(("30", "30", "60", "10"))
        version = f"1.{rng.randrange(10)}"
        flavour = rng.random()
        mains = (app, *rng.sample(_SIDECARS, rng.randint(0, 3)))
        inits = _INITS[: rng.randint(1, 2)] if shape is PodShape.WITH_INIT else ()
        hashes = {c: rng.getrandbits(32) for c in (*inits, *mains)}
        return _Identity(
            namespace,
            name,
            uid,
            labels,
            grace,
            version,
            _image_flavour(flavour),
            mains,
            inits,
            hashes,
        )

    def _add_sandbox(
        self,
        pod: _Identity,
        attempt: int,
        created: int,
        state: SimSandboxState,
        *,
        newest: bool,
        host_network: bool,
    ) -> str:
        """Store one sandbox of ``pod``; returns its ID. A READY one on the pod network holds
        an address of the pool; a host-network one has none of its own (as containerd says)."""
        sid = self._new_id()
        ip = ""
        if state is SimSandboxState.READY and not host_network:
            ip = self._addresses.allocate()
        seen = datetime.fromtimestamp(created / _SECOND, UTC)
        # A label added to the pod later (its tier) shows on re-created sandboxes only.
        labels = pod.labels if newest else {k: v for k, v in pod.labels.items() if k != "tier"}
        self._sandboxes[sid] = SimSandbox(
            id=sid,
            name=pod.name,
            uid=pod.uid,
            namespace=pod.namespace,
            attempt=attempt,
            state=state,
            created_at=created,
            labels=_frozen(labels | pod.kubelet_labels() | self._sandbox_labels),
            annotations=_frozen(
                {
                    "kubernetes.io/config.seen": seen.isoformat(timespec="microseconds"),
                    "kubernetes.io/config.source": "api",
                    **pod.large_annotations(self._annotation_bytes),
                }
            ),
            ip=ip,
            host_network=host_network,
        )
        return sid

    def _add_container(
        self, pod: _Identity, p: _Planned, sandbox_ids: list[str], shift: int
    ) -> str:
        """Store one planned container of ``pod``, its times moved by ``shift``; returns its ID."""
        image, config_id, manifest_ref = self._image(p.name, pod.version)
        image_ref, image_id = pod.image_flavour.ref_and_id(config_id, manifest_ref)
        cid = self._new_id()
        self._containers[cid] = SimContainer(
            id=cid,
            pod_sandbox_id=sandbox_ids[p.sandbox],
            name=p.name,
            attempt=p.attempt,
            state=p.state,
            created_at=p.created + shift,
            started_at=p.started + shift if p.started else 0,
            finished_at=p.finished + shift if p.finished else 0,
            exit_code=p.exit_code,
            reason=p.reason,
            image=image,
            image_ref=image_ref,
            image_id=image_id,
            labels=_frozen({CONTAINER_NAME_LABEL: p.name, **pod.kubelet_labels()}),
            annotations=_frozen(
                {
                    CONTAINER_HASH_ANNOTATION: f"{pod.hashes[p.name]:x}",
                    RESTART_COUNT_ANNOTATION: str(p.attempt),
                    TERMINATION_MESSAGE_PATH_ANNOTATION: "/dev/termination-log",
                    TERMINATION_MESSAGE_POLICY_ANNOTATION: "File",
                    GRACE_PERIOD_ANNOTATION: pod.grace,
                    **pod.large_annotations(self._annotation_bytes),
                }
            ),
            log_path=f"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}/{p.name}/{p.attempt}.log",
            init=p.init,
        )
        return cid
