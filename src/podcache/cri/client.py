"""CRI getters CRIRuntime (threads) and AsyncCRIRuntime (asyncio) over gRPC; no grouping rules
(docs/architecture.md §4, "Calls", and the modules it names for each concept).

The connection discipline, beside §4's:

- one channel at a time per getter, insecure, on the unix socket with authority ``localhost``,
  reconnect backoff 100 ms to 3 s, minimum connect timeout 5 s (the kubelet's), and its own
  subchannel (``grpc.use_local_subchannel_pool``): no other channel in the process shares its
  connection or its reconnect backoff;
- every call carries the deadline (``timeout``) and ``wait_for_ready``;
- a call on a READY channel goes straight to gRPC (the hot path: nothing else is done). On any
  other channel it first connects to the endpoint with a plain socket and closes again: a
  missing socket, a refused connection or a denied one fails at once, not at the deadline.
  When the endpoint accepts but the channel is in reconnect backoff, the channel is replaced
  by a fresh one, which connects at once: the call never waits for a reconnect timer that may
  fire after its deadline. Calls still waiting on the old channel go on on the new one;
- a call that reaches its deadline is followed by one short probe of the endpoint (a plain
  connect that sends the HTTP/2 preface, at most ``min(0.5, timeout)`` seconds) to say what
  is wrong: nothing there, nobody listening, something that is not gRPC, or a runtime that is
  up but does not answer.

Every failure is raised as a ``podcache.errors`` exception naming the endpoint, with the gRPC
error as its ``__cause__``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from google.protobuf.message import Message

from podcache.cri.caller import SyncCaller
from podcache.cri.channels import (
    MAX_RECEIVE_MESSAGE_BYTES,
    channel_options,
)
from podcache.cri.convert import Listing, Memo, read_containers, read_sandboxes
from podcache.cri.converter import (
    _READERS,
    INLINE_POD_BYTES,
    READ_PIECE_BYTES,
    _converted,
    _Converter,
    _Held,
    _read_both,
    _read_messages,
)
from podcache.cri.endpoint import RuntimeAddress
from podcache.cri.eventstream import AsyncContainerEventStream, ContainerEventStream
from podcache.cri.eventwire import EventFields
from podcache.cri.failures import (
    _closed_error,
    _not_cri_message,
)
from podcache.cri.listcalls import LIST_CALL_THREADS, _ListCaller
from podcache.cri.liststream import MAX_STREAMED_LIST_BYTES, STREAMED, StreamedAnswer
from podcache.cri.networks import ListingPass, NetworkMemo, StatusReader, loop_turn
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import (
    CRI_VERSION,
    _check_uid,
    _id_requests,
    _list_requests,
    _owner_of,
    _pod_requests,
)
from podcache.cri.values import (
    RuntimeCondition,
    RuntimeStatus,
    RuntimeVersion,
    _status_from,
)
from podcache.cri.wireitems import WireItems
from podcache.errors import (
    CRIError,
    MalformedListingError,
    RuntimeProtocolError,
)
from podcache.model import Pod, PodList

__all__ = [
    "CRI_VERSION",
    "DEFAULT_TIMEOUT",
    "LIST_CALL_THREADS",
    "MAX_RECEIVE_MESSAGE_BYTES",
    "MAX_STREAMED_LIST_BYTES",
    "READ_PIECE_BYTES",
    "AsyncCRIRuntime",
    "CRIRuntime",
    "RuntimeCondition",
    "RuntimeStatus",
    "RuntimeVersion",
    "channel_options",
]

DEFAULT_TIMEOUT = 2.0
"""Seconds allowed for each call (crictl's default)."""

_R = TypeVar("_R")


def _read_answer(url: str, method: str, read: Callable[[bytes], Listing], data: bytes) -> Listing:
    """A list answer's bytes, read; ``RuntimeProtocolError`` when they are not one."""
    try:
        return read(data)
    except MalformedListingError:
        raise RuntimeProtocolError(url, _not_cri_message(method)) from None


class _Base(RuntimeAddress):
    """What the twins share: endpoint, timeout and the memo."""

    def __init__(self, endpoint: str | None, timeout: float, config_path: str | None) -> None:
        super().__init__(endpoint, timeout, config_path)
        # The last listing's conversions: a refresh re-reads only what changed (see convert).
        self._memo = Memo()
        # Each sandbox's IPs, asked once per sandbox ID (see networks).
        self._networks = NetworkMemo()

    @property
    def invalid_ips(self) -> int:
        """IP strings the runtime's PodSandboxStatus answers (or events) carried that were not
        IP addresses, dropped (``networks``): a hostile runtime's, never a listing's error."""
        return self._networks.invalid_ips

    @property
    def status_calls(self) -> int:
        """PodSandboxStatus calls made (one per new sandbox ID, plus retries of failed ones)."""
        return self._networks.status_calls

    @property
    def status_failures(self) -> int:
        """PodSandboxStatus calls that failed (their pods' IPs stay unknown until a retry)."""
        return self._networks.status_failures

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint!r}, timeout={self._timeout:g})"


class CRIRuntime(_Base):
    """A CRI runtime getter for threads: ``get_pods(all)`` as the kubelet lists pods.

    Safe to share between threads. Use it as a context manager, or call ``close()``.
    ``endpoint``: ``unix:///path``, an absolute socket path, loopback ``tcp://HOST:PORT``,
    or None to resolve it as crictl does (``config_path`` names the crictl config file).
    ``timeout``: the deadline of each call, in seconds. Its calls are made by a
    ``caller.SyncCaller`` (deadline, channel replacement, errors), which it delegates to.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        config_path: str | None = None,
    ) -> None:
        super().__init__(endpoint, timeout, config_path)
        self._caller = SyncCaller(self._endpoint, self._timeout, type(self).__name__)
        self._statuses = StatusReader(self._networks, self._caller.statuses)

    def version(self) -> RuntimeVersion:
        """The runtime's Version answer: asked once per channel, then remembered.

        A channel in reconnect backoff is replaced first (see ``SyncCaller._usable``): the
        new one asks again, so a restarted runtime's answer is fresh.
        """
        return self._caller.version()

    def status(self, verbose: bool = False) -> RuntimeStatus:
        """The runtime's conditions (RuntimeReady, NetworkReady) and, if verbose, its info."""
        self.version()
        answer, _ = self._caller.call(
            "Status", pb.StatusRequest(verbose=verbose), pb.StatusResponse
        )
        return _status_from(answer)

    @property
    def list_streaming(self) -> bool | None:
        """Whether the runtime streams lists (KEP-5825), as the current channel learnt it at its
        first listing: True (listings are streamed), False (its streaming calls are
        UNIMPLEMENTED: listings are unary, each answer bound by gRPC's 16 MiB), None (not
        asked yet on this channel)."""
        return self._caller.list_streaming

    def _listings(
        self, sandbox_request: pb.ListPodSandboxRequest, container_request: pb.ListContainersRequest
    ) -> tuple[Listing, Listing]:
        """The answers of the two list calls, read."""
        sandboxes = self._listing("ListPodSandbox", sandbox_request)
        containers = self._listing("ListContainers", container_request)
        return sandboxes, containers

    def _listing(self, method: str, request: Message) -> Listing:
        """One of a node's list calls, read: a unary answer is read in gRPC's thread; a streamed
        one (``SyncCaller.listing``) message by message, by the same reader, the rows joined."""
        answer, _ = self._caller.listing(method, request, Listing)
        if not isinstance(answer, StreamedAnswer):
            return answer
        twin = STREAMED[method][0]
        read = _READERS[twin]
        return _read_messages(
            lambda data: _read_answer(self.endpoint, twin, read, data), answer.parts
        )

    def _filtered_listings(
        self, sandbox_request: pb.ListPodSandboxRequest, container_request: pb.ListContainersRequest
    ) -> tuple[Listing, Listing]:
        """``_listings`` of a filter that names one pod or one ID: both calls at once on a
        connection of the caller's pool (docs/architecture.md §7 rule 6), read by the same
        reader as a node's listing."""
        answers = self._caller.pod_calls(
            (("ListPodSandbox", sandbox_request), ("ListContainers", container_request))
        )
        return (
            _read_answer(self.endpoint, "ListPodSandbox", read_sandboxes, answers[0]),
            _read_answer(self.endpoint, "ListContainers", read_containers, answers[1]),
        )

    def get_pods(self, all: bool = False) -> PodList:
        """The node's pods: running ones (ready sandboxes, running containers), or all."""
        runtime_name = self.version().runtime_name
        sandboxes, containers = self._listings(*_list_requests(all))
        listing = self._networks.begin(full=True)
        pods = _converted(runtime_name, sandboxes, containers, self._memo, listing)
        return self._statuses.complete(pods, listing, full=True)

    def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The pod with ``uid`` as ``get_pods(all)`` would list it, or None: the same two list
        calls, each filtered by the kubelet's pod-UID label, converted by the same rules (and
        reader). Its cost is that pod's, not the node's. The listing memo is left alone."""
        _check_uid(uid)
        runtime_name = self.version().runtime_name
        sandboxes, containers = self._filtered_listings(*_pod_requests(uid, all))
        listing = self._networks.begin(full=False, pod=uid)
        pods = _converted(runtime_name, sandboxes, containers, None, listing)
        return self._statuses.complete(pods, listing, full=False).by_uid(uid)

    def pod_uid_of(self, ident: str) -> str | None:
        """The UID of the pod whose container or sandbox has the bare ID ``ident``, as the
        runtime lists it now (any state): ListPodSandbox and ListContainers filtered by that
        ID. None when the runtime lists no such item."""
        runtime_name = self.version().runtime_name
        sandboxes, containers = self._filtered_listings(*_id_requests(ident))
        return _owner_of(_converted(runtime_name, sandboxes, containers, None), ident)

    def container_events(self) -> ContainerEventStream:
        """The runtime's container events (GetContainerEvents), from now on, as an iterator.

        ``for event in runtime.container_events()``. It subscribes on first use (or
        ``open()``): an unreachable endpoint fails at once, a runtime without the RPC raises
        ``EventsUnsupportedError``; stream failures are the errors of the other calls.
        """
        stream = self._caller.container_events()
        stream.sandbox_sink = self._networks.learn_event
        stream.runtime_type = self._runtime_type
        return stream

    def _runtime_type(self) -> str:
        """The runtime's name from its Version answer if one was had, else "" (never a call:
        the event stream's thread asks it for each event's pod)."""
        version = self._caller.line.version
        return "" if version is None else version.runtime_name

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled. Idempotent."""
        self._caller.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class _PodAnswers:
    """One pod's two list answers (sandboxes, containers), and whether they list every state
    (``all``)."""

    data: tuple[bytes, bytes]
    all: bool


class _PodFetch:
    """The list calls of one pod's relist, shared by the relists asked before they begin.

    Made as a task of its own at the first ask; it begins on a later turn of the loop, so an
    ask in the same turn (the other view's, on the same event) shares it. ``wants_all`` is
    whether any sharer asked for every state; ``answers`` is awaited shielded by each."""

    __slots__ = ("answers", "uid", "wants_all")

    def __init__(
        self, uid: str, fetch: Callable[[_PodFetch], Coroutine[Any, Any, _PodAnswers]]
    ) -> None:
        self.uid = uid
        self.wants_all = False
        self.answers: asyncio.Task[_PodAnswers] = asyncio.ensure_future(fetch(self))
        self.answers.add_done_callback(_retrieved)


def _retrieved(task: asyncio.Task[_PodAnswers]) -> None:
    """A fetch every sharer left: its failure is nobody's (retrieved, not logged)."""
    if not task.cancelled():
        task.exception()


class AsyncCRIRuntime(_Base):
    """The asyncio twin of CRIRuntime: same arguments, same methods, awaited.

    Use it from one event loop; the channel is opened on first use, inside that loop. Its
    calls and event stream are made by a ``listcalls._ListCaller`` it holds (a sync channel,
    worker threads) and delegates to.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        config_path: str | None = None,
    ) -> None:
        super().__init__(endpoint, timeout, config_path)
        self._closed = False
        self._list_caller: _ListCaller | None = None  # every call, made in its threads
        self._converter = _Converter(self.endpoint)
        # One pod's answers are read in a thread of their own: never queued behind a full
        # listing's conversion.
        self._pod_converter = _Converter(self.endpoint)
        self._statuses = StatusReader(self._networks, self._statuses_of)
        self._pod_fetches: dict[str, _PodFetch] = {}  # relists of one pod not yet begun

    def _statuses_of(self, sandbox_ids: Sequence[str]) -> list[EventFields | CRIError]:
        """Sandboxes' PodSandboxStatus, made together by the list calls' caller (in a thread)."""
        return self._lister().statuses(sandbox_ids)

    async def _with_ips(self, pods: PodList, listing: ListingPass, *, full: bool) -> PodList:
        """``StatusReader.complete``: in a worker thread when it makes calls or prunes the memo
        after a full listing (O(the pods)); a relist with none to make stays on the loop."""
        if not full and not self._networks.to_ask(listing):
            return self._statuses.complete(pods, listing, full=full)
        pace = loop_turn(asyncio.get_running_loop())  # rounds yield to the loop (networks)
        return await asyncio.to_thread(self._statuses.complete, pods, listing, full=full, pace=pace)

    def _check_open(self) -> None:
        if self._closed:
            raise _closed_error(type(self).__name__, self.endpoint)

    async def version(self) -> RuntimeVersion:
        """The runtime's Version answer: asked once per channel, then remembered.

        A channel in reconnect backoff is replaced first (see ``SyncCaller._usable``): the new
        one asks again, so a restarted runtime's answer is fresh.
        """
        version = self._known_version()
        if version is None:
            version = await self._lister().version()
        return version

    def _known_version(self) -> RuntimeVersion | None:
        """The Version answer still good (``_ListCaller.known_version``), never a call."""
        lister = self._list_caller
        return None if lister is None else lister.known_version()

    async def status(self, verbose: bool = False) -> RuntimeStatus:
        """The runtime's conditions (RuntimeReady, NetworkReady) and, if verbose, its info."""
        await self.version()
        answer = await self._lister().call(
            "Status", pb.StatusRequest(verbose=verbose), pb.StatusResponse
        )
        return _status_from(answer)

    async def get_pods(self, all: bool = False) -> PodList:
        """The node's pods: running ones (ready sandboxes, running containers), or all.

        The list calls are made in worker threads (``_ListCaller``) and their answers read and
        converted in another, never on the event loop; the sandboxes are read before
        ListContainers is called. Cancelling the caller cancels the list call in flight.
        """
        runtime_name = (await self.version()).runtime_name
        lister = self._lister()
        sandbox_request, container_request = _list_requests(all)
        sandbox_answer = await lister.listing("ListPodSandbox", sandbox_request)
        convert = self._converter
        sandboxes = _Held()
        # Read before the second call, not while it runs: the two would contend for the GIL
        # with the event loop at once, and the loop loses the most (docs/architecture.md §4).
        await convert.run(self._read_sandboxes, sandboxes, *sandbox_answer)
        del sandbox_answer
        container_answer = await lister.listing("ListContainers", container_request)
        listing = self._networks.begin(full=True)
        pods = await convert.run(self._convert, runtime_name, sandboxes, container_answer, listing)
        return await self._with_ips(pods, listing, full=True)

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The twin of ``CRIRuntime.get_pod``: one pod's two filtered list calls, made off the
        event loop, their answers read on it up to ``INLINE_POD_BYTES``, else in the pod
        converter's thread. Relists of one pod asked before its calls begin share them
        (``_PodFetch``; docs/architecture.md §7 rule 6)."""
        _check_uid(uid)
        runtime_name = (await self.version()).runtime_name
        fetch = self._pod_fetches.get(uid)
        if fetch is None:
            fetch = self._pod_fetches[uid] = _PodFetch(uid, self._fetch_pod)
        fetch.wants_all = fetch.wants_all or all
        answers = await asyncio.shield(fetch.answers)
        listing = self._networks.begin(full=False, pod=uid)
        converter = self._pod_converter
        data, running_only = answers.data, not all and answers.all
        if len(data[0]) + len(data[1]) <= INLINE_POD_BYTES:  # a pod's few items: on the loop
            pods = _read_both(converter, runtime_name, *data, listing, running_only)
        else:
            pods = await converter.run(
                _read_both, converter, runtime_name, *data, listing, running_only
            )
        return (await self._with_ips(pods, listing, full=False)).by_uid(uid)

    async def _fetch_pod(self, fetch: _PodFetch) -> _PodAnswers:
        """``fetch``'s calls (a task of its own: a sharer's cancellation is its own)."""
        if self._pod_fetches.get(fetch.uid) is fetch:
            del self._pod_fetches[fetch.uid]  # begun: a later relist makes calls of its own
        listed_all = fetch.wants_all
        answers = await self._pod_calls(*_pod_requests(fetch.uid, listed_all))
        return _PodAnswers(answers, listed_all)

    async def _pod_calls(
        self,
        sandbox_request: pb.ListPodSandboxRequest,
        container_request: pb.ListContainersRequest,
    ) -> tuple[bytes, bytes]:
        """Both filtered list calls' answers, made together (``_ListCaller.pod_calls``)."""
        answers = await self._lister().pod_calls(
            (("ListPodSandbox", sandbox_request), ("ListContainers", container_request))
        )
        return answers[0], answers[1]

    async def pod_uid_of(self, ident: str) -> str | None:
        """The twin of ``CRIRuntime.pod_uid_of``."""
        pods = await self._filtered(*_id_requests(ident))
        return _owner_of(pods, ident)

    async def _filtered(
        self,
        sandbox_request: pb.ListPodSandboxRequest,
        container_request: pb.ListContainersRequest,
        listing: ListingPass | None = None,
    ) -> PodList:
        """The pods of two filtered list calls (small answers, made together:
        ``_ListCaller.pod_calls``), without the listing memo."""
        runtime_name = (await self.version()).runtime_name
        sandbox_bytes, container_bytes = await self._pod_calls(sandbox_request, container_request)
        converter = self._pod_converter
        return await converter.run(
            _read_both, converter, runtime_name, sandbox_bytes, container_bytes, listing
        )

    @property
    def list_streaming(self) -> bool | None:
        """The twin of ``CRIRuntime.list_streaming`` (the list calls' channel's)."""
        lister = self._list_caller
        return lister.list_streaming if lister is not None else None

    def _lister(self) -> _ListCaller:
        self._check_open()
        lister = self._list_caller
        if lister is None:
            lister = self._list_caller = _ListCaller(self._endpoint, self._timeout)
        return lister

    def _read_sandboxes(self, held: _Held, method: str, parts: list[bytes]) -> None:
        """In the converter's thread: read the sandboxes (the answer of ``method``, in
        ``parts``: one message, or a streamed answer's) into ``held``."""
        held.listing = self._converter.read_all(method, parts)

    def _convert(
        self,
        runtime_name: str,
        held: _Held,
        container_answer: tuple[str, list[bytes]],
        listing: ListingPass,
    ) -> PodList:
        """In the converter's thread: read the containers, then build the pods; both listings
        are released here too, off the loop."""
        sandboxes, held.listing = held.listing, None
        assert sandboxes is not None
        containers = self._converter.read_all(*container_answer)
        return _converted(runtime_name, sandboxes, containers, self._memo, listing)

    def keep_wire_items(self, items: WireItems) -> None:
        """Teach ``items`` every list answer this getter reads from now on (full listings and
        one pod's alike), in its converter thread: the CRI socket re-sends them
        (docs/architecture.md §10)."""
        self._converter.keeper = self._pod_converter.keeper = items.learn

    def container_events(self) -> AsyncContainerEventStream:
        """The runtime's container events as an async iterator (see ``CRIRuntime``'s).

        ``async for event in runtime.container_events()``; ``await stream.open()`` subscribes
        without waiting for an event, ``await stream.aclose()`` ends it. Read in a thread of
        its own: nothing of a message is received or read on the event loop (``eventstream``).
        """
        self._check_open()
        stream = self._lister().container_events()
        stream.sandbox_sink = self._networks.learn_event
        stream.runtime_type = self._runtime_type
        return AsyncContainerEventStream(stream)

    def _runtime_type(self) -> str:
        """The runtime's name from its Version answer if one is still good, else "" (never a
        call: the event stream's thread asks it for each event's pod)."""
        version = self._known_version()
        return "" if version is None else version.runtime_name

    async def close(self) -> None:
        """Close the channels; calls in flight are cancelled (a list call then fails with
        CRIError "was cancelled", as in CRIRuntime). Idempotent."""
        if not self._closed:
            self._closed = True
            self._converter.close()
            self._pod_converter.close()
            if self._list_caller is not None:
                self._list_caller.close()  # a call in flight ends CANCELLED

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
