"""A sorted set of strings for prefix lookups that stays cheap to change; no I/O, no clock.

``SortedIDs`` holds the container and sandbox IDs the departed index remembers
(``cache/departed.py``), so that a prefix of a departed ID (crictl's 12 characters) is found as
one of the snapshot's is (``model.ids_with_prefix``). A snapshot's sorted IDs are built once
and never change; these change at every publish that releases or forgets a key, so one sorted
list (whose every insertion moves every later entry) would make each change cost the whole
index. The strings are kept instead in sorted blocks of at most ``2 * LOAD``, with each block's
largest string in a list of its own.

Costs (n strings): ``add`` and ``discard`` O(log n + LOAD + n / LOAD) (a bisection of the
maxima, one of a block, a block's memmove, and the maxima's when a block splits or empties);
``prefixed(prefix, limit)`` O(log n + limit). Nothing walks the whole set but ``__iter__``.

Invariants: every block is sorted, non-empty and at most ``2 * LOAD`` long; the blocks are in
order (every string of a block is less than every string of the next); ``_maxes[i]`` is
``_blocks[i][-1]``; no string is held twice; ``len`` is the number of strings held.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

__all__ = ["LOAD", "SortedIDs"]

LOAD = 256
"""Half the longest block: a block past ``2 * LOAD`` strings is split in two."""


class SortedIDs:
    """Distinct strings in order, in blocks (module docstring)."""

    __slots__ = ("_blocks", "_len", "_maxes")

    def __init__(self) -> None:
        self._blocks: list[list[str]] = []
        self._maxes: list[str] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        at = bisect.bisect_left(self._maxes, value)
        if at == len(self._maxes):
            return False
        block = self._blocks[at]
        index = bisect.bisect_left(block, value)
        return index < len(block) and block[index] == value

    def __iter__(self) -> Iterator[str]:
        for block in self._blocks:
            yield from block

    def add(self, value: str) -> None:
        """Hold ``value`` (nothing when it is held already)."""
        blocks, maxes = self._blocks, self._maxes
        if not blocks:
            blocks.append([value])
            maxes.append(value)
            self._len = 1
            return
        at = bisect.bisect_left(maxes, value)
        if at == len(blocks):
            at -= 1  # past every block's largest: it ends the last block
        block = blocks[at]
        index = bisect.bisect_left(block, value)
        if index < len(block) and block[index] == value:
            return
        block.insert(index, value)
        maxes[at] = block[-1]
        self._len += 1
        if len(block) > 2 * LOAD:
            blocks[at : at + 1] = [block[:LOAD], block[LOAD:]]
            maxes[at : at + 1] = [block[LOAD - 1], block[-1]]

    def discard(self, value: str) -> None:
        """Stop holding ``value`` (nothing when it is not held)."""
        blocks, maxes = self._blocks, self._maxes
        at = bisect.bisect_left(maxes, value)
        if at == len(blocks):
            return
        block = blocks[at]
        index = bisect.bisect_left(block, value)
        if index == len(block) or block[index] != value:
            return
        del block[index]
        self._len -= 1
        if block:
            maxes[at] = block[-1]
        else:
            del blocks[at]
            del maxes[at]

    def prefixed(self, prefix: str, limit: int) -> list[str]:
        """The first ``limit`` strings held that start with ``prefix``, in order."""
        blocks = self._blocks
        found: list[str] = []
        at = bisect.bisect_left(self._maxes, prefix)
        start = bisect.bisect_left(blocks[at], prefix) if at < len(blocks) else 0
        while at < len(blocks) and len(found) < limit:
            for value in blocks[at][start : start + limit - len(found)]:
                if not value.startswith(prefix):
                    return found
                found.append(value)
            at += 1
            start = 0
        return found
