"""containerd's own Events service, as far as podcache follows it: ``Subscribe`` streams the
envelopes a test or benchmark sends (``SimTaskEvents.send``) to every open subscription.

containerd publishes ``/containers/update`` (``UpdateContainerResources``) and ``/tasks/oom``
(a process of the container killed for memory) there and sends no CRI event for either
(docs/architecture.md §10 rule 8). The simulator changes no resources and kills nothing, so
it sends them only when told to; it keeps every subscription open until the client leaves or
the server stops, as containerd does. Only the containerd flavour serves it: CRI-O has no
such service, and the CRI-O flavour answers UNIMPLEMENTED.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from podcache.sim.encoding import field, varint

__all__ = ["SERVICE", "SimTaskEvents", "envelope"]

SERVICE = "containerd.services.events.v1.Events"
_TYPES = {
    "/containers/update": "containerd.events.ContainerUpdate",
    "/tasks/oom": "containerd.events.TaskOOM",
}
_POLL = 0.1  # seconds between looks at whether the client left or the server stops


def envelope(topic: str, container_id: str, namespace: str = "k8s.io") -> bytes:
    """An ``Envelope`` as containerd sends it: its time, namespace, topic and event (an
    ``Any`` whose message's field 1 is the container's ID)."""
    now = time.time_ns()
    stamp = varint(1 << 3) + varint(now // 10**9) + varint(2 << 3) + varint(now % 10**9)
    kind = _TYPES.get(topic, "containerd.events.TaskOOM")
    event = field(1, kind.encode()) + field(2, field(1, container_id.encode()))
    return (
        field(1, stamp)
        + field(2, namespace.encode())
        + field(3, topic.encode())
        + (field(4, event))
    )


def _identity(data: bytes) -> bytes:
    return data


class SimTaskEvents:
    """The Events service's ``Subscribe``; ``stopping``: the server's stop."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping
        self._lock = threading.Lock()
        self._subscribers: set[queue.SimpleQueue[bytes]] = set()

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def send(self, envelopes: Sequence[bytes]) -> int:
        """Queue ``envelopes`` for every open subscription; how many there are."""
        with self._lock:
            for subscriber in self._subscribers:
                for each in envelopes:
                    subscriber.put(each)
            return len(self._subscribers)

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        subscribe = grpc.unary_stream_rpc_method_handler(
            self._subscribe, request_deserializer=_identity, response_serializer=_identity
        )
        return grpc.method_handlers_generic_handler(SERVICE, {"Subscribe": subscribe})

    def _subscribe(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        mine: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        with self._lock:
            self._subscribers.add(mine)
        try:
            while context.is_active() and not self._stopping.is_set():
                try:
                    yield mine.get(timeout=_POLL)
                except queue.Empty:
                    continue
        finally:
            with self._lock:
                self._subscribers.discard(mine)
