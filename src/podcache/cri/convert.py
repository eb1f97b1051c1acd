"""CRI list responses -> PodList, as the kubelet's GetPods builds it; pure, no gRPC, no I/O.

The grouping follows the kubelet (``pkg/kubelet/kuberuntime``, ``GetPods``) item by item, with
the two deliberate improvements of docs/architecture.md §4: a pod's ``created_at`` is the
newest of its sandboxes', and every order is total (pods newest first, ties by pod ID
ascending; containers and sandboxes inside a pod newest first by CRI ``created_at``, ties by ID
ascending). Pods also get their newest sandbox's own labels (a podcache addition).

Trade-off: this runs on every cache refresh over every container of the node, so it prefers
speed and a small snapshot over elegance. Reading a field of a upb message allocates, so each
is read once, into a local; ``HasField`` runs only when a read value cannot prove presence;
repeated strings are shared so a snapshot holds one object per distinct value;
ordering uses C-level sort keys. And since a CRI item never changes after creation except for
its state (labels, annotations, image and metadata are fixed when it is created), an optional
``Memo`` carries each item's conversion to the next listing: an item listed again with the
same id, ``created_at`` and state costs three field reads instead of a dozen.

Two readers feed the same assembly: protobuf messages (``build_pods``), and the raw bytes of
the two list answers (``read_sandboxes``/``read_containers``, then ``pods_from_listings``),
which the C extension ``podcache.cri._wire`` reads in one pass into flat tuples, several times
faster than upb's decode plus field reads; where the extension is not built, protobuf decodes
the bytes and the message reader reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter, itemgetter
from typing import Any, Generic, NamedTuple, TypeVar

from google.protobuf.message import DecodeError

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
    "WIRE_READER",
    "Listing",
    "MalformedListingError",
    "Memo",
    "build_pods",
    "container_state",
    "parse_hash",
    "pods_from_listings",
    "pods_from_responses",
    "pods_from_wire",
    "read_containers",
    "read_sandboxes",
    "sandbox_state",
]

_WireRead = Callable[[bytes], list[tuple[Any, ...]]]


def _load_wire() -> tuple[_WireRead, _WireRead, type[ValueError]] | None:
    try:
        from podcache.cri import _wire  # noqa: PLC0415 -- optional: built only with a C compiler
    except ImportError:  # not compiled here: protobuf reads the bytes
        return None
    return _wire.sandboxes, _wire.containers, _wire.MalformedError


_WIRE = _load_wire()

WIRE_READER = "c" if _WIRE is not None else "protobuf"
"""What ``pods_from_wire`` reads the bytes with: the C extension, or protobuf's decoder."""

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
# A listed item as a reader hands it over: (id, created_at, state, ...), the rest the reader's.
_Row = TypeVar("_Row", bound=tuple[Any, ...])
_Entry = TypeVar("_Entry", _SandboxFacts, _ContainerFacts)

# Sort keys over facts and over finished pods.
_BY_CREATED = itemgetter(0)
_FACT_ID = itemgetter(2)
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

    __slots__ = ("containers", "created_at", "labels", "name", "namespace", "sandboxes")

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self.created_at = 0
        self.labels = _NO_LABELS
        self.containers: list[Container] = []
        self.sandboxes: list[Container] = []


class MalformedListingError(ValueError):
    """The bytes of a list answer are not a valid message of the CRI API."""


# -- reader 1: protobuf messages -------------------------------------------------------------
# A row is (id, created_at, state, message): the three fields a memo checks, read first.
_MessageRow = tuple[str, int, int, Any]


def _message_rows(items: Iterable[Any]) -> Iterable[_MessageRow]:
    return ((item.id, item.created_at, item.state, item) for item in items)


def _sandbox_facts(row: _MessageRow, runtime: str, share: _Share) -> _SandboxFacts:
    """The kubelet's rules for one sandbox message."""
    sandbox_id, created_at, state, sandbox = row
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


def _container_facts(row: _MessageRow, runtime: str, share: _Share) -> _ContainerFacts:
    """The kubelet's rules for one container message."""
    container_id, created_at, state, container = row
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
    converted = Container(
        id=ContainerID(runtime, container_id),
        name=share(name, name),
        image=share(image_name, image_name),
        image_id=share(image_id, image_id),
        image_ref=share(image_ref, image_ref),
        image_runtime_handler=share(handler, handler) if handler else "",
        hash=parse_hash(container.annotations.get(CONTAINER_HASH_ANNOTATION, "")),
        state=_CONTAINER_STATES.get(state, _UNKNOWN),
    )
    return (created_at, state, container_id, uid, converted)


def _pod_names(row: _MessageRow) -> tuple[str, str]:
    """A synthesised pod's name and namespace, from its first container's labels."""
    labels = row[3].labels
    return labels.get(POD_NAME_LABEL, ""), labels.get(POD_NAMESPACE_LABEL, "")


# -- reader 2: the flat tuples of podcache.cri._wire -----------------------------------------
# sandbox:   (id, created_at, state, has_metadata, name, uid, namespace, pod labels), the
#            pod labels as _sandbox_facts makes them: sorted pairs, no io.kubernetes.pod.* keys
# container: (id, created_at, state, has_metadata, name, has_image, image, runtime_handler,
#             image_ref, image_id, pod uid label, pod name label, pod namespace label, hash)
# Strings arrive shared (one object per distinct value in the listing); absent ones are "".
_WireRow = tuple[Any, ...]


def _wire_sandbox_facts(row: _WireRow, runtime: str, share: _Share) -> _SandboxFacts:
    """The kubelet's rules for one sandbox row (the same rules as ``_sandbox_facts``)."""
    sandbox_id, created_at, state, has_metadata, name, uid, namespace, labels = row
    if not has_metadata:
        return (created_at, state, sandbox_id, None, None, "", "", _NO_LABELS)
    if not sandbox_id:
        return (created_at, state, sandbox_id, uid, None, name, namespace, _NO_LABELS)
    converted = Container(
        id=ContainerID(runtime, sandbox_id),
        state=_SANDBOX_STATES.get(state, _UNKNOWN),
    )
    return (created_at, state, sandbox_id, uid, converted, name, namespace, labels)


def _wire_container_facts(row: _WireRow, runtime: str, share: _Share) -> _ContainerFacts:
    """The kubelet's rules for one container row (the same rules as ``_container_facts``)."""
    (
        container_id,
        created_at,
        state,
        has_metadata,
        name,
        has_image,
        image,
        handler,
        image_ref,
        image_id,
        uid,
        _,
        _,
        hash_text,
    ) = row
    if not has_metadata:
        return (created_at, state, container_id, None, None)
    if not container_id or not has_image:
        return (created_at, state, container_id, uid, None)
    converted = Container(
        id=ContainerID(runtime, container_id),
        name=name,
        image=image,
        image_id=image_id or image_ref,
        image_ref=image_ref,
        image_runtime_handler=handler,
        hash=parse_hash(hash_text),
        state=_CONTAINER_STATES.get(state, _UNKNOWN),
    )
    return (created_at, state, container_id, uid, converted)


def _wire_pod_names(row: _WireRow) -> tuple[str, str]:
    return row[11], row[12]


# -- assembly --------------------------------------------------------------------------------
def _newest_first(entries: list[_Entry]) -> None:
    """Sort facts (``(created_at, state, id, ...)``) newest first, ties by ID, in place.

    Sorting by the int alone settles it unless two entries were created in the same
    nanosecond; only then are the IDs (long strings, slower to compare) sorted too.
    """
    entries.sort(key=_BY_CREATED, reverse=True)  # reverse=True keeps the sort stable
    if len(set(map(_BY_CREATED, entries))) < len(entries):
        entries.sort(key=_FACT_ID)
        entries.sort(key=_BY_CREATED, reverse=True)


class _Reader(NamedTuple, Generic[_Row]):
    """How one kind of row is read: the kubelet's rules for a sandbox and for a container,
    and a synthesised pod's name and namespace from its first container."""

    sandbox_facts: Callable[[_Row, str, _Share], _SandboxFacts]
    container_facts: Callable[[_Row, str, _Share], _ContainerFacts]
    pod_names: Callable[[_Row], tuple[str, str]]


_MESSAGES = _Reader(_sandbox_facts, _container_facts, _pod_names)
_WIRE_ROWS = _Reader(_wire_sandbox_facts, _wire_container_facts, _wire_pod_names)


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
    return _assemble(
        runtime_name,
        _message_rows(sandboxes),
        _message_rows(containers),
        memo,
        _MESSAGES,
    )


class Listing:
    """One list answer, read from its wire bytes (opaque); ``pods_from_listings`` takes two."""

    __slots__ = ("_reader", "_rows")

    def __init__(self, rows: list[Any], reader: _Reader[Any]) -> None:
        self._rows = rows
        self._reader = reader

    def __len__(self) -> int:
        """How many items the answer lists."""
        return len(self._rows)


def read_sandboxes(data: bytes) -> Listing:
    """Read a ListPodSandboxResponse's bytes (a MalformedListingError if they are not one)."""
    if _WIRE is None:
        return _messages(_parse(pb.ListPodSandboxResponse, data).items)
    return _read(_WIRE[0], data)


def read_containers(data: bytes) -> Listing:
    """Read a ListContainersResponse's bytes (a MalformedListingError if they are not one)."""
    if _WIRE is None:
        return _messages(_parse(pb.ListContainersResponse, data).containers)
    return _read(_WIRE[1], data)


def _read(read: _WireRead, data: bytes) -> Listing:
    assert _WIRE is not None
    try:
        return Listing(read(data), _WIRE_ROWS)
    except _WIRE[2] as exc:
        raise MalformedListingError(str(exc)) from None


def _messages(items: Iterable[Any]) -> Listing:
    return Listing(list(_message_rows(items)), _MESSAGES)


def _parse(message: Any, data: bytes) -> Any:
    try:
        return message.FromString(data)
    except DecodeError as exc:
        raise MalformedListingError(f"malformed {message.__name__}: {exc}") from None


def pods_from_listings(
    runtime_name: str, sandboxes: Listing, containers: Listing, memo: Memo | None = None
) -> PodList:
    """``build_pods`` over one ListPodSandbox and one ListContainers answer, as read."""
    return _assemble(runtime_name, sandboxes._rows, containers._rows, memo, sandboxes._reader)


def pods_from_wire(
    runtime_name: str,
    sandboxes: bytes,
    containers: bytes,
    memo: Memo | None = None,
) -> PodList:
    """``build_pods`` over the wire bytes of one ListPodSandbox and one ListContainers answer.

    Raises MalformedListingError (a ValueError naming the message and the byte) when either
    is not a valid message, with the C reader and with protobuf's alike.
    """
    return pods_from_listings(
        runtime_name, read_sandboxes(sandboxes), read_containers(containers), memo
    )


def _assemble(
    runtime_name: str,
    sandbox_rows: Iterable[_Row],
    container_rows: Iterable[_Row],
    memo: Memo | None,
    reader: _Reader[_Row],
) -> PodList:
    """Group rows into pods (see ``build_pods``); the reader turns a row into facts."""
    sandbox_facts, container_facts, pod_names = reader
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
    # The facts of the items that made it into a pod, to order before they go to their pods.
    kept_sandboxes: list[_SandboxFacts] = []
    kept_containers: list[_ContainerFacts] = []

    for row in sandbox_rows:
        sandbox_id: str = row[0]
        created_at: int = row[1]
        facts = known_sandboxes.get(sandbox_id)
        if facts is None or facts[0] != created_at or facts[1] != row[2]:
            facts = sandbox_facts(row, runtime, share)
        if sandbox_id and remember:
            seen_sandboxes[sandbox_id] = facts
        uid = facts[3]
        if uid is None:
            continue
        if uid not in groups:
            groups[uid] = group = _Group(facts[5], facts[6])
        else:
            group = groups[uid]
        if facts[4] is not None:
            group.created_at = max(group.created_at, created_at)
            kept_sandboxes.append(facts)

    for row in container_rows:
        container_id: str = row[0]
        created_at = row[1]
        facts_c = known_containers.get(container_id)
        if facts_c is None or facts_c[0] != created_at or facts_c[1] != row[2]:
            facts_c = container_facts(row, runtime, share)
        if container_id and remember:
            seen_containers[container_id] = facts_c
        uid = facts_c[3]
        if uid is None:
            continue
        if uid not in groups:
            name, namespace = pod_names(row)
            groups[uid] = _Group(share(name, name), share(namespace, namespace))
        if facts_c[4] is not None:
            kept_containers.append(facts_c)

    # One total order for all items, then each item goes to its pod in that order: cheaper
    # than sorting pod by pod.
    _newest_first(kept_sandboxes)
    for facts in kept_sandboxes:
        group = groups[facts[3]]  # type: ignore[index]  # kept: it has a uid
        if not group.sandboxes:
            group.labels = facts[7]  # the newest sandbox's
        group.sandboxes.append(facts[4])  # type: ignore[arg-type]  # kept: converted
    _newest_first(kept_containers)
    for facts_c in kept_containers:
        groups[facts_c[3]].containers.append(facts_c[4])  # type: ignore[index, arg-type]

    pods: list[Pod] = []
    seen_pods: dict[str, Pod] = {}
    for uid, group in groups.items():
        pod_sandboxes = tuple(group.sandboxes)
        pod_containers = tuple(group.containers)
        pod_labels = group.labels
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
