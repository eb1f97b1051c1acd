"""The background thread that churns a population at a rate; no gRPC, no population logic.

``ChurnDriver`` calls ``Population.step()`` about ``rate`` times a second (each step replaces
one pod). Steps are owed in proportion to the time spent running and unpaused, so a slow tick
catches up instead of drifting, while time spent paused is never made up afterwards.
Pausing waits for a step in progress to finish, so a test that pauses can then compare a list
with a snapshot knowing nothing changes in between.
"""

from __future__ import annotations

import threading
import time

from podcache.sim.population import Population

__all__ = ["ChurnDriver", "ChurnPause"]

_MAX_TICK = 0.05


class ChurnPause:
    """A pause in effect from its creation until ``resume()`` or the end of a ``with`` block."""

    def __init__(self, driver: ChurnDriver) -> None:
        self._driver = driver
        self._active = True
        driver.pause()

    def resume(self) -> None:
        """End this pause (other pauses may still hold churn); idempotent."""
        if self._active:
            self._active = False
            self._driver.resume()

    def __enter__(self) -> ChurnPause:
        return self

    def __exit__(self, *exc: object) -> None:
        self.resume()


class ChurnDriver:
    """Steps a population ``rate`` times per second on a daemon thread while started."""

    def __init__(self, population: Population, rate: float = 0.0) -> None:
        self._population = population
        self._rate = 0.0
        self.rate = rate
        self._step_lock = threading.Lock()
        self._pauses = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def rate(self) -> float:
        """Pods replaced per second (0: no churn); may be changed while running."""
        return self._rate

    @rate.setter
    def rate(self, value: float) -> None:
        if not value >= 0:
            raise ValueError(f"churn rate must be >= 0 pods/s, not {value!r}")
        self._rate = float(value)

    def pause(self) -> None:
        """Hold churn (counted: each ``pause`` needs its ``resume``); returns after any step in
        progress has finished."""
        with self._step_lock:
            self._pauses += 1

    def resume(self) -> None:
        """Release one pause."""
        with self._step_lock:
            if self._pauses == 0:
                raise RuntimeError("resume() without a matching pause()")
            self._pauses -= 1

    def step(self, count: int = 1) -> None:
        """Take ``count`` steps now, on this thread (even while paused)."""
        with self._step_lock:
            for _ in range(count):
                self._population.step()

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is not None:
            raise RuntimeError("churn already started")
        self._thread = threading.Thread(target=self._run, name="podcache-sim-churn", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        owed = 0.0
        last = time.monotonic()
        while True:
            rate = self._rate
            tick = min(_MAX_TICK, 1.0 / rate) if rate > 0 else _MAX_TICK
            if self._stop.wait(tick):
                return
            now = time.monotonic()
            elapsed, last = now - last, now
            with self._step_lock:
                if self._pauses or rate <= 0:
                    owed = 0.0
                    continue
                # Never owe more than a second's worth: a stalled machine does not burst.
                owed = min(owed + elapsed * rate, max(1.0, rate))
                due = int(owed)
                owed -= due
                for _ in range(due):
                    if self._stop.is_set():
                        return
                    self._population.step()
