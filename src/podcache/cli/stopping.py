"""The signals that end a follower, taken where no lock is held.

A Python signal handler that raises (SIGINT's ``KeyboardInterrupt``, ``watch``'s SIGTERM) raises
in whatever the main thread is running, also between a lock's acquisition and the ``with``
that would release it: the lock then stays held, and the command hangs on its way out (a
watch's ``close`` waits for it for ever; ``podcache watch`` into a pipe did on SIGTERM). So
while a follower runs, each of these signals whose handler is Python's only sets a flag; the
follower's loop, which turns at least every ``follow.POLL`` seconds, checks it between two
waits, with no lock held, and raises ``KeyboardInterrupt`` there (exit status as before). A
signal left to the system (SIG_DFL ends the process, SIG_IGN ignores it) is left alone.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

__all__ = ["ENDING_SIGNALS", "StopSignals"]

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that end a follower when a Python handler takes them."""


class StopSignals:
    """``with StopSignals() as stop: ... stop.check()``: the ending signals set ``requested``;
    ``check`` raises ``KeyboardInterrupt`` once one came. The handlers are restored on exit."""

    def __init__(self) -> None:
        self.requested: int | None = None
        """The first ending signal that came (None: none yet)."""
        self._previous: dict[int, Any] = {}

    def _take(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is None:
            self.requested = signum

    def __enter__(self) -> StopSignals:
        for signum in ENDING_SIGNALS:
            handler = signal.getsignal(signum)
            if callable(handler):
                self._previous[signum] = signal.signal(signum, self._take)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` when an ending signal came (call with no lock held)."""
        if self.requested is not None:
            raise KeyboardInterrupt
