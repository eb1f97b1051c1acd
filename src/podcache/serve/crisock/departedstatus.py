"""``serve --cri-keep-departed DURATION``: the last status answers of an item the runtime
deleted, kept ``keep_for`` seconds (docs/architecture.md §10 rule 9). Rules:

1. **Exact IDs only.** An item is found by its whole ID (a prefix names nothing here: the
   runtime no longer resolves it either).
2. **A verbose call gets the verbose answer kept, else the plain one** (the status as it
   last was, an empty ``info``).
3. **Bounded**: at most ``max_items`` items and ``max_bytes`` of their answers; past either,
   and past ``keep_for``, the oldest departure goes first.
4. **When it left** is the DELETED event's time (its ``created_at``; the wall clock when
   podcache read the event for a time unset or in the future), written in RFC 3339 (UTC,
   nanoseconds); ``keep_for`` runs from then.

Costs: ``left`` O(1) amortized (expired and excess items leave from the oldest end), ``answer``
O(1). Thread-safe (one lock).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEPARTED_BYTES", "DEPARTED_ITEMS", "DepartedStatuses", "rfc3339"]

DEPARTED_ITEMS = 10_000
"""Departed items kept at most: two minutes of a node replacing 80 containers a second."""
DEPARTED_BYTES = 32 * 1024 * 1024
"""Bytes of their answers at most."""


def rfc3339(nanoseconds: int) -> str:
    """``nanoseconds`` since the epoch as RFC 3339 UTC with nine fractional digits."""
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


@dataclass(slots=True)
class _Departed:
    plain: bytes
    verbose: bytes | None
    left_at: str
    expires: float

    @property
    def cost(self) -> int:
        return len(self.plain) + len(self.verbose or b"")


class DepartedStatuses:
    """The departed items' last answers (rules above); ``clock`` times the expiry,
    ``wall_clock`` (ns) dates a departure whose event had no time."""

    def __init__(
        self,
        keep_for: float,
        *,
        max_items: int = DEPARTED_ITEMS,
        max_bytes: int = DEPARTED_BYTES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.keep_for = keep_for
        self.max_items, self.max_bytes = max_items, max_bytes
        self._clock, self._wall_clock = clock, wall_clock
        self._lock = threading.Lock()
        self._items: collections.OrderedDict[tuple[str, str], _Departed] = collections.OrderedDict()
        self._bytes = 0

    @property
    def size(self) -> tuple[int, int]:
        """Items kept now, and their answers' bytes."""
        return len(self._items), self._bytes

    def left(
        self, method: str, ident: str, plain: bytes, verbose: bytes | None, at_ns: int
    ) -> None:
        """``ident`` (a ``method`` item) was deleted at ``at_ns`` (0: unknown, now). It is kept
        ``keep_for`` from its deletion (an event containerd 2.x replays to a new subscriber
        tells of a deletion minutes old); one already older is not kept."""
        now_ns = self._wall_clock()
        at_ns = at_ns if 0 < at_ns <= now_ns else now_ns
        remaining = self.keep_for - (now_ns - at_ns) / 1e9
        if remaining < 0:
            return
        item = _Departed(plain, verbose, rfc3339(at_ns), self._clock() + remaining)
        with self._lock:
            old = self._items.pop((method, ident), None)
            if old is not None:
                self._bytes -= old.cost
            self._items[(method, ident)] = item
            self._bytes += item.cost
            self._trim()

    def _trim(self) -> None:
        now = self._clock()
        while self._items:
            oldest = next(iter(self._items.values()))
            over = len(self._items) > self.max_items or self._bytes > self.max_bytes
            if not over and oldest.expires >= now:
                return
            _, gone = self._items.popitem(last=False)
            self._bytes -= gone.cost

    def answer(self, method: str, ident: str, verbose: bool) -> tuple[bytes, str] | None:
        """The answer for a ``method`` call on ``ident`` and when the item left; None when
        it is not kept (never was, or expired)."""
        with self._lock:
            self._trim()
            item = self._items.get((method, ident))
        if item is None:
            return None
        answer = item.verbose if verbose and item.verbose is not None else item.plain
        return answer, item.left_at
