"""CRI list responses -> PodList, as the kubelet's GetPods builds it; pure, no gRPC, no I/O.

The grouping follows the kubelet (``pkg/kubelet/kuberuntime``, ``GetPods``) item by item, with
the two deliberate improvements of DESIGN.md: a pod's ``created_at`` is the newest of its
sandboxes', and every order is total (pods newest first, ties by pod ID ascending; containers
and sandboxes inside a pod newest first by CRI ``created_at``, ties by ID ascending). Pods also
get their newest sandbox's own labels (a podcache addition).

Trade-off: this runs on every cache refresh over every container of the node, so it prefers
speed and a small snapshot over elegance. Reading a field of a upb message allocates, so each
is read once, into a local; ``HasField`` runs only when a read value cannot prove presence;
repeated strings are shared so a snapshot holds one object per distinct value;
ordering uses C-level sort keys. And since a CRI item never changes after creation except for
its state (labels, annotations, image and metadata are fixed when it is created), an optional
``Memo`` carries each item's conversion to the next listing: an item listed again with the
same id, ``created_at`` and state costs three field reads instead of a dozen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter, itemgetter
from typing import TypeVar

from podcache.cri.proto import api_pb2 as pb
from podcache.model import (
    Container,
    ContainerID,
    ContainerState,
    Pod,
    PodList,
    with_sorted_labels,
)

__all__ = [
    "CONTAINER_HASH_ANNOTATION",
    "POD_NAMESPACE_LABEL",
    "POD_NAME_LABEL",
    "POD_UID_LABEL",
    "Memo",
    "build_pods",
    "container_state",
    "parse_hash",
    "pods_from_responses",
    "sandbox_state",
]

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_HASH_ANNOTATION = "io.kubernetes.container.hash"

_UINT64_MAX = (1 << 64) - 1
_HEX_DIGITS = "0123456789abcdefABCDEF"

_CONTAINER_STATES: dict[int, ContainerState] = {
    pb.CONTAINER_CREATED: ContainerState.CREATED,
    pb.CONTAINER_RUNNING: ContainerState.RUNNING,
    pb.CONTAINER_EXITED: ContainerState.EXITED,
}
_SANDBOX_STATES: dict[int, ContainerState] = {
    pb.SANDBOX_READY: ContainerState.RUNNING,
    pb.SANDBOX_NOTREADY: ContainerState.EXITED,
}
_UNKNOWN = ContainerState.UNKNOWN
_KUBELET_POD_LABELS = "io.kubernetes.pod."

_Labels = tuple[tuple[str, str], ...]
_NO_LABELS: _Labels = ()
_Share = Callable[[str, str], str]

# What one listed item contributes to the pods, once read: the unit a Memo keeps.
#   container: (created_at, state, id, pod uid | None, converted | None)
#   sandbox:   (created_at, state, id, pod uid | None, converted | None, name, namespace, labels)
# A None uid: no metadata, skipped before grouping. A None conversion: skipped after grouping.
_ContainerFacts = tuple[int, int, str, str | None, Container | None]
_SandboxFacts = tuple[int, int, str, str | None, Container | None, str, str, _Labels]
# What a pod collects: (created_at, id, converted[, labels]); created_at and id to sort by.
_Entry = TypeVar("_Entry", tuple[int, str, Container], tuple[int, str, Container, _Labels])

# Sort keys over entries and over finished pods.
_BY_CREATED = itemgetter(0)
_BY_ID = itemgetter(1)
_ITEM = itemgetter(2)
_POD_BY_CREATED = attrgetter("created_at")
_POD_BY_ID = attrgetter("id")


def parse_hash(value: str | None) -> int:
    """The ``io.kubernetes.container.hash`` annotation as the kubelet reads it.

    Hexadecimal digits only (either case; Go's ``strconv.ParseUint(v, 16, 64)``: no ``0x``,
    no sign, no underscores, no spaces), within uint64; anything else, or a missing value, is 0.
    """
    if not value or value.strip(_HEX_DIGITS):
        return 0
    number = int(value, 16)
    return number if number <= _UINT64_MAX else 0


def container_state(state: int) -> ContainerState:
    """A CRI ContainerState as the kubelet maps it: created/running/exited, else unknown."""
    return _CONTAINER_STATES.get(state, _UNKNOWN)


def sandbox_state(state: int) -> ContainerState:
    """A CRI PodSandboxState as the kubelet maps it: READY->running, NOTREADY->exited."""
    return _SANDBOX_STATES.get(state, _UNKNOWN)


class Memo:
    """The conversions of one listing, for the next ``build_pods`` to reuse; opaque.

    An item listed again with the same id, ``created_at`` and state is not read again: CRI
    items are immutable but for their state. A pod whose parts all came out the same is the
    previous snapshot's Pod object. Each call replaces the whole content (one attribute swap),
    so a memo only ever holds the last listing and may be shared by threads.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # (runtime name, sandbox facts by id, container facts by id, pods by uid)
        self._last: tuple[
            str, dict[str, _SandboxFacts], dict[str, _ContainerFacts], dict[str, Pod]
        ] = ("", {}, {}, {})

    def __len__(self) -> int:
        """How many items (sandboxes and containers) the memo holds."""
        _, sandboxes, containers, _ = self._last
        return len(sandboxes) + len(containers)


class _Group:
    """One pod while it is being assembled (the kubelet's ``pods[uid]`` map value)."""

    __slots__ = ("containers", "created_at", "name", "namespace", "sandboxes")

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self.created_at = 0
        self.containers: list[tuple[int, str, Container]] = []
        self.sandboxes: list[tuple[int, str, Container, _Labels]] = []


def _sandbox_facts(
    sandbox: pb.PodSandbox,
    sandbox_id: str,
    created_at: int,
    state: int,
    *,
    runtime: str,
    share: _Share,
) -> _SandboxFacts:
    """The kubelet's rules for one sandbox (id, created_at and state already read)."""
    metadata = sandbox.metadata
    uid = metadata.uid
    # A non-empty field proves the submessage is present: HasField only when in doubt.
    if not uid and not sandbox.HasField("metadata"):
        return (created_at, state, sandbox_id, None, None, "", "", _NO_LABELS)
    name = metadata.name
    namespace = metadata.namespace
    if not sandbox_id:
        return (created_at, state, sandbox_id, uid, None, name, namespace, _NO_LABELS)
    # Not labels.items(): on a upb map that is the slow pure-Python Mapping mixin.
    labels = sandbox.labels
    pairs = tuple(
        [
            (share(key, key), share(value, value))
            for key in sorted(labels)
            if not key.startswith(_KUBELET_POD_LABELS)
            for value in (labels[key],)
        ]
    )
    converted = Container(
        id=ContainerID(runtime, sandbox_id),
        state=_SANDBOX_STATES.get(state, _UNKNOWN),
    )
    return (
        created_at,
        state,
        sandbox_id,
        uid,
        converted,
        share(name, name),
        share(namespace, namespace),
        pairs,
    )


def _container_facts(
    container: pb.Container,
    container_id: str,
    created_at: int,
    state: int,
    *,
    runtime: str,
    share: _Share,
) -> _ContainerFacts:
    """The kubelet's rules for one container (id, created_at and state already read)."""
    name = container.metadata.name
    if not name and not container.HasField("metadata"):
        return (created_at, state, container_id, None, None)
    uid = container.labels.get(POD_UID_LABEL, "")
    image = container.image
    image_name = image.image
    if not container_id or (not image_name and not container.HasField("image")):
        return (created_at, state, container_id, uid, None)
    handler = image.runtime_handler
    image_ref = container.image_ref
    image_id = container.image_id or image_ref
    hash_text = container.annotations.get(CONTAINER_HASH_ANNOTATION, "")
    # parse_hash, inlined: one call per container is measurable at node scale.
    if hash_text and not hash_text.strip(_HEX_DIGITS):
        hash_value = int(hash_text, 16)
        if hash_value > _UINT64_MAX:
            hash_value = 0
    else:
        hash_value = 0
    converted = Container(
        id=ContainerID(runtime, container_id),
        name=share(name, name),
        image=share(image_name, image_name),
        image_id=share(image_id, image_id),
        image_ref=share(image_ref, image_ref),
        image_runtime_handler=share(handler, handler) if handler else "",
        hash=hash_value,
        state=_CONTAINER_STATES.get(state, _UNKNOWN),
    )
    return (created_at, state, container_id, uid, converted)


def _newest_first(entries: list[_Entry]) -> tuple[Container, ...]:
    """Sort entries newest first, ties by ID ascending (two stable C-level sorts, in place);
    return the converted items in that order."""
    if len(entries) > 1:
        entries.sort(key=_BY_ID)
        entries.sort(key=_BY_CREATED, reverse=True)  # reverse=True keeps the sort stable
    return tuple(map(_ITEM, entries))


def build_pods(
    runtime_name: str,
    sandboxes: Iterable[pb.PodSandbox],
    containers: Iterable[pb.Container],
    memo: Memo | None = None,
) -> PodList:
    """Group listed sandboxes and containers into pods, exactly as the kubelet's GetPods.

    ``runtime_name`` (from the runtime's Version) becomes the type of every ContainerID.
    Sandboxes: grouped by metadata uid (name and namespace from the first one's metadata);
    no metadata -> skipped; empty id -> skipped but its pod remains. Containers: grouped by
    the label ``io.kubernetes.pod.uid``, a pod synthesised from the pod labels when no sandbox
    made it (created_at 0; missing labels give the one pod with an empty ID); no metadata ->
    skipped before grouping; empty id or no image -> skipped after grouping (the pod remains).
    A pod's ``labels`` are its newest sandbox's, less the kubelet's ``io.kubernetes.pod.*``
    keys (a podcache addition); a pod with no converted sandbox has none.

    ``memo`` (optional) carries conversions from the previous call to the next; the result is
    the same with or without it.
    """
    shared: dict[str, str] = {}
    share = shared.setdefault
    runtime = share(runtime_name, runtime_name)
    known_sandboxes: dict[str, _SandboxFacts] = {}
    known_containers: dict[str, _ContainerFacts] = {}
    known_pods: dict[str, Pod] = {}
    remember = memo is not None
    if memo is not None and memo._last[0] == runtime_name:
        _, known_sandboxes, known_containers, known_pods = memo._last
    seen_sandboxes: dict[str, _SandboxFacts] = {}
    seen_containers: dict[str, _ContainerFacts] = {}
    groups: dict[str, _Group] = {}

    for sandbox in sandboxes:
        sandbox_id = sandbox.id
        created_at = sandbox.created_at
        state: int = sandbox.state
        facts = known_sandboxes.get(sandbox_id)
        if facts is None or facts[0] != created_at or facts[1] != state:
            facts = _sandbox_facts(
                sandbox,
                sandbox_id,
                created_at,
                state,
                runtime=runtime,
                share=share,
            )
        if sandbox_id and remember:
            seen_sandboxes[facts[2]] = facts
        uid = facts[3]
        if uid is None:
            continue
        group = groups.get(uid)
        if group is None:
            group = groups[uid] = _Group(facts[5], facts[6])
        converted = facts[4]
        if converted is None:
            continue
        group.created_at = max(group.created_at, created_at)
        group.sandboxes.append((created_at, sandbox_id, converted, facts[7]))

    for container in containers:
        container_id = container.id
        created_at = container.created_at
        state = container.state
        facts_c = known_containers.get(container_id)
        if facts_c is None or facts_c[0] != created_at or facts_c[1] != state:
            facts_c = _container_facts(
                container, container_id, created_at, state, runtime=runtime, share=share
            )
        if container_id and remember:
            seen_containers[facts_c[2]] = facts_c
        uid = facts_c[3]
        if uid is None:
            continue
        group = groups.get(uid)
        if group is None:
            labels = container.labels
            name = labels.get(POD_NAME_LABEL, "")
            namespace = labels.get(POD_NAMESPACE_LABEL, "")
            group = groups[uid] = _Group(share(name, name), share(namespace, namespace))
        converted = facts_c[4]
        if converted is not None:
            group.containers.append((created_at, container_id, converted))

    pods: list[Pod] = []
    seen_pods: dict[str, Pod] = {}
    for uid, group in groups.items():
        listed = group.sandboxes
        pod_sandboxes = _newest_first(listed)
        pod_containers = _newest_first(group.containers)
        pod_labels = listed[0][3] if listed else _NO_LABELS
        pod = known_pods.get(uid)
        if not (  # the same pod as last time (items reused from the memo compare by identity)
            pod is not None
            and pod.created_at == group.created_at
            and pod.containers == pod_containers
            and pod.sandboxes == pod_sandboxes
            and pod.name == group.name
            and pod.namespace == group.namespace
            and pod.labels == pod_labels
        ):
            # Labels are sorted pairs by construction: hand them over without the re-check.
            pod = with_sorted_labels(
                Pod(
                    id=uid,
                    name=group.name,
                    namespace=group.namespace,
                    created_at=group.created_at,
                    containers=pod_containers,
                    sandboxes=pod_sandboxes,
                ),
                pod_labels,
            )
        pods.append(pod)
        if remember:
            seen_pods[uid] = pod
    if memo is not None:
        memo._last = (runtime_name, seen_sandboxes, seen_containers, seen_pods)
    pods.sort(key=_POD_BY_ID)
    pods.sort(key=_POD_BY_CREATED, reverse=True)
    return PodList(tuple(pods))


def pods_from_responses(
    runtime_name: str,
    sandboxes: pb.ListPodSandboxResponse,
    containers: pb.ListContainersResponse,
    memo: Memo | None = None,
) -> PodList:
    """``build_pods`` over the items of one ListPodSandbox and one ListContainers response."""
    return build_pods(runtime_name, sandboxes.items, containers.containers, memo)
