"""The listed items' wire bytes, as the runtime sent them, keyed by (ID, state); no filtering.

The store the CRI socket's list answers are joined from (docs/architecture.md §10). Rules:

1. The store keys an item's bytes by ``(id, ContainerState)`` (the state as the snapshot's
   ``Container`` holds it): any listing may teach it (full, one pod's, one ID's; one the
   cache later drops; each message of a streamed one), the bytes of a key being the same
   whoever listed them.
2. Learning costs O(items listed) dictionary look-ups, in the getter's converter thread (never
   on the event loop); only an item not seen before is copied and decoded (protobuf, for its
   labels and its sandbox ID, which the socket's filters need). A steady node decodes nothing.
3. Bounded: ``prune(pods)`` (called at each publish of the cache that the socket reads)
   keeps only the snapshot's items once the store holds more than twice what the last prune
   kept plus ``SLACK``; between publishes it grows only by listings, each followed by a
   publish.
4. An answer that lacks an item's bytes (pruned under a listing in flight: a race, or an
   item a reader skipped) is never made up: ``get`` returns None and the socket forwards
   that request to the runtime.

Deliberately not here: which items a request selects (``serve.crisock.lists``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from podcache.cri.convert import container_state, item_ends, sandbox_state
from podcache.cri.proto import api_pb2 as pb
from podcache.model import ContainerState, PodList

__all__ = ["SLACK", "WireItem", "WireItems"]

SLACK = 1024
"""Items the store may hold beyond twice the snapshot's before ``prune`` drops the gone ones."""


class WireItem(NamedTuple):
    """One listed item: its field-1 entry of the list answer (tag, length, message) as the
    runtime sent it, and what the socket's filters read."""

    entry: bytes
    state: int
    """The CRI state number (``PodSandboxState`` or ``ContainerState``)."""
    labels: Mapping[str, str]
    pod_sandbox_id: str
    """A container's sandbox ID ("" for a sandbox)."""


_Key = tuple[str, ContainerState]
_KINDS = {
    "ListPodSandbox": 0,
    "ListContainers": 1,
    # KEP-5825: each message of a streamed answer holds whole items in field 1, as the unary's
    "StreamPodSandboxes": 0,
    "StreamContainers": 1,
}


def _body_start(data: memoryview, start: int) -> int:
    """Where an item's message starts: after its tag byte and its length varint."""
    position = start + 1
    while data[position] & 0x80:
        position += 1
    return position + 1


def _decoded(kind: int, entry: bytes, body: bytes) -> WireItem:
    if kind == 0:
        sandbox = pb.PodSandbox.FromString(body)
        return WireItem(entry, sandbox.state, dict(sandbox.labels), "")
    container = pb.Container.FromString(body)
    return WireItem(entry, container.state, dict(container.labels), container.pod_sandbox_id)


class WireItems:
    """The bytes of every item the getter listed lately (see the module's rules).

    ``learn`` runs in the getter's converter thread, ``get`` in the socket's threads,
    ``prune`` on the event loop: a lock is held only to add new items and to swap the tables.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: tuple[dict[_Key, WireItem], dict[_Key, WireItem]] = ({}, {})
        self._kept = 0  # items the last prune kept: the bound's base (rule 3)

    def __len__(self) -> int:
        return len(self._tables[0]) + len(self._tables[1])

    def learn(self, method: str, data: bytes, rows: Sequence[Any]) -> None:
        """Keep the items of one list answer (``data``) that are new; ``rows`` are the items as
        the getter's reader read them, in order (one per item, each with ``id`` and ``state``).
        An answer whose items do not line up with the rows teaches nothing."""
        kind = _KINDS.get(method)
        ends = item_ends(data) if kind is not None else None
        if kind is None or ends is None or len(ends) != len(rows):
            return
        state_of = sandbox_state if kind == 0 else container_state
        table = self._tables[kind]
        view = memoryview(data)
        start = 0
        for end, row in zip(ends, rows, strict=True):
            key = (row.id, state_of(row.state))
            if key not in table:
                entry = bytes(view[start:end])
                item = _decoded(kind, entry, entry[_body_start(view, start) - start :])
                with self._lock:
                    table = self._tables[kind]
                    table[key] = item
            start = end

    def get(self, kind: int, ident: str, state: ContainerState) -> WireItem | None:
        """The item ``ident`` in ``state`` (``kind`` 0: a sandbox, 1: a container), else None."""
        return self._tables[kind].get((ident, state))

    def prune(self, pods: PodList) -> None:
        """Past the bound (rule 3): keep only the items ``pods`` holds. O(1) but when it runs,
        then O(items), which is after at least ``SLACK`` more items were learned than the
        last prune kept (amortised O(1) per item learned)."""
        if len(self) <= 2 * self._kept + SLACK:
            return
        with self._lock:
            old_sandboxes, old_containers = self._tables
            kept_sandboxes: dict[_Key, WireItem] = {}
            kept_containers: dict[_Key, WireItem] = {}
            for pod in pods:
                for item in pod.sandboxes:
                    key = (item.id.id, item.state)
                    if key in old_sandboxes:
                        kept_sandboxes[key] = old_sandboxes[key]
                for item in pod.containers:
                    key = (item.id.id, item.state)
                    if key in old_containers:
                        kept_containers[key] = old_containers[key]
            self._tables = (kept_sandboxes, kept_containers)
            self._kept = len(kept_sandboxes) + len(kept_containers)
