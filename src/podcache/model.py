"""The pod model: what the kubelet's ``pkg/kubelet/container/runtime.go`` holds, immutable.

Values only, no I/O. Every type is a frozen ``msgspec.Struct`` (cheap to build, compared by
value, hashable, JSON-encodable as is). Sequences are stored as tuples, so nothing reachable
from a snapshot can be mutated and equality never depends on list-versus-tuple.

``PodList`` is the snapshot type: an immutable sequence of pods whose lookup indexes (by UID,
by full name, by container or sandbox ID, by ID prefix) are built once, on first use, and then
answer in O(1) (O(log n) for a prefix). Its ``revision`` numbers the cache's snapshots by
content (see ``PodList.revision``).
"""

from __future__ import annotations

import bisect
import enum
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast, overload

import msgspec

from podcache.errors import AmbiguousContainerIDError
from podcache.ipaddr import normalise_ip

__all__ = [
    "MAX_ID_LENGTH",
    "AmbiguousContainerIDError",
    "Container",
    "ContainerEvent",
    "ContainerEventType",
    "ContainerID",
    "ContainerState",
    "Pod",
    "PodList",
    "carry_tables",
    "derive",
    "ids_with_prefix",
    "normalise_ip",
    "pod_at_ip",
    "pods_by_uid",
    "with_revision",
]

MIN_PREFIX = 4
"""Shortest container-ID prefix ``PodList.by_container_id`` accepts (crictl's habit)."""


_MAX_CHAR = chr(0x10FFFF)
_set = object.__setattr__


class ContainerState(enum.StrEnum):
    """A container's state as the kubelet's list model knows it."""

    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


class ContainerID(msgspec.Struct, frozen=True, gc=False):
    """A runtime-qualified container ID: the runtime's name (``type``) and the bare ID the
    runtime and crictl show (``id``, also named ``bare``).

    Where a string is expected it is its bare ID: ``str()`` and f-strings give the bare ID (as
    crictl and log lines show it), it compares equal to a ``str`` holding the bare ID, and
    hashes as that string (a dict keyed by bare IDs finds it). Two ContainerIDs are equal when
    both parts are. ``qualified`` is the kubelet's ``type://id`` (``containerd://3f2a...``),
    the form ``parse`` reads and the JSON views print.
    """

    type: str
    id: str

    @property
    def bare(self) -> str:
        """The bare ID, as the runtime and crictl show it (the ``id`` field)."""
        return self.id

    @property
    def qualified(self) -> str:
        """The kubelet's ``type://id`` form (``containerd://3f2a...``)."""
        return f"{self.type}://{self.id}"

    def __str__(self) -> str:
        return self.id

    def __eq__(self, other: object) -> bool:
        if type(other) is str:
            return self.id == other
        if isinstance(other, ContainerID):
            return self.id == other.id and self.type == other.type
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self.id)  # equal to a str holding the bare ID: the same hash

    @classmethod
    def parse(cls, text: str) -> ContainerID:
        """Parse ``type://id``; a missing separator or an empty part is a ValueError."""
        if not isinstance(text, str):
            raise TypeError(f"container ID must be a str, not {type(text).__name__}")
        runtime, sep, ident = text.partition("://")
        if not sep:
            raise ValueError(f"malformed container ID {text!r}: expected 'type://id'")
        if not runtime or not ident:
            raise ValueError(
                f"malformed container ID {text!r}: {'type' if not runtime else 'id'} part is empty"
            )
        if "://" in ident:
            raise ValueError(f"malformed container ID {text!r}: more than one '://'")
        return cls(runtime, ident)


class Container(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A container (or a sandbox, in ``Pod.sandboxes``) as the kubelet lists it, and its
    ``attempt``."""

    id: ContainerID
    sandbox_id: str = ""
    """The bare ID of the sandbox this container ran in (the runtime's ``pod_sandbox_id``; crictl
    shows it as POD ID): an old attempt's may be an older sandbox than the pod's newest. ""
    for a sandbox, and when the runtime did not say. A podcache addition."""
    name: str = ""
    image: str = ""
    image_id: str = ""
    image_ref: str = ""
    image_runtime_handler: str = ""
    hash: int = 0
    state: ContainerState = ContainerState.UNKNOWN
    attempt: int = 0
    """The CRI metadata's ``attempt`` (crictl's ATTEMPT column): for a container, how many
    times the kubelet created it before in this sandbox (its restart count); for a sandbox,
    how many sandboxes the pod had before it. A podcache addition: the kubelet's list model
    does not keep it."""


def _as_tuple(value: Iterable[Container]) -> tuple[Container, ...]:
    return value if type(value) is tuple else tuple(value)


_NO_LABELS: tuple[tuple[str, str], ...] = ()

Labels = Mapping[str, str] | Sequence[tuple[str, str]]
"""Pod labels as given: a mapping or ``(key, value)`` pairs; stored as pairs sorted by key."""


def _as_pairs(labels: Labels) -> tuple[tuple[str, str], ...]:
    items = labels.items() if isinstance(labels, Mapping) else labels
    return tuple(sorted((str(k), str(v)) for k, v in items))


def _as_ips(ips: Iterable[str]) -> tuple[str, ...]:
    """Each address normalised, in order, each kept once (the first time it is given)."""
    return tuple(dict.fromkeys(normalise_ip(ip) for ip in ips))


class Pod(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A pod: its UID, name, namespace, creation time (ns) and its containers and sandboxes.

    ``labels`` (a podcache addition, not in the kubelet's list model) are the pod's own labels
    as its newest sandbox carries them, without the kubelet's ``io.kubernetes.pod.*`` keys;
    stored as ``(key, value)`` pairs sorted by key so the pod stays immutable and hashable.

    ``ips`` (a podcache addition) are the IP addresses of the pod's newest READY sandbox, as
    its ``PodSandboxStatus`` reports them: the primary first, then the additional ones, each
    in ``normalise_ip``'s canonical text, each once; empty when the runtime has not said (or
    for a host-network pod, which has no IPs of its own). ``host_network``: the sandbox shares
    the node's network namespace (``NamespaceOption.network == NODE``).
    """

    id: str
    name: str = ""
    namespace: str = ""
    created_at: int = 0
    containers: Sequence[Container] = ()
    sandboxes: Sequence[Container] = ()
    labels: Labels = _NO_LABELS
    ips: Sequence[str] = ()
    host_network: bool = False

    def __post_init__(self) -> None:
        # Lists (or any iterable) become tuples: the snapshot stays immutable all the way down.
        if type(self.containers) is not tuple:
            msgspec.structs.force_setattr(self, "containers", _as_tuple(self.containers))
        if type(self.sandboxes) is not tuple:
            msgspec.structs.force_setattr(self, "sandboxes", _as_tuple(self.sandboxes))
        labels = self.labels
        if labels is not _NO_LABELS and (type(labels) is not tuple or not _sorted_pairs(labels)):
            msgspec.structs.force_setattr(self, "labels", _as_pairs(self.labels))
        ips = self.ips
        if ips:
            normal = _as_ips(ips)
            if ips != normal or type(ips) is not tuple:
                msgspec.structs.force_setattr(self, "ips", normal)
        elif type(ips) is not tuple:
            msgspec.structs.force_setattr(self, "ips", ())

    def label(self, key: str) -> str | None:
        """The value of label ``key``, None when the pod has no such label."""
        for k, v in cast(tuple[tuple[str, str], ...], self.labels):
            if k == key:
                return v
        return None

    def label_map(self) -> dict[str, str]:
        """The labels as a new dict."""
        return dict(cast(tuple[tuple[str, str], ...], self.labels))

    @property
    def full_name(self) -> str:
        """``name_namespace``, the kubelet's unique pod name (``_`` is illegal in both parts)."""
        return f"{self.name}_{self.namespace}"

    def find_container_by_name(self, name: str) -> Container | None:
        """The first container (not sandbox) with this name, like the kubelet."""
        for container in self.containers:
            if container.name == name:
                return container
        return None

    def find_container_by_id(self, cid: ContainerID) -> Container | None:
        """The container (not sandbox) with this ID, like the kubelet."""
        for container in self.containers:
            if container.id == cid:
                return container
        return None


def _sorted_pairs(labels: object) -> bool:
    """True for a tuple of (str, str) tuples already sorted by key (the stored form)."""
    pairs = labels if isinstance(labels, tuple) else ()
    return all(
        type(p) is tuple and len(p) == 2 and type(p[0]) is str and type(p[1]) is str for p in pairs
    ) and all(pairs[i][0] <= pairs[i + 1][0] for i in range(len(pairs) - 1))


def with_sorted_labels(pod: Pod, labels: tuple[tuple[str, str], ...]) -> Pod:
    """Give ``pod`` (built without labels) ``labels`` that are already sorted ``(k, v)`` pairs.

    For runtime getters building thousands of pods per refresh: skips the per-pair check that
    construction does. Only for a pod no one else has seen yet.
    """
    if labels:
        msgspec.structs.force_setattr(pod, "labels", labels)
    return pod


_pod_uid = operator.attrgetter("id")


class _Index:
    """Lookup tables for one PodList, each built on its first use, then kept.

    Pods are newest first, so keeping the first entry per key keeps the newest, like the
    kubelet's first-match scans. Each table is built at most a few times under a race, always
    to the same value: no lock is needed.
    """

    __slots__ = (
        "_by_full_name",
        "_by_id",
        "_by_ip",
        "_by_uid",
        "_id_count",
        "_ip_count",
        "_pods",
        "_sorted_ids",
    )

    def __init__(self, pods: tuple[Pod, ...]) -> None:
        self._pods = pods
        self._by_uid: dict[str, Pod] | None = None
        self._by_full_name: dict[str, Pod] | None = None
        self._by_id: dict[str, Pod] | None = None
        self._by_ip: dict[str, Pod] | None = None
        self._sorted_ids: list[str] | None = None
        self._id_count = 0  # items ``by_id`` was built from (more than its keys: an ID twice)
        self._ip_count = 0  # addresses ``by_ip`` was built from (more than its keys: one twice)

    @property
    def by_uid(self) -> dict[str, Pod]:
        table = self._by_uid
        if table is None:
            # Reversed, so a later (older) duplicate is overwritten: the newest wins. Built by
            # zip and map: no Python-level loop.
            pods = self._pods
            uids = map(_pod_uid, reversed(pods))
            table = self._by_uid = dict(zip(uids, reversed(pods), strict=True))
        return table

    @property
    def by_full_name(self) -> dict[str, Pod]:
        table = self._by_full_name
        if table is None:
            table = {}
            for pod in reversed(self._pods):
                table[f"{pod.name}_{pod.namespace}"] = pod
            self._by_full_name = table
        return table

    @property
    def by_id(self) -> dict[str, Pod]:
        """Container or sandbox ID -> its pod (the item itself is found in the pod by
        ``find``: a table of pods, not of pairs, is one allocation less per item)."""
        table = self._by_id
        if table is None:
            table = {}
            count = 0
            for pod in reversed(self._pods):
                for item in pod.sandboxes:
                    table[item.id.id] = pod
                for item in pod.containers:
                    table[item.id.id] = pod
                count += len(pod.sandboxes) + len(pod.containers)
            self._id_count = count
            self._by_id = table
        return table

    @property
    def by_ip(self) -> dict[str, Pod]:
        """Canonical IP -> the newest pod holding it, host-network pods left out."""
        table = self._by_ip
        if table is None:
            table = {}
            count = 0
            for pod in reversed(self._pods):
                if not pod.host_network:
                    count += len(pod.ips)
                    for ip in pod.ips:
                        table[ip] = pod
            # A pod's own IPs are distinct: fewer keys than that count is an address held twice
            # (a reused one while its old holder is still listed).
            self._ip_count = count
            self._by_ip = table
        return table

    def find(self, ident: str) -> tuple[Pod, Container] | None:
        """The pod and item of an exact bare ID: the pod's first container with it, else its
        first sandbox (what a scan in the kubelet's order meets first)."""
        pod = self.by_id.get(ident)
        if pod is None:
            return None
        for item in pod.containers:
            if item.id.id == ident:
                return pod, item
        for item in pod.sandboxes:
            if item.id.id == ident:
                return pod, item
        raise AssertionError(f"index out of step with pod {pod.id}")  # pragma: no cover

    @property
    def sorted_ids(self) -> list[str]:
        ids = self._sorted_ids
        if ids is None:
            ids = self._sorted_ids = sorted(self.by_id)
        return ids


class PodList(Sequence[Pod]):
    """An immutable snapshot of pods with O(1) lookups (indexes built on first lookup).

    ``revision`` is the cache's number for the snapshot's content: equal pods, equal revision
    (equality and hashing ignore it: they compare the pods).
    """

    __slots__ = ("_index", "_pods", "_revision")

    _pods: tuple[Pod, ...]
    _index: _Index | None
    _revision: int | None

    def __init__(self, pods: Iterable[Pod] = (), *, revision: int | None = None) -> None:
        _set(self, "_pods", pods if type(pods) is tuple else tuple(pods))
        _set(self, "_index", None)
        _set(self, "_revision", revision)

    @property
    def revision(self) -> int:
        """The revision of this snapshot: it increases by one each time a cache's refresh
        yields pods that differ (by UID and value) from its previous snapshot's, and stays
        the same when they are equal. 0 for a PodList no cache has published."""
        revision = self._revision
        return 0 if revision is None else revision

    # -- Sequence ---------------------------------------------------------------------------
    @overload
    def __getitem__(self, index: int) -> Pod: ...
    @overload
    def __getitem__(self, index: slice) -> PodList: ...
    def __getitem__(self, index: int | slice) -> Pod | PodList:
        if isinstance(index, slice):
            return PodList(self._pods[index])
        return self._pods[index]

    def __len__(self) -> int:
        return len(self._pods)

    def __iter__(self) -> Iterator[Pod]:
        return iter(self._pods)

    def __contains__(self, value: object) -> bool:
        return value in self._pods

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PodList):
            return self._pods == other._pods
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._pods)

    def __repr__(self) -> str:
        return f"PodList({list(self._pods)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._pods, self._revision))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"PodList is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"PodList is immutable: cannot delete {name!r}")

    @property
    def pods(self) -> tuple[Pod, ...]:
        """The pods as a tuple (newest first when built by a runtime getter)."""
        return self._pods

    # -- lookups ----------------------------------------------------------------------------
    def _idx(self) -> _Index:
        index = self._index
        if index is None:
            # Built at most a few times under a race, always to the same value: no lock needed.
            index = _Index(self._pods)
            _set(self, "_index", index)
        return index

    def by_uid(self, uid: str) -> Pod | None:
        """The pod with this UID (the first, i.e. newest, if several share it)."""
        return self._idx().by_uid.get(uid)

    def by_full_name(self, full_name: str) -> Pod | None:
        """The pod named ``name_namespace``; the newest wins, like the kubelet."""
        return self._idx().by_full_name.get(full_name)

    def by_exact_id(self, ident: str) -> tuple[Pod, Container] | None:
        """The pod and container (or sandbox) with exactly this bare ID; no prefix matching."""
        return self._idx().find(ident)

    def by_ip(self, ip: str) -> Pod | None:
        """The pod holding IP address ``ip`` now (the newest, should two claim it), host-network
        pods skipped (they have no IPs of their own). Any spelling of the address is accepted
        (``normalise_ip``: ``2001:DB8::0:1`` finds ``2001:db8::1``); one that is not an IP
        address is a ValueError naming it."""
        table = self._idx().by_ip
        pod = table.get(ip)
        if pod is not None:
            return pod
        return table.get(normalise_ip(ip))

    def by_container_id(self, id_or_prefix: str) -> tuple[Pod, Container] | None:
        """The pod and container (or sandbox) for a full ``type://id``, a bare ID or a prefix.

        A full ID must match both type and id. A bare ID that matches exactly wins; otherwise
        it is taken as a prefix of at least ``MIN_PREFIX`` characters (shorter: ValueError).
        None when nothing matches; AmbiguousContainerIDError (a LookupError) when a prefix
        matches several.
        """
        index = self._idx()
        if "://" in id_or_prefix:
            cid = ContainerID.parse(id_or_prefix)
            found = index.find(cid.id)
            if found is None or found[1].id.type != cid.type:
                return None
            return found
        found = index.find(id_or_prefix)
        if found is not None:
            return found
        if len(id_or_prefix) < MIN_PREFIX:
            raise ValueError(
                f"container ID prefix {id_or_prefix!r} is too short: "
                f"give at least {MIN_PREFIX} characters"
            )
        matches = ids_with_prefix(self, id_or_prefix)
        if not matches:
            return None
        if len(matches) > 1:
            raise AmbiguousContainerIDError(id_or_prefix, matches)
        return index.find(matches[0])


# -- container events (CRI GetContainerEvents; a hint, never data: docs/architecture.md §7) ----

MAX_ID_LENGTH = 256
"""Longest container or sandbox ID an event may carry (containerd's are 64 hex digits)."""


class ContainerEventType(enum.StrEnum):
    """What happened: the CRI ``ContainerEventType`` values, in lower case."""

    CREATED = "created"
    STARTED = "started"
    STOPPED = "stopped"
    DELETED = "deleted"


class ContainerEvent(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One change the runtime reported.

    ``container_id``: the container's bare ID, or the sandbox's for a sandbox event (as
    containerd reports them). ``pod_sandbox_id``: the sandbox it belongs to ("" when the runtime
    sent no sandbox status). ``created_at``: when the runtime made the event, in nanoseconds
    since the epoch. ``pod_uid``: the pod's UID from the sandbox status's metadata ("" when the
    runtime sent none; containerd 1.7 and 2.x send it on every event).
    """

    type: ContainerEventType
    container_id: str
    pod_sandbox_id: str = ""
    created_at: int = 0
    pod_uid: str = ""
    pod: Pod | None = None
    """The pod as the event's sandbox status and container statuses describe it
    (``cri.eventpod``; None without a UID): what the cache remembers of it even when no
    listing sees it (docs/architecture.md §7, "Events are facts")."""


def _ids(pod: Pod) -> list[str]:
    return [item.id.id for item in (*pod.sandboxes, *pod.containers)]


def _held_ips(pod: Pod) -> list[str]:
    """The keys a pod has in the by_ip table (none on the host network)."""
    return [] if pod.host_network else list(pod.ips)


def _swap(
    table: dict[str, Pod] | None,
    old: dict[str, Pod] | None,
    new: dict[str, Pod] | None,
    keys: int,
) -> dict[str, Pod] | None:
    """``table`` with the keys of ``old`` (which must map to their pod) replaced by ``new``'s
    (which must be free, or held by a pod replaced); None when either does not hold, when
    ``old`` or ``new`` is None (a key claimed by two of the changed pods), or when ``table``
    has fewer entries than the ``keys`` it was built from (a key held twice: removing one
    holder could not reveal the other). None: built again on first use."""
    if table is None or old is None or new is None or len(table) != keys:
        return None
    for key, pod in old.items():
        if table.get(key) is not pod:
            return None
    table = table.copy()
    for key in old:
        del table[key]
    for key in new:
        if key in table:
            return None
    table.update(new)
    return table


def _keys(pods: Sequence[Pod], key: Callable[[Pod], list[str]]) -> dict[str, Pod] | None:
    """Each key of ``pods`` -> its pod; None when two of them claim one key (which one the
    table keeps is then the order's: left to a rebuild)."""
    table: dict[str, Pod] = {}
    for pod in pods:
        for each in key(pod):
            if table.setdefault(each, pod) is not pod:
                return None
    return table


def _uid(pod: Pod) -> list[str]:
    return [pod.id]


def _full_name(pod: Pod) -> list[str]:
    return [f"{pod.name}_{pod.namespace}"]


SORTED_CARRY = 64
"""Most IDs a carry moves in the sorted IDs (each an insertion into a list: O(n) pointer moves);
past it the list is sorted again on first use (O(n log n), in C)."""


def _carried(
    before: PodList, index: _Index, items: tuple[Pod, ...], gone: Sequence[Pod], came: Sequence[Pod]
) -> _Index:
    """The tables of ``items``: ``index``'s (``before``'s), with the keys of the pods that
    left (``gone``) and arrived (``came``) changed. Each table is a copy (C speed, no pod
    read) or None (built on first use) when it was not built or a change cannot be made
    exactly (rule of ``_swap``)."""
    new = _Index(items)
    pods_before = len(before.pods)
    new._by_uid = _swap(index._by_uid, _keys(gone, _uid), _keys(came, _uid), pods_before)
    new._by_full_name = _swap(
        index._by_full_name, _keys(gone, _full_name), _keys(came, _full_name), pods_before
    )
    ids_gone, ids_came = _counted(gone, _ids), _counted(came, _ids)
    new._by_id = _swap(index._by_id, _keys(gone, _ids), _keys(came, _ids), index._id_count)
    new._id_count = index._id_count - ids_gone + ids_came
    new._by_ip = _swap(
        index._by_ip, _keys(gone, _held_ips), _keys(came, _held_ips), index._ip_count
    )
    new._ip_count = index._ip_count - _counted(gone, _held_ips) + _counted(came, _held_ips)
    if (
        new._by_id is not None
        and index._sorted_ids is not None
        and ids_gone + ids_came <= SORTED_CARRY
    ):
        ids = index._sorted_ids.copy()
        for pod in gone:
            for key in _ids(pod):
                del ids[bisect.bisect_left(ids, key)]
        for pod in came:
            for key in _ids(pod):
                bisect.insort(ids, key)
        new._sorted_ids = ids
    return new


def _counted(pods: Sequence[Pod], key: Callable[[Pod], list[str]]) -> int:
    return sum(len(key(pod)) for pod in pods)


def derive(pods: PodList, items: tuple[Pod, ...], was: Pod | None, pod: Pod | None) -> PodList:
    """A PodList of ``items``: ``pods``'s with ``was`` replaced by ``pod`` (either None). The
    tables ``pods`` already built are carried over with that one pod's keys changed: a copy of
    each table (C speed, no pod read) instead of a rebuild that reads every pod."""
    derived = PodList(items)
    index = pods._index
    if index is not None:
        gone, came = [] if was is None else [was], [] if pod is None else [pod]
        _set(derived, "_index", _carried(pods, index, items, gone, came))
    return derived


def carry_tables(before: PodList, after: PodList, gone: Sequence[Pod], came: Sequence[Pod]) -> None:
    """Give ``after`` (a new snapshot no one has read yet) the tables ``before`` built,
    changed by the pods that left and arrived between them (``gone``, ``came``: by identity,
    as ``cache.changes.moved`` finds them), so its first lookup by ID, UID, name or IP reads
    no pod. A table ``before`` did not build, or one the changes cannot be applied to
    exactly, is built on first use as before."""
    index = before._index
    if index is None or after._index is not None:
        return
    _set(after, "_index", _carried(before, index, after.pods, gone, came))


def _rebuild(pods: tuple[Pod, ...], revision: int | None) -> PodList:
    return PodList(pods, revision=revision)


def pod_at_ip(pods: PodList, canonical: str) -> Pod | None:
    """``pods.by_ip`` for an address already in ``normalise_ip``'s text: one dict lookup, no
    parse on a miss (a lookup of a departed pod's IP misses the snapshot)."""
    return pods._idx().by_ip.get(canonical)


def ids_with_prefix(pods: PodList, prefix: str) -> list[str]:
    """The bare container and sandbox IDs of ``pods`` that start with ``prefix``, in order:
    two bisections of the snapshot's sorted IDs (built once per snapshot, as
    ``by_container_id``'s), then a slice of the matches."""
    ids = pods._idx().sorted_ids
    start = bisect.bisect_left(ids, prefix)
    end = bisect.bisect_left(ids, prefix + _MAX_CHAR, lo=start)
    return ids[start:end]


def pods_by_uid(pods: PodList) -> Mapping[str, Pod]:
    """The snapshot's pods by UID (the newest of several with one UID), from its index: built
    once per snapshot and shared with ``by_uid``. Read-only by convention: do not mutate."""
    return pods._idx().by_uid


def with_revision(pods: PodList, revision: int) -> PodList:
    """``pods`` numbered ``revision``: the same object when it has no revision yet (a cache
    numbers a getter's fresh answer before anyone else sees it) or already has this one, else
    a new PodList sharing its pods and index."""
    current = pods._revision
    if current is None:
        _set(pods, "_revision", revision)
        return pods
    if current == revision:
        return pods
    copy = PodList(pods._pods, revision=revision)
    _set(copy, "_index", pods._index)
    return copy
