"""Conversion of list answers, and the thread and GC pause it runs under for the asyncio getter.

Holds ``_converted`` (two listings to pods, released in any case), ``_read_messages`` (a
streamed answer's messages read and their rows joined), ``_Converter`` (``AsyncCRIRuntime``'s
one worker thread, which reads answers in pieces of ``READ_PIECE_BYTES`` and converts them off
the event loop), ``_GCPause`` (the process-wide pause of the cyclic collector during a
conversion) and ``_Held``. Deliberately not here: the
grouping rules (``convert``) and the calls that fetch the answers (the getters).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from podcache.cri.convert import (
    Listing,
    MalformedListingError,
    Memo,
    pods_from_listings,
    read_containers,
    read_sandboxes,
    split_items,
)
from podcache.cri.failures import _not_cri_message
from podcache.cri.networks import ListingPass
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import (
    RuntimeProtocolError,
)
from podcache.model import PodList

__all__ = ["INLINE_POD_BYTES", "READ_PIECE_BYTES"]


_R = TypeVar("_R")

Keeper = Callable[[str, bytes, Sequence[Any]], None]
"""Takes a list answer read (the method, its bytes, its rows): ``wireitems.WireItems.learn``."""


READ_PIECE_BYTES = 128 * 1024
"""Bytes of a list answer read per call of the reader in ``AsyncCRIRuntime`` (a GIL hold)."""

INLINE_POD_BYTES = 16 * 1024
"""The most bytes of one pod's two answers that ``AsyncCRIRuntime.get_pod`` converts on the
event loop; larger ones go to the pod converter's thread (docs/architecture.md §7 rule 6:
below it, the two thread hops would cost more than the reading)."""


_READERS: dict[str, Callable[[bytes | memoryview], Listing]] = {
    "ListPodSandbox": read_sandboxes,
    "ListContainers": read_containers,
    # Each message of a streamed list answer is, on the wire, the unary answer (liststream).
    "StreamPodSandboxes": read_sandboxes,
    "StreamContainers": read_containers,
}


def _read_messages(read: Callable[[bytes], Listing], parts: Sequence[bytes]) -> Listing:
    """The listing of a streamed answer: each message read by ``read`` on its own, in order,
    the rows joined (no message: no items). ``read`` raises what it raises."""
    if not parts:
        return read(b"")
    if len(parts) == 1:
        return read(parts[0])
    return Listing.joined([read(part) for part in parts])


def _read_both(  # noqa: PLR0917 -- positional: passed through ``_Converter.run``
    converter: _Converter,
    runtime_name: str,
    sandbox_bytes: bytes,
    container_bytes: bytes,
    networks: ListingPass | None = None,
    running_only: bool = False,
) -> PodList:
    """In the converter's thread: both answers read and converted without a memo.
    ``running_only``: of answers listing every state, the ready sandboxes and running
    containers alone (what the runtime's state filters of ``get_pods(False)`` list)."""
    sandboxes = converter.read("ListPodSandbox", sandbox_bytes)
    containers = converter.read("ListContainers", container_bytes)
    if running_only:
        sandboxes = sandboxes.in_state(pb.SANDBOX_READY)
        containers = containers.in_state(pb.CONTAINER_RUNNING)
    return _converted(runtime_name, sandboxes, containers, None, networks)


def _converted(
    runtime_name: str,
    sandboxes: Listing,
    containers: Listing,
    memo: Memo | None,
    networks: ListingPass | None = None,
) -> PodList:
    """The pods of two listings, which are released (``Listing.release``) in any case."""
    try:
        return pods_from_listings(runtime_name, sandboxes, containers, memo, networks)
    finally:
        sandboxes.release()
        containers.release()


class _GCPause:
    """Pauses Python's cyclic garbage collector while listings are read and converted.

    The rows a conversion allocates are freed by reference counting when it ends
    (docs/architecture.md §4, "Calls"); a collection triggered meanwhile would scan them with
    the GIL held and promote the live rows to older generations, which then need full
    collections.

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
        self.keeper: Keeper | None = None
        """Given every answer read and its rows (``AsyncCRIRuntime.keep_wire_items``)."""

    def run(self, function: Callable[..., _R], *args: Any) -> asyncio.Future[_R]:
        """``function(*args)`` in the worker thread, as a future of the running loop; the
        cyclic garbage collector is paused while it runs (``_GCPause``)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="podcache-convert")
        return asyncio.get_running_loop().run_in_executor(self._pool, _without_gc, function, args)

    def read(self, method: str, data: bytes) -> Listing:
        """``data``, the answer of ``method``, read (a protocol error when it is not one).

        A large answer is read in pieces of whole items (see ``split_items``): the reader
        holds the GIL for one piece at a time, not for the whole answer.
        """
        read = _READERS[method]
        try:
            pieces = split_items(data, READ_PIECE_BYTES)
            listing = read(data) if pieces is None else Listing.joined([read(p) for p in pieces])
        except MalformedListingError as exc:
            raise RuntimeProtocolError(self._url, _not_cri_message(method)) from exc
        if self.keeper is not None:
            self.keeper(method, data, listing.rows)
        return listing

    def read_all(self, method: str, parts: Sequence[bytes]) -> Listing:
        """The answer of ``method`` in messages (one for a unary call, any number for a
        streaming one), each read as ``read`` reads an answer, the rows joined."""
        return _read_messages(lambda data: self.read(method, data), parts)

    def close(self) -> None:
        """Stop the thread once a conversion running now ends (its caller is gone anyway)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
