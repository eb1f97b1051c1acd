"""CRI getters CRIRuntime (threads) and AsyncCRIRuntime (asyncio) over gRPC; no grouping rules.

They list sandboxes and containers the way the kubelet does and hand the responses to
``convert`` (which owns every grouping rule); endpoint lookup is ``endpoint``'s job. What lives
here is the connection discipline and the error story:

- one channel at a time per getter, insecure, on the unix socket with authority ``localhost``,
  receive limit 16 MiB, reconnect backoff 100 ms to 3 s, minimum connect timeout 5 s (the
  kubelet's), and its own subchannel (``grpc.use_local_subchannel_pool``): no other channel in
  the process shares its connection or its reconnect backoff;
- ``AsyncCRIRuntime`` has two: an asyncio one for Version and Status, and a sync one for the
  list calls, made in worker threads (``_ListCaller``), so that the list answers (8-12 MB at
  5,000 pods) never become bytes on the event loop; its Version is asked again when either
  is in reconnect backoff;
- one Version call per channel, made lazily by the first request (and retried until it
  succeeds): its ``runtime_name`` is the type of every ContainerID;
- a ``convert.Memo`` of the last listing, so a refresh converts only the items that changed;
- every call carries the deadline (``timeout``) and ``wait_for_ready``;
- a call on a READY channel goes straight to gRPC (the hot path: nothing else is done). On any
  other channel it first connects to the endpoint with a plain socket and closes again (tens of
  microseconds): a missing socket, a refused connection or a denied one fails at once, not at
  the deadline. When the endpoint accepts but the channel is in reconnect backoff (the runtime
  was down long enough for gRPC to wait seconds between attempts, and is back), the channel is
  replaced by a fresh one, which connects at once: the call never waits for a reconnect timer
  that may fire after its deadline. Calls still waiting on the old channel go on on the new one;
- a call that reaches its deadline is followed by one short probe of the endpoint (a plain
  connect that sends the HTTP/2 preface) to say what is wrong: nothing there, nobody
  listening, something that is not gRPC, or a runtime that is up but does not answer.

Every failure is raised as a ``podcache.errors`` exception naming the endpoint, with the gRPC
error as its ``__cause__``. The probe costs at most ``min(0.5, timeout)`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import math
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from podcache.cri.convert import (
    Listing,
    MalformedListingError,
    Memo,
    pods_from_listings,
    read_containers,
    read_sandboxes,
    split_items,
)
from podcache.cri.endpoint import Endpoint, resolve_endpoint
from podcache.cri.eventstream import (
    CONFIRM_SECONDS,
    AsyncContainerEventStream,
    ContainerEventStream,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import (
    CRIError,
    EventsUnsupportedError,
    RuntimeDeadlineError,
    RuntimeProtocolError,
    RuntimeUnavailableError,
)
from podcache.model import Pod, PodList

__all__ = [
    "CRI_VERSION",
    "DEFAULT_TIMEOUT",
    "LIST_CALL_THREADS",
    "MAX_RECEIVE_MESSAGE_BYTES",
    "READ_PIECE_BYTES",
    "AsyncCRIRuntime",
    "CRIRuntime",
    "RuntimeCondition",
    "RuntimeStatus",
    "RuntimeVersion",
    "channel_options",
]

CRI_VERSION = "0.1.0"
"""The version podcache sends in VersionRequest (the kubelet's)."""
DEFAULT_TIMEOUT = 2.0
"""Seconds allowed for each call (crictl's default)."""
MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024

_SERVICE = "/runtime.v1.RuntimeService/"
_PROBE_BUDGET = 0.5
# The HTTP/2 client connection preface and an empty SETTINGS frame: what gRPC sends first.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_FRAME_HEADER = 9
_H2_SETTINGS = 0x04

_R = TypeVar("_R")


# -- values -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    """The runtime's answer to Version (all four fields are non-empty)."""

    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True, slots=True)
class RuntimeCondition:
    """One runtime condition from Status (``RuntimeReady``, ``NetworkReady``, ...)."""

    type: str
    status: bool
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class RuntimeStatus:
    """The runtime's answer to Status: its conditions and (when verbose) its info map."""

    conditions: tuple[RuntimeCondition, ...]
    info: Mapping[str, str] = field(default_factory=dict)

    def condition(self, type: str) -> RuntimeCondition | None:
        """The condition of this type, or None when the runtime did not report it."""
        for condition in self.conditions:
            if condition.type == type:
                return condition
        return None

    @property
    def ready(self) -> bool:
        """True when both RuntimeReady and NetworkReady are reported and true."""
        return all(
            (c := self.condition(t)) is not None and c.status
            for t in ("RuntimeReady", "NetworkReady")
        )


def _version_from(url: str, response: pb.VersionResponse) -> RuntimeVersion:
    version = RuntimeVersion(
        response.version,
        response.runtime_name,
        response.runtime_version,
        response.runtime_api_version,
    )
    empty = [name for name in RuntimeVersion.__slots__ if not getattr(version, name)]
    if empty:
        raise RuntimeProtocolError(
            url, f"its Version answer has an empty {', '.join(empty)} (not a CRI runtime?)"
        )
    return version


def _status_from(response: pb.StatusResponse) -> RuntimeStatus:
    return RuntimeStatus(
        tuple(
            RuntimeCondition(c.type, c.status, c.reason, c.message)
            for c in response.status.conditions
        ),
        dict(response.info),
    )


def _list_requests(all: bool) -> tuple[pb.ListPodSandboxRequest, pb.ListContainersRequest]:
    """The kubelet's filters: running only (READY sandboxes, RUNNING containers), or none."""
    if all:
        return pb.ListPodSandboxRequest(), pb.ListContainersRequest(filter=pb.ContainerFilter())
    return (
        pb.ListPodSandboxRequest(
            filter=pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
        ),
        pb.ListContainersRequest(
            filter=pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
        ),
    )


POD_UID_LABEL = "io.kubernetes.pod.uid"
"""The kubelet's label naming a sandbox's or container's pod (``get_pod``'s filter)."""


def _pod_requests(uid: str, all: bool) -> tuple[pb.ListPodSandboxRequest, pb.ListContainersRequest]:
    """``_list_requests`` narrowed to one pod: the kubelet's pod-UID label as a selector, so
    every sandbox and container the kubelet would group into that pod is listed."""
    sandbox_request, container_request = _list_requests(all)
    sandbox_request.filter.label_selector[POD_UID_LABEL] = uid
    container_request.filter.label_selector[POD_UID_LABEL] = uid
    return sandbox_request, container_request


def _id_requests(ident: str) -> tuple[pb.ListPodSandboxRequest, pb.ListContainersRequest]:
    """Both list calls filtered by one ID, in every state: a container or a sandbox."""
    return (
        pb.ListPodSandboxRequest(filter=pb.PodSandboxFilter(id=ident)),
        pb.ListContainersRequest(filter=pb.ContainerFilter(id=ident)),
    )


def _check_uid(uid: object) -> str:
    if not isinstance(uid, str) or not uid:
        raise ValueError(f"uid must be a non-empty pod UID string, not {uid!r}")
    return uid


def _owner_of(pods: PodList, ident: str) -> str | None:
    """The UID of the pod of ``ident`` in a listing filtered by that ID (the runtime's filter
    is not trusted: the ID must be the item's own)."""
    for pod in pods:
        if any(part.id.id == ident for part in (*pod.containers, *pod.sandboxes)):
            return pod.id
    return None


def channel_options(endpoint: Endpoint) -> list[tuple[str, Any]]:
    """gRPC channel options matching the kubelet's CRI client."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 3_000),
        # In gRPC core this is the minimum connect timeout (Go: MinConnectTimeout 5 s).
        ("grpc.min_reconnect_backoff_ms", 5_000),
        ("grpc.enable_http_proxy", 0),
        # A subchannel of its own: gRPC otherwise shares one (with its reconnect backoff) among
        # every channel to the same target in the process, so a fresh channel would inherit the
        # backoff it is meant to escape (see ``_usable``).
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if endpoint.path is not None:
        options.append(("grpc.default_authority", "localhost"))
    return options


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


# -- diagnosis: facts about a failure in, the podcache error out --------------------------------


def _os_reason(error: OSError) -> str:
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return "socket does not exist"
    if error.errno == errno.ECONNREFUSED:
        return "connection refused: nothing is listening (is the runtime running?)"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied on the socket (run as root?)"
    return f"cannot connect: {error.strerror or error}"


@dataclass(frozen=True, slots=True)
class _Probe:
    """What a plain connection to the endpoint showed after a deadline.

    ``error``: connecting failed. Else ``reply``: the first bytes the server sent after our
    HTTP/2 preface; ``b""`` when it closed the connection; None when it sent nothing in time.
    """

    error: OSError | None = None
    reply: bytes | None = None


def _describe_reply(reply: bytes) -> str:
    if reply.startswith(b"HTTP/"):
        first_line = reply.split(b"\r\n", 1)[0].decode("ascii", "replace")
        return f"an HTTP/1 server answered {first_line!r}"
    head = reply.lstrip()[:16].lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "an HTTP/1 server answered with an HTML page"
    return f"it answered {reply[:16]!r}, which is not HTTP/2"


def _deadline_error(url: str, method: str, timeout: float, probe: _Probe) -> CRIError:
    """The error to raise for a call that reached its deadline, given what the probe saw."""
    waited = f"{method} got no answer within {timeout:g} s"
    if probe.error is not None:
        return RuntimeUnavailableError(url, f"{_os_reason(probe.error)} ({waited})")
    reply = probe.reply
    if reply is None:
        return RuntimeDeadlineError(
            url, f"{waited}; it accepts connections but sends nothing (hung?)"
        )
    if not reply:
        return RuntimeUnavailableError(
            url, f"it accepts connections and closes them without answering ({waited})"
        )
    if len(reply) > 3 and reply[3] == _H2_SETTINGS:
        return RuntimeDeadlineError(url, f"{waited} (deadline exceeded; the runtime is up)")
    return RuntimeProtocolError(
        url, f"{_describe_reply(reply)}: not a gRPC server ({waited}); wrong socket?"
    )


_UNAVAILABLE_REASONS = (
    ("no such file", "socket does not exist"),
    ("connection refused", "connection refused: nothing is listening (is the runtime running?)"),
    ("permission denied", "permission denied on the socket (run as root?)"),
)
"""UNAVAILABLE details (lowercased substring) -> what to tell the user, first match wins."""


def _unavailable_reason(endpoint: Endpoint, method: str, details: str) -> str:
    """Why an UNAVAILABLE call failed: gRPC's details, else what the socket file says."""
    lowered = details.lower()
    for words, reason in _UNAVAILABLE_REASONS:
        if words in lowered:
            return reason
    reason = f"the connection failed or was closed during {method} ({details})"
    problem = _unix_problem(endpoint.path) if endpoint.path is not None else None
    return reason if problem is None else f"{problem} ({reason})"


def _rpc_error(endpoint: Endpoint, method: str, error: grpc.RpcError) -> CRIError | None:
    """The error for a failed call, or None for DEADLINE_EXCEEDED (the caller probes first)."""
    return _status_error(endpoint, method, error.code(), error.details() or "")


def _status_error(
    endpoint: Endpoint, method: str, code: grpc.StatusCode | None, details: str
) -> CRIError | None:
    """``_rpc_error`` from a call's status code and details.

    For UNAVAILABLE (the connection failed or dropped mid-call) it looks at the socket file:
    "socket does not exist" says more than gRPC's "Broken pipe".
    """
    url = endpoint.url
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return None
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return RuntimeProtocolError(
            url,
            f"{method} is UNIMPLEMENTED (a gRPC server, but not a CRI runtime, "
            "or one older than CRI v1?)",
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        return RuntimeUnavailableError(url, _unavailable_reason(endpoint, method, details))
    if code == grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
        return RuntimeProtocolError(url, _not_cri_message(method))
    if code == grpc.StatusCode.CANCELLED:
        return CRIError(url, f"{method} was cancelled ({details}; was the client closed?)")
    name = code.name if code is not None else "UNKNOWN"
    return CRIError(url, f"{method} failed with {name}: {details}")


def _not_cri_message(method: str) -> str:
    return f"its {method} answer is not a valid CRI message"


def _closed_error(kind: str, url: str) -> RuntimeError:
    return RuntimeError(f"{kind} for {url} is closed")


# -- probes: the same question asked with a blocking socket and with asyncio --------------------


def _socket_problem(path: str) -> str | None:
    """Why connecting to this unix socket path cannot work, or None when it looks usable."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "socket does not exist"
    except PermissionError:
        return "permission denied: cannot reach the socket (run as root?)"
    except OSError as e:
        return f"cannot stat the socket: {e.strerror}"
    if not stat.S_ISSOCK(st.st_mode):
        return "the path exists but is not a socket"
    if not os.access(path, os.W_OK):
        return "permission denied on the socket (run as root, or as a user allowed to write to it)"
    return None


def _unix_problem(path: str) -> str | None:
    """Why a connection to this unix socket fails right now, or None when one is accepted.

    A non-blocking connect, closed at once (tens of microseconds): it never waits, so the event
    loop may call it too. A full backlog (EAGAIN) counts as accepted: something listens, and the
    call's deadline will tell whether it answers.
    """
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.setblocking(False)
            code = sock.connect_ex(path)
    except OSError as e:
        return _socket_problem(path) or _os_reason(e)
    if code in (0, errno.EAGAIN, errno.EINPROGRESS):
        return None
    return _socket_problem(path) or _os_reason(OSError(code, os.strerror(code)))


def _unreachable(endpoint: Endpoint, budget: float) -> str | None:
    """Why the endpoint takes no connection now (no socket, refused, denied), or None.

    Loopback TCP waits at most ``budget`` seconds for the connect; one that is neither accepted
    nor refused by then is None too (the call goes ahead and its deadline decides).
    """
    if endpoint.path is not None:
        return _unix_problem(endpoint.path)
    assert endpoint.address is not None
    try:
        socket.create_connection(endpoint.address, timeout=budget).close()
    except TimeoutError:
        return None
    except OSError as e:
        return _os_reason(e)
    return None


async def _unreachable_async(endpoint: Endpoint, budget: float) -> str | None:
    """``_unreachable`` for the event loop."""
    if endpoint.path is not None:
        return _unix_problem(endpoint.path)  # never blocks
    assert endpoint.address is not None
    try:
        async with asyncio.timeout(budget):
            _, writer = await asyncio.open_connection(*endpoint.address)
    except TimeoutError:
        return None
    except OSError as e:
        return _os_reason(e)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


def _probe_budget(timeout: float) -> float:
    return min(_PROBE_BUDGET, timeout)


def _probe(endpoint: Endpoint, budget: float) -> _Probe:
    """Connect, send the HTTP/2 preface, read the first frame header (blocking, <= budget)."""
    deadline = time.monotonic() + budget
    try:
        if endpoint.path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(budget)
            try:
                sock.connect(endpoint.path)
            except BaseException:
                sock.close()
                raise
        else:
            assert endpoint.address is not None
            sock = socket.create_connection(endpoint.address, timeout=budget)
    except TimeoutError:
        return _Probe()
    except OSError as e:
        return _Probe(error=e)
    reply = b""
    with sock:
        try:
            sock.sendall(_H2_PREFACE)
            while len(reply) < _H2_FRAME_HEADER:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
        except TimeoutError:
            return _Probe(reply=reply or None)
        except OSError:
            pass  # reset by the peer: it closed on us
    return _Probe(reply=reply)


async def _probe_async(endpoint: Endpoint, budget: float) -> _Probe:
    """``_probe`` for the event loop."""
    reply = b""
    try:
        async with asyncio.timeout(budget):
            if endpoint.path is not None:
                reader, writer = await asyncio.open_unix_connection(endpoint.path)
            else:
                assert endpoint.address is not None
                reader, writer = await asyncio.open_connection(*endpoint.address)
            try:
                writer.write(_H2_PREFACE)
                while len(reply) < _H2_FRAME_HEADER:
                    chunk = await reader.read(64)
                    if not chunk:
                        break
                    reply += chunk
            except OSError:
                pass  # reset by the peer: it closed on us
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except TimeoutError:
        return _Probe(reply=reply or None)
    except OSError as e:
        return _Probe(error=e)
    return _Probe(reply=reply)


# -- conversion off the event loop -------------------------------------------------------------

READ_PIECE_BYTES = 128 * 1024
"""Bytes of a list answer read per call of the reader in ``AsyncCRIRuntime`` (about 0.3 ms)."""


def _read_both(
    converter: _Converter, runtime_name: str, sandbox_bytes: bytes, container_bytes: bytes
) -> PodList:
    """In the converter's thread: both answers read and converted without a memo."""
    sandboxes = converter.read("ListPodSandbox", sandbox_bytes)
    containers = converter.read("ListContainers", container_bytes)
    return _converted(runtime_name, sandboxes, containers, None)


def _converted(
    runtime_name: str, sandboxes: Listing, containers: Listing, memo: Memo | None
) -> PodList:
    """The pods of two listings, which are released (``Listing.release``) in any case."""
    try:
        return pods_from_listings(runtime_name, sandboxes, containers, memo)
    finally:
        sandboxes.release()
        containers.release()


class _GCPause:
    """Pauses Python's cyclic garbage collector while listings are read and converted.

    A conversion at 5,000 pods allocates some 100,000 container objects (the reader's rows)
    that reference counting frees when it ends. Collections triggered meanwhile scan them,
    hold the GIL for the whole scan (5-15 ms for a young one) and promote the live rows to
    older generations, which then need full collections (40-70 ms, the event loop stopped)
    every few refreshes. Paused, the rows are gone before the next collection looks.

    Process-wide (the collector has one switch): pauses nest across threads and runtimes; the
    collector is enabled again when the last one ends, and only if it was enabled when the
    first began. The longest a pause lasts is one conversion (bounded by the listing size).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._resume = False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0 and self._resume:
                    gc.enable()


_gc_paused = _GCPause()


def _without_gc(function: Callable[..., _R], args: tuple[Any, ...]) -> _R:
    with _gc_paused():
        return function(*args)


class _Held:
    """A listing kept for the converter's thread while the event loop waits for the next call:
    the loop never holds the last reference to it, so it is never freed there."""

    __slots__ = ("listing",)

    def __init__(self) -> None:
        self.listing: Listing | None = None


class _Converter:
    """``AsyncCRIRuntime``'s worker thread: reads and converts list answers off the event loop.

    One thread, started on first use: conversions of one runtime run one at a time (the cache
    has at most one refresh in flight) and share its memo. The reader and the conversion hold
    the GIL while they run; the event loop gets it back at least every ``sys.getswitchinterval()``
    seconds during the conversion's Python code (``podcache serve`` shortens that interval).
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._pool: ThreadPoolExecutor | None = None

    def run(self, function: Callable[..., _R], *args: Any) -> asyncio.Future[_R]:
        """``function(*args)`` in the worker thread, as a future of the running loop; the
        cyclic garbage collector is paused while it runs (``_GCPause``)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="podcache-convert")
        return asyncio.get_running_loop().run_in_executor(self._pool, _without_gc, function, args)

    def read(self, method: str, data: bytes) -> Listing:
        """``data``, the answer of ``method``, read (a protocol error when it is not one).

        A large answer is read in pieces of whole items (see ``split_items``): the reader
        holds the GIL for one piece at a time, not for the whole answer (~30 ms at 5,000
        pods), so the event loop is never kept waiting longer than a piece takes.
        """
        read = _READERS[method]
        try:
            pieces = split_items(data, READ_PIECE_BYTES)
            if pieces is None:
                return read(data)
            return Listing.joined([read(piece) for piece in pieces])
        except MalformedListingError as exc:
            raise RuntimeProtocolError(self._url, _not_cri_message(method)) from exc

    def close(self) -> None:
        """Stop the thread once a conversion running now ends (its caller is gone anyway)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


# -- channels: one gRPC channel, what is known of it, and the Version asked on it ---------------

_READY = grpc.ChannelConnectivity.READY
_BACKING_OFF = grpc.ChannelConnectivity.TRANSIENT_FAILURE
# The same states as gRPC core's numbers, which is what the sync channel's state reader gives.
_CORE_IDLE: int = grpc.ChannelConnectivity.IDLE.value[0]
_CORE_READY: int = _READY.value[0]
_CORE_BACKING_OFF: int = _BACKING_OFF.value[0]


# Each method's request type and how its answer is decoded. The list answers are read straight
# from their bytes (convert's C reader), in gRPC's deserializer: bytes that are not a valid
# message fail the call as any decoding failure does.
_Methods = Mapping[str, tuple[type[Message], Callable[[bytes], object] | None]]
"""Each method's request type and its answer's decoder (None: the answer's bytes)."""
_METHODS: dict[str, tuple[type[Message], Callable[[bytes], object]]] = {
    "Version": (pb.VersionRequest, pb.VersionResponse.FromString),
    "Status": (pb.StatusRequest, pb.StatusResponse.FromString),
    "ListPodSandbox": (pb.ListPodSandboxRequest, read_sandboxes),
    "ListContainers": (pb.ListContainersRequest, read_containers),
}


# AsyncCRIRuntime receives the list answers as bytes: they are read in the converter's thread.
_ASYNC_METHODS: dict[str, tuple[type[Message], Callable[[bytes], object] | None]] = {
    **_METHODS,
    "ListPodSandbox": (pb.ListPodSandboxRequest, None),
    "ListContainers": (pb.ListContainersRequest, None),
}
_READERS: dict[str, Callable[[bytes | memoryview], Listing]] = {
    "ListPodSandbox": read_sandboxes,
    "ListContainers": read_containers,
}


_EVENTS_METHOD = "GetContainerEvents"
_NOT_CONNECTED = "no connection for GetContainerEvents within {:g} s"


def _events_error(
    endpoint: Endpoint, line_retired: bool, code: grpc.StatusCode | None, details: str
) -> CRIError:
    """The error for a GetContainerEvents stream that failed (UNIMPLEMENTED: no events)."""
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return EventsUnsupportedError(
            endpoint.url,
            f"{_EVENTS_METHOD} is UNIMPLEMENTED (containerd before 1.7 has no container events)",
        )
    if code == grpc.StatusCode.CANCELLED and line_retired:
        return RuntimeUnavailableError(
            endpoint.url,
            f"the connection of the {_EVENTS_METHOD} stream was closed (client closed, "
            "or the runtime restarted and the channel was replaced)",
        )
    mapped = _status_error(endpoint, _EVENTS_METHOD, code, details)
    if mapped is None:  # no deadline is set on a stream; a proxy or server may impose one
        return RuntimeDeadlineError(endpoint.url, f"{_EVENTS_METHOD} reached a deadline")
    return mapped


def _state_reader(channel: grpc.Channel) -> Callable[[bool], int]:
    """The sync channel's connectivity reader: ``read(False)`` is gRPC core's state number.

    grpc.aio channels have ``get_state()``; sync channels only have ``subscribe()``, whose
    polling thread (one per channel) makes ``close()`` wait up to 0.2 s for it, races it (a
    thread traceback "Cannot monitor channel state: Channel closed!") and delivers each change
    from a new thread. So this asks the core channel under the sync one directly, as
    ``get_state()`` and that thread do: one C call, well under a microsecond. Should a gRPC
    release move it, every state reads IDLE: each call then checks the endpoint first (correct,
    a little slower), but a channel in backoff is no longer replaced; a test pins the reader.
    """
    read = getattr(getattr(channel, "_channel", None), "check_connectivity_state", None)
    if read is None:
        return lambda try_to_connect: _CORE_IDLE
    return read  # type: ignore[no-any-return]


class _Line:
    """A sync channel, its methods, its state reader and the Version asked on it.

    ``retired``: replaced by a fresh channel, or closed.
    """

    __slots__ = ("channel", "events", "retired", "rpcs", "state", "version")

    def __init__(self, endpoint: Endpoint, methods: _Methods | None = None) -> None:
        self.channel = grpc.insecure_channel(endpoint.target, options=channel_options(endpoint))
        self.rpcs: dict[str, grpc.UnaryUnaryMultiCallable[Any, Any]] = {
            method: self.channel.unary_unary(
                _SERVICE + method,
                request_serializer=request.SerializeToString,
                response_deserializer=decode,
            )
            for method, (request, decode) in (methods or _METHODS).items()
        }
        # Its answers stay bytes: eventstream reads them (eventwire), off any event loop.
        self.events = self.channel.unary_stream(
            _SERVICE + _EVENTS_METHOD,
            request_serializer=pb.GetEventsRequest.SerializeToString,
            response_deserializer=None,
        )
        self.state = _state_reader(self.channel)
        self.version: RuntimeVersion | None = None
        self.retired = False

    def close(self) -> None:
        """Close the channel: calls still waiting on it end with CANCELLED."""
        self.retired = True
        self.channel.close()


class _AsyncLine:
    """An asyncio channel, its methods and the Version asked on it (its state is asked of it)."""

    __slots__ = ("channel", "retired", "rpcs", "version")

    def __init__(self, endpoint: Endpoint) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint.target, options=channel_options(endpoint))
        self.rpcs: dict[str, grpc.aio.UnaryUnaryMultiCallable[Any, Any]] = {
            method: self.channel.unary_unary(
                _SERVICE + method,
                request_serializer=request.SerializeToString,
                response_deserializer=decode,
            )
            for method, (request, decode) in _ASYNC_METHODS.items()
        }
        self.version: RuntimeVersion | None = None
        self.retired = False

    async def close(self) -> None:
        """Close the channel: calls still waiting on it are cancelled."""
        self.retired = True
        await self.channel.close(None)


def _cancelled_by_caller() -> bool:
    """Whether the running task itself is being cancelled (not just a call of a closed channel).

    grpc.aio ends a call of a channel being closed with CancelledError in the awaiting task,
    though nobody cancelled that task: ``cancelling()`` tells the two apart.
    """
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


# -- the getters --------------------------------------------------------------------------------


class _Base:
    """What the twins share: endpoint, timeout, the memo and the closed flag."""

    def __init__(self, endpoint: str | None, timeout: float, config_path: str | None) -> None:
        resolved = resolve_endpoint(endpoint, config_path=config_path)
        self._endpoint = resolved.endpoint
        # Where the endpoint came from: "argument", the variable, the config file, "default".
        self.endpoint_source = resolved.source
        self._timeout = _check_timeout(timeout)
        # The last listing's conversions: a refresh re-reads only what changed (see convert).
        self._memo = Memo()
        self._closed = False

    @property
    def endpoint(self) -> str:
        """The resolved endpoint URL (``unix:///run/containerd/containerd.sock``)."""
        return self._endpoint.url

    @property
    def timeout(self) -> float:
        """Seconds allowed for each call."""
        return self._timeout

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint!r}, timeout={self._timeout:g})"

    def _check_open(self) -> None:
        if self._closed:
            raise _closed_error(type(self).__name__, self.endpoint)

    def _unreachable_error(self, problem: str) -> RuntimeUnavailableError:
        return RuntimeUnavailableError(self.endpoint, problem)

    def _answer(self, method: str, result: object, response: type[_R]) -> _R:
        if not isinstance(result, response):  # grpc.aio answers None when decoding failed
            raise RuntimeProtocolError(self.endpoint, _not_cri_message(method))
        return result


class CRIRuntime(_Base):
    """A CRI runtime getter for threads: ``get_pods(all)`` as the kubelet lists pods.

    Safe to share between threads. Use it as a context manager, or call ``close()``.
    ``endpoint``: ``unix:///path``, an absolute socket path, loopback ``tcp://HOST:PORT``,
    or None to resolve it as crictl does (``config_path`` names the crictl config file).
    ``timeout``: the deadline of each call, in seconds.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        config_path: str | None = None,
    ) -> None:
        super().__init__(endpoint, timeout, config_path)
        self._version_lock = threading.Lock()  # one Version call per channel, across threads
        self._swap_lock = threading.Lock()  # replacing the channel; closing
        self._line = self._new_line()

    def _new_line(self) -> _Line:
        return _Line(self._endpoint)

    def _invoke(self, line: _Line, method: str, request: Message, timeout: float) -> object:
        """One call of ``method`` on ``line``, blocking; raises gRPC's errors."""
        return line.rpcs[method](request, timeout=timeout, wait_for_ready=True)

    def _usable(self, line: _Line) -> _Line:
        """The line to call on, for a ``line`` that is not READY (the hot path skips this).

        Raises at once when the endpoint takes no connection. When it does and ``line`` is in
        reconnect backoff, a fresh line replaces it (once, whichever thread comes first).
        """
        problem = _unreachable(self._endpoint, _probe_budget(self._timeout))
        if problem is not None:
            raise self._unreachable_error(problem)
        if line.state(False) == _CORE_BACKING_OFF:
            with self._swap_lock:
                self._check_open()
                if self._line is line:
                    self._line = self._new_line()
                    line.close()  # calls waiting on it are cancelled: they go on on the new one
                line = self._line
        return line

    def _call(self, method: str, request: Message, response: type[_R]) -> tuple[_R, _Line]:
        """Call ``method``; its answer and the line that gave it."""
        deadline = time.monotonic() + self._timeout
        line = self._line
        while True:
            self._check_open()
            if line.state(False) != _CORE_READY:
                line = self._usable(line)
            try:
                result = self._invoke(line, method, request, max(0.0, deadline - time.monotonic()))
            except ValueError:  # gRPC's "Cannot invoke RPC on closed channel!"
                if not line.retired:
                    raise
                self._check_open()
                line = self._line  # replaced between the state check and the call
                continue
            except grpc.RpcError as e:
                if line.retired and not self._closed and e.code() is grpc.StatusCode.CANCELLED:
                    line = self._line  # replaced while this call waited on it
                    continue
                error = _rpc_error(self._endpoint, method, e)
                if error is None:
                    probe = _probe(self._endpoint, _probe_budget(self._timeout))
                    error = _deadline_error(self.endpoint, method, self._timeout, probe)
                raise error from e
            return self._answer(method, result, response), line

    def version(self) -> RuntimeVersion:
        """The runtime's Version answer: asked once per channel, then remembered.

        A channel in reconnect backoff is replaced first (see ``_usable``): the new one asks
        again, so a restarted runtime's answer is fresh.
        """
        line = self._line
        version = line.version
        if version is None or line.state(False) == _CORE_BACKING_OFF:
            with self._version_lock:
                line = self._line
                version = line.version
                if version is None or line.state(False) == _CORE_BACKING_OFF:
                    answer, line = self._call(
                        "Version", pb.VersionRequest(version=CRI_VERSION), pb.VersionResponse
                    )
                    version = line.version = _version_from(self.endpoint, answer)
        return version

    def status(self, verbose: bool = False) -> RuntimeStatus:
        """The runtime's conditions (RuntimeReady, NetworkReady) and, if verbose, its info."""
        self.version()
        answer, _ = self._call("Status", pb.StatusRequest(verbose=verbose), pb.StatusResponse)
        return _status_from(answer)

    def get_pods(self, all: bool = False) -> PodList:
        """The node's pods: running ones (ready sandboxes, running containers), or all."""
        runtime_name = self.version().runtime_name
        sandbox_request, container_request = _list_requests(all)
        sandboxes, _ = self._call("ListPodSandbox", sandbox_request, Listing)
        containers, _ = self._call("ListContainers", container_request, Listing)
        return _converted(runtime_name, sandboxes, containers, self._memo)

    def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The pod with ``uid`` as ``get_pods(all)`` would list it, or None: the same two list
        calls, each filtered by the kubelet's pod-UID label, converted by the same rules (and
        reader). Its cost is that pod's, not the node's. The listing memo is left alone."""
        _check_uid(uid)
        runtime_name = self.version().runtime_name
        sandbox_request, container_request = _pod_requests(uid, all)
        sandboxes, _ = self._call("ListPodSandbox", sandbox_request, Listing)
        containers, _ = self._call("ListContainers", container_request, Listing)
        return _converted(runtime_name, sandboxes, containers, None).by_uid(uid)

    def pod_uid_of(self, ident: str) -> str | None:
        """The UID of the pod whose container or sandbox has the bare ID ``ident``, as the
        runtime lists it now (any state): ListPodSandbox and ListContainers filtered by that
        ID. None when the runtime lists no such item."""
        runtime_name = self.version().runtime_name
        sandbox_request, container_request = _id_requests(ident)
        sandboxes, _ = self._call("ListPodSandbox", sandbox_request, Listing)
        containers, _ = self._call("ListContainers", container_request, Listing)
        return _owner_of(_converted(runtime_name, sandboxes, containers, None), ident)

    def container_events(self) -> ContainerEventStream:
        """The runtime's container events (GetContainerEvents), from now on, as an iterator.

        ``for event in runtime.container_events()``. It subscribes on first use (or
        ``open()``): an unreachable endpoint fails at once, a runtime without the RPC raises
        ``EventsUnsupportedError``; stream failures are the errors of the other calls.
        """
        self._check_open()
        holder: list[_Line] = []

        def start() -> Any:
            self._check_open()
            line = self._line
            if line.state(False) != _CORE_READY:
                line = self._connected(self._usable(line))
            holder.append(line)
            return line.events(pb.GetEventsRequest(), wait_for_ready=False)

        def error(code: grpc.StatusCode | None, details: str) -> CRIError:
            return _events_error(self._endpoint, bool(holder) and holder[-1].retired, code, details)

        return ContainerEventStream(self.endpoint, start, error, CONFIRM_SECONDS)

    def _connected(self, line: _Line) -> _Line:
        """``line`` once READY (a stream must not be taken for open while it is connecting);
        ``RuntimeUnavailableError`` when it fails to connect or takes longer than the timeout."""
        deadline = time.monotonic() + self._timeout
        while (state := line.state(True)) != _CORE_READY:
            if state == _CORE_BACKING_OFF or time.monotonic() > deadline:
                problem = _unreachable(self._endpoint, _probe_budget(self._timeout))
                raise self._unreachable_error(problem or _NOT_CONNECTED.format(self._timeout))
            time.sleep(0.002)
        return line

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled. Idempotent."""
        with self._swap_lock:
            if self._closed:
                return
            self._closed = True
        self._line.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


LIST_CALL_THREADS = 4
"""Threads making ``AsyncCRIRuntime``'s list calls: at most this many calls wait on the
runtime at once per getter; more wait for a thread (the cache makes one refresh at a time)."""


class _CallHandle:
    """One list call made in a thread for a task on the event loop: the task's cancellation
    cancels the gRPC call it is waiting for (and any it would make next)."""

    __slots__ = ("_call", "_cancelled", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._call: grpc.Future[Any] | None = None
        self._cancelled = False

    def attach(self, call: grpc.Future[Any]) -> None:
        """``call`` is the gRPC call made now (in the calling thread)."""
        with self._lock:
            self._call = call
            cancelled = self._cancelled
        if cancelled:
            call.cancel()

    def cancel(self) -> None:
        """The task gave up (on the event loop)."""
        with self._lock:
            self._cancelled = True
            call = self._call
        if call is not None:
            call.cancel()


class _ListCaller(CRIRuntime):
    """``AsyncCRIRuntime``'s list calls on a sync channel of their own, each made in a thread
    of a small pool (``LIST_CALL_THREADS``), with ``CRIRuntime``'s deadlines, channel
    replacement and error mapping.

    The answers (8-12 MB each at 5,000 pods) become bytes in gRPC's threads, never on the
    event loop (grpc.aio builds each answer's bytes in a loop callback, a stall of several
    milliseconds); the loop only receives the finished ``bytes`` object. Calls are gRPC
    futures so that the awaiting task's cancellation cancels them (``_CallHandle``).
    """

    def __init__(self, endpoint: str, timeout: float) -> None:
        super().__init__(endpoint, timeout=timeout)
        self._local = threading.local()  # the handle of the call the current thread makes
        self._pool: ThreadPoolExecutor | None = None

    def _new_line(self) -> _Line:
        return _Line(self._endpoint, _ASYNC_METHODS)

    def _invoke(self, line: _Line, method: str, request: Message, timeout: float) -> object:
        call = line.rpcs[method].future(request, timeout=timeout, wait_for_ready=True)
        handle: _CallHandle | None = getattr(self._local, "handle", None)
        if handle is not None:
            handle.attach(call)
        return call.result()

    def backing_off(self) -> bool:
        """Whether the channel is in reconnect backoff (read from any thread)."""
        return bool(self._line.state(False) == _CORE_BACKING_OFF)

    async def list_bytes(self, method: str, request: Message) -> bytes:
        """The answer of ``method`` as bytes, called in a pool thread (a podcache error naming
        what failed). Cancelling the caller cancels the call."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(LIST_CALL_THREADS, thread_name_prefix="podcache-list")
        handle = _CallHandle()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, self._list_bytes, handle, method, request)
        except asyncio.CancelledError:
            handle.cancel()
            raise

    def _list_bytes(self, handle: _CallHandle, method: str, request: Message) -> bytes:
        self._local.handle = handle
        try:
            answer, _ = self._call(method, request, bytes)
        finally:
            self._local.handle = None
        return answer

    def close(self) -> None:
        """Close the channel (calls in flight end CANCELLED) and let the threads go."""
        super().close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class AsyncCRIRuntime(_Base):
    """The asyncio twin of CRIRuntime: same arguments, same methods, awaited.

    Use it from one event loop; the channel is opened on first use, inside that loop.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        config_path: str | None = None,
    ) -> None:
        super().__init__(endpoint, timeout, config_path)
        self._lock = asyncio.Lock()  # one Version call per channel, across tasks
        self._line: _AsyncLine | None = None  # Version and Status
        self._list_caller: _ListCaller | None = None  # the list calls, in its threads
        self._converter = _Converter(self.endpoint)

    def _current(self) -> _AsyncLine:
        self._check_open()
        line = self._line
        if line is None:
            line = self._line = _AsyncLine(self._endpoint)
        return line

    async def _usable(self, line: _AsyncLine) -> _AsyncLine:
        """``CRIRuntime._usable`` for the event loop (no lock: the swap has no await in it)."""
        problem = await _unreachable_async(self._endpoint, _probe_budget(self._timeout))
        if problem is not None:
            raise self._unreachable_error(problem)
        current = self._current()
        if current is line and line.channel.get_state() is _BACKING_OFF:
            current = self._line = _AsyncLine(self._endpoint)
            await line.close()  # calls waiting on it are cancelled: they go on on the new one
        return current

    async def _call(
        self, method: str, request: Message, response: type[_R]
    ) -> tuple[_R, _AsyncLine]:
        """Call ``method``; its answer and the line that gave it."""
        deadline = time.monotonic() + self._timeout
        line = self._current()
        while True:
            self._check_open()
            if line.channel.get_state() is not _READY:
                line = await self._usable(line)
            try:
                result = await line.rpcs[method](
                    request, timeout=max(0.0, deadline - time.monotonic()), wait_for_ready=True
                )
            except asyncio.CancelledError:
                if self._closed or not line.retired or _cancelled_by_caller():
                    raise
                line = self._current()  # replaced while this call waited on it
                continue
            except grpc.aio.UsageError:  # "Channel is closed."
                if not line.retired:
                    raise
                line = self._current()  # closed or replaced while this task was suspended
                continue
            except grpc.RpcError as e:
                error = _rpc_error(self._endpoint, method, e)
                if error is None:
                    probe = await _probe_async(self._endpoint, _probe_budget(self._timeout))
                    error = _deadline_error(self.endpoint, method, self._timeout, probe)
                raise error from e
            return self._answer(method, result, response), line

    def _known_version(self) -> RuntimeVersion | None:
        """The Version answer still good: None when either channel (this one, or the list
        calls') is in reconnect backoff, as after a runtime restart."""
        line = self._line
        if line is None or line.channel.get_state() is _BACKING_OFF:
            return None
        lister = self._list_caller
        if lister is not None and lister.backing_off():
            return None
        return line.version

    async def version(self) -> RuntimeVersion:
        """The runtime's Version answer: asked once per channel, then remembered.

        A channel in reconnect backoff is replaced first (see ``CRIRuntime._usable``): the new
        one asks again, so a restarted runtime's answer is fresh.
        """
        version = self._known_version()
        if version is None:
            async with self._lock:
                version = self._known_version()
                if version is None:
                    answer, line = await self._call(
                        "Version", pb.VersionRequest(version=CRI_VERSION), pb.VersionResponse
                    )
                    version = line.version = _version_from(self.endpoint, answer)
        return version

    async def status(self, verbose: bool = False) -> RuntimeStatus:
        """The runtime's conditions (RuntimeReady, NetworkReady) and, if verbose, its info."""
        await self.version()
        answer, _ = await self._call("Status", pb.StatusRequest(verbose=verbose), pb.StatusResponse)
        return _status_from(answer)

    async def get_pods(self, all: bool = False) -> PodList:
        """The node's pods: running ones (ready sandboxes, running containers), or all.

        The list calls are made in worker threads (``_ListCaller``) and their answers read and
        converted in another, never on the event loop (at 5,000 pods the answers are 8-12 MB
        and converting them takes about 100 ms); the sandboxes are read before ListContainers
        is called. Cancelling the caller cancels the list call in flight.
        """
        runtime_name = (await self.version()).runtime_name
        lister = self._lister()
        sandbox_request, container_request = _list_requests(all)
        sandbox_bytes = await lister.list_bytes("ListPodSandbox", sandbox_request)
        convert = self._converter
        sandboxes = _Held()
        # Read before the second call, not while it runs: the two would contend for the GIL
        # with the event loop at once, and the loop loses the most (docs/architecture.md §4).
        await convert.run(self._read_sandboxes, sandboxes, sandbox_bytes)
        del sandbox_bytes
        container_bytes = await lister.list_bytes("ListContainers", container_request)
        return await convert.run(self._convert, runtime_name, sandboxes, container_bytes)

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        """The twin of ``CRIRuntime.get_pod``: one pod's two filtered list calls, made and read
        off the event loop as ``get_pods``' are."""
        _check_uid(uid)
        sandbox_request, container_request = _pod_requests(uid, all)
        pods = await self._filtered(sandbox_request, container_request)
        return pods.by_uid(uid)

    async def pod_uid_of(self, ident: str) -> str | None:
        """The twin of ``CRIRuntime.pod_uid_of``."""
        pods = await self._filtered(*_id_requests(ident))
        return _owner_of(pods, ident)

    async def _filtered(
        self, sandbox_request: pb.ListPodSandboxRequest, container_request: pb.ListContainersRequest
    ) -> PodList:
        """The pods of two filtered list calls (small answers), without the listing memo."""
        runtime_name = (await self.version()).runtime_name
        lister = self._lister()
        sandbox_bytes = await lister.list_bytes("ListPodSandbox", sandbox_request)
        container_bytes = await lister.list_bytes("ListContainers", container_request)
        return await self._converter.run(
            _read_both, self._converter, runtime_name, sandbox_bytes, container_bytes
        )

    def _lister(self) -> _ListCaller:
        self._check_open()
        lister = self._list_caller
        if lister is None:
            lister = self._list_caller = _ListCaller(self.endpoint, self._timeout)
        return lister

    def _read_sandboxes(self, held: _Held, data: bytes) -> None:
        """In the converter's thread: read the sandboxes into ``held``."""
        held.listing = self._converter.read("ListPodSandbox", data)

    def _convert(self, runtime_name: str, held: _Held, container_bytes: bytes) -> PodList:
        """In the converter's thread: read the containers, then build the pods. Both listings
        are released here too: freeing their rows is some milliseconds at 5,000 pods."""
        sandboxes, held.listing = held.listing, None
        assert sandboxes is not None
        containers = self._converter.read("ListContainers", container_bytes)
        return _converted(runtime_name, sandboxes, containers, self._memo)

    def container_events(self) -> AsyncContainerEventStream:
        """The runtime's container events as an async iterator (see ``CRIRuntime``'s).

        ``async for event in runtime.container_events()``; ``await stream.open()`` subscribes
        without waiting for an event, ``await stream.aclose()`` ends it. The call is made on the
        list calls' sync channel and read in a thread of its own: no message, whatever its
        size, is received or read on the event loop (``eventstream``).
        """
        self._check_open()
        return AsyncContainerEventStream(self._lister().container_events())

    async def close(self) -> None:
        """Close the channels; calls in flight are cancelled (a list call then fails with
        CRIError "was cancelled", as in CRIRuntime). Idempotent."""
        if not self._closed:
            self._closed = True
            self._converter.close()
            if self._list_caller is not None:
                self._list_caller.close()  # a list call in flight ends CANCELLED
            line = self._line
            if line is not None:
                await line.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
