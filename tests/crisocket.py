"""What the CRI socket's tests over the simulator (``tests/serve``) and over containerd
(``tests/containerd``) share: a ``GetContainerEvents`` watcher of a socket, and serve's event
subscriptions as ``/metrics`` shows them. Helpers only: no test, no fixture, no waiting policy
(each suite waits its own way).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import NamedTuple, Protocol

import grpc

from podcache.cri.proto import api_pb2 as pb
from tests.serve.conftest import Client

SUBSCRIBED = b'podcache_events_state{state="subscribed"} 1.0'
"""The /metrics line of a default view whose event stream is open."""


class Stream(Protocol):
    """A grpcio server stream of raw bytes (``unary_stream`` without a deserializer)."""

    def __iter__(self) -> Iterator[bytes]: ...

    def cancel(self) -> bool: ...


class EventWatcher:
    """A ``GetContainerEvents`` client: the events it got, in order, read by a thread of its
    own. serve reads each event into its status store before any client gets it, so a status
    asked once the watcher has an event is asked after serve knew of it."""

    def __init__(self, stream: Stream) -> None:
        self.raw: list[bytes] = []
        """The events' bytes as they came."""
        self.events: list[pb.ContainerEventResponse] = []
        self._stream = stream
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for data in self._stream:
                self.events.append(pb.ContainerEventResponse.FromString(data))
                self.raw.append(data)
        except grpc.RpcError:
            pass

    def got(self, ident: str, kind: int) -> pb.ContainerEventResponse | None:
        """The first ``kind`` event naming container (or sandbox) ``ident`` got, if any."""
        return next(
            (e for e in self.events if e.container_id == ident and e.container_event_type == kind),
            None,
        )

    def ids(self) -> list[str]:
        """The container (or sandbox) ID each event got names, in order."""
        return [event.container_id for event in list(self.events)]

    def close(self) -> None:
        self._stream.cancel()
        self._thread.join(10)


class Subscriptions(NamedTuple):
    """serve's event subscriptions as /metrics shows them."""

    state: str
    """The default view's cache's ``events_state``."""
    resubscriptions: int
    """Its subscriptions after the first (one per runtime restart)."""
    upstream: int
    """Streams the hub opened to the runtime (--cri-listen: every cache follows the hub)."""

    @property
    def subscribed(self) -> bool:
        return self.state == "subscribed"


def subscriptions(client: Client) -> Subscriptions:
    """serve's subscriptions now, from its /metrics."""
    text = client.get("/metrics").body.decode()
    (state,) = re.findall(r'^podcache_events_state\{state="(\w+)"\} 1\.0$', text, re.MULTILINE)
    counters = dict(re.findall(r"^(podcache_\w+_total) (\S+)$", text, re.MULTILINE))
    return Subscriptions(
        state,
        int(float(counters["podcache_event_resubscriptions_total"])),
        int(float(counters["podcache_cri_event_subscriptions_total"])),
    )


class TaskEvents(NamedTuple):
    """serve's following of containerd's own events, as /metrics shows it."""

    state: str
    """following, retrying, unimplemented or off."""
    events: int
    """Events that named a container."""


def task_events(client: Client) -> TaskEvents:
    """serve's following of containerd's own events now, from its /metrics."""
    text = client.get("/metrics").body.decode()
    (state,) = re.findall(
        r'^podcache_cri_task_events_state\{state="(\w+)"\} 1\.0$', text, re.MULTILINE
    )
    (events,) = re.findall(r"^podcache_cri_task_events_total (\S+)$", text, re.MULTILINE)
    return TaskEvents(state, int(float(events)))
