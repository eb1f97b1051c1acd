"""``podcache serve --cri-listen PATH``: the read-only CRI socket's gRPC server
(docs/architecture.md §10 rules 1-4 and 6), raw-bytes generic handlers on an event loop of its
own: no message is decoded but a list request's filter, no answer encoded. ``clock`` is the
cache's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import grp
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from podcache.cache import AsyncRuntimeCache
from podcache.cri.channels import MAX_RECEIVE_MESSAGE_BYTES
from podcache.cri.convert import split_items
from podcache.cri.eventstream import NO_EVENTS
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.wire.methods import SERVICE
from podcache.cri.wireitems import WireItems
from podcache.errors import EventsUnsupportedError, PodcacheError, ServeError
from podcache.model import PodList
from podcache.serve.crisock.calls import CallStats
from podcache.serve.crisock.forward import Forwarder, UpstreamError
from podcache.serve.crisock.lists import (
    ANSWER_MEMO,
    AnswerMemo,
    containers_answer,
    listed_state,
    normal_form,
    sandboxes_answer,
)
from podcache.serve.crisock.redact import answer_rewrites
from podcache.serve.crisock.relay import AnyRelay, make_relay
from podcache.serve.crisock.routes import Route, denial, is_cri, route_of
from podcache.serve.crisock.statuscalls import DEPARTED_TRAILER, ListedItem, StatusCalls
from podcache.serve.crisock.statuses import StatusStore
from podcache.serve.crisock.taskevents import TaskEvents
from podcache.serve.eventhub import EventClient, EventHub, SubscribersFullError
from podcache.unixsocket import BoundSocket, claim_socket_path

__all__ = [
    "ANSWER_MEMO",
    "DEFAULT_ACCESS",
    "DEFAULT_LIMITS",
    "CRILimits",
    "CRISocket",
    "CRISocketError",
    "SocketAccess",
    "group_id",
    "group_refusal",
    "mode_warning",
]


FAIR_MARGIN = 64
"""Calls below gRPC's bound (``max_calls``) at which the relay's rule 3 starts."""


@dataclass(frozen=True, slots=True)
class CRILimits:
    """The socket's bounds (docs/architecture.md §10 rule 6)."""

    max_connections: int = 1024
    """Connections at once (the relay's rule 1)."""
    max_calls: int = 1024
    """Calls at once over all connections; one more answers RESOURCE_EXHAUSTED."""
    max_streams_per_connection: int = 100
    """HTTP/2 streams, so calls, one connection may have open at once."""
    max_request_bytes: int = 64 * 1024
    """A request message at most, and its metadata (a hard bound, counted as HPACK does)."""
    max_answer_bytes: int = MAX_RECEIVE_MESSAGE_BYTES
    """An answer at most: what a CRI client receives by default."""
    idle_seconds: float = 75.0
    """A connection without calls this long is closed (``--idle-timeout``, gRPC's)."""
    handshake_seconds: float = 5.0
    """The relay's rule 2, and gRPC's ``grpc.server_handshake_timeout_ms``."""
    max_event_streams: int = 64
    """GetContainerEvents subscribers at once (``EventHub.max_clients``)."""


@dataclass(frozen=True, slots=True)
class SocketAccess:
    """Who may connect: the socket file's mode (0600 unless told) and group."""

    mode: int = 0o600
    group: int | None = None


DEFAULT_LIMITS = CRILimits()
DEFAULT_ACCESS = SocketAccess()


class CRISocketError(ServeError):
    """The CRI socket cannot serve a ``--cri-listen`` path: the message names it and why."""


class _FailureError(Exception):
    """A call's failure: the status to answer with."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


async def _abort(context: grpc.aio.ServicerContext[Any, Any], failure: _FailureError) -> NoReturn:
    await context.abort(failure.code, failure.details)
    raise AssertionError("abort returned")  # pragma: no cover


def _remaining(context: grpc.aio.ServicerContext[Any, Any]) -> float | None:
    left = context.time_remaining()
    return None if left is None or left > 1e9 else left


def _sandboxes(pods: PodList, items: WireItems, request: Any) -> bytes | None:
    return sandboxes_answer(pods, items, request.filter)


def _containers(pods: PodList, items: WireItems, request: Any) -> bytes | None:
    return containers_answer(pods, items, request.filter)


_LIST = SERVICE
_EVENTS = _LIST + "GetContainerEvents"
_LISTS: dict[str, tuple[type[Any], Callable[[PodList, WireItems, Any], bytes | None], str]] = {
    _LIST + "ListPodSandbox": (pb.ListPodSandboxRequest, _sandboxes, _LIST + "ListPodSandbox"),
    _LIST + "ListContainers": (pb.ListContainersRequest, _containers, _LIST + "ListContainers"),
    # KEP-5825: the same filter (field 1) and the same items (field 1) as the unary call's.
    _LIST + "StreamPodSandboxes": (
        pb.StreamPodSandboxesRequest,
        _sandboxes,
        _LIST + "ListPodSandbox",
    ),
    _LIST + "StreamContainers": (pb.StreamContainersRequest, _containers, _LIST + "ListContainers"),
}
STREAM_SLICE_BYTES = 1024 * 1024
"""A streamed list's messages hold whole items, about this many bytes each (the last fewer)."""

Context = grpc.aio.ServicerContext[Any, Any]
Answers = AsyncGenerator[bytes, None]


class CRISocket:
    """The socket's server: ``start()`` on the event loop that runs ``cache``, ``stop()``. It
    runs on its own loop in the thread ``podcache-cri``; the cache, the hub's stream and the
    publish hook on the cache's loop (§10 rule 1)."""

    task_events: TaskEvents | None = None
    """containerd's own events for the status store (``taskevents``), once started."""

    def __init__(
        self,
        paths: list[str],
        *,
        cache: AsyncRuntimeCache,
        items: WireItems,
        forwarder: Forwarder,
        hub: EventHub,
        wait: float,
        access: SocketAccess = DEFAULT_ACCESS,
        limits: CRILimits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
        redact_env: bool = False,
        statuses: StatusStore | None = None,
    ) -> None:
        self._paths = paths
        self._rewrites = answer_rewrites(redact_env=redact_env)
        store = statuses or StatusStore(cache.cache_period, clock=clock)
        self.statuses = StatusCalls(store, forwarder, self._rewrites, self._item_listed)
        """The status calls (``statuscalls``): their store and their counts."""
        self._cache = cache
        self._items = items
        self._forwarder = forwarder
        self._hub = hub
        self._wait = wait
        self._access = access
        self._limits = limits
        self._cache_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the socket's own
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._grace = 1.0  # seconds calls in flight get at stop()
        self.relay: AnyRelay | None = None
        """The listening sockets' relay to gRPC (``relay``), once serving."""
        self._lock = threading.Lock()
        self._memo = AnswerMemo(None)
        self.calls = CallStats()
        """Calls answered, by method and gRPC status code, and how long each took."""
        self.list_forwards = 0
        """List calls forwarded because an item's bytes were missing (``lists``)."""
        self.in_flight = 0
        """Calls being answered now (on the socket's loop), over all connections."""
        self._bound: list[BoundSocket] = []
        """The socket files this server bound, each removed only while it is still ours."""
        self._latest: tuple[PodList, float] | None = None
        self._asked = False
        self._clock = clock
        cache.on_publish(self._published)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Bind every path and serve on the socket's loop, in its thread (call on the event
        loop that runs the cache). A path that cannot be claimed or bound is a
        ``CRISocketError`` naming it, raised here; ``stop`` releases what was bound."""
        self._cache_loop = asyncio.get_running_loop()
        self._hub.bind(self._cache_loop)
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        thread = self._thread = threading.Thread(
            target=self._run, args=(started,), name="podcache-cri", daemon=True
        )
        thread.start()
        try:
            started.result()
        except BaseException:
            thread.join()
            raise

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # this thread's: gRPC's aio finds it so
        try:
            loop.run_until_complete(self._serve(started))
        except BaseException as error:
            if not started.done():
                started.set_exception(error)
        finally:
            _end_tasks(loop)
            loop.close()

    def _server(self) -> grpc.aio.Server:
        limits = self._limits
        return grpc.aio.server(
            handlers=[_Handlers(self)],
            maximum_concurrent_rpcs=limits.max_calls,
            options=[
                ("grpc.max_receive_message_length", limits.max_request_bytes),
                ("grpc.max_send_message_length", limits.max_answer_bytes),
                ("grpc.max_metadata_size", limits.max_request_bytes),
                ("grpc.absolute_max_metadata_size", limits.max_request_bytes),
                ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
                # The relay's bound is the one clients meet; this one has room for a
                # connection being replaced (rule 1 of relay).
                ("grpc.max_allowed_incoming_connections", limits.max_connections + 64),
                ("grpc.max_connection_idle_ms", int(limits.idle_seconds * 1000)),
                ("grpc.server_handshake_timeout_ms", int(limits.handshake_seconds * 1000)),
                ("grpc.so_reuseport", 0),
            ],
        )

    async def _serve(self, started: concurrent.futures.Future[None]) -> None:
        """gRPC on a private socket; the ``--cri-listen`` paths relayed to it (``relay``)."""
        self._stopping = asyncio.Event()
        private = tempfile.mkdtemp(prefix="podcache-cri-")  # mode 0700
        try:
            target = os.path.join(private, "grpc.sock")
            server = self._server()
            server.add_insecure_port(f"unix:{target}")
            limits = self._limits
            relay = self.relay = make_relay(
                target,
                max_connections=limits.max_connections,
                handshake_seconds=limits.handshake_seconds,
                fair_calls=limits.max_calls - FAIR_MARGIN,
            )
            listening = [self._bind(path) for path in self._paths]
            await server.start()
            for each in listening:
                await relay.serve(each)
            store = self.statuses.store
            if relay.mirror is not None and store.monotonic:
                store.mirror_to(relay.mirror)  # the C relay answers what the store would
            started.set_result(None)
            await self._stopping.wait()
            await relay.stop_accepting()
            await server.stop(self._grace)
            store.mirror_to(None)  # before the core goes: events go on arriving
            await relay.aclose()
        finally:
            shutil.rmtree(private, ignore_errors=True)

    def _bind(self, path: str) -> socket.socket:
        """``path``'s listening socket, born 0600, then given the socket's mode and group."""
        try:
            claim_socket_path(path)
        except OSError as error:
            raise CRISocketError(f"--cri-listen {path}: {error}") from None
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # born 0600: no window in which others may connect
        try:
            listening.bind(path)
        except OSError as error:
            listening.close()
            raise CRISocketError(
                f"--cri-listen {path}: cannot listen there ({error.strerror})"
            ) from None
        finally:
            os.umask(old_umask)
        listening.listen(socket.SOMAXCONN)
        listening.setblocking(False)
        bound = BoundSocket.record(path)
        self._bound.append(bound)
        try:
            bound.set_access(self._access.mode, self._access.group)
        except OSError as error:
            listening.close()
            raise CRISocketError(f"--cri-listen {path}: {error}") from None
        return listening

    async def stop(self, grace: float = 1.0) -> None:
        """Stop serving (calls in flight get ``grace`` s), remove the sockets it bound."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is not None and stopping is not None and thread is not None:
            self._grace = grace
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                loop.call_soon_threadsafe(stopping.set)
            await asyncio.to_thread(thread.join)
        self._forwarder.close()
        for bound in self._bound:
            bound.remove()
        self._bound.clear()

    # -- counting ------------------------------------------------------------------------------
    def count(self, path: str, code: grpc.StatusCode, started: float | None = None) -> None:
        """One call answered; ``started``: its ``perf_counter`` start, to time it."""
        seconds = None if started is None else time.perf_counter() - started
        self.calls.record(path, code.name, seconds)

    @property
    def paths(self) -> list[str]:
        """The ``--cri-listen`` paths."""
        return list(self._paths)

    @property
    def forwarder(self) -> Forwarder:
        return self._forwarder

    @property
    def hub(self) -> EventHub:
        return self._hub

    def bounded(self, path: str, answer: bytes) -> bytes:
        """``answer`` when within ``max_answer_bytes``; else the call's RESOURCE_EXHAUSTED
        (sent by us: gRPC's own refusal of it is logged as a servicer's error)."""
        limit = self._limits.max_answer_bytes
        if len(answer) > limit:
            raise _FailureError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{path.lstrip('/')}: the answer is {len(answer)} bytes, past the CRI socket's "
                f"{limit}-byte bound (a CRI client's receive limit): filter the list, or "
                "stream it (StreamPodSandboxes, StreamContainers)",
            )
        return answer

    # -- lists ---------------------------------------------------------------------------------
    def _published(self, publication: Any) -> None:
        """The cache's publish hook (on its loop): the newest snapshot and its timestamp."""
        self._latest = (publication.pods, publication.timestamp)
        self._items.prune(publication.pods)

    async def _snapshot(self, remaining: float | None) -> PodList:
        """The all view's pods by the cache's rules, on the socket's loop (§10 rule 3)."""
        pods = self._cache.get_pods_nowait()
        if pods is not None:
            return pods
        latest = self._latest
        if latest is not None and self._clock() - latest[1] <= self._cache.cache_period:
            self._ask_refresh_ahead()
            return latest[0]
        loop = self._cache_loop
        assert loop is not None
        budget = remaining or self._wait
        future: concurrent.futures.Future[PodList] = asyncio.run_coroutine_threadsafe(
            self._cache.get_pods(timeout=budget), loop
        )
        try:
            return await asyncio.wrap_future(future)
        except TimeoutError:
            raise _FailureError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"podcache: no snapshot of runtime {self._hub.endpoint} within {budget:g}s",
            ) from None
        except PodcacheError as error:
            raise _FailureError(grpc.StatusCode.UNAVAILABLE, f"podcache: {error}") from None

    async def _item_listed(
        self, sandbox: bool, ident: str, remaining: float | None
    ) -> ListedItem | None:
        """The item's state in the all view's snapshot by the cache's rules, and until when
        that snapshot is within the period (now when it is not the newest published one);
        None when not listed or no snapshot came."""
        try:
            pods = await self._snapshot(remaining)
        except _FailureError:
            return None
        state = listed_state(pods, sandbox, ident)
        if state is None:
            return None
        latest = self._latest
        if latest is not None and latest[0] is pods:
            return ListedItem(state, latest[1] + self._cache.cache_period)
        return ListedItem(state, self._clock())

    def _ask_refresh_ahead(self) -> None:
        """Have the cache's loop make the ``get_pods`` call that starts the refresh-ahead (a
        hit: it returns at once); one asked at a time."""
        if self._asked:
            return
        self._asked = True
        loop = self._cache_loop
        assert loop is not None

        def ask() -> None:
            task = loop.create_task(self._cache.get_pods())
            task.add_done_callback(self._asked_done)

        loop.call_soon_threadsafe(ask)

    def _asked_done(self, task: asyncio.Task[PodList]) -> None:
        self._asked = False
        if not task.cancelled():
            task.exception()  # retrieved: a failure is the next caller's to see

    async def listed(self, path: str, request: bytes, context: Context) -> bytes:
        """A list call's answer from the cache (forwarded when ``lists`` cannot answer)."""
        message_type, answer, _ = _LISTS[path]
        pods = await self._snapshot(_remaining(context))
        memo = self._memo
        if memo.pods is not pods:
            memo = self._memo = AnswerMemo(pods)
        data = memo.sent(path, request)  # a hit: the bytes sent before, no request decoded
        if data is None:
            try:
                parsed = message_type.FromString(request)
            except DecodeError:
                raise _FailureError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{path.lstrip('/')}: the request is not a {message_type.__name__}",
                ) from None
            form = normal_form(parsed)
            data = memo.formed(path, form)
            if data is None:
                data = answer(pods, self._items, parsed)
            if data is None:
                self.list_forwards += 1
                unary = _LISTS[path][2]  # a streamed list is asked as the unary call
                return await self.forwarded(unary, request, context, keep=False)
            memo.keep(path, request, form, data)
        self._forwarder.count_saved(path)
        return data

    async def streamed(
        self, path: str, request: bytes, context: Context
    ) -> AsyncGenerator[bytes, None]:
        """StreamPodSandboxes / StreamContainers: the list answer in slices of whole items (each
        slice is a valid Stream*Response: its items are field 1, as the list answer's). A
        runtime that must be asked (an item's bytes missing) is asked the unary call."""
        data = await self.listed(path, request, context)
        pieces = split_items(data, STREAM_SLICE_BYTES)
        if pieces is None:
            yield data  # one message (also when no item is selected)
            return
        for piece in pieces:
            yield bytes(piece)

    async def forwarded(self, path: str, request: bytes, context: Context, *, keep: bool) -> bytes:
        rewrite = self._rewrites.get(path)
        try:
            answer = await self._forwarder.call(path, request, _remaining(context), keep=keep)
            return answer if rewrite is None else rewrite(answer)
        except UpstreamError as error:
            raise _FailureError(error.code, error.details) from None
        except ValueError as error:  # the rewrite could not read the answer: never pass it on
            raise _FailureError(grpc.StatusCode.INTERNAL, f"podcache: {error}") from None

    async def status(self, path: str, request: bytes, context: Context) -> bytes:
        """ContainerStatus / PodSandboxStatus (``statuscalls``); a departed item's answer
        carries ``podcache-departed`` in its trailing metadata."""
        try:
            answer = await self.statuses.answer(path, request, _remaining(context))
        except UpstreamError as error:
            raise _FailureError(error.code, error.details) from None
        except ValueError as error:  # the rewrite could not read the answer: never pass it on
            raise _FailureError(grpc.StatusCode.INTERNAL, f"podcache: {error}") from None
        if answer.departed is not None:
            context.set_trailing_metadata(((DEPARTED_TRAILER, answer.departed),))
        return answer.data

    # -- events --------------------------------------------------------------------------------
    async def events(
        self, path: str, request: bytes, context: Context
    ) -> AsyncGenerator[bytes, None]:
        """GetContainerEvents: the hub's events for this client until it leaves or is ended."""
        client = await self._attach()
        if client is None:
            return
        try:
            while (data := await client.next()) is not None:
                yield data
            assert client.end is not None
            raise _FailureError(*client.end)
        finally:
            client.detach()

    async def _attach(self) -> EventClient | None:
        """The hub's client for one subscriber; None for a runtime whose stream ends at once
        with OK and no event (CRI-O's default): the subscriber's ends so too."""
        try:
            return await self._hub.attach(self._wait)
        except SubscribersFullError as error:
            raise _FailureError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)) from None
        except TimeoutError:
            raise _FailureError(
                grpc.StatusCode.UNAVAILABLE,
                f"GetContainerEvents: runtime {self._hub.endpoint} did not open its event "
                f"stream within {self._wait:g}s",
            ) from None
        except PodcacheError as error:
            if isinstance(error, EventsUnsupportedError) and error.reason == NO_EVENTS:
                return None
            code = (
                grpc.StatusCode.UNIMPLEMENTED
                if isinstance(error, EventsUnsupportedError)
                else grpc.StatusCode.UNAVAILABLE
            )
            raise _FailureError(code, f"GetContainerEvents: {error}") from None


_GenericHandler: Any = grpc.GenericRpcHandler  # the stubs make it generic, grpcio does not
_Unary = Callable[[str, bytes, Context], Awaitable[bytes]]
_Streaming = Callable[[str, bytes, Context], AsyncGenerator[bytes, None]]


class _Handlers(_GenericHandler):  # type: ignore[misc]
    """Every method of the CRI services: its route's handler, or the denial. Each streamed
    message is awaited: a client that does not read parks a coroutine, never a thread."""

    def __init__(self, socket: CRISocket) -> None:
        self._socket = socket
        self._table: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        path: str = handler_call_details.method
        if not is_cri(path):
            return None  # another service: gRPC answers UNIMPLEMENTED
        handler = self._table.get(path)
        if handler is None:
            handler = self._handler(path, route_of(path))
            if len(self._table) < 256:  # paths are the client's: bound what is kept
                self._table[path] = handler
        return handler

    def _handler(self, path: str, route: Route | None) -> grpc.RpcMethodHandler[Any, Any]:
        socket = self._socket
        if route is None:
            return grpc.stream_stream_rpc_method_handler(self._denied(path))
        if route is Route.FAN_OUT:
            return grpc.unary_stream_rpc_method_handler(self._streaming(path, socket.events))
        if route is Route.CACHE_STREAM:
            return grpc.unary_stream_rpc_method_handler(self._streaming(path, socket.streamed))
        if route is Route.CACHE:
            behaviour: _Unary = socket.listed
        elif route is Route.STATUS:
            behaviour = socket.status
        else:
            keep = route is Route.CACHED_FORWARD

            async def behaviour(path: str, request: bytes, context: Context) -> bytes:
                return await socket.forwarded(path, request, context, keep=keep)

        return grpc.unary_unary_rpc_method_handler(self._unary(path, behaviour))

    def _denied(self, path: str) -> Callable[[Any, Context], Awaitable[None]]:
        socket = self._socket

        async def deny(requests: Any, context: Context) -> None:
            socket.count(path, grpc.StatusCode.PERMISSION_DENIED)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, denial(path))

        return deny

    def _unary(self, path: str, behaviour: _Unary) -> Callable[[bytes, Context], Awaitable[bytes]]:
        socket = self._socket

        async def handle(request: bytes, context: Context) -> bytes:
            started = time.perf_counter()
            socket.in_flight += 1
            try:
                answer = socket.bounded(path, await behaviour(path, request, context))
            except _FailureError as failure:
                socket.count(path, failure.code, started)
                await _abort(context, failure)
            finally:
                socket.in_flight -= 1
            socket.count(path, grpc.StatusCode.OK, started)
            return answer

        return handle

    def _streaming(
        self, path: str, behaviour: _Streaming
    ) -> Callable[[bytes, Context], Awaitable[None]]:
        socket = self._socket
        timed = path != _EVENTS  # an event stream lasts as long as its client wants

        async def handle(request: bytes, context: Context) -> None:
            code = grpc.StatusCode.CANCELLED  # the client left (the coroutine is cancelled)
            started = time.perf_counter() if timed else None
            socket.in_flight += 1
            try:
                # Closed here, not when collected: a client's leave detaches it at once.
                async with contextlib.aclosing(behaviour(path, request, context)) as answers:
                    async for data in answers:
                        await _write(context, data)
                code = grpc.StatusCode.OK
            except _FailureError as failure:
                code = failure.code
                await _abort(context, failure)
            finally:
                socket.in_flight -= 1
                socket.count(path, code, started)

        return handle


_END_WAIT = 1.0
"""Seconds the calls gRPC cancelled at stop get to end by themselves before they are cancelled
(a cancelled gRPC call task logs an error)."""


def _end_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what still runs on the socket's stopped loop (calls gRPC left behind past the
    grace) and let it end, then close the async generators: nothing is destroyed pending."""
    tasks = asyncio.all_tasks(loop)
    if tasks:  # gRPC cancelled its calls at stop: most end by themselves, given a turn or two
        _, tasks = loop.run_until_complete(asyncio.wait(tasks, timeout=_END_WAIT))
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks))
    loop.run_until_complete(loop.shutdown_asyncgens())


async def _write(context: Context, data: bytes) -> None:
    """Send ``data``; a write that fails (the call ended under it, §10 rule 1) is
    CancelledError, as gRPC raises in a cancelled call's handler: a status sent after it would
    be refused and logged as the servicer's error."""
    try:
        await context.write(data)
    except Exception:  # ExecuteBatchError, which grpc does not export
        raise asyncio.CancelledError from None


_CAP_CHOWN = 0
"""The capability bit that lets a process give a file to a group it is not in."""


def _has_capability(bit: int, status_path: str = "/proc/self/status") -> bool:
    try:
        with open(status_path, encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0  # no /proc: root is taken to hold it, as it usually does


def group_refusal(gid: int, status_path: str = "/proc/self/status") -> str | None:
    """Why this process cannot give its socket to group ``gid`` (None: it can). Only a process
    in the group, or one with CAP_CHOWN, may (chown(2))."""
    if gid == os.getegid() or gid in os.getgroups() or _has_capability(_CAP_CHOWN, status_path):
        return None
    groups = ", ".join(str(each) for each in sorted({os.getegid(), *os.getgroups()}))
    return (
        f"podcache runs as uid {os.geteuid()} in groups {groups} without CAP_CHOWN, so it "
        f"cannot give its socket to group {gid}: run it in that group (e.g. the pod's "
        "supplementalGroups) or name one of its groups"
    )


def mode_warning(mode: int) -> str | None:
    """What is wrong with socket mode ``mode``, if anything worth a warning."""
    if mode & 0o007:
        return (
            f"--cri-socket-mode {mode:04o} lets every user of the node connect, and read every "
            "container's environment through the socket; give 0660 and --cri-socket-group"
        )
    return None


def group_id(name: str) -> int:
    """``--cri-socket-group``: a group name or number; KeyError naming it when unknown."""
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise KeyError(f"no group {name!r} on this node") from None
