"""FakeRuntime and AsyncFakeRuntime: in-memory pod getters for tests (yours and ours).

They count calls, can fail, can be slow, and can hold every call until released, so a test can
put a cache exactly where it wants it. They speak no protocol; ``podcache.sim`` is the
simulated runtime that speaks real CRI over a socket.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable

from podcache.model import Pod, PodList

__all__ = ["AsyncFakeRuntime", "FakeRuntime"]


class _FakeBase:
    """State shared by the twins: the pods, the fault settings and the call records."""

    def __init__(
        self,
        pods: Iterable[Pod] = (),
        *,
        all_pods: Iterable[Pod] | None = None,
        latency: float = 0.0,
        error: BaseException | None = None,
    ) -> None:
        self.pods = PodList(pods)
        """What ``get_pods(False)`` returns (replace it to change the runtime's state)."""
        self.all_pods = None if all_pods is None else PodList(all_pods)
        """What ``get_pods(True)`` returns; None means the same as ``pods``."""
        self.latency = latency
        """Seconds each call takes before it answers."""
        self.error = error
        """Raised by every call while set (the same exception object each time)."""
        self.calls = 0
        """Calls started so far."""
        self.all_args: list[bool] = []
        """The ``all`` argument of each call, in order."""
        self.in_flight = 0
        """Calls started and not yet finished."""
        self.on_call: Callable[[bool], None] | None = None
        """Run inside each call with its ``all`` argument, before it answers (e.g. to move
        a fake clock, or change ``pods``, while the fetch is under way)."""
        self.max_in_flight = 0
        """The most calls ever in flight at once (a cache should keep this at 1)."""
        self._lock = threading.Lock()
        self._init_gate()

    def _init_gate(self) -> None:
        """Set up the twin's way of holding calls (threading or asyncio)."""
        raise NotImplementedError

    def set_pods(self, pods: Iterable[Pod]) -> None:
        """Replace the running pods."""
        self.pods = PodList(pods)

    def _enter(self, all: bool) -> None:
        with self._lock:
            self.calls += 1
            self.all_args.append(all)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self, all: bool) -> PodList:
        with self._lock:
            self.in_flight -= 1
        if self.on_call is not None:
            self.on_call(all)
        if self.error is not None:
            raise self.error
        if all and self.all_pods is not None:
            return self.all_pods
        return self.pods


class FakeRuntime(_FakeBase):
    """A thread-safe in-memory getter: ``get_pods(all)`` returns ``pods`` after the faults."""

    def _init_gate(self) -> None:
        self._gate = threading.Event()
        self._gate.set()
        self._entered = threading.Condition(self._lock)

    def block(self) -> None:
        """Hold every call (new and in flight) until ``release``."""
        self._gate.clear()

    def release(self) -> None:
        """Let held calls answer."""
        self._gate.set()

    def wait_for_calls(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` calls have started; False on timeout."""
        with self._entered:
            return self._entered.wait_for(lambda: self.calls >= count, timeout)

    def get_pods(self, all: bool) -> PodList:
        """The pods, after the configured latency and while not blocked; or ``error``."""
        self._enter(all)
        with self._entered:
            self._entered.notify_all()
        try:
            self._gate.wait()
            if self.latency:
                time.sleep(self.latency)
        except BaseException:
            with self._lock:
                self.in_flight -= 1
            raise
        return self._leave(all)


class AsyncFakeRuntime(_FakeBase):
    """The asyncio twin of FakeRuntime; use it (block, release, await) from one event loop."""

    def _init_gate(self) -> None:
        self._gate: asyncio.Event | None = None
        self._hold = False

    def _event(self) -> asyncio.Event:
        if self._gate is None:
            self._gate = asyncio.Event()
            if not self._hold:
                self._gate.set()
        return self._gate

    def block(self) -> None:
        """Hold every call (new and in flight) until ``release``."""
        self._hold = True
        if self._gate is not None:
            self._gate.clear()

    def release(self) -> None:
        """Let held calls answer."""
        self._hold = False
        if self._gate is not None:
            self._gate.set()

    async def wait_for_calls(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` calls have started; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.calls < count:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.001)
        return True

    async def get_pods(self, all: bool) -> PodList:
        """The pods, after the configured latency and while not blocked; or ``error``."""
        self._enter(all)
        try:
            await self._event().wait()
            if self.latency:
                await asyncio.sleep(self.latency)
        except BaseException:
            with self._lock:
                self.in_flight -= 1
            raise
        return self._leave(all)
