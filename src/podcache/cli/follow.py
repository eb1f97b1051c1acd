"""Following the node's changes for ``podcache events``, ``podcache pods -w`` and ``podcache
watch`` into a pipe: a RuntimeCache over the open runtime, watched until interrupted; it prints
the changes through its caller and, on stderr, when it loses the runtime and gets it back.

Rules (the same for the three commands, and for ``watch`` on a terminal, whose footer says it):

- the first read failing ends the command (exit status 1): there is nothing to follow yet;
- after it, a failed refresh (the runtime restarting, or gone) never ends the command: one line
  on stderr says the runtime failed and that it is reconnecting, the pods shown stay as they
  were, the cache tries again every period (and, with events, at once when the event stream
  opens again), and one line says when the runtime answers again; the changes made meanwhile
  then follow, as changes;
- Ctrl-C ends it with 130 (``podcache.cli.main`` maps it); ``watch`` with q. The signal is
  taken at the loop's next turn, where no lock is held (``stopping``).
"""

# ruff: noqa: PLC0415 -- the cache is imported only when a command follows: start-up stays fast

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from podcache.cli.options import PodFilter
from podcache.cli.query import matches
from podcache.cli.stopping import StopSignals

if TYPE_CHECKING:
    from podcache.cache.changes import PodChange
    from podcache.cli.source import Source
    from podcache.cri.client import CRIRuntime
    from podcache.cri.eventstream import ContainerEventStream
    from podcache.model import PodList

__all__ = [
    "POLL",
    "EventListing",
    "Listing",
    "Outage",
    "follow",
    "listing",
    "require_events",
]

POLL = 0.25
"""Seconds between checks for a failed refresh while no change arrives."""


class Listing:
    """The runtime's pods with a fixed ``all`` (a RuntimeCache always asks for ``all=False``);
    remembers how its last call ended (``last_error``: None after a success). It offers no
    container events: a cache over it polls by its period (``--events off``)."""

    def __init__(self, source: Source, all_: bool) -> None:
        self._runtime = source.runtime
        self._all = all_
        self.last_error: Exception | None = None
        """The last call's error; None when it succeeded (or none was made)."""
        self.endpoint = source.endpoint
        """The runtime's endpoint (the event subscription's log lines name it)."""

    def get_pods(self, all: bool) -> PodList:
        try:
            pods = self._runtime.get_pods(self._all)
        except Exception as exc:
            self.last_error = exc
            raise
        self.last_error = None
        return pods


class EventListing(Listing):
    """A ``Listing`` that also offers the runtime's container events (``--events auto|on``):
    the cache then refreshes on every event, not only every period."""

    def container_events(self) -> ContainerEventStream:
        return cast("CRIRuntime", self._runtime).container_events()  # open_source's default


def listing(source: Source, all_: bool, events: bool) -> Listing:
    """The getter that ``watch``, ``events`` and ``pods -w`` give their RuntimeCache; their
    ``--log-level`` takes effect here, as they start following the runtime."""
    from podcache.cli.logs import install

    install()
    return (EventListing if events else Listing)(source, all_)


def require_events(source: Source) -> None:
    """``--events on``: a runtime without container events is an error (exit status 1)."""
    import click

    from podcache.cri.support import events_unsupported

    unsupported = events_unsupported(source.endpoint, source.runtime.timeout)
    if unsupported is not None:
        raise click.ClickException(f"--events on: {unsupported}")


class Outage:
    """Whether the runtime is lost, from the getter's last outcome, and the two stderr lines
    that say so (``check`` prints each on its transition only: one line per outage)."""

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self.lost = False

    def check(self, getter: Listing) -> None:
        """Say so when the last call's outcome changes whether the runtime is lost."""
        import click

        error = getter.last_error
        if error is not None and not self.lost:
            self.lost = True
            click.echo(
                f"podcache: the runtime failed ({error}); reconnecting to {self._endpoint} "
                "(the pods shown stay as they were until it answers)",
                err=True,
            )
        elif error is None and self.lost:
            self.lost = False
            click.echo(
                f"podcache: reconnected to {self._endpoint}; following its changes again",
                err=True,
            )


def follow(
    source: Source,
    *,
    all_: bool,
    period: float,
    where: PodFilter,
    show: Callable[[list[PodChange]], None],
    events: str = "off",
) -> None:
    """Call ``show`` with each batch of changes of the pods ``where`` selects, the current
    pods first (as ADDED; this first batch even when empty), until interrupted. The first
    read's error is raised; later failures are ridden through (module docstring). ``events``:
    ``auto`` subscribes to the runtime's container events when it has them, ``on`` requires
    them (a click error, exit status 1, when the runtime answers UNIMPLEMENTED), ``off`` polls
    every ``period`` only."""
    from podcache.cache import RuntimeCache
    from podcache.cache.changes import visible

    def shown(pod: object) -> bool:
        return matches(pod, where)  # type: ignore[arg-type]

    if events == "on":
        require_events(source)
    getter = listing(source, all_, events != "off")
    cache = RuntimeCache(getter, period, events=events != "off")
    outage = Outage(source.endpoint)
    first = True
    with StopSignals() as stop, cache, cache.watch() as watch:
        while True:
            stop.check()  # here no lock is held (``stopping``)
            batch = watch.next_batch(POLL)
            outage.check(getter)
            kept = [c for c in (visible(change, shown) for change in batch) if c is not None]
            if kept or (first and watch.revision is not None):
                first = False
                show(kept)
                sys.stdout.flush()
