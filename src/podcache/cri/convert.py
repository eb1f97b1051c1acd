"""CRI list responses -> PodList, as the kubelet's GetPods builds it; pure, no gRPC, no I/O.

The rules are docs/architecture.md §4's ("Conversion", "The total order", "Speed without
other rules"). This runs on every refresh over every container of the node: each field of a
upb message is read once, into a local (a read allocates); ``HasField`` runs only when a read
value cannot prove presence; repeated strings are shared so a snapshot holds one object per
distinct value; ordering uses C-level sort keys.

Two readers feed the same assembly: protobuf messages (``build_pods``), and the raw bytes of
the two list answers (``read_sandboxes``/``read_containers``, then ``pods_from_listings``),
which the C extension ``podcache.cri._wire`` reads in one pass into rows with named fields
(``SandboxRow``, ``ContainerRow``); where it is not built, protobuf decodes the bytes and the
message reader reads them. Either way each item becomes its facts (``_KeptSandbox`` ...
``_SkippedContainer``: what it contributes to the pods, and the unit a ``Memo`` keeps), and
the assembly groups facts into pods in small steps: facts, groups, placement in each group,
pods, their order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, Protocol, TypeVar

import msgspec

from podcache.errors import MalformedListingError
from podcache.model import (
    Container,
    ContainerID,
    ContainerState,
    Pod,
    PodList,
    with_sorted_labels,
)

if TYPE_CHECKING:
    from podcache.cri._wire import ContainerRow, SandboxRow
    from podcache.cri.networks import ListingPass, SandboxNetwork
    from podcache.cri.proto import api_pb2 as pb

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
    "item_ends",
    "parse_hash",
    "pods_from_listings",
    "pods_from_responses",
    "pods_from_wire",
    "read_containers",
    "read_sandboxes",
    "sandbox_state",
    "split_items",
]


class _CReader(NamedTuple):
    """The C extension's entry points."""

    sandboxes: Callable[[bytes | memoryview], list[SandboxRow]]
    containers: Callable[[bytes | memoryview], list[ContainerRow]]
    error: type[ValueError]
    item_cuts: Callable[[bytes | memoryview, int], list[int] | None]
    newest_first: Callable[[Sequence[int], Sequence[str]], list[int]]


def _load_wire() -> _CReader | None:
    try:
        from podcache.cri import _wire  # noqa: PLC0415 -- optional: built only with a C compiler
    except ImportError:  # not compiled here: protobuf reads the bytes
        return None
    return _CReader(
        _wire.sandboxes,
        _wire.containers,
        _wire.MalformedError,
        _wire.item_cuts,
        _wire.newest_first,
    )


_WIRE = _load_wire()

WIRE_READER: Literal["c", "protobuf"] = "c" if _WIRE is not None else "protobuf"
"""What ``pods_from_wire`` reads the bytes with: the C extension, or protobuf's decoder (an
install without a C compiler). Public as ``podcache.cri.DECODER``; ``podcache version`` and
``/metrics`` (``podcache_build_info``) report it."""

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_HASH_ANNOTATION = "io.kubernetes.container.hash"

_UINT64_MAX = (1 << 64) - 1
_HEX_DIGITS = "0123456789abcdefABCDEF"

# The CRI enums' numbers (api.proto; a test holds them to the generated module's), written
# out so that the C reader's path imports no protobuf: a one-shot listing starts faster.
_CONTAINER_STATES: dict[int, ContainerState] = {
    0: ContainerState.CREATED,  # CONTAINER_CREATED
    1: ContainerState.RUNNING,  # CONTAINER_RUNNING
    2: ContainerState.EXITED,  # CONTAINER_EXITED
}
_SANDBOX_STATES: dict[int, ContainerState] = {
    0: ContainerState.RUNNING,  # SANDBOX_READY
    1: ContainerState.EXITED,  # SANDBOX_NOTREADY
}
_UNKNOWN = ContainerState.UNKNOWN
_KUBELET_POD_LABELS = "io.kubernetes.pod."
_INFRA_CONTAINER_LABEL = "io.kubernetes.container.name"
"""On a sandbox, CRI-O's name of its infra container (``POD``): the runtime's, not the pod's."""

_Labels = tuple[tuple[str, str], ...]
_NO_LABELS: _Labels = ()
_Share = Callable[[str, str], str]


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


class _Listed(Protocol):
    """Any listed item, row or message: the three fields a memo checks."""

    @property
    def id(self) -> str: ...
    @property
    def created_at(self) -> int: ...
    @property
    def state(self) -> int: ...


# -- facts: what one listed item contributes to the pods, once read ----------------------------
# Every kind carries the item's id, created_at and state (what a Memo checks before it reuses
# them). A uid of None: the item had no metadata and is skipped before grouping; a Skipped
# item with a uid makes or joins its pod but is not part of it (no ID, no image).


class _KeptSandbox(msgspec.Struct, frozen=True, gc=False):
    """A sandbox that is part of its pod (``item``), with the pod's facts it carries."""

    created_at: int
    state: int
    id: str
    uid: str
    item: Container
    name: str
    namespace: str
    labels: _Labels


class _SkippedSandbox(msgspec.Struct, frozen=True, gc=False):
    """A sandbox that is not part of any pod; with a uid it still makes its pod."""

    created_at: int
    state: int
    id: str
    uid: str | None
    name: str
    namespace: str


class _KeptContainer(msgspec.Struct, frozen=True, gc=False):
    """A container that is part of its pod (``item``)."""

    created_at: int
    state: int
    id: str
    uid: str
    item: Container


class _SkippedContainer(msgspec.Struct, frozen=True, gc=False):
    """A container that is not part of any pod; with a uid it still makes its pod."""

    created_at: int
    state: int
    id: str
    uid: str | None


_SandboxFacts = _KeptSandbox | _SkippedSandbox
_ContainerFacts = _KeptContainer | _SkippedContainer


class _Remembered(NamedTuple):
    """One listing's conversions, by item ID and pod UID, for the next one to reuse."""

    runtime: str
    sandboxes: Mapping[str, _SandboxFacts]
    containers: Mapping[str, _ContainerFacts]
    pods: Mapping[str, Pod]


_NOTHING_REMEMBERED = _Remembered("", {}, {}, {})


class Memo:
    """The conversions of one listing, for the next ``build_pods`` to reuse; opaque
    (docs/architecture.md §4, "Speed without other rules"). Each call replaces the whole
    content (one attribute swap), so a memo only ever holds the last listing and may be shared
    by threads.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = _NOTHING_REMEMBERED

    def __len__(self) -> int:
        """How many items (sandboxes and containers) the memo holds."""
        return len(self._last.sandboxes) + len(self._last.containers)


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


# -- reader 1: protobuf messages ---------------------------------------------------------------
# The messages are the rows. Reading a field of a upb message allocates: each is read once.


def _sandbox_facts(sandbox: pb.PodSandbox, runtime: str, share: _Share) -> _SandboxFacts:
    """The kubelet's rules for one sandbox message."""
    sandbox_id, created_at, state = sandbox.id, sandbox.created_at, sandbox.state
    metadata = sandbox.metadata
    uid = metadata.uid
    # A non-empty field proves the submessage is present: HasField only when in doubt.
    if not uid and not sandbox.HasField("metadata"):
        return _SkippedSandbox(created_at, state, sandbox_id, None, "", "")
    name, namespace = metadata.name, metadata.namespace
    name, namespace = share(name, name), share(namespace, namespace)
    if not sandbox_id:
        return _SkippedSandbox(created_at, state, sandbox_id, uid, name, namespace)
    # Not labels.items(): on a upb map that is the slow pure-Python Mapping mixin.
    labels = sandbox.labels
    pairs = tuple(
        [
            (share(key, key), share(value, value))
            for key in sorted(labels)
            if not key.startswith(_KUBELET_POD_LABELS) and key != _INFRA_CONTAINER_LABEL
            for value in (labels[key],)
        ]
    )
    item = Container(
        id=ContainerID(runtime, sandbox_id), state=sandbox_state(state), attempt=metadata.attempt
    )
    return _KeptSandbox(created_at, state, sandbox_id, uid, item, name, namespace, pairs)


def _container_facts(container: pb.Container, runtime: str, share: _Share) -> _ContainerFacts:
    """The kubelet's rules for one container message."""
    container_id, created_at, state = container.id, container.created_at, container.state
    metadata = container.metadata
    name = metadata.name
    if not name and not container.HasField("metadata"):
        return _SkippedContainer(created_at, state, container_id, None)
    uid = container.labels.get(POD_UID_LABEL, "")
    image = container.image
    image_name = image.image
    if not container_id or (not image_name and not container.HasField("image")):
        return _SkippedContainer(created_at, state, container_id, uid)
    handler = image.runtime_handler
    image_ref = container.image_ref
    image_id = container.image_id or image_ref
    sandbox_id = container.pod_sandbox_id
    item = Container(
        id=ContainerID(runtime, container_id),
        sandbox_id=share(sandbox_id, sandbox_id),
        name=share(name, name),
        image=share(image_name, image_name),
        image_id=share(image_id, image_id),
        image_ref=share(image_ref, image_ref),
        image_runtime_handler=share(handler, handler) if handler else "",
        hash=parse_hash(container.annotations.get(CONTAINER_HASH_ANNOTATION, "")),
        state=container_state(state),
        attempt=metadata.attempt,
    )
    return _KeptContainer(created_at, state, container_id, uid, item)


def _pod_names(container: pb.Container) -> tuple[str, str]:
    """A synthesised pod's name and namespace, from its first container's labels."""
    labels = container.labels
    return labels.get(POD_NAME_LABEL, ""), labels.get(POD_NAMESPACE_LABEL, "")


# -- reader 2: the rows of podcache.cri._wire --------------------------------------------------
# Strings arrive shared (one object per distinct value in the listing); absent ones are "";
# a sandbox row's labels are already the pod's own, sorted, as _sandbox_facts makes them.


def _wire_sandbox_facts(row: SandboxRow, runtime: str, share: _Share) -> _SandboxFacts:
    """The kubelet's rules for one sandbox row (the same rules as ``_sandbox_facts``)."""
    if not row.has_metadata:
        return _SkippedSandbox(row.created_at, row.state, row.id, None, "", "")
    sandbox_id = row.id
    if not sandbox_id:
        return _SkippedSandbox(row.created_at, row.state, "", row.uid, row.name, row.namespace)
    state = row.state
    item = Container(
        id=ContainerID(runtime, sandbox_id), state=sandbox_state(state), attempt=row.attempt
    )
    return _KeptSandbox(
        row.created_at, state, sandbox_id, row.uid, item, row.name, row.namespace, row.labels
    )


def _wire_container_facts(row: ContainerRow, runtime: str, share: _Share) -> _ContainerFacts:
    """The kubelet's rules for one container row (the same rules as ``_container_facts``)."""
    if not row.has_metadata:
        return _SkippedContainer(row.created_at, row.state, row.id, None)
    container_id = row.id
    if not container_id or not row.has_image:
        return _SkippedContainer(row.created_at, row.state, container_id, row.pod_uid)
    state = row.state
    image_ref = row.image_ref
    item = Container(
        id=ContainerID(runtime, container_id),
        sandbox_id=row.pod_sandbox_id,
        name=row.name,
        image=row.image,
        image_id=row.image_id or image_ref,
        image_ref=image_ref,
        image_runtime_handler=row.runtime_handler,
        hash=parse_hash(row.hash),
        state=container_state(state),
        attempt=row.attempt,
    )
    return _KeptContainer(row.created_at, state, container_id, row.pod_uid, item)


def _wire_pod_names(row: ContainerRow) -> tuple[str, str]:
    """A synthesised pod's name and namespace, from its first container's labels."""
    return row.pod_name, row.pod_namespace


# -- one reader's rules, and the API over them -------------------------------------------------
_SandboxRow = TypeVar("_SandboxRow", bound=_Listed)
_ContainerRow = TypeVar("_ContainerRow", bound=_Listed)


class _Reader(NamedTuple, Generic[_SandboxRow, _ContainerRow]):
    """How one kind of row is read: the kubelet's rules for a sandbox and for a container,
    and a synthesised pod's name and namespace from its first container."""

    sandbox_facts: Callable[[_SandboxRow, str, _Share], _SandboxFacts]
    container_facts: Callable[[_ContainerRow, str, _Share], _ContainerFacts]
    pod_names: Callable[[_ContainerRow], tuple[str, str]]


_MESSAGES: _Reader[pb.PodSandbox, pb.Container] = _Reader(
    _sandbox_facts, _container_facts, _pod_names
)
_WIRE_ROWS: _Reader[SandboxRow, ContainerRow] = _Reader(
    _wire_sandbox_facts, _wire_container_facts, _wire_pod_names
)


def build_pods(
    runtime_name: str,
    sandboxes: Iterable[pb.PodSandbox],
    containers: Iterable[pb.Container],
    memo: Memo | None = None,
) -> PodList:
    """Group listed sandboxes and containers into pods, exactly as the kubelet's GetPods
    (docs/architecture.md §4, "Conversion" rules 1-4); ``runtime_name`` (from the runtime's
    Version) becomes the type of every ContainerID.

    ``memo`` (optional) carries conversions from the previous call to the next; the result is
    the same with or without it.
    """
    return _assemble(runtime_name, sandboxes, list(containers), memo, _MESSAGES)


class Listing:
    """One list answer, read from its wire bytes (opaque); ``pods_from_listings`` takes two."""

    __slots__ = ("_reader", "_rows")

    def __init__(self, rows: Sequence[Any], reader: _Reader[Any, Any]) -> None:
        self._rows = rows
        self._reader = reader

    def __len__(self) -> int:
        """How many items the answer lists."""
        return len(self._rows)

    @property
    def rows(self) -> Sequence[Any]:
        """The items as read, in order (rows of the C reader, or protobuf messages): each has
        ``id``, ``created_at`` and ``state``."""
        return self._rows

    def release(self) -> None:
        """Drop the rows (the listing is empty afterwards), ``RELEASE_SLICE`` at a time: the
        interpreter may hand the GIL over between slices (docs/architecture.md §4)."""
        rows = self._rows
        self._rows = ()
        if isinstance(rows, list):
            while rows:
                del rows[-RELEASE_SLICE:]

    def in_state(self, state: int) -> Listing:
        """The items whose CRI state is ``state`` (a runtime's state filter: equality)."""
        return Listing([row for row in self._rows if row.state == state], self._reader)

    @classmethod
    def joined(cls, parts: Sequence[Listing]) -> Listing:
        """One listing of ``parts``, each read from consecutive whole items of one answer."""
        rows: list[Any] = []
        for part in parts:
            rows.extend(part._rows)
        return cls(rows, parts[0]._reader)


_LIST_ITEM_TAG = 0x0A  # field 1 (the repeated items of both list answers), length-delimited
_MAX_LENGTH_SHIFT = 28  # a length varint of at most 5 bytes


def split_items(data: bytes, piece: int) -> list[memoryview] | None:
    """``data``, a list answer, cut between its top-level items into pieces of at least
    ``piece`` bytes (the last may be shorter); None when it is not longer than ``piece``.

    Both list answers are one repeated message field, and the items of a repeated field are
    independent: reading the pieces and joining the rows in order is reading the whole. Only
    answers made solely of field-1 length-delimited items, each within the bytes, are cut;
    anything else (unknown fields, groups, a truncated item) gives None, and the answer is
    read whole, so the reader alone decides what is malformed.

    The pieces are views of ``data``, nothing is copied; the C extension finds the cuts in one
    pass (``_item_cuts_python`` is the reference it is tested against).
    """
    find_cuts = _item_cuts_python if _WIRE is None else _WIRE.item_cuts
    cuts = find_cuts(data, piece)
    if cuts is None:
        return None
    view = memoryview(data)
    return [view[start:end] for start, end in pairwise([0, *cuts])]


def item_ends(data: bytes) -> list[int] | None:
    """Where each top-level item of a list answer ends (``[]`` for an empty answer); None when
    the answer is not made solely of field-1 length-delimited items (see ``split_items``)."""
    if not data:
        return []
    find_cuts = _item_cuts_python if _WIRE is None else _WIRE.item_cuts
    if len(data) == 1:
        return None  # one byte is no item (and item_cuts answers None for it)
    return find_cuts(data, 1)


def _item_cuts_python(data: bytes | memoryview, piece: int) -> list[int] | None:
    """Where ``split_items`` cuts ``data``: the end of each piece, the last ``len(data)``."""
    size = len(data)
    if size <= piece:
        return None
    cuts: list[int] = []
    start = position = 0
    while position < size:
        if data[position] != _LIST_ITEM_TAG:
            return None
        read = _item_length(data, position + 1, size)
        if read is None:
            return None
        length, position = read
        position += length
        if position > size:
            return None
        if position - start >= piece:
            cuts.append(position)
            start = position
    if start < size:
        cuts.append(size)
    return cuts


def _item_length(data: bytes | memoryview, position: int, size: int) -> tuple[int, int] | None:
    """An item's length varint at ``position`` (of at most 5 bytes, within ``size``) and where
    it ends; None when it is cut short or longer."""
    length = shift = 0
    while True:
        if position >= size or shift > _MAX_LENGTH_SHIFT:
            return None
        byte = data[position]
        position += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return length, position
        shift += 7


def read_sandboxes(data: bytes | memoryview) -> Listing:
    """Read a ListPodSandboxResponse's bytes (a MalformedListingError if they are not one)."""
    if _WIRE is None:
        from podcache.cri.proto import api_pb2 as pb  # noqa: PLC0415 -- the fallback only

        return Listing(_parse(pb.ListPodSandboxResponse, data).items, _MESSAGES)
    return _read(_WIRE.sandboxes, _WIRE.error, data)


def read_containers(data: bytes | memoryview) -> Listing:
    """Read a ListContainersResponse's bytes (a MalformedListingError if they are not one)."""
    if _WIRE is None:
        from podcache.cri.proto import api_pb2 as pb  # noqa: PLC0415 -- the fallback only

        return Listing(_parse(pb.ListContainersResponse, data).containers, _MESSAGES)
    return _read(_WIRE.containers, _WIRE.error, data)


def _read(
    read: Callable[[bytes | memoryview], Sequence[Any]],
    error: type[ValueError],
    data: bytes | memoryview,
) -> Listing:
    try:
        return Listing(read(data), _WIRE_ROWS)
    except error as exc:
        raise MalformedListingError(str(exc)) from None


def _parse(message: Any, data: bytes | memoryview) -> Any:
    from google.protobuf.message import DecodeError  # noqa: PLC0415 -- the fallback only

    try:
        return message.FromString(data)
    except DecodeError as exc:
        raise MalformedListingError(f"malformed {message.__name__}: {exc}") from None


def pods_from_listings(
    runtime_name: str,
    sandboxes: Listing,
    containers: Listing,
    memo: Memo | None = None,
    networks: ListingPass | None = None,
) -> PodList:
    """``build_pods`` over one ListPodSandbox and one ListContainers answer, as read.

    ``networks`` (a getter's ``networks.ListingPass``): each pod's IPs and host-network flag
    come from the network it knows for the pod's newest READY sandbox (none: empty, False)."""
    return _assemble(
        runtime_name, sandboxes._rows, containers._rows, memo, sandboxes._reader, networks=networks
    )


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


def pods_from_responses(
    runtime_name: str,
    sandboxes: pb.ListPodSandboxResponse,
    containers: pb.ListContainersResponse,
    memo: Memo | None = None,
) -> PodList:
    """``build_pods`` over the items of one ListPodSandbox and one ListContainers response."""
    return build_pods(runtime_name, sandboxes.items, containers.containers, memo)


# -- assembly: rows -> facts -> groups -> pods -------------------------------------------------


_Row = TypeVar("_Row", bound=_Listed)
_Facts = TypeVar("_Facts", bound=_Listed)
_Kept = TypeVar("_Kept", _KeptSandbox, _KeptContainer)
_Dated = TypeVar("_Dated", _KeptSandbox, _KeptContainer, Pod)

# Sort keys over kept facts and over finished pods.
_BY_CREATED = attrgetter("created_at")
_BY_ID = attrgetter("id")

RELEASE_SLICE = 1_000
"""Rows freed per step by ``Listing.release``."""
ORDER_IN_C_FROM = 64
"""Lists at least this long are ordered by the C extension (``_ordered``)."""


def _assemble(
    runtime_name: str,
    sandbox_rows: Iterable[_SandboxRow],
    container_rows: Sequence[_ContainerRow],
    memo: Memo | None,
    reader: _Reader[_SandboxRow, _ContainerRow],
    *,
    networks: ListingPass | None = None,
) -> PodList:
    """Group rows into pods (see ``build_pods``); the reader turns a row into facts."""
    last = memo._last if memo is not None else _NOTHING_REMEMBERED
    if last.runtime != runtime_name:
        last = _NOTHING_REMEMBERED
    shared: dict[str, str] = {}
    share = shared.setdefault
    runtime = share(runtime_name, runtime_name)
    sandboxes = _facts(sandbox_rows, reader.sandbox_facts, last.sandboxes, runtime, share)
    containers = _facts(container_rows, reader.container_facts, last.containers, runtime, share)
    groups: dict[str, _Group] = {}
    kept_sandboxes = _group_sandboxes(sandboxes, groups)
    kept_containers = _group_containers(container_rows, containers, groups, reader.pod_names, share)
    _place_sandboxes(kept_sandboxes, groups)
    _place_containers(kept_containers, groups)
    pods = _pods(groups, last.pods, networks.network if networks is not None else _no_network)
    if memo is not None:
        memo._last = _Remembered(
            runtime_name, _by_id(sandboxes), _by_id(containers), {pod.id: pod for pod in pods}
        )
    return PodList(_newest_pods_first(pods))


def _facts(
    rows: Iterable[_Row],
    read: Callable[[_Row, str, _Share], _Facts],
    known: Mapping[str, _Facts],
    runtime: str,
    share: _Share,
) -> list[_Facts]:
    """Each row's facts: the memo's where the item is listed again unchanged (same id,
    created_at and state), else read from the row."""
    facts: list[_Facts] = []
    append = facts.append
    remembered = known.get
    for row in rows:
        item = remembered(row.id)
        if item is None or item.created_at != row.created_at or item.state != row.state:
            item = read(row, runtime, share)
        append(item)
    return facts


def _by_id(facts: list[_Facts]) -> dict[str, _Facts]:
    """Facts by item ID, for the memo (no ID, nothing to find them by; the last one wins)."""
    return {item.id: item for item in facts if item.id}


def _group_sandboxes(
    sandboxes: list[_SandboxFacts], groups: dict[str, _Group]
) -> list[_KeptSandbox]:
    """Each sandbox with metadata makes or joins its pod's group (the first one of a pod names
    it; a pod is as new as its newest kept sandbox); the kept ones, returned."""
    kept: list[_KeptSandbox] = []
    for item in sandboxes:
        uid = item.uid
        if uid is None:
            continue
        group = groups.get(uid)
        if group is None:
            group = groups[uid] = _Group(item.name, item.namespace)
        if isinstance(item, _KeptSandbox):
            group.created_at = max(group.created_at, item.created_at)
            kept.append(item)
    return kept


def _group_containers(
    rows: Sequence[_ContainerRow],
    containers: list[_ContainerFacts],
    groups: dict[str, _Group],
    pod_names: Callable[[_ContainerRow], tuple[str, str]],
    share: _Share,
) -> list[_KeptContainer]:
    """Each container with metadata joins its pod's group, or makes one named by its pod
    labels when no sandbox did; the kept ones, returned."""
    kept: list[_KeptContainer] = []
    for row, item in zip(rows, containers, strict=True):
        uid = item.uid
        if uid is None:
            continue
        if uid not in groups:
            name, namespace = pod_names(row)
            groups[uid] = _Group(share(name, name), share(namespace, namespace))
        if isinstance(item, _KeptContainer):
            kept.append(item)
    return kept


def _newest_first(kept: list[_Kept]) -> None:
    """Sort kept facts newest first, ties by ID, in place (see ``_ordered``)."""
    kept[:] = _ordered(kept)


def _ordered(items: list[_Dated]) -> list[_Dated]:
    """``items`` newest first, ties by ID ascending, then as they came (a stable order).

    A long list is ordered by the C extension with the GIL released, its keys gathered in
    Python (docs/architecture.md §4, "No long hold of the GIL"). Without the extension: one
    sort by time, and only if two times tie, the slower sorts by ID then time.
    """
    if _WIRE is not None and len(items) >= ORDER_IN_C_FROM:
        order = _WIRE.newest_first([item.created_at for item in items], [item.id for item in items])
        return [items[position] for position in order]
    ordered = sorted(items, key=_BY_CREATED, reverse=True)  # reverse=True keeps it stable
    if len(set(map(_BY_CREATED, ordered))) < len(ordered):
        ordered.sort(key=_BY_ID)
        ordered.sort(key=_BY_CREATED, reverse=True)
    return ordered


def _place_sandboxes(kept: list[_KeptSandbox], groups: dict[str, _Group]) -> None:
    """Each kept sandbox into its pod, in one total order (cheaper than sorting pod by pod);
    a pod's labels are its newest sandbox's."""
    _newest_first(kept)
    for item in kept:
        group = groups[item.uid]
        if not group.sandboxes:
            group.labels = item.labels
        group.sandboxes.append(item.item)


def _place_containers(kept: list[_KeptContainer], groups: dict[str, _Group]) -> None:
    """Each kept container into its pod, in one total order."""
    _newest_first(kept)
    for item in kept:
        groups[item.uid].containers.append(item.item)


def _no_network(sandbox_id: str) -> SandboxNetwork | None:
    return None


_RUNNING = ContainerState.RUNNING


def _pod_network(
    sandboxes: tuple[Container, ...], network: Callable[[str], SandboxNetwork | None]
) -> tuple[tuple[str, ...], bool]:
    """The IPs and host-network flag of the newest READY sandbox (sandboxes newest first)."""
    for sandbox in sandboxes:
        if sandbox.state is _RUNNING:
            found = network(sandbox.id.id)
            return ((), False) if found is None else found
    return (), False


def _pods(
    groups: dict[str, _Group],
    known: Mapping[str, Pod],
    network: Callable[[str], SandboxNetwork | None],
) -> list[Pod]:
    """One Pod per group: the previous listing's Pod object where nothing in it changed
    (items reused from the memo compare by identity, so that check is cheap)."""
    pods: list[Pod] = []
    for uid, group in groups.items():
        sandboxes = tuple(group.sandboxes)
        containers = tuple(group.containers)
        ips, host_network = _pod_network(sandboxes, network)
        pod = known.get(uid)
        if pod is None or not _unchanged(pod, group, sandboxes, containers, (ips, host_network)):
            # Labels are sorted pairs by construction, IPs canonical: handed over as they are.
            pod = with_sorted_labels(
                Pod(
                    id=uid,
                    name=group.name,
                    namespace=group.namespace,
                    created_at=group.created_at,
                    containers=containers,
                    sandboxes=sandboxes,
                ),
                group.labels,
            )
            if ips or host_network:
                msgspec.structs.force_setattr(pod, "ips", ips)
                msgspec.structs.force_setattr(pod, "host_network", host_network)
        pods.append(pod)
    return pods


def _unchanged(
    pod: Pod,
    group: _Group,
    sandboxes: tuple[Container, ...],
    containers: tuple[Container, ...],
    network: tuple[tuple[str, ...], bool],
) -> bool:
    """Whether ``pod`` is what ``group`` (with ``network``) would make."""
    return (
        pod.created_at == group.created_at
        and pod.ips == network[0]
        and pod.host_network == network[1]
        and pod.containers == containers
        and pod.sandboxes == sandboxes
        and pod.name == group.name
        and pod.namespace == group.namespace
        and pod.labels == group.labels
    )


def _newest_pods_first(pods: list[Pod]) -> tuple[Pod, ...]:
    """Pods newest first, ties by pod ID ascending (see ``_ordered``)."""
    return tuple(_ordered(pods))
