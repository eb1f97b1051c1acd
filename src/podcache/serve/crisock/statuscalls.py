"""``ContainerStatus`` and ``PodSandboxStatus`` on the CRI socket: the store's, else one call
(docs/architecture.md §10 rules 8 and 9). ``StatusCalls.answer`` answers, in order:

1. **Kept** (``source="cache"``): the store's answer; one it offers past the period
   (``kept_listed``) while ``listed`` shows the item in the state it gives and the store still
   keeps it after that wait. After the departed, the runtime's kept NOT_FOUND of a whole ID.
2. **Departed** (``source="departed"``, ``--cri-keep-departed``).
3. **One call per change** (``source="upstream"``, for each caller it answers): the runtime is
   asked once for the key; callers meanwhile join it within their own deadlines unless the
   store says an event overtook it (``overtaken``); a container's plain call with no flight
   of its own joins the verbose flight. The call has the socket's ``timeout`` and runs to its
   end when its callers leave. Without an event stream the call is forwarded as any other.

Costs: O(1) per call but the runtime's; at most one flight per key. Runs on the socket's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

import grpc

from podcache.serve.crisock.forward import (
    Forwarder,
    UpstreamError,
    end_shared,
    fail_shared,
    joined,
)
from podcache.serve.crisock.statuses import CONTAINER, SANDBOX, StatusKey, StatusStore, Ticket
from podcache.serve.crisock.statuswire import ProtobufError, plain_answer, status_request

__all__ = [
    "DEPARTED_TRAILER",
    "SOURCES",
    "ListedItem",
    "StatusAnswer",
    "StatusCalls",
    "status_method",
]

DEPARTED_TRAILER = "podcache-departed"
"""The trailing metadata of an answer about a departed item: RFC 3339, when it left."""
SOURCES = ("cache", "departed", "upstream")
"""The ``source`` label of ``podcache_cri_status_answers_total``."""


def status_method(path: str) -> str | None:
    """``ContainerStatus`` or ``PodSandboxStatus`` for their paths, else None."""
    method = path.rsplit("/", 1)[-1]
    return method if method in (CONTAINER, SANDBOX) else None


class StatusAnswer(NamedTuple):
    """An answer's bytes; ``departed``: when its item left (None: it has not)."""

    data: bytes
    departed: str | None = None


class ListedItem(NamedTuple):
    """An item's CRI state in a listing, and until when that listing is within the period
    (on the store's clock)."""

    state: int
    fresh_until: float


Listed = Callable[[bool, str, float | None], Awaitable[ListedItem | None]]
"""An item's CRI state (a sandbox's when the first argument is true) in a listing within the
period, asked within a deadline (None: the socket's); None when not listed or none came."""


class StatusCalls:
    """Status calls answered from ``store`` or, once per key, by ``forwarder``; ``rewrites``:
    the server's answer rewrites by path (``--cri-redact-env``), applied before keeping;
    ``listed``: items' states in a listing within the period (None: not asked, so no
    answer is given past the period)."""

    def __init__(
        self,
        store: StatusStore,
        forwarder: Forwarder,
        rewrites: Mapping[str, Callable[[bytes], bytes]],
        listed: Listed | None = None,
    ) -> None:
        self.store = store
        self._forwarder = forwarder
        self._rewrites = rewrites
        self._listed = listed
        self._flights: dict[StatusKey, tuple[asyncio.Future[bytes], Ticket]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.answers: dict[tuple[str, str], int] = {}
        """Status answers given, by (method, source)."""

    def _count(self, method: str, source: str) -> None:
        key = (method, source)
        self.answers[key] = self.answers.get(key, 0) + 1

    async def answer(self, path: str, request: bytes, remaining: float | None) -> StatusAnswer:
        """The answer for ``request`` on ``path``; raises ``UpstreamError``."""
        method = status_method(path)
        asked = status_request(request)
        assert method is not None
        store = self.store
        if asked is None:
            return await self._forwarded(path, method, request, remaining)
        key = StatusKey(method, asked.ident, asked.verbose)
        kept = store.kept(key)
        if kept is None:
            # Past the period: what a listing confirms, else what an event brought meanwhile.
            kept = await self._kept_listed(key, remaining) or store.kept(key)
        if kept is not None:
            self._count(method, "cache")
            self._forwarder.count_saved(path)
            return StatusAnswer(kept)
        departed = (
            store.departed.answer(method, asked.ident, asked.verbose) if store.departed else None
        )
        if departed is not None:
            self._count(method, "departed")
            self._forwarder.count_saved(path)
            return StatusAnswer(*departed)
        missing = store.missing(key)
        if missing is not None:
            self._count(method, "cache")
            self._forwarder.count_saved(path)
            raise UpstreamError(grpc.StatusCode.NOT_FOUND, missing)
        if not store.streaming:
            return await self._forwarded(path, method, request, remaining)
        data = await self._once(path, key, request, remaining)
        self._count(method, "upstream")
        return StatusAnswer(data)

    async def _kept_listed(self, key: StatusKey, remaining: float | None) -> bytes | None:
        """An answer past the period that a listing within it confirms, else None."""
        if self._listed is None:
            return None
        held = self.store.kept_listed(key)
        if held is None:
            return None
        listed = await self._listed(key.method == SANDBOX, key.ident, remaining)
        if listed is None or listed.state != held[1] or self.store.kept_listed(key) != held:
            return None
        self.store.offer_listed(key, held, listed.fresh_until)
        return held[0]

    async def _forwarded(
        self, path: str, method: str, request: bytes, remaining: float | None
    ) -> StatusAnswer:
        """Without events: forwarded as any call (``forward``'s sharing), nothing kept."""
        data = await self._forwarder.call(path, request, remaining, keep=False)
        self._count(method, "upstream")
        return StatusAnswer(self._rewritten(path, data))

    def _rewritten(self, path: str, data: bytes) -> bytes:
        rewrite = self._rewrites.get(path)
        return data if rewrite is None else rewrite(data)

    async def _once(
        self, path: str, key: StatusKey, request: bytes, remaining: float | None
    ) -> bytes:
        """The key's one flight's answer, joined or begun here (rule 3); a plain answer joined
        to a verbose flight is that answer's status."""
        flight, derived = self._joinable(key)
        if flight is not None:
            self._forwarder.count_saved(path)
        else:
            loop = asyncio.get_running_loop()
            flight = loop.create_future()
            ticket = self.store.begin()
            self._flights[key] = (flight, ticket)
            task = loop.create_task(self._fly(path, key, request, (flight, ticket)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        data = await joined(flight, remaining, self._forwarder.endpoint, path)
        if not derived:
            return data
        try:
            return plain_answer(data)
        except ProtobufError:
            raise UpstreamError(
                grpc.StatusCode.INTERNAL,
                f"podcache: the runtime at {self._forwarder.endpoint} answered a verbose "
                f"{key.method} with no status",
            ) from None

    def _joinable(self, key: StatusKey) -> tuple[asyncio.Future[bytes] | None, bool]:
        """The flight a caller for ``key`` may join (None: none), and whether it is the
        verbose flight of a plain container call, whose answer's status is the caller's."""
        for each in (key, key._replace(verbose=True)):
            flying = self._flights.get(each)
            if flying is not None and not self.store.overtaken(flying[1], key):
                return flying[0], each != key
            if key.method != CONTAINER or key.verbose:
                break
        return None, False

    async def _fly(
        self,
        path: str,
        key: StatusKey,
        request: bytes,
        flying: tuple[asyncio.Future[bytes], Ticket],
    ) -> None:
        flight, ticket = flying
        try:
            data = self._rewritten(
                path, await self._forwarder.call(path, request, None, keep=False)
            )
        except (UpstreamError, ValueError) as error:
            if isinstance(error, ValueError):  # the rewrite could not read it: never passed on
                error = UpstreamError(grpc.StatusCode.INTERNAL, f"podcache: {error}")
            elif error.code is grpc.StatusCode.NOT_FOUND and not error.unreachable:
                self.store.keep_missing(key, error.details, ticket)
            fail_shared(flight, error)
        else:
            self.store.keep(key, data, ticket)
            flight.set_result(data)
        finally:
            if self._flights.get(key) == flying:
                del self._flights[key]
            end_shared(flight)
