"""What the simulated runtime was asked: calls and answer bytes per RPC, filtered or not; counts.

A benchmark that says "one pod change costs N bytes of list answers" needs the runtime's
side of the wire, not the client's guess. ``CallCounters`` is that ledger: for every RPC the
server answers, how many calls and how many bytes of answers (the serialized response, as it
leaves the servicer), split by whether the request was **filtered**:

- ``ListPodSandbox``: filtered when the filter names an ``id`` or has a ``label_selector``;
- ``ListContainers``: filtered when the filter names an ``id``, a ``pod_sandbox_id`` or has a
  ``label_selector``;
- ``StreamPodSandboxes`` and ``StreamContainers`` (KEP-5825) as their unary twins; a streamed
  call's bytes are those of all its messages, and ``stream_messages()`` counts the messages;
- a state filter alone does not narrow the listing to a pod, so such a call (the kubelet's
  ``all=False`` listing) counts as **unfiltered**: it is a full listing of the node;
- ``PodSandboxStatus`` and ``ContainerStatus`` always name one item: always filtered.

Calls answered with an error (an injected fault, NOT_FOUND) are counted with 0 bytes. Every
method is guarded by one lock; ``snapshot()`` is a consistent copy, JSON-ready. This module
does not serve, decide faults or know about pods.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["COUNTED_METHODS", "STREAMED_METHODS", "CallCounters", "is_filtered"]

COUNTED_METHODS: tuple[str, ...] = (
    "ListPodSandbox",
    "ListContainers",
    "StreamPodSandboxes",
    "StreamContainers",
    "PodSandboxStatus",
    "ContainerStatus",
)
"""The RPCs whose calls and answer bytes are counted."""

STREAMED_METHODS: tuple[str, ...] = ("StreamPodSandboxes", "StreamContainers")
"""The counted RPCs whose answers are streams of messages (``stream_messages``)."""

_KINDS = ("filtered", "unfiltered")


def is_filtered(method: str, request: Any) -> bool:
    """Whether this request narrows its answer to named items (see the module docstring)."""
    if method in ("ListPodSandbox", "StreamPodSandboxes"):
        f = request.filter
        return bool(f.id or f.label_selector)
    if method in ("ListContainers", "StreamContainers"):
        f = request.filter
        return bool(f.id or f.pod_sandbox_id or f.label_selector)
    return True


class CallCounters:
    """Calls and answer bytes per counted RPC, filtered and unfiltered; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unimplemented: dict[str, int] = {}
        self.reset()

    def record_unimplemented(self, path: str) -> None:
        """Count one call of a method the sim does not implement (by its gRPC path)."""
        with self._lock:
            self._unimplemented[path] = self._unimplemented.get(path, 0) + 1

    def unimplemented(self) -> dict[str, int]:
        """Calls of methods the sim does not implement, by gRPC path (a copy): what a client
        asked that no handler of the sim answers (it answers UNIMPLEMENTED)."""
        with self._lock:
            return dict(self._unimplemented)

    def record(self, method: str, *, filtered: bool, answer_bytes: int, messages: int = 0) -> None:
        """Count one answered call of ``method`` (ignored for RPCs that are not counted);
        ``messages``: those of a streamed answer."""
        if method not in COUNTED_METHODS:
            return
        with self._lock:
            slot = self._counts[method]["filtered" if filtered else "unfiltered"]
            slot[0] += 1
            slot[1] += answer_bytes
            if method in self._messages:
                self._messages[method] += messages

    def reset(self) -> None:
        """Set every count back to zero (the unimplemented methods' are kept)."""
        with self._lock:
            self._counts = {method: {kind: [0, 0] for kind in _KINDS} for method in COUNTED_METHODS}
            self._messages = dict.fromkeys(STREAMED_METHODS, 0)

    def stream_messages(self) -> dict[str, int]:
        """Messages sent so far per streaming list RPC (``{"StreamContainers": 12, ...}``)."""
        with self._lock:
            return dict(self._messages)

    def snapshot(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{method: {"filtered"|"unfiltered": {"calls": n, "bytes": b}}}``, a copy."""
        with self._lock:
            return {
                method: {kind: {"calls": slot[0], "bytes": slot[1]} for kind, slot in kinds.items()}
                for method, kinds in self._counts.items()
            }
