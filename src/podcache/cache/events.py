"""The event subscription's decisions: a state table, counters and backoff; no I/O, no threads.

The drivers run the stream and report what happened (a ``Signal``); this module says what to
do next (a ``Step``, by ``TRANSITIONS``) and keeps the numbers ``stats()`` shows. The rules are
docs/architecture.md §7's (the subscription's table and what follows it); from the inside:

1. Every event asks for a refresh, and so does every successful (re)subscription; the core
   coalesces them (``FreshnessCore.hint``).
2. A stream that fails or ends, and a runtime not reached at all, is tried again after a
   capped, jittered exponential backoff (``BACKOFF_FIRST`` doubling to ``BACKOFF_CAP``, each
   wait drawn from its upper half), which starts over only after a stream stayed open
   ``BACKOFF_CAP`` seconds, so a runtime that accepts and drops streams at once costs one
   refresh per backoff step. It never gives up.
3. "No events" (UNIMPLEMENTED, or a stream ending at once with OK before any event) waits
   ``UNSUPPORTED_RETRY``, or until a refresh succeeds after one failed; only while the runtime
   never streamed: once it sent an event or kept a stream ``BACKOFF_CAP`` seconds, either is an
   ordinary end, retried on the backoff (a runtime shutting down or recovering may end a stream
   at once). Logged once per cache.
4. ``resubscriptions`` counts one per outage, ``failures`` every failed attempt. A stream lost
   within ``BACKOFF_CAP`` seconds of a resubscription that ended an outage with the runtime
   unreachable belongs to that outage (containerd may end the first stream it takes while it
   recovers), and one before the first subscription was open is none.
5. The log (``podcache.cache``) reports each change of the state it last reported, once, with
   its cause, naming the method and the endpoint (§7 says at which level): a restart is two
   WARNING lines, however long it lasts.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from podcache.errors import PodcacheError

__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "ENDED",
    "METHOD",
    "TRANSITIONS",
    "UNSUPPORTED_RETRY",
    "EventState",
    "Signal",
    "Step",
    "Subscription",
    "cause_of",
    "failure",
]

BACKOFF_FIRST = 0.05
"""Seconds before the first attempt to reopen a failed stream (upper bound of the draw)."""
BACKOFF_CAP = 2.0
"""The longest wait between two attempts to reopen a stream."""
UNSUPPORTED_RETRY = 300.0
"""Seconds after which a runtime that answered UNIMPLEMENTED is asked again."""

METHOD = "GetContainerEvents"
"""The CRI method of the subscription's stream, as its log lines name it."""

log = logging.getLogger("podcache.cache")


class EventState(enum.StrEnum):
    """Where the subscription is (``CacheStats.events_state``)."""

    OFF = "off"
    """No subscription: events not asked for, the getter has none, or the cache is closed."""
    SUBSCRIBING = "subscribing"
    """Not subscribed yet: the first attempt is under way (polling meanwhile)."""
    SUBSCRIBED = "subscribed"
    """A stream is open; changes are seen when they happen."""
    RECONNECTING = "reconnecting"
    """The stream failed, ended or could not be opened: trying again with backoff; polling
    meanwhile."""
    UNSUPPORTED = "unsupported"
    """The runtime sends no container events: polling by the period, asking again later."""


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
    WAIT_SUPPORT = "wait-support"
    """Wait ``UNSUPPORTED_RETRY`` seconds (or until woken), then open a new stream."""
    STOP = "stop"
    """End the subscription."""


TRANSITIONS: dict[tuple[EventState, Signal], tuple[EventState, Step]] = {
    (EventState.SUBSCRIBING, Signal.OPENED): (EventState.SUBSCRIBED, Step.REFRESH),
    (EventState.SUBSCRIBING, Signal.FAILED): (EventState.RECONNECTING, Step.RETRY),
    (EventState.SUBSCRIBING, Signal.UNREACHABLE): (EventState.RECONNECTING, Step.RETRY),
    (EventState.SUBSCRIBING, Signal.UNSUPPORTED): (EventState.UNSUPPORTED, Step.WAIT_SUPPORT),
    (EventState.RECONNECTING, Signal.OPENED): (EventState.SUBSCRIBED, Step.REFRESH),
    (EventState.RECONNECTING, Signal.FAILED): (EventState.RECONNECTING, Step.RETRY),
    (EventState.RECONNECTING, Signal.UNREACHABLE): (EventState.RECONNECTING, Step.RETRY),
    (EventState.RECONNECTING, Signal.UNSUPPORTED): (EventState.UNSUPPORTED, Step.WAIT_SUPPORT),
    (EventState.SUBSCRIBED, Signal.EVENT): (EventState.SUBSCRIBED, Step.REFRESH),
    (EventState.SUBSCRIBED, Signal.FAILED): (EventState.RECONNECTING, Step.RETRY),
    (EventState.SUBSCRIBED, Signal.UNSUPPORTED): (EventState.UNSUPPORTED, Step.WAIT_SUPPORT),
    (EventState.UNSUPPORTED, Signal.OPENED): (EventState.SUBSCRIBED, Step.REFRESH),
    (EventState.UNSUPPORTED, Signal.FAILED): (EventState.RECONNECTING, Step.RETRY),
    (EventState.UNSUPPORTED, Signal.UNREACHABLE): (EventState.RECONNECTING, Step.RETRY),
    (EventState.UNSUPPORTED, Signal.UNSUPPORTED): (EventState.UNSUPPORTED, Step.WAIT_SUPPORT),
}
"""(state, signal) -> (next state, step). Any state with CLOSE, and OFF with anything, stops."""


_FAILURES = frozenset({Signal.FAILED, Signal.UNREACHABLE, Signal.UNSUPPORTED})
"""The signals that are a failed attempt (``Subscription.failures``)."""


@dataclass(frozen=True, slots=True)
class EventCounters:
    """The subscription's part of ``CacheStats``."""

    state: EventState
    received: int
    refreshes: int
    resubscriptions: int
    last_event_at: float | None = None
    """The cache clock's reading when the last event was received (None: none yet)."""
    failures: int = 0


ENDED = "the runtime ended the stream"
"""The cause of a stream that ended without an error."""


def cause_of(error: BaseException) -> str:
    """A failure's cause for the log: a podcache error's message (it names the endpoint and
    what failed), else the exception's type and message."""
    text = str(error)
    if isinstance(error, PodcacheError) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


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
        self.state = EventState.SUBSCRIBING if enabled else EventState.OFF
        self.received = 0
        self.last_event_at: float | None = None  # the clock when the last event arrived
        self.refreshes = 0
        self.resubscriptions = 0
        self.subscriptions = 0
        self.failures = 0
        """Failed attempts: streams not opened, failed or ended, runtimes unreachable or
        without events (rule 4); every one counts."""
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._backoff = BACKOFF_FIRST
        self._opened_at: float | None = None
        self._unreached = False  # the runtime was unreachable since the last subscription
        self._recovered = False  # the open stream ended an outage with the runtime unreachable
        self._same_outage = False  # the next subscription ends the outage already counted
        self._logged_unsupported = False
        self._streamed = False  # an event came, or a stream lived BACKOFF_CAP: it has events
        self._refresh_failed = False
        self._said: EventState | None = None  # the state the log last reported (rule 5)
        self._outage_failures = 0  # failed attempts since the log said it was failing
        self._outage_began = 0.0

    # -- the table -------------------------------------------------------------------------
    def on(self, signal: Signal, cause: str | None = None) -> Step:
        """Record ``signal`` (``cause``: what failed, for a failure); the step to take. Unknown
        pairs stop (the table is the truth)."""
        if signal is Signal.CLOSE or self.state is EventState.OFF:
            return self._close()
        if signal is Signal.UNSUPPORTED and self._streamed:
            # A runtime that streamed events is not one without them: a stream it ends at once
            # (shutting down, or recovering from a restart) is an ordinary end, retried on the
            # backoff, not a wait of UNSUPPORTED_RETRY (rule 3).
            signal = Signal.FAILED
        before = self.state
        self.state, step = TRANSITIONS[(before, signal)]
        if signal in _FAILURES:
            self.failures += 1
        self._report(signal, cause)
        self._count(signal, before, cause)
        return step

    def _count(self, signal: Signal, before: EventState, cause: str | None) -> None:
        """What ``signal`` (from state ``before``) adds to the counters and the outage."""
        if signal is Signal.OPENED:
            self._opened()
        elif signal is Signal.EVENT:
            self._streamed = True
            self.received += 1
            self.last_event_at = self._clock()
        elif signal in (Signal.FAILED, Signal.UNREACHABLE):
            self._unreached = self._unreached or signal is Signal.UNREACHABLE
            self._failed(before)
        elif signal is Signal.UNSUPPORTED:
            self._unsupported(cause)

    def _close(self) -> Step:
        """Closed (or off already): nothing more is done, said once when it was running."""
        if self.state is not EventState.OFF and self._said is not None:
            log.info("%s at %s: the subscription is closed", METHOD, self.endpoint)
        self.state = EventState.OFF
        return Step.STOP

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

    def _failed(self, before: EventState) -> None:
        opened_at, self._opened_at = self._opened_at, None
        if before is not EventState.SUBSCRIBED or opened_at is None:
            return
        healthy = self._clock() - opened_at >= BACKOFF_CAP
        self._streamed = self._streamed or healthy
        if healthy:
            self._backoff = BACKOFF_FIRST  # it was a healthy stream: start over
        self._same_outage = self._recovered and not healthy

    def _unsupported(self, cause: str | None) -> None:
        self._opened_at = None
        self._refresh_failed = False
        if not self._logged_unsupported:
            self._logged_unsupported = True
            log.warning(
                "%s at %s: the runtime sends no container events (%s); the cache refreshes by "
                "its period, asking again after %g s or a runtime restart",
                METHOD,
                self.endpoint,
                _said(cause),
                UNSUPPORTED_RETRY,
            )

    # -- what the operator is told (rule 5) ------------------------------------------------
    def _report(self, signal: Signal, cause: str | None) -> None:
        """Log the change of the reported state, once; a failure that changes nothing at
        DEBUG."""
        said, now = self._said, self.state
        if signal in _FAILURES:
            self._outage_failures += 1
        if now is said:
            if signal in _FAILURES:
                log.debug("%s at %s failed again: %s", METHOD, self.endpoint, _said(cause))
            return
        self._said = now
        if now is EventState.SUBSCRIBED:
            self._report_subscribed(said)
        elif now is EventState.RECONNECTING:
            self._outage_failures, self._outage_began = 1, self._clock()
            lost = "stream lost" if said is EventState.SUBSCRIBED else "cannot subscribe"
            log.warning(
                "%s at %s: %s: %s; retrying with backoff (the cache refreshes by its period "
                "meanwhile)",
                METHOD,
                self.endpoint,
                lost,
                _said(cause),
            )
        # UNSUPPORTED: _unsupported said it, once per cache (rule 3)

    def _report_subscribed(self, said: EventState | None) -> None:
        if said is None:
            log.info("%s at %s: subscribed", METHOD, self.endpoint)
        elif said is EventState.UNSUPPORTED:
            log.warning("runtime at %s now streams container events (%s)", self.endpoint, METHOD)
        else:
            log.warning(
                "%s at %s: subscribed%s after %d failed attempt%s in %.1f s",
                METHOD,
                self.endpoint,
                " again" if self.subscriptions > 0 else "",
                self._outage_failures,
                "" if self._outage_failures == 1 else "s",
                self._clock() - self._outage_began,
            )

    # -- numbers ---------------------------------------------------------------------------
    def retry_delay(self) -> float:
        """Seconds to wait before the next attempt (jittered), and grow the backoff."""
        ceiling = self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_CAP)
        return self._rng.uniform(ceiling / 2, ceiling)

    def delay(self, step: Step) -> float:
        """Seconds to wait before the next attempt, for a RETRY or WAIT_SUPPORT step."""
        if step is Step.RETRY:
            return self.retry_delay()
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
            self.state,
            self.received,
            self.refreshes,
            self.resubscriptions,
            last_event_at=self.last_event_at,
            failures=self.failures,
        )


def _said(cause: str | None) -> str:
    return cause if cause else "the stream failed (no error given)"
