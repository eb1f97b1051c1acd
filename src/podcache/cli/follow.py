"""Following the node's changes for ``podcache events`` and ``podcache pods -w``: a RuntimeCache
over the open runtime, watched until interrupted; it prints nothing itself.

A runtime error ends the command (exit status 1), whether on the first read or on a refresh
made later while watching; Ctrl-C ends it with 130 (``podcache.cli.main`` maps both).
"""

# ruff: noqa: PLC0415 -- the cache is imported only when a command follows: start-up stays fast

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from podcache.cli.options import PodFilter
from podcache.cli.query import matches

if TYPE_CHECKING:
    from podcache.cache.changes import PodChange
    from podcache.cli.source import Source
    from podcache.model import PodList

__all__ = ["POLL", "follow"]

POLL = 0.25
"""Seconds between checks for a failed refresh while no change arrives."""


class _Listing:
    """The runtime's pods with a fixed ``all``; remembers the last error it raised."""

    def __init__(self, source: Source, all_: bool) -> None:
        self._runtime = source.runtime
        self._all = all_
        self.error: Exception | None = None

    def get_pods(self, all: bool) -> PodList:
        try:
            return self._runtime.get_pods(self._all)
        except Exception as exc:
            self.error = exc
            raise


def follow(
    source: Source,
    *,
    all_: bool,
    period: float,
    where: PodFilter,
    show: Callable[[list[PodChange]], None],
) -> None:
    """Call ``show`` with each batch of changes of the pods ``where`` selects, the current
    pods first (as ADDED; this first batch even when empty), until interrupted or the runtime
    fails (its error is raised)."""
    from podcache.cache import RuntimeCache
    from podcache.cache.changes import visible

    def shown(pod: object) -> bool:
        return matches(pod, where)  # type: ignore[arg-type]

    listing = _Listing(source, all_)
    cache = RuntimeCache(listing, period)
    first = True
    with cache.watch() as watch:
        while True:
            batch = watch.next_batch(POLL)
            if listing.error is not None:
                raise listing.error
            kept = [c for c in (visible(change, shown) for change in batch) if c is not None]
            if kept or (first and watch.revision is not None):
                first = False
                show(kept)
                sys.stdout.flush()
