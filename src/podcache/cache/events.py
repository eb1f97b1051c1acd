"""The event subscription's decisions: a state table, counters and backoff; no I/O, no threads.

A cache built with ``events=True`` over a getter that offers ``container_events()`` keeps one
subscription to the runtime's container events in the background (a thread in
``RuntimeCache``, a task in ``AsyncRuntimeCache``). The drivers run the stream and report what
happened (a ``Signal``); this module says what to do next (a ``Step``) and keeps the numbers
``stats()`` shows.

Rules
-----
1. Every event asks for a refresh; so does every successful (re)subscription (changes made
   while no stream was open are then never missed). The refresh itself is coalesced by the
   freshness core: at most one in flight and one queued (``FreshnessCore.hint``).
2. A stream that fails or ends is reopened after a capped, jittered exponential backoff:
   ``BACKOFF_FIRST`` doubling up to ``BACKOFF_CAP``, each wait drawn uniformly from its upper
   half. The backoff starts over only after a stream stayed open ``BACKOFF_CAP`` seconds, so a
   runtime that accepts and drops streams at once costs one refresh per backoff step, not a
   storm. A runtime that is not there at all (nothing listening: the stream reports it was
   never ``connected``) is knocked on every ``BACKOFF_FIRST`` (jittered) without growing the
   backoff: a refused connect costs it nothing, and a restarted runtime is found again within
   about 50 ms of its return. The subscription never gives up.
3. A runtime without the RPC (UNIMPLEMENTED) leaves the cache polling by its period, as without
   events; that is logged once per cache, and the runtime is asked again after
   ``UNSUPPORTED_RETRY`` seconds, or sooner when a refresh succeeds after one failed (the
   runtime was restarted, perhaps upgraded).
4. ``resubscriptions`` counts successful subscriptions after the first: one runtime restart
   is one resubscription, however many attempts the outage took. A stream lost within
   ``BACKOFF_CAP`` seconds of a resubscription that ended an outage (the runtime was
   unreachable in between: it restarted) belongs to that outage (containerd may end the first
   stream it takes while it is still recovering), so the subscription after it is not counted
   again.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "TRANSITIONS",
    "UNSUPPORTED_RETRY",
    "EventState",
    "Signal",
    "Step",
    "Subscription",
    "failure",
]

BACKOFF_FIRST = 0.05
"""Seconds before the first attempt to reopen a failed stream (upper bound of the draw)."""
BACKOFF_CAP = 2.0
"""The longest wait between two attempts to reopen a stream."""
UNSUPPORTED_RETRY = 300.0
"""Seconds after which a runtime that answered UNIMPLEMENTED is asked again."""

log = logging.getLogger("podcache.cache")


class EventState(enum.StrEnum):
    """Where the subscription is (``CacheStats.events_state``)."""

    OFF = "off"
    """No subscription: events not asked for, the getter has none, or the cache is closed."""
    SUBSCRIBED = "subscribed"
    """A stream is open; changes are seen when they happen."""
    RECONNECTING = "reconnecting"
    """No stream open (not yet, or it failed): trying again with backoff; polling meanwhile."""
    UNSUPPORTED = "unsupported"
    """The runtime has no container events: polling by the period, asking again later."""


class Signal(enum.Enum):
    """What the driver saw."""

    OPENED = "opened"
    EVENT = "event"
    FAILED = "failed"
    """The runtime was reached, but the stream could not be opened, failed, or ended."""
    UNREACHABLE = "unreachable"
    """The runtime was not reached at all (no socket, nothing listening)."""
    UNSUPPORTED = "unsupported"
    CLOSE = "close"


class Step(enum.Enum):
    """What the driver does next."""

    REFRESH = "refresh"
    """Ask for a background refresh, then go on reading the stream."""
    RETRY = "retry"
    """Wait ``Subscription.retry_delay()`` seconds (the backoff), then open a new stream."""
    KNOCK = "knock"
    """Wait about ``BACKOFF_FIRST`` seconds (the backoff unchanged), then try again."""
    WAIT_SUPPORT = "wait-support"
    """Wait ``UNSUPPORTED_RETRY`` seconds (or until woken), then open a new stream."""
    STOP = "stop"
    """End the subscription."""


TRANSITIONS: dict[tuple[EventState, Signal], tuple[EventState, Step]] = {
    (EventState.RECONNECTING, Signal.OPENED): (EventState.SUBSCRIBED, Step.REFRESH),
    (EventState.RECONNECTING, Signal.FAILED): (EventState.RECONNECTING, Step.RETRY),
    (EventState.RECONNECTING, Signal.UNREACHABLE): (EventState.RECONNECTING, Step.KNOCK),
    (EventState.RECONNECTING, Signal.UNSUPPORTED): (EventState.UNSUPPORTED, Step.WAIT_SUPPORT),
    (EventState.SUBSCRIBED, Signal.EVENT): (EventState.SUBSCRIBED, Step.REFRESH),
    (EventState.SUBSCRIBED, Signal.FAILED): (EventState.RECONNECTING, Step.RETRY),
    (EventState.SUBSCRIBED, Signal.UNSUPPORTED): (EventState.UNSUPPORTED, Step.WAIT_SUPPORT),
    (EventState.UNSUPPORTED, Signal.OPENED): (EventState.SUBSCRIBED, Step.REFRESH),
    (EventState.UNSUPPORTED, Signal.FAILED): (EventState.RECONNECTING, Step.RETRY),
    (EventState.UNSUPPORTED, Signal.UNREACHABLE): (EventState.RECONNECTING, Step.KNOCK),
    (EventState.UNSUPPORTED, Signal.UNSUPPORTED): (EventState.UNSUPPORTED, Step.WAIT_SUPPORT),
}
"""(state, signal) -> (next state, step). Any state with CLOSE, and OFF with anything, stops."""


@dataclass(frozen=True, slots=True)
class EventCounters:
    """The subscription's part of ``CacheStats``."""

    state: EventState
    received: int
    refreshes: int
    resubscriptions: int
    last_event_at: float | None = None
    """The cache clock's reading when the last event was received (None: none yet)."""


def failure(stream: object) -> Signal:
    """How a stream failed: UNREACHABLE when it says it never reached the runtime (its
    ``connected`` is False), else FAILED (also for streams that do not say)."""
    return Signal.UNREACHABLE if getattr(stream, "connected", True) is False else Signal.FAILED


class Subscription:
    """The state of one cache's subscription; the driver calls it under its own exclusion.

    ``clock`` is the cache's clock (seconds); ``rng`` draws the backoff jitter.
    """

    def __init__(
        self,
        endpoint: str,
        clock: Callable[[], float],
        *,
        enabled: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.state = EventState.RECONNECTING if enabled else EventState.OFF
        self.received = 0
        self.last_event_at: float | None = None  # the clock when the last event arrived
        self.refreshes = 0
        self.resubscriptions = 0
        self.subscriptions = 0
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._backoff = BACKOFF_FIRST
        self._opened_at: float | None = None
        self._unreached = False  # the runtime was unreachable since the last subscription
        self._recovered = False  # the open stream ended an outage with the runtime unreachable
        self._same_outage = False  # the next subscription ends the outage already counted
        self._logged_unsupported = False
        self._refresh_failed = False

    # -- the table -------------------------------------------------------------------------
    def on(self, signal: Signal) -> Step:
        """Record ``signal``; the step to take. Unknown pairs stop (the table is the truth)."""
        if signal is Signal.CLOSE or self.state is EventState.OFF:
            self.state = EventState.OFF
            return Step.STOP
        before = self.state
        self.state, step = TRANSITIONS[(before, signal)]
        if signal is Signal.OPENED:
            self._opened()
        elif signal is Signal.EVENT:
            self.received += 1
            self.last_event_at = self._clock()
        elif signal in (Signal.FAILED, Signal.UNREACHABLE):
            self._unreached = self._unreached or signal is Signal.UNREACHABLE
            self._failed(before)
        elif signal is Signal.UNSUPPORTED:
            self._unsupported()
        return step

    def _opened(self) -> None:
        in_outage = self._same_outage
        if self.subscriptions > 0 and not in_outage:
            self.resubscriptions += 1
        # An outage with the runtime unreachable lasts until a stream lives BACKOFF_CAP.
        self._recovered = (self.subscriptions > 0 and self._unreached) or in_outage
        self._unreached = self._same_outage = False
        self.subscriptions += 1
        self._opened_at = self._clock()
        if self._logged_unsupported:
            self._logged_unsupported = False
            log.info("runtime at %s now streams container events", self.endpoint)

    def _failed(self, before: EventState) -> None:
        opened_at, self._opened_at = self._opened_at, None
        if before is not EventState.SUBSCRIBED or opened_at is None:
            return
        healthy = self._clock() - opened_at >= BACKOFF_CAP
        if healthy:
            self._backoff = BACKOFF_FIRST  # it was a healthy stream: start over
        self._same_outage = self._recovered and not healthy

    def _unsupported(self) -> None:
        self._opened_at = None
        self._refresh_failed = False
        if not self._logged_unsupported:
            self._logged_unsupported = True
            log.info(
                "runtime at %s does not stream container events (GetContainerEvents is "
                "UNIMPLEMENTED): the cache refreshes by its period; asking again after %g s "
                "or a runtime restart",
                self.endpoint,
                UNSUPPORTED_RETRY,
            )

    # -- numbers ---------------------------------------------------------------------------
    def retry_delay(self) -> float:
        """Seconds to wait before the next attempt (jittered), and grow the backoff."""
        ceiling = self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_CAP)
        return self._rng.uniform(ceiling / 2, ceiling)

    def delay(self, step: Step) -> float:
        """Seconds to wait before the next attempt, for a RETRY, KNOCK or WAIT_SUPPORT step."""
        if step is Step.RETRY:
            return self.retry_delay()
        if step is Step.KNOCK:
            return self._rng.uniform(BACKOFF_FIRST / 2, BACKOFF_FIRST)
        return UNSUPPORTED_RETRY

    def counted_refresh(self, scheduled: bool) -> None:
        """A refresh asked for by the subscription: count it when it added one."""
        if scheduled:
            self.refreshes += 1

    def refresh_done(self, ok: bool) -> bool:
        """A refresh ended; True when an UNSUPPORTED wait should end now (runtime is back)."""
        if not ok:
            self._refresh_failed = True
            return False
        back = self._refresh_failed and self.state is EventState.UNSUPPORTED
        self._refresh_failed = False
        return back

    def counters(self) -> EventCounters:
        return EventCounters(
            self.state, self.received, self.refreshes, self.resubscriptions, self.last_event_at
        )
