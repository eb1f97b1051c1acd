"""ListPodSandbox and ListContainers answered from a snapshot and the items' wire bytes; pure
(docs/architecture.md §10 rule 3: the join, the filters, the costs).

An ID filter's prefix that is ambiguous or unknown selects nothing, as containerd's truncindex;
a container filter's ``pod_sandbox_id`` is resolved among the sandboxes the same way. Items are
found in the pod the snapshot groups them in: sandboxes by their metadata UID, containers by
their pod UID label (the kubelet's grouping), which is the pod their sandbox belongs to on
every runtime the kubelet drives. ``None`` instead of bytes: a selected item's bytes are not
in the store; the caller forwards the request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from podcache.cri.convert import POD_UID_LABEL
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.wireitems import WireItem, WireItems
from podcache.model import Container, ContainerState, Pod, PodList, ids_with_prefix

__all__ = [
    "ANSWER_MEMO",
    "ANSWER_MEMO_BYTES",
    "AnswerMemo",
    "containers_answer",
    "listed_state",
    "normal_form",
    "sandboxes_answer",
]

SANDBOX, CONTAINER = 0, 1


def _items_of(pod: Pod, kind: int) -> Iterable[Container]:
    return pod.sandboxes if kind == SANDBOX else pod.containers


def _resolve(pods: PodList, kind: int, wanted: str) -> tuple[Pod, Container] | None:
    """The item of ``kind`` an ID filter names: exact, else a unique prefix among that kind's
    IDs (matches of the other kind passed over by one ID-table look-up each; an ID naming
    items of both kinds counts as the kind the table holds it as)."""
    pod = _pod_holding(pods, kind, wanted)
    if pod is not None:
        return pod, _item_of(pod, kind, wanted)
    found: tuple[Pod, str] | None = None
    for ident in ids_with_prefix(pods, wanted):
        holder = _held_as(pods, kind, ident)
        if holder is None:
            continue
        if found is not None:
            return None  # ambiguous
        found = (holder, ident)
    return None if found is None else (found[0], _item_of(found[0], kind, found[1]))


def _item_of(pod: Pod, kind: int, ident: str) -> Container:
    return next(i for i in _items_of(pod, kind) if i.id.id == ident)


def _held_as(pods: PodList, kind: int, ident: str) -> Pod | None:
    """The pod the ID table gives ``ident``, if it holds it as an item of ``kind``."""
    found = pods.by_exact_id(ident)
    if found is not None and any(i.id.id == ident for i in _items_of(found[0], kind)):
        return found[0]
    return None


def _pod_holding(pods: PodList, kind: int, ident: str) -> Pod | None:
    held = _held_as(pods, kind, ident)
    if held is not None or pods.by_exact_id(ident) is None:
        return held
    # The ID names an item of the other kind first (never on a real runtime): look deeper.
    for pod in pods:
        if any(i.id.id == ident for i in _items_of(pod, kind)):
            return pod
    return None


_LISTED_STATES = (
    {ContainerState.RUNNING: 0, ContainerState.EXITED: 1},
    {
        ContainerState.CREATED: 0,
        ContainerState.RUNNING: 1,
        ContainerState.EXITED: 2,
        ContainerState.UNKNOWN: 3,
    },
)
"""An item's state in the list model as the CRI's, by kind: a sandbox's ``PodSandboxState``
(READY, NOTREADY), a container's ``ContainerState``."""


def listed_state(pods: PodList, sandbox: bool, ident: str) -> int | None:
    """The CRI state the snapshot lists for the sandbox (else container) ``ident`` (a whole
    ID), or None when it lists no such item; O(1) by the snapshot's ID table."""
    kind = SANDBOX if sandbox else CONTAINER
    pod = _held_as(pods, kind, ident)
    if pod is None:
        return None
    return _LISTED_STATES[kind].get(_item_of(pod, kind, ident).state)


def _candidates(
    pods: PodList, kind: int, wanted_id: str, selector: Mapping[str, str]
) -> Iterable[Container]:
    """The items a filter can select at all, found through the cheapest table."""
    if wanted_id:
        found = _resolve(pods, kind, wanted_id)
        return () if found is None else (found[1],)
    uid = selector.get(POD_UID_LABEL)
    if uid is not None:
        pod = pods.by_uid(uid)
        return () if pod is None else _items_of(pod, kind)
    return (item for pod in pods for item in _items_of(pod, kind))


def _selected(  # noqa: PLR0917 -- one filter's parts, each named at every call
    items: WireItems,
    kind: int,
    candidates: Iterable[Container],
    state: int | None,
    selector: Mapping[str, str],
    sandbox_id: str = "",
) -> bytes | None:
    parts: list[bytes] = []
    for candidate in candidates:
        item: WireItem | None = items.get(kind, candidate.id.id, candidate.state)
        if item is None:
            return None
        if state is not None and item.state != state:
            continue
        if sandbox_id and item.pod_sandbox_id != sandbox_id:
            continue
        labels = item.labels
        if selector and any(labels.get(k) != v for k, v in selector.items()):
            continue
        parts.append(item.entry)
    return b"".join(parts)


def sandboxes_answer(pods: PodList, items: WireItems, f: pb.PodSandboxFilter) -> bytes | None:
    """The ListPodSandboxResponse bytes for filter ``f`` (None: forward it, see above)."""
    selector = dict(f.label_selector)
    state = int(f.state.state) if f.HasField("state") else None
    return _selected(items, SANDBOX, _candidates(pods, SANDBOX, f.id, selector), state, selector)


def containers_answer(pods: PodList, items: WireItems, f: pb.ContainerFilter) -> bytes | None:
    """The ListContainersResponse bytes for filter ``f`` (None: forward it, see above)."""
    selector = dict(f.label_selector)
    state = int(f.state.state) if f.HasField("state") else None
    sandbox_id = ""
    if f.pod_sandbox_id:
        sandbox = _resolve(pods, SANDBOX, f.pod_sandbox_id)
        if sandbox is None:
            return b""
        sandbox_id = sandbox[1].id.id
        if not f.id:  # the sandbox's pod holds its containers (see above)
            candidates: Iterable[Container] = sandbox[0].containers
            return _selected(items, CONTAINER, candidates, state, selector, sandbox_id)
    candidates = _candidates(pods, CONTAINER, f.id, selector)
    return _selected(items, CONTAINER, candidates, state, selector, sandbox_id)


ANSWER_MEMO = 256
"""Distinct list answers kept per snapshot, and request spellings that lead to them."""
ANSWER_MEMO_BYTES = 64 * 1024 * 1024
"""The bytes of the distinct answers kept per snapshot, at most."""


class AnswerMemo:
    """The answers given for one snapshot (``pods``), by the request's bytes as sent and by
    its ``normal_form`` (§10 rule 3). At most ``ANSWER_MEMO`` of each, the latter within
    ``ANSWER_MEMO_BYTES``; past a bound nothing new is kept (the answer is built for that
    call only)."""

    __slots__ = ("_by_form", "_by_sent", "_held_bytes", "pods")

    def __init__(self, pods: PodList | None) -> None:
        self.pods = pods
        self._by_sent: dict[tuple[str, bytes], bytes] = {}
        self._by_form: dict[tuple[str, bytes], bytes] = {}
        self._held_bytes = 0

    def sent(self, path: str, request: bytes) -> bytes | None:
        return self._by_sent.get((path, request))

    def formed(self, path: str, form: bytes) -> bytes | None:
        return self._by_form.get((path, form))

    def keep(self, path: str, request: bytes, form: bytes, answer: bytes) -> None:
        """Keep ``answer`` under both keys, within the bounds."""
        if (path, form) not in self._by_form and (
            len(self._by_form) < ANSWER_MEMO and self._held_bytes + len(answer) <= ANSWER_MEMO_BYTES
        ):
            self._by_form[(path, form)] = answer
            self._held_bytes += len(answer)
        if len(self._by_sent) < ANSWER_MEMO:
            self._by_sent[(path, request)] = answer  # the same bytes object: no copy


def normal_form(request: pb.ListPodSandboxRequest | pb.ListContainersRequest) -> bytes:
    """The request's known fields, deterministically encoded (unknown ones dropped)."""
    request.DiscardUnknownFields()
    return request.SerializeToString(deterministic=True)
