"""One-shot reads of the runtime for the CLI (docs/architecture.md §6 rule 1): Version, a
node's listing and its pods' IPs, made on one HTTP/2 connection of its own without grpcio,
protobuf or asyncio, a driver of the connection core (§4, "One wire, two drivers"); its
listing equals ``CRIRuntime.get_pods``'s.

Rules:

- **Success only.** Anything but a clean answer (any exception) makes the whole read again
  with ``CRIRuntime``, whose errors are the reference; that fallback imports grpcio. A
  PodSandboxStatus that ends with a status other than OK leaves its pod's IPs unknown, as
  ``CRIRuntime``'s listing does. A runtime that hangs is waited for twice (this read, then
  the fallback's), each within ``timeout`` per call.
- **Scheduling.** At most ``BATCH`` calls in flight (nor more than the runtime's
  SETTINGS_MAX_CONCURRENT_STREAMS), one message per answer; every read and write within one
  call's timeout of the last call sent (no call ending for that long fails the read).
- **Start-up.** The module imports no ``socket`` (``_socket`` is enough), no ``hpack``, no
  msgspec (``values``' records) and no model or conversion: a listing imports those after its
  requests are sent, while the runtime answers; ``version`` imports ``values`` once its answer
  came, and never the model.
- **Begun early** (``OneShotRuntime.begin``): ``get_pods(False)`` reads the statuses asked
  ahead as it needs them (a frame is taken whole or not at all by the bounded wait,
  ``_Connection.wait_answers``) and calls the rest once all those ended.
"""

# ruff: noqa: PLC0415 -- imports inside functions are deliberate: start-up stays fast

from __future__ import annotations

import _socket
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from typing import TYPE_CHECKING, NamedTuple, Self

from podcache.cri import h2core
from podcache.cri.endpoint import Endpoint, RuntimeAddress, check_timeout
from podcache.cri.h2core import Stream, preface
from podcache.cri.wire.grpcwire import OK
from podcache.cri.wire.headers import authority
from podcache.cri.wire.methods import request
from podcache.cri.wire.protobuf import version_fields

if TYPE_CHECKING:
    from podcache.cri._wire import SandboxRow
    from podcache.cri.client import CRIRuntime
    from podcache.cri.networks import NetworkMemo, SandboxNetwork
    from podcache.cri.values import RuntimeVersion
    from podcache.model import PodList

__all__ = [
    "BATCH",
    "FIRST_STEP",
    "STATUSES_IN_FLIGHT",
    "OneShotRuntime",
]

STATUSES_IN_FLIGHT = 8
"""PodSandboxStatus calls a one-shot read has in flight at once, a new one as each ends."""

BATCH = 100
"""Most calls in flight at once (PodSandboxStatus calls go in batches of this many)."""
FIRST_STEP = 8
"""PodSandboxStatus calls of the first step when only some IPs are looked up (``find_ips``);
each further step doubles, up to ``BATCH``."""
EARLY_WAIT = 0.03
"""Seconds ``OneShotRuntime.begin`` waits for the listing before it asks statuses ahead; a
runtime slower than that is left answering (its calls are read by ``get_pods``), unasked."""

_SANDBOX_READY = 0  # PodSandboxState.SANDBOX_READY


class _UnexpectedAnswerError(Exception):
    """Anything but a clean answer: the read is made again by ``CRIRuntime``."""


class _NotYet(Exception):  # noqa: N818 -- not an error: the wait ran out between frames
    """``wait_answers``' wait ran out before the next frame came whole: nothing was taken."""


def _version_answer(data: bytes) -> RuntimeVersion:
    """A ``VersionResponse``'s four strings as a ``RuntimeVersion``."""
    fields = version_fields(data)
    from podcache.cri.values import RuntimeVersion  # msgspec: after the answer came

    return RuntimeVersion(*fields)


# -- HTTP/2: a driver of the connection core --------------------------------------------------

_Batch = dict[int, Stream]
"""Calls sent together: each one's stream ID and answer, in the order sent."""


class _Connection(h2core.Connection):
    """One HTTP/2 connection (``h2core``), used by one thread, for unary calls made in batches;
    every read and write within one call's timeout of the last call sent."""

    def __init__(self, endpoint: Endpoint, timeout: float) -> None:
        self._timeout = timeout
        if endpoint.path is not None:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            target: object = endpoint.path
        else:
            assert endpoint.address is not None
            family = _socket.AF_INET6 if ":" in endpoint.address[0] else _socket.AF_INET
            sock = _socket.socket(family, _socket.SOCK_STREAM)
            target = endpoint.address
        try:
            sock.settimeout(timeout)
            sock.connect(target)  # type: ignore[arg-type]
        except BaseException:
            sock.close()
            raise
        super().__init__(sock, authority(endpoint.address))
        self._deadline: float = time.monotonic() + timeout
        self._wait_until: float | None = None  # wait_answers' end, while it waits
        self._out = bytearray(preface())  # written with the first calls

    @property
    def max_streams(self) -> int:
        """Calls this connection may have in flight: ``BATCH``, or the runtime's lower limit."""
        return max(1, min(BATCH, self._peer_max_streams))

    def retime(self, timeout: float) -> None:
        """Make ``timeout`` the seconds per call, the current deadline moved to match (it
        counts from the last call sent)."""
        self._deadline += timeout - self._timeout
        self._timeout = timeout

    def send(self, requests: Sequence[tuple[str, bytes]]) -> _Batch:
        """Send at most ``BATCH`` calls at once (the batch's deadline starts now); their
        answers are ``answers(batch)``'s, so the caller may work while the runtime answers."""
        return {sid: self._streams[sid] for sid in self._sent(requests[:BATCH])}

    def answers(self, batch: _Batch) -> list[Stream]:
        """The answers of the calls ``send`` sent, in order, once each has ended."""
        for call in batch.values():
            while call.status is None:
                self.take()
        return list(batch.values())

    def wait_answers(self, batch: _Batch, seconds: float) -> bool:
        """``answers(batch)`` within ``seconds``: True once every call of the batch ended;
        False when the wait ran out first, the connection as usable as before (a frame is
        taken whole or not at all)."""
        self._wait_until = time.monotonic() + seconds
        try:
            self.answers(batch)
        except _NotYet:
            return False
        finally:
            self._wait_until = None
        return True

    def calls(
        self,
        requests: Sequence[tuple[str, bytes]],
        window: int,
        ended: Callable[[int, Stream], None],
    ) -> None:
        """Make every call of ``requests`` with at most ``window`` in flight (nor more than
        ``max_streams``): a call is sent as soon as one ends, and each send starts the deadline
        again (a runtime that ends no call within the timeout fails the read). ``ended`` is
        called with each answer as it ends (and its request's index), while the others are
        answered."""
        in_flight: dict[int, int] = {}  # stream ID: its request's index
        sent = 0
        while sent < len(requests) or in_flight:
            room = min(window, self.max_streams) - len(in_flight)
            if room > 0 and sent < len(requests):
                ids = self._sent(requests[sent : sent + room])
                in_flight.update(zip(ids, range(sent, sent + len(ids)), strict=True))
                sent += len(ids)
            taken = self.take()
            for stream_id in [taken] if taken else list(in_flight):  # 0: a GOAWAY may end all
                if stream_id in in_flight and self._streams[stream_id].status is not None:
                    ended(in_flight.pop(stream_id), self._streams.pop(stream_id))

    def take(self) -> int:
        """Read one frame (of any call) and act on it; its stream ID."""
        frame = self._next_frame(self._deadline)
        self._take(frame)
        return frame.stream

    def _sent(self, requests: Sequence[tuple[str, bytes]]) -> list[int]:
        """Send a call for each request, all in one write (with the preface, the first time);
        the deadline starts again. Their stream IDs."""
        self._deadline = time.monotonic() + self._timeout
        out, self._out = self._out, bytearray()
        return self._send_calls(requests, out)

    def _fill(self, deadline: float | None) -> None:
        """The core's read; within ``wait_answers``, first a wait for bytes no longer than its
        wait: ``_NotYet`` when it ends with nothing to read (what was read stays)."""
        if self._wait_until is not None:
            left = min(self._wait_until, self._deadline) - time.monotonic()
            if left <= 0:
                raise _NotYet
            self._sock.settimeout(left)
            try:
                self._sock.recv(1, _socket.MSG_PEEK)
            except TimeoutError:
                raise _NotYet from None
            except OSError:
                pass  # the core's read fails the same way, and says so
        super()._fill(deadline)


def _ok(call: Stream) -> bool:
    return call.status is not None and call.status[0] == OK


def _message(call: Stream) -> bytes:
    """The one gRPC message of an answer that ended OK."""
    if not _ok(call):
        raise _UnexpectedAnswerError(f"{call.method} answered {call.status}")
    if len(call.messages) != 1 or call.pending:
        raise _UnexpectedAnswerError(f"{call.method}: not exactly one message")
    return call.messages[0]


# -- the getter ---------------------------------------------------------------------------------


class OneShotRuntime(RuntimeAddress):
    """The runtime at ``endpoint`` (resolved as crictl does), read once per call:
    ``get_pods(all)`` and ``version()`` as ``CRIRuntime``'s, each on a connection of its own
    that it closes (module rules). ``timeout``: seconds per call, as ``CRIRuntime``'s.

    ``ips=False``: for a caller that shows no pod IPs (``pods`` as a table, ``ps``), no
    PodSandboxStatus calls are made and every pod's ``ips`` is empty (unknown), as crictl's
    ``pods`` asks no status either; the rest of the listing is ``CRIRuntime``'s.

    ``find_ips``: for a caller that only looks these canonical IPs up (``which IP...``): the
    statuses are asked pod by pod in the listing's order (newest first), in steps, stopping
    once every one of them is found held; pods after that step keep unknown IPs. The pod
    ``PodList.by_ip`` gives each of them is the one a listing with every IP gives: the newest
    pod holding it (should two sandboxes claim one IP, the newer pod, as ``by_ip`` rules)."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float,
        config_path: str | None = None,
        ips: bool = True,
        find_ips: frozenset[str] | None = None,
    ) -> None:
        super().__init__(endpoint, timeout, config_path)
        self._ips = ips
        self._find_ips = find_ips
        self._given_endpoint = endpoint
        self._config_path = config_path
        self._begun: _Begun | None = None
        self._fallback: CRIRuntime | None = None
        self.fallbacks = 0
        """Reads made again by ``CRIRuntime`` (after anything but a clean answer)."""

    @property
    def arguments(self) -> tuple[str | None, str | None, bool, frozenset[str] | None]:
        """What it was made with but the timeout: endpoint (as given), config path, ips,
        find_ips."""
        return (self._given_endpoint, self._config_path, self._ips, self._find_ips)

    def version(self) -> RuntimeVersion:
        """The runtime's Version answer (a protocol error when a field is empty)."""
        try:
            with closing(_Connection(self._endpoint, self._timeout)) as connection:
                (call,) = connection.answers(connection.send([request("Version")]))
                answer = _version_answer(_message(call))
        except Exception:  # anything but a clean answer: the reference reads and says why
            return self._reference().version()
        from podcache.cri.values import _version_from

        return _version_from(self.endpoint, answer)

    def begin(self) -> bool:
        """Begin ``get_pods(False)``'s read now, for a caller with other work before it asks
        (the CLI, which then imports click): the listing's calls are sent; when IPs are asked
        and the runtime lists within ``EARLY_WAIT``, so are the statuses of its newest READY
        sandboxes (at most ``BATCH``: the pods' newest ready sandboxes, most likely), read by
        ``get_pods(False)`` as it needs them. True when begun. Never raises: anything but a
        clean start leaves nothing begun, and ``get_pods`` reads as if it had not been called.
        The statuses are asked after the listing answered, as ``get_pods`` asks them."""
        if self._begun is not None:
            return True
        connection = None
        try:
            connection = _Connection(self._endpoint, self._timeout)
            lists = connection.send(_list_calls(all=False))
            ahead = None
            if self._ips and connection.wait_answers(lists, EARLY_WAIT):
                ahead = _ask_ahead(connection, lists)
        except Exception:  # the read is made later, as if nothing had begun
            if connection is not None:
                connection.close()
            return False
        self._begun = _Begun(connection, lists, ahead)
        return True

    def retime(self, timeout: float) -> None:
        """Make ``timeout`` the seconds per call, for a begun read too."""
        self._timeout = check_timeout(timeout)
        if self._begun is not None:
            self._begun.connection.retime(self._timeout)

    def get_pods(self, all: bool = False) -> PodList:
        """The node's pods, as ``CRIRuntime.get_pods(all)`` lists them, IPs included."""
        try:
            return self._get_pods(all)
        except Exception:  # anything but a clean answer: the reference reads and says why
            return self._reference().get_pods(all)

    def _start(self, all: bool) -> _Begun:
        """The read ``begin`` began, when it is this one's (``all`` False); else a new one."""
        begun, self._begun = self._begun, None
        if begun is not None and not all:
            return begun
        if begun is not None:
            begun.connection.close()
        connection = _Connection(self._endpoint, self._timeout)
        try:
            return _Begun(connection, connection.send(_list_calls(all)), None)
        except BaseException:
            connection.close()
            raise

    def _get_pods(self, all: bool) -> PodList:
        connection, asked, ahead = self._start(all)
        with closing(connection):
            # While the runtime answers: the conversion (the model, msgspec) is imported.
            from podcache.cri.convert import (
                pods_from_listings,
                read_containers,
                read_sandboxes,
            )
            from podcache.cri.networks import NetworkMemo, with_networks
            from podcache.cri.values import _version_from

            version, sandboxes, containers = connection.answers(asked)
            runtime = _version_from(self.endpoint, _version_answer(_message(version)))
            listed = (read_sandboxes(_message(sandboxes)), read_containers(_message(containers)))
            memo = NetworkMemo()
            listing = memo.begin(full=True)
            try:
                pods = pods_from_listings(runtime.runtime_name, *listed, None, listing)
            finally:
                listed[0].release()
                listed[1].release()
            wanted = memo.to_ask(listing) if self._ips else []
            asking = _Asking(connection, memo, ahead)
            if self._find_ips is None:
                fetched = asking.statuses(wanted)
            else:
                fetched = asking.statuses_until(_in_order(pods, wanted), self._find_ips)
        return with_networks(pods, fetched)

    def _reference(self) -> CRIRuntime:
        """The full client, made on first need (it imports grpcio)."""
        if self._fallback is None:
            from podcache.cri.client import CRIRuntime

            self._fallback = CRIRuntime(
                self._endpoint.url, timeout=self._timeout, config_path=self._config_path
            )
        self.fallbacks += 1
        return self._fallback

    def close(self) -> None:
        """Close a begun read not read, and the fallback client, if one was made. Idempotent."""
        begun, self._begun = self._begun, None
        if begun is not None:
            begun.connection.close()
        if self._fallback is not None:
            self._fallback.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _in_order(pods: PodList, wanted: Sequence[str]) -> list[str]:
    """``wanted`` in the order of the pods whose newest READY sandbox each is: the listing's
    order (pods newest first), the order ``PodList.by_ip`` prefers a holder in."""
    from podcache.cri.networks import newest_ready_sandbox

    asked = set(wanted)
    ordered = [sid for pod in pods if (sid := newest_ready_sandbox(pod)) in asked]
    placed = set(ordered)
    return ordered + [sid for sid in wanted if sid not in placed]


def _list_calls(all: bool) -> list[tuple[str, bytes]]:
    """A listing's first calls: Version, and the two list calls with the kubelet's filters."""
    return [request("Version"), request("ListPodSandbox", all), request("ListContainers", all)]


class _Begun(NamedTuple):
    """A read under way: its connection, its listing's calls, the statuses asked ahead."""

    connection: _Connection
    lists: _Batch
    ahead: _Ahead | None


class _Ahead(NamedTuple):
    """PodSandboxStatus calls sent before they were wanted: each sandbox ID's call."""

    batch: _Batch
    calls: dict[str, Stream]


def _ask_ahead(connection: _Connection, lists: _Batch) -> _Ahead | None:
    """Send the statuses ``get_pods`` most likely asks, once the listing answered: the
    newest READY sandbox of each pod (by its UID label), newest first, at most as many as
    may be in flight. None without the C reader (reading the listing twice in Python would
    cost more than it saves) or when ListPodSandbox failed (``get_pods`` says why)."""
    try:
        from podcache.cri import _wire
    except ImportError:
        return None
    sandboxes = next(call for call in lists.values() if call.method == "ListPodSandbox")
    if not _ok(sandboxes):
        return None
    chosen = _newest_ready(_wire.sandboxes(_message(sandboxes)))[: connection.max_streams]
    if not chosen:
        return None
    batch = connection.send([request("PodSandboxStatus", sid) for sid in chosen])
    return _Ahead(batch, dict(zip(chosen, batch.values(), strict=True)))


def _newest_ready(rows: Iterable[SandboxRow]) -> list[str]:
    """The ID of each pod's newest READY sandbox (by its UID label), newest first."""
    newest: dict[str, tuple[int, str]] = {}
    for row in rows:
        if row.state == _SANDBOX_READY and (row.created_at, row.id) > newest.get(row.uid, (-1, "")):
            newest[row.uid] = (row.created_at, row.id)
    return [sid for _, sid in sorted(newest.values(), reverse=True)]


class _Asking:
    """The PodSandboxStatus calls of one read, on its connection: those asked ahead
    (``begin``) are read as needed; the rest are called once all those ended (a connection's
    calls are read batch by batch)."""

    def __init__(self, connection: _Connection, memo: NetworkMemo, ahead: _Ahead | None) -> None:
        self._connection = connection
        self._memo = memo
        self._ahead = ahead

    def statuses(self, wanted: Sequence[str]) -> dict[str, SandboxNetwork]:
        """The network of each sandbox of ``wanted`` whose PodSandboxStatus answered OK (a
        failed one: that pod's IPs stay unknown, as ``CRIRuntime``'s)."""
        from podcache.cri.eventwire import status_fields

        fetched = {}
        called = []

        def learn(sandbox_id: str, answer: Stream) -> None:
            if _ok(answer):
                fetched[sandbox_id] = self._memo.learn(sandbox_id, status_fields(_message(answer)))

        for sandbox_id in wanted:
            asked = self._asked_ahead(sandbox_id)
            if asked is None:
                called.append(sandbox_id)
            else:
                learn(sandbox_id, asked)
        if called:
            if self._ahead is not None:
                self._connection.answers(self._ahead.batch)
            requests = [request("PodSandboxStatus", s) for s in called]
            self._connection.calls(
                requests,
                window=STATUSES_IN_FLIGHT,
                ended=lambda index, answer: learn(called[index], answer),  # as each ends
            )
        return fetched

    def _asked_ahead(self, sandbox_id: str) -> Stream | None:
        """The call asked ahead for ``sandbox_id``, once it ended; None if none was."""
        if self._ahead is None or (call := self._ahead.calls.get(sandbox_id)) is None:
            return None
        while call.status is None:
            self._connection.take()
        return call

    def statuses_until(
        self, ordered: Sequence[str], ips: frozenset[str]
    ) -> dict[str, SandboxNetwork]:
        """``statuses`` of ``ordered`` in steps (``FIRST_STEP`` sandboxes, doubling up to
        ``BATCH``), stopping after the step in which every IP of ``ips`` was found held (not
        by a host-network sandbox). Every sandbox before the one found holding an IP was
        asked, so ``by_ip`` gives that IP the same pod as after asking them all (module
        rules)."""
        fetched: dict[str, SandboxNetwork] = {}
        missing = set(ips)
        first, step = 0, FIRST_STEP
        while first < len(ordered) and missing:
            found = self.statuses(ordered[first : first + step])
            fetched |= found
            for network in found.values():
                if not network.host_network:
                    missing.difference_update(network.ips)
            first += step
            step = min(2 * step, BATCH)
        return fetched
