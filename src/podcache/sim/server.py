"""The sim's gRPC side: RuntimeService servicer and server lifecycle; no pod or socket-path logic.

It answers ``runtime.v1.RuntimeService`` from a ``Population`` and a ``Faults``: Version,
Status, ListPodSandbox, ListContainers, their streaming twins StreamPodSandboxes and
StreamContainers (KEP-5825), PodSandboxStatus, ContainerStatus and the GetContainerEvents
stream; every other RPC answers UNIMPLEMENTED, as the generated servicer's default does (here:
no handler is registered for it). It does not own the population, the churn thread or the
socket path (see ``runtime``).

A streamed list answer holds exactly the unary answer's items, in the same order, sent in
messages of varying size (``StreamChunking``: a seeded number of items each, at most
``max_items``, and never more than ``STREAM_MESSAGE_BYTES`` unless one item alone is larger),
so a client's reading of one message at a time is exercised at every cut. No items, no message.

Throughput: list responses are assembled from bytes, not messages. Each record is encoded
once, as its length-delimited ``repeated`` field entry (records are immutable, so a cached
encoding is valid as long as the record is the same object), and a response is the join of
the entries that pass the filter; whole responses are memoised per population generation and
filter. Listing 5,000 pods costs one pass over the records when the population changed and
a dictionary look-up when it did not. A label selector on the pod UID (a relist of one pod)
reads only that pod's items, through an index of the view built on first use.

ID filters and status look-ups follow containerd: an exact ID, or a prefix that matches
exactly one ID, names an item (containerd's truncindex); an ambiguous or unknown prefix
matches nothing (an empty list; NOT_FOUND for a status).
"""

from __future__ import annotations

import bisect
import collections
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from typing import Any, Generic, NoReturn, TypeVar

import grpc
from google.protobuf.message import Message

from podcache import __version__
from podcache.cri.proto import api_pb2 as pb
from podcache.sim.counters import CallCounters, is_filtered
from podcache.sim.encoding import (
    TIMESTAMP_TAG,
    StatusEncodings,
    container_message,
    container_status_message,
    entry,
    event_message,
    field,
    info_entry,
    sandbox_message,
    sandbox_status_message,
    varint,
)
from podcache.sim.faults import (
    LIST_METHODS,
    MAX_EVENT_REPLAY,
    STREAM_LIST_METHODS,
    Faults,
    Malformed,
)
from podcache.sim.flavor import CONTAINERD, Flavor
from podcache.sim.population import (
    POD_UID_LABEL,
    Population,
    SimContainer,
    SimEvent,
    SimSandbox,
)
from podcache.sim.taskevents import SimTaskEvents

__all__ = [
    "DEFAULT_STREAM_ITEMS",
    "RUNTIME_API_VERSION",
    "RUNTIME_NAME",
    "STREAM_MESSAGE_BYTES",
    "SimServer",
    "SimServicer",
    "StreamChunking",
    "container_message",
    "container_status_message",
    "event_message",
    "sandbox_message",
    "sandbox_status_message",
]

RUNTIME_NAME = CONTAINERD.runtime_name
RUNTIME_API_VERSION = "v1"
CRI_VERSION = "0.1.0"
_SERVICE = pb.DESCRIPTOR.services_by_name["RuntimeService"]
_MAX_MESSAGE = 64 * 1024 * 1024
_EVENT_BACKLOG = 100_000
"""Events queued for one slow GetContainerEvents subscriber before it is cut off."""
_MEMO_SIZE = 64
_ID_LENGTH = 64  # every ID the population makes: 64 hex digits
STREAM_MESSAGE_BYTES = 4 * 1024 * 1024
"""The most bytes of one streamed list message (unless one item alone is larger): well under
the 16 MiB a client receives in one message."""
DEFAULT_STREAM_ITEMS = 500
"""The most items of one streamed list message, by default."""
_END = object()
_CUT = object()
_SERVER_CLOSE = object()
_SERVER_CLOSED_DETAILS = "container events subscription closed by server"
"""containerd 2.x's UNAVAILABLE details when it closes a subscription itself (1.7 ends it OK)."""


def _answer_size(response: Message | bytes) -> int:
    """The bytes this answer puts on the wire (the serialized response message)."""
    return len(response) if isinstance(response, bytes) else response.ByteSize()


def _serialize(response: Message | bytes) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def _listed(
    items: Sequence[SimSandbox | SimContainer],
    entries: Sequence[bytes],
    f: pb.PodSandboxFilter | pb.ContainerFilter,
    wanted_id: str = "",
    keep: Callable[[Any], bool] | None = None,
) -> list[bytes]:
    """The encoded entries of the items filter ``f`` selects (``wanted_id``: the ID its ``id``
    names; its state; its labels; ``keep`` for what only containers have), in order: joined,
    a list answer's bytes."""
    state = int(f.state.state) if f.HasField("state") else None
    selector = dict(f.label_selector)
    parts = []
    for item, encoded in zip(items, entries, strict=True):
        if wanted_id and item.id != wanted_id:
            continue
        if state is not None and item.state != state:
            continue
        labels = item.labels  # it must hold every label of the selector
        if all(labels.get(k) == v for k, v in selector.items()) and (keep is None or keep(item)):
            parts.append(encoded)
    return parts


class _Answer:
    """One list answer: its items' encoded entries, and (joined on first use) the unary
    answer's bytes."""

    __slots__ = ("_data", "entries")

    def __init__(self, entries: list[bytes]) -> None:
        self.entries = entries
        self._data: bytes | None = None

    @property
    def data(self) -> bytes:
        data = self._data
        if data is None:  # two threads may join it at once: the same bytes either way
            data = self._data = b"".join(self.entries)
        return data


class StreamChunking:
    """How a streamed list answer is cut into messages: each message takes a number of items
    drawn from ``random.Random(seed)`` in ``1..max_items`` (fewer when the next item would take
    it past ``STREAM_MESSAGE_BYTES``; always at least one), or exactly ``max_items`` with
    ``by_count``. ``max_items`` may be set at any
    time; draws are made under a lock, so the cuts depend on the seed and the calls' order."""

    def __init__(
        self, seed: int = 0, max_items: int = DEFAULT_STREAM_ITEMS, *, by_count: bool = False
    ) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(f"{seed}/stream")
        self._max_items = 1
        self.max_items = max_items
        self.by_count = by_count
        """Every message takes ``max_items`` items (the last the rest), however many bytes
        they make: CRI-O's ``streamChunkSize`` (``podcache.sim.flavor``)."""

    @property
    def max_items(self) -> int:
        """The most items of one message."""
        return self._max_items

    @max_items.setter
    def max_items(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"max_items must be an int >= 1, not {count!r}")
        self._max_items = count

    def messages(self, entries: Sequence[bytes]) -> list[bytes]:
        """``entries`` (encoded items, in order) as the messages of a streamed answer."""
        if self.by_count:
            step = self._max_items
            return [b"".join(entries[i : i + step]) for i in range(0, len(entries), step)]
        out: list[bytes] = []
        start, total = 0, len(entries)
        with self._lock:
            while start < total:
                wanted = self._rng.randint(1, self._max_items)
                end, size = start + 1, len(entries[start])
                while end < total and end - start < wanted:
                    size += len(entries[end])
                    if size > STREAM_MESSAGE_BYTES:
                        break
                    end += 1
                out.append(b"".join(entries[start:end]))
                start = end
        return out


def _positions(items: Sequence[SimSandbox | SimContainer]) -> dict[str, list[int]]:
    by_pod: dict[str, list[int]] = {}
    for position, item in enumerate(items):
        uid = item.labels.get(POD_UID_LABEL)
        if uid is not None:
            by_pod.setdefault(uid, []).append(position)
    return by_pod


_Item = TypeVar("_Item", SimSandbox, SimContainer)


class _Items(Generic[_Item]):
    """One kind of a view's listable items (sandboxes or containers), their encoded entries,
    and the indexes filters need, each built on first use (plain and state-filtered lists
    never need them)."""

    def __init__(self, items: tuple[_Item, ...], entries: list[bytes]) -> None:
        self.items: tuple[_Item, ...] = items
        self.entries = entries
        self._by_id: dict[str, _Item] | None = None
        self._sorted: list[str] | None = None
        self._by_pod: dict[str, list[int]] | None = None

    @property
    def by_id(self) -> dict[str, _Item]:
        if self._by_id is None:
            self._by_id = {item.id: item for item in self.items if item.id}
        return self._by_id

    def _sorted_ids(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.by_id)
        return self._sorted

    def _prefixed(self, wanted: str) -> range:
        """Where the IDs that begin with ``wanted`` are in ``_sorted_ids()``."""
        ids = self._sorted_ids()
        start = bisect.bisect_left(ids, wanted)
        return range(start, bisect.bisect_left(ids, wanted + "\U0010ffff", lo=start))

    def resolve(self, wanted: str) -> str | None:
        """containerd's truncindex: the exact ID, else the one ID with this prefix, else None."""
        if wanted in self.by_id:
            return wanted
        found = self._prefixed(wanted)
        return self._sorted_ids()[found.start] if len(found) == 1 else None

    def named(self, wanted: str) -> str:
        """The ID a filter's ``wanted`` stands for: the one it resolves to, else itself."""
        return (self.resolve(wanted) or wanted) if wanted else ""

    def ambiguous(self, wanted: str) -> bool:
        """Whether more than one ID begins with ``wanted`` (and none is it)."""
        return len(self._prefixed(wanted)) > 1

    def listed(
        self,
        f: pb.PodSandboxFilter | pb.ContainerFilter,
        keep: Callable[[Any], bool] | None = None,
    ) -> list[bytes]:
        """``_listed`` over the items ``f`` can match at all: those of the pod its selector's
        pod UID label names (by the positions of each pod's items, in list order: a relist of
        one pod then costs that pod, not the node), else all."""
        items: Sequence[_Item] = self.items
        entries: Sequence[bytes] = self.entries
        uid = f.label_selector.get(POD_UID_LABEL) if f.label_selector else None
        if uid is not None:
            if self._by_pod is None:
                self._by_pod = _positions(self.items)
            positions = self._by_pod.get(uid, [])
            items, entries = [items[i] for i in positions], [entries[i] for i in positions]
        return _listed(items, entries, f, self.named(f.id), keep)


class _View:
    """The listable items of one population generation plus one malformed setting."""

    def __init__(
        self,
        key: tuple[int, frozenset[Malformed]],
        sandboxes: _Items[SimSandbox],
        containers: _Items[SimContainer],
    ) -> None:
        self.key = key
        self.sandbox_items = sandboxes
        self.container_items = containers
        self.sandboxes = sandboxes.items
        self.containers = containers.items
        self.memo: dict[tuple[str, bytes], _Answer] = {}
        self._by_sandbox: dict[str, list[SimContainer]] | None = None

    def containers_of(self, sandbox_id: str) -> list[SimContainer]:
        """The containers of one sandbox (an index built on first use: a cold start's
        thousands of PodSandboxStatus calls must not each scan every container)."""
        table = self._by_sandbox
        if table is None:
            table = {}
            for container in self.containers:
                table.setdefault(container.pod_sandbox_id, []).append(container)
            self._by_sandbox = table
        return table.get(sandbox_id, [])

    def resolve_sandbox(self, wanted: str) -> str | None:
        return self.sandbox_items.resolve(wanted)

    def ambiguous(self, kind: str, wanted: str) -> bool:
        """Whether more than one sandbox (``kind`` "sandbox") or container ID begins with
        ``wanted`` (and none is it)."""
        items = self.sandbox_items if kind == "sandbox" else self.container_items
        return items.ambiguous(wanted)

    def list_sandboxes(self, f: pb.PodSandboxFilter) -> list[bytes]:
        return self.sandbox_items.listed(f)

    def list_containers(self, f: pb.ContainerFilter) -> list[bytes]:
        sandbox = self.sandbox_items.named(f.pod_sandbox_id)
        return self.container_items.listed(
            f, (lambda c: c.pod_sandbox_id == sandbox) if sandbox else None
        )


def _memoized(
    view: _View, rpc: str, request_filter: Message, build: Callable[[Any], list[bytes]]
) -> _Answer:
    """One list answer per (list, filter) and population state: built once, then reused by
    the unary call and its streaming twin alike."""
    key = (rpc, request_filter.SerializeToString(deterministic=True))
    found = view.memo.get(key)
    if found is None:
        found = _Answer(build(request_filter))
        if len(view.memo) >= _MEMO_SIZE:
            view.memo.clear()
        view.memo[key] = found
    return found


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> NoReturn:
    context.abort(code, details)
    raise AssertionError("unreachable: ServicerContext.abort raises")  # pragma: no cover


def _refuse_unimplemented(faults: Faults, method: str, context: grpc.ServicerContext) -> None:
    """UNIMPLEMENTED, as a runtime without ``method`` answers, when the faults say so."""
    if method in faults.unimplemented:
        details = f"unknown method {method} for service runtime.v1.RuntimeService"
        _abort(context, grpc.StatusCode.UNIMPLEMENTED, details)


class _FaultyStream:
    """One event stream's faults, applied per event in this order: drop, reorder (hold it back
    behind the next one), delay, duplicate; ``event_cut_after`` ends it with UNAVAILABLE."""

    def __init__(
        self,
        faults: Faults,
        stopping: threading.Event,
        context: grpc.ServicerContext,
        encode: Callable[[SimEvent], bytes],
    ) -> None:
        self._faults = faults
        self._stopping = stopping
        self._context = context
        self._encode = encode
        self._sent = 0
        self._held: SimEvent | None = None

    def send(self, event: SimEvent) -> Iterator[bytes]:
        """The responses this event causes (none, one, two, or it and the one held back)."""
        faults = self._faults
        if faults.roll_event("drop"):
            return
        if self._held is None and faults.roll_event("reorder"):
            self._held = event
            return
        batch = [event] if self._held is None else [event, self._held]
        self._held = None
        for item in batch:
            delay = faults.event_delay
            if delay > 0 and self._stopping.wait(delay):
                _abort(self._context, grpc.StatusCode.UNAVAILABLE, "podcache-sim is stopping")
            for _ in range(2 if faults.roll_event("duplicate") else 1):
                yield self._counted(item)

    def _counted(self, event: SimEvent) -> bytes:
        cut_after = self._faults.event_cut_after
        if cut_after is not None and self._sent >= cut_after:
            _abort(
                self._context,
                grpc.StatusCode.UNAVAILABLE,
                f"podcache-sim: stream cut after {self._sent} events",
            )
        self._sent += 1
        return self._encode(event)


class SimServicer:
    """RuntimeService over a population, with faults applied to every unary call.

    Faults are applied in this order: UNIMPLEMENTED, hang, latency, UNAVAILABLE (list calls).
    """

    def __init__(
        self,
        population: Population,
        faults: Faults,
        stopping: threading.Event,
        chunking: StreamChunking | None = None,
        *,
        flavor: Flavor = CONTAINERD,
        pod_events: bool = True,
    ) -> None:
        self._population = population
        self.flavor = flavor
        """The runtime it behaves like (Version, which events it sends)."""
        self.event_calls = 0
        """GetContainerEvents calls made (under the subscribers lock)."""
        self.pod_events = pod_events
        """Whether GetContainerEvents sends events; False: it ends at once with OK, as CRI-O
        with ``enable_pod_events = false`` (its default)."""
        self._faults = faults
        self._stopping = stopping
        self.chunking = chunking if chunking is not None else StreamChunking()
        """How streamed list answers are cut into messages."""
        self.counters = CallCounters()
        """Calls and answer bytes per list and status RPC, filtered and unfiltered."""
        self._view: _View | None = None
        self._view_lock = threading.Lock()
        self._encoded: dict[int, tuple[SimSandbox | SimContainer, bytes]] = {}
        self._statuses = StatusEncodings()
        self._subscribers: set[queue.SimpleQueue[object]] = set()
        self._subscribers_lock = threading.Lock()
        self._recent: collections.deque[SimEvent] = collections.deque(maxlen=MAX_EVENT_REPLAY)
        """The last events sent, for ``Faults.event_replay`` (guarded by the subscribers lock)."""
        self._unsubscribe = population.subscribe(self._fan_out)

    def close(self) -> None:
        """Stop listening to the population and end every event stream."""
        self._unsubscribe()
        with self._subscribers_lock:
            for subscriber in self._subscribers:
                subscriber.put(_END)

    # -- plumbing -----------------------------------------------------------------------------
    @property
    def subscriber_count(self) -> int:
        """How many GetContainerEvents streams are open."""
        return len(self._subscribers)

    def _fan_out(self, events: Sequence[SimEvent]) -> None:
        sandbox_ids = frozenset(e.sandbox.id for e in events if e.sandbox is not None)
        sent = self.flavor.sent(events, sandbox_ids)
        if sent:
            self.send_events(sent)

    def send_events(self, events: Sequence[SimEvent]) -> int:
        """Queue ``events`` for every open stream; how many streams there are."""
        with self._subscribers_lock:
            self._recent.extend(events)
            for subscriber in self._subscribers:
                for event in events:
                    subscriber.put(event)
            return len(self._subscribers)

    def _entries(self, records: Sequence[SimSandbox | SimContainer]) -> list[bytes]:
        # Keyed by id(): the cache holds each record, so an id cannot be reused while cached.
        encoded = self._encoded
        get = encoded.get
        out: list[bytes] = []
        append = out.append
        for record in records:
            cached = get(id(record))
            if cached is None or cached[0] is not record:
                message = (
                    sandbox_message(record)
                    if isinstance(record, SimSandbox)
                    else container_message(record)
                )
                cached = encoded[id(record)] = (record, entry(message))
            append(cached[1])
        return out

    def view(self) -> _View:
        """The current listable items (rebuilt only when the population or faults changed)."""
        malformed = self._faults.malformed
        view = self._view
        if view is not None and view.key == (self._population.generation, malformed):
            return view
        with self._view_lock:
            snapshot = self._population.snapshot()
            key = (snapshot.generation, malformed)
            view = self._view
            if view is not None and view.key == key:
                return view
            extra_sandboxes, extra_containers = self._faults.malformed_items()
            sandboxes = snapshot.sandboxes + extra_sandboxes
            containers = snapshot.containers + extra_containers
            view = _View(
                key,
                _Items(sandboxes, self._entries(sandboxes)),
                _Items(containers, self._entries(containers)),
            )
            live = len(sandboxes) + len(containers)
            if len(self._encoded) > 2 * live + 1024:  # drop encodings of records now gone
                self._encoded = {id(r): self._encoded[id(r)] for r in (*sandboxes, *containers)}
            self._view = view
            return view

    def _before(self, method: str, context: grpc.ServicerContext) -> None:
        faults = self._faults
        _refuse_unimplemented(faults, method, context)
        if faults.hanging:
            released = faults.wait_while_hanging(
                lambda: self._stopping.is_set() or not context.is_active()
            )
            if not released:
                if self._stopping.is_set():
                    _abort(context, grpc.StatusCode.UNAVAILABLE, "podcache-sim is stopping")
                _abort(context, grpc.StatusCode.DEADLINE_EXCEEDED, "hung call gave up")
        latency = faults.latency
        if latency > 0 and self._stopping.wait(latency):
            _abort(context, grpc.StatusCode.UNAVAILABLE, "podcache-sim is stopping")
        if method in LIST_METHODS and faults.roll_failure():
            _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"podcache-sim: injected failure (fail_rate={faults.fail_rate})",
            )

    def handlers(self) -> grpc.GenericRpcHandler[Any, Any]:
        """Handlers for the RPCs this servicer implements, faults applied, lists as bytes.

        The RPCs it has no method for are left out: gRPC answers them UNIMPLEMENTED, without
        logging a traceback for each. The event stream is only refused when UNIMPLEMENTED
        (its faults apply per event); every other call is ``_counted``.
        """
        table: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for method in _SERVICE.methods:
            name, streamed = method.name, method.server_streaming
            if not callable(getattr(type(self), name, None)):
                continue
            behaviour = getattr(self, name)
            plain = streamed and name not in STREAM_LIST_METHODS
            make = (
                grpc.unary_stream_rpc_method_handler
                if streamed
                else grpc.unary_unary_rpc_method_handler
            )
            table[name] = make(
                self._refusable(name, behaviour)
                if plain
                else self._counted(name, behaviour, streamed),
                request_deserializer=getattr(pb, method.input_type.name).FromString,
                response_serializer=_serialize,
            )
        return grpc.method_handlers_generic_handler(_SERVICE.full_name, table)

    def _counted(
        self, method: str, behaviour: Callable[[Any, grpc.ServicerContext], Any], streamed: bool
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        """A call with the faults first (``_before``), counted (an error answer too, with no
        bytes); a ``streamed`` list's answer is its messages, counted as one call with the
        bytes of them all."""
        counters = self.counters

        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            filtered = is_filtered(method, request)
            try:
                self._before(method, context)
                response = behaviour(request, context)
            except BaseException:
                counters.record(method, filtered=filtered, answer_bytes=0)
                raise
            if not streamed:
                counters.record(method, filtered=filtered, answer_bytes=_answer_size(response))
                return response
            size = sum(len(message) for message in response)
            counters.record(method, filtered=filtered, answer_bytes=size, messages=len(response))
            return iter(response)

        return handle

    def _refusable(
        self, method: str, behaviour: Callable[[Any, grpc.ServicerContext], Iterator[Any]]
    ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
        def handle(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            _refuse_unimplemented(self._faults, method, context)
            return behaviour(request, context)

        return handle

    # -- RPCs ---------------------------------------------------------------------------------
    def Version(  # noqa: N802 -- the CRI RPC's name, as gRPC dispatches it
        self, request: pb.VersionRequest, context: grpc.ServicerContext
    ) -> pb.VersionResponse:
        """The runtime's name and versions (runtime_name is what ContainerIDs carry)."""
        flavor = self.flavor
        return pb.VersionResponse(
            version=CRI_VERSION,
            runtime_name=flavor.runtime_name,
            runtime_version=flavor.runtime_version or __version__,
            runtime_api_version=RUNTIME_API_VERSION,
        )

    def Status(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.StatusRequest, context: grpc.ServicerContext
    ) -> pb.StatusResponse:
        """RuntimeReady and NetworkReady, both true."""
        return pb.StatusResponse(
            status=pb.RuntimeStatus(
                conditions=[
                    pb.RuntimeCondition(type="RuntimeReady", status=True),
                    pb.RuntimeCondition(type="NetworkReady", status=True),
                ]
            )
        )

    def ListPodSandbox(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.ListPodSandboxRequest, context: grpc.ServicerContext
    ) -> bytes:
        """The sandboxes that pass the filter, as an encoded ListPodSandboxResponse."""
        return self._sandboxes(request.filter).data

    def StreamPodSandboxes(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.StreamPodSandboxesRequest, context: grpc.ServicerContext
    ) -> list[bytes]:
        """ListPodSandbox's items, in its order, as encoded StreamPodSandboxesResponse
        messages cut by ``chunking``."""
        return self.chunking.messages(self._sandboxes(request.filter).entries)

    def _sandboxes(self, f: pb.PodSandboxFilter) -> _Answer:
        return self._list(f, 0, f.id, f.id, "ListPodSandbox")

    def ListContainers(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.ListContainersRequest, context: grpc.ServicerContext
    ) -> bytes:
        """The containers that pass the filter, as an encoded ListContainersResponse."""
        return self._containers(request.filter).data

    def StreamContainers(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.StreamContainersRequest, context: grpc.ServicerContext
    ) -> list[bytes]:
        """ListContainers' items, in its order, as encoded StreamContainersResponse messages
        cut by ``chunking``."""
        return self.chunking.messages(self._containers(request.filter).entries)

    def _containers(self, f: pb.ContainerFilter) -> _Answer:
        exact_id = "" if f.pod_sandbox_id else f.id  # a sandbox named too: the view answers
        return self._list(f, 1, f.id or f.pod_sandbox_id, exact_id, "ListContainers")

    def _list(
        self,
        f: pb.PodSandboxFilter | pb.ContainerFilter,
        kind: int,
        ids: str,
        exact_id: str,
        rpc: str,
    ) -> _Answer:
        """The ``rpc`` answer of the sandboxes (``kind`` 0) or containers (1) ``f`` selects
        (``ids``: the IDs it names; ``exact_id``: one to look up), from the records
        ``_records`` gives, else from the view of the node (memoised per filter)."""
        records = None if self._faults.malformed else self._records(f, kind, ids, exact_id)
        if records is not None:
            return _Answer(_listed(records, self._entries(records), f))
        view = self.view()
        return _memoized(view, rpc, f, view.list_containers if kind else view.list_sandboxes)

    def _records(
        self, f: pb.PodSandboxFilter | pb.ContainerFilter, kind: int, ids: str, exact_id: str
    ) -> Sequence[SimSandbox | SimContainer] | None:
        """The records a filter can select, never from a view of the node: a pod UID named by
        the label alone (a relist of one pod, the kubelet's and podcache's) gives that pod's,
        O(pod); an ``id`` of an ID's full length is looked up as containerd looks an ID up,
        O(1) (an agent asking for a new pod by ID would have a view built per creation).
        None (the view answers) for anything else, a prefix among them."""
        uid = f.label_selector.get(POD_UID_LABEL) if f.label_selector and not ids else None
        if uid is not None:
            return self._population.pod_records(uid)[kind]
        if len(exact_id) < _ID_LENGTH:
            return None
        population = self._population
        record = (population.container if kind else population.sandbox)(exact_id)
        return () if record is None else (record,)

    def PodSandboxStatus(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.PodSandboxStatusRequest, context: grpc.ServicerContext
    ) -> bytes:
        """The sandbox named by an ID or unique prefix, with its containers, as an encoded
        PodSandboxStatusResponse; else NOT_FOUND.

        O(its pod) for an exact ID, or any ID of full length (``_sandbox_records``): a cold
        start asks thousands while the population churns, and a view of the node (built per
        generation) would be rebuilt for nearly every one."""
        wanted = request.pod_sandbox_id
        found = self._sandbox_records(wanted) if wanted else None
        answers = self.flavor.answers
        if found is None:
            _abort(context, grpc.StatusCode.NOT_FOUND, self._missing("sandbox", wanted))
        sandbox, containers = found
        bad_ips = self._faults.bad_ips
        info = b""
        if request.verbose:
            cgroup = self.flavor.cgroup_path(sandbox.uid, sandbox.id)
            info = info_entry(answers.sandbox_info(sandbox, cgroup))
        if not (answers.sandbox_extras and self.pod_events):  # the status alone
            return field(1, self._statuses.of(sandbox, bad_ips)) + info
        listed = answers.sandbox_containers(containers)
        body = self._statuses.answer_body(sandbox, listed, bad_ips, info)
        return body + TIMESTAMP_TAG + varint(time.time_ns())

    def _missing(self, kind: str, wanted: str, view: _View | None = None) -> str:
        """The NOT_FOUND details for ``wanted`` (``kind``: "container" or "sandbox"); a
        prefix that several IDs begin with is told so (a whole ID never: no walk for it)."""
        ambiguous = 0 < len(wanted) < _ID_LENGTH and (view or self.view()).ambiguous(kind, wanted)
        return self.flavor.answers.missing(kind, wanted, ambiguous)

    def _event_bytes(self, event: SimEvent) -> bytes:
        """``event``'s ContainerEventResponse with this stream's bad IPs (``StatusEncodings``)."""
        containers = self.flavor.answers.event_containers(event)
        return self._statuses.event(event, self._faults.bad_ips, containers)

    def _sandbox_records(self, wanted: str) -> tuple[SimSandbox, Sequence[SimContainer]] | None:
        """The sandbox ``wanted`` names and its containers: from the population when no item
        is made malformed (an exact ID; one of an ID's full length or longer can be a prefix
        of none other), else from the view (a unique prefix, containerd's truncindex)."""
        if not self._faults.malformed:
            records = self._population.sandbox_records(wanted)
            if records is not None or len(wanted) >= _ID_LENGTH:
                return records
        view = self.view()
        found = view.resolve_sandbox(wanted)
        if found is None:
            return None
        return view.sandbox_items.by_id[found], view.containers_of(found)

    def ContainerStatus(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.ContainerStatusRequest, context: grpc.ServicerContext
    ) -> pb.ContainerStatusResponse:
        """The container named by an ID or unique prefix; else NOT_FOUND."""
        view = self.view()
        wanted = request.container_id
        found = view.container_items.resolve(wanted) if wanted else None
        answers = self.flavor.answers
        if found is None:
            _abort(context, grpc.StatusCode.NOT_FOUND, self._missing("container", wanted, view))
        container = view.container_items.by_id[found]
        info = {}
        if request.verbose:
            cgroup = self.flavor.cgroup_path(container.pod_uid, container.id)
            info["info"] = answers.container_info(container, cgroup)
        return pb.ContainerStatusResponse(status=container_status_message(container), info=info)

    def GetContainerEvents(  # noqa: N802 -- the CRI RPC's name
        self, request: pb.GetEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        """Every later population change, one response per event, until the client leaves.

        The event faults apply on the way out (``_FaultyStream``); ``cut()`` ends the stream
        with UNAVAILABLE. With ``event_replay``, the stream opens with that many past events.
        Without ``pod_events`` it ends at once with OK and nothing sent (CRI-O's default).
        """
        with self._subscribers_lock:
            self.event_calls += 1
        if not self.pod_events:
            return
        inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        context.add_callback(lambda: inbox.put(_END))
        with self._subscribers_lock:
            replay = self._faults.event_replay
            for event in list(self._recent)[len(self._recent) - replay :] if replay else ():
                inbox.put(event)  # old events first, as containerd 2.x replays what it kept
            self._subscribers.add(inbox)
        try:
            stream = _FaultyStream(self._faults, self._stopping, context, self._event_bytes)
            for event in self._received(inbox, context):
                yield from stream.send(event)
        finally:
            with self._subscribers_lock:
                self._subscribers.discard(inbox)

    def _received(
        self, inbox: queue.SimpleQueue[object], context: grpc.ServicerContext
    ) -> Iterator[SimEvent]:
        """The events queued for one subscriber, until it leaves, is cut or falls behind."""
        while context.is_active():
            if self._stopping.is_set():
                _abort(context, grpc.StatusCode.UNAVAILABLE, "podcache-sim is stopping")
            try:
                item = inbox.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is _CUT:
                _abort(context, grpc.StatusCode.UNAVAILABLE, "podcache-sim: stream cut")
            if item is _SERVER_CLOSE:
                _abort(context, grpc.StatusCode.UNAVAILABLE, _SERVER_CLOSED_DETAILS)
            if item is _END:
                continue  # the client left, or the server is stopping: the loop decides
            if inbox.qsize() > _EVENT_BACKLOG:
                _abort(
                    context,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"event subscriber fell more than {_EVENT_BACKLOG} events behind",
                )
            assert isinstance(item, SimEvent)
            yield item

    def cut(self, *, by_server: bool = False) -> int:
        """End every open event stream with UNAVAILABLE (events queued before are sent);
        returns how many were cut. ``by_server``: with containerd 2.x's details for a
        subscription it closes itself, not the sim's "stream cut"."""
        with self._subscribers_lock:
            for subscriber in self._subscribers:
                subscriber.put(_SERVER_CLOSE if by_server else _CUT)
            return len(self._subscribers)


_GenericHandler: Any = grpc.GenericRpcHandler  # the stubs make it generic, grpcio does not


class _Unimplemented(_GenericHandler):  # type: ignore[misc]
    """Every method no other handler answers: counted (``CallCounters.unimplemented``), then
    UNIMPLEMENTED as a runtime answers a method it lacks."""

    def __init__(self, counters: CallCounters) -> None:
        self._counters = counters

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        path: str = details.method
        counters = self._counters

        def answer(requests: Any, context: grpc.ServicerContext) -> Any:
            counters.record_unimplemented(path)
            service, _, method = path.lstrip("/").partition("/")
            _abort(
                context,
                grpc.StatusCode.UNIMPLEMENTED,
                f"unknown method {method} for service {service}",
            )

        return grpc.stream_stream_rpc_method_handler(answer)


class SimServer:
    """A ``grpc.server`` (thread pool) serving a ``SimServicer`` on one address.

    ``address`` is what ``add_insecure_port`` takes: ``unix:/abs/path`` or ``127.0.0.1:0``.
    Each open event stream and each hung or delayed call holds one of ``max_workers``
    threads; calls beyond that wait in gRPC's queue.
    """

    def __init__(
        self,
        population: Population,
        faults: Faults,
        address: str,
        *,
        max_workers: int = 32,
        chunking: StreamChunking | None = None,
        flavor: Flavor = CONTAINERD,
        pod_events: bool = True,
    ) -> None:
        self._stopping = threading.Event()
        self.servicer = SimServicer(
            population, faults, self._stopping, chunking, flavor=flavor, pod_events=pod_events
        )
        self._executor = futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="podcache-sim-rpc"
        )
        self.task_events = SimTaskEvents(self._stopping) if flavor.events_service else None
        """containerd's own Events service (None for a flavour without it: UNIMPLEMENTED)."""
        served = [] if self.task_events is None else [self.task_events.handler()]
        self._server = grpc.server(
            self._executor,
            handlers=[
                self.servicer.handlers(),
                *served,
                _Unimplemented(self.servicer.counters),
            ],
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ("grpc.max_send_message_length", _MAX_MESSAGE),
                ("grpc.so_reuseport", 0),
            ],
        )
        self.port = self._server.add_insecure_port(address)
        if self.port == 0 and not address.startswith("unix:"):
            raise RuntimeError(f"podcache-sim could not bind {address}")
        self._started = False

    def start(self) -> None:
        """Start serving (after encoding the population, so the first list is as fast as any)."""
        self.servicer.view()
        self._server.start()
        self._started = True

    def stop(self, grace: float = 0.5) -> None:
        """Release hung calls and event streams, stop within ``grace`` s, join the threads."""
        self._stopping.set()
        self.servicer.close()
        if self._started:
            self._server.stop(grace).wait()
        self._executor.shutdown(wait=True, cancel_futures=True)
