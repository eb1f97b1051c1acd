"""containerd's own events of what changes a container's status with no CRI event
(``/containers/update``, ``/tasks/oom``), followed for the CRI socket's status store in a
thread of its own (docs/architecture.md §10 rule 8, "containerd's own events"): each container
named is told to ``StatusStore.task_event``, the subscription to ``tasks_opened``, its end to
``tasks_ended``. Rules:

1. **Registered after a settle.** containerd sends nothing on a subscription until its first
   event: it counts as registered ``settle`` seconds after it was asked without an error, and
   only answers begun after that are covered.
2. **A runtime without the service is not asked again.** UNIMPLEMENTED ends the following for
   good; any other end is retried every ``retry`` seconds, the store told of each end at once.
3. **Every message is hostile.** At most ``MAX_ENVELOPE_BYTES`` a message (a larger one ends
   the subscription, which is asked again); a message that does not read as an envelope of a
   wanted topic naming an ID of at most ``MAX_ID_CHARS`` characters ends it too (counted,
   ``unreadable``).

Costs: O(1) per event; one connection and one thread.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import grpc

from podcache.cri.endpoint import Endpoint
from podcache.cri.wire.protobuf import ProtobufError, varint
from podcache.serve.crisock.forward import identity
from podcache.serve.crisock.statuswire import message_fields, text_of

__all__ = [
    "MAX_ENVELOPE_BYTES",
    "MAX_ID_CHARS",
    "SUBSCRIBE",
    "TOPICS",
    "ProtobufError",
    "TaskEvents",
    "named_container",
    "subscribe_request",
]

SUBSCRIBE = "/containerd.services.events.v1.Events/Subscribe"
TOPICS = ("/containers/update", "/tasks/oom")
"""The topics followed: each names a container whose status changed with no CRI event."""
MAX_ENVELOPE_BYTES = 1024 * 1024
"""One event's bytes at most (rule 3)."""
MAX_ID_CHARS = 256
"""A container ID's characters at most (containerd's are 64)."""

_LEN = 2
_log = logging.getLogger(__name__)


def subscribe_request() -> bytes:
    """``SubscribeRequest{filters: ['topic=="/containers/update"', 'topic=="/tasks/oom"']}``:
    containerd joins the filters with OR."""
    out = b""
    for topic in TOPICS:
        text = f'topic=="{topic}"'.encode()
        out += varint(1 << 3 | _LEN) + varint(len(text)) + text
    return out


def _length_fields(data: bytes) -> dict[int, bytes]:
    """The last value of each length-delimited field of one message (protobuf's last-wins);
    ``ProtobufError`` for bytes that are not a message."""
    return {n: v for n, kind, v in message_fields(data) if kind == _LEN and isinstance(v, bytes)}


def named_container(envelope: bytes) -> str | None:
    """The container an ``Envelope`` of a followed topic names (its event's field 1:
    ``ContainerUpdate.id``, ``TaskOOM.container_id``); None for another topic.
    ``ProtobufError`` for bytes that are not such an envelope (rule 3)."""
    fields = _length_fields(envelope)
    topic = fields.get(3, b"").decode("utf-8", "replace")
    if topic not in TOPICS:
        return None
    value = _length_fields(fields.get(4, b"")).get(2, b"")  # Any.value
    ident = _length_fields(value).get(1, b"")
    if not ident or len(ident) > MAX_ID_CHARS:
        raise ProtobufError(f"a {topic} event names no container ID of at most {MAX_ID_CHARS}")
    return text_of(ident, f"a {topic} event's container ID")


class TaskEvents:
    """Follows containerd's Events service at ``endpoint`` for ``store`` (a
    ``statuses.StatusStore``), in the thread ``podcache-task-events`` (rules above)."""

    def __init__(
        self,
        endpoint: Endpoint,
        store: Any,
        *,
        settle: float,
        retry: float = 1.0,
    ) -> None:
        self._endpoint = endpoint
        self._store = store
        self._settle = settle
        self._retry = retry
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._call: Any = None
        self.events = 0
        """Events that named a container."""
        self.unreadable = 0
        """Messages that ended the subscription (rule 3)."""
        self.state = "starting"
        """``following``, ``retrying``, ``unimplemented`` (rule 2) or ``stopped``."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="podcache-task-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        call = self._call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(5)
        self.state = "stopped"

    def _run(self) -> None:
        while not self._stopping.is_set():
            code = self._follow()
            self._store.tasks_ended()
            if code is grpc.StatusCode.UNIMPLEMENTED:
                self.state = "unimplemented"
                _log.info("runtime %s has no Events service: statuses last the period", self._url)
                return
            if self._stopping.is_set():
                return
            self.state = "retrying"
            self._stopping.wait(self._retry)

    @property
    def _url(self) -> str:
        return self._endpoint.url

    def _follow(self) -> grpc.StatusCode | None:
        """One subscription, until it ends; the code it ended with (None: a message ended it)."""
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_ENVELOPE_BYTES),
            ("grpc.enable_http_proxy", 0),
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if self._endpoint.path is not None:
            options.append(("grpc.default_authority", "localhost"))
        with grpc.insecure_channel(self._endpoint.target, options=options) as channel:
            subscribe = channel.unary_stream(
                SUBSCRIBE, request_serializer=identity, response_deserializer=identity
            )
            call: Any = subscribe(subscribe_request())
            self._call = call
            if self._stopping.is_set():
                call.cancel()
            self._store.tasks_opened(self._settle)
            self.state = "following"
            try:
                return self._read(call)
            except grpc.RpcError as error:
                code: grpc.StatusCode = error.code()
                return code
            finally:
                self._call = None

    def _read(self, call: Any) -> grpc.StatusCode | None:
        for envelope in call:
            try:
                ident = named_container(envelope)
            except ProtobufError as error:
                self.unreadable += 1
                _log.warning("runtime %s: an unreadable task event (%s)", self._url, error)
                call.cancel()
                return None
            if ident is not None:
                self.events += 1
                self._store.task_event(ident)
        return grpc.StatusCode.OK
