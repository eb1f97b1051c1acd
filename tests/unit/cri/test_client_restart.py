"""A long-lived getter across runtime deaths and restarts, over real sockets, both twins alike.

The runtime goes away in two ways: an in-process server that stops and comes back on the same
socket path, and a child process that is SIGKILLed (its socket file stays, nobody listening),
the way containerd dies. While the runtime is down, a listener that hangs up on every
connection holds its path: a call then puts the channel into gRPC's reconnect backoff (the
connection is accepted, the handshake fails), and every later connection it accepts is one of
gRPC's own reconnect attempts, so the test sees the backoff grow. The kubelet's backoff (100 ms,
times 1.6 per attempt, up to 3 s, jitter 20%) passes one second about 2.6 s into an outage and
two seconds about 4.3 s into it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import grpc
import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.cri.convert import pods_from_responses
from podcache.errors import RuntimeUnavailableError
from podcache.model import PodList
from tests.unit.cri.servers import (
    CannedRuntime,
    canned,
    grpc_runtime,
    killable_runtime,
    raw_listener,
)

KINDS = ["sync", "async"]
TIMEOUT = 1.0  # each call's deadline in the restart tests: shorter than the grown backoff
KILLED_DEADLINE = 20.0
"""The deadline of the calls to a killed runtime: "at once" is long before it (half of it),
which no load makes a refused connect miss; a client that waited would end by the deadline."""
GROWN = 4.3  # s into an outage, the backoff between reconnect attempts is past 2 s
WAIT_MAX = 15.0


def expected_pods(runtime: CannedRuntime) -> PodList:
    return pods_from_responses("containerd", runtime.sandboxes, runtime.containers)


class Getter:
    """One getter of either kind, called the same way from an async test."""

    def __init__(self, kind: str, endpoint: str, timeout: float) -> None:
        self.kind = kind
        if kind == "sync":
            self.sync: CRIRuntime | None = CRIRuntime(endpoint, timeout=timeout)
            self.aio: AsyncCRIRuntime | None = None
        else:
            self.sync, self.aio = None, AsyncCRIRuntime(endpoint, timeout=timeout)

    async def get_pods(self) -> PodList:
        if self.sync is not None:
            return self.sync.get_pods(False)
        assert self.aio is not None
        return await self.aio.get_pods(False)

    def start_get_pods(self) -> Callable[[], Awaitable[PodList]]:
        """Start get_pods in the background (a thread, or a task); await the result later."""
        if self.aio is not None:
            task = asyncio.ensure_future(self.aio.get_pods(False))

            async def task_result() -> PodList:
                return await task

            return task_result
        sync = self.sync
        assert sync is not None
        result: list[PodList | BaseException] = []

        def run() -> None:
            try:
                result.append(sync.get_pods(False))
            except BaseException as e:
                result.append(e)

        thread = threading.Thread(target=run)
        thread.start()

        async def thread_result() -> PodList:
            while thread.is_alive():
                await asyncio.sleep(0.005)
            (outcome,) = result
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        return thread_result

    async def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
        if self.aio is not None:
            await self.aio.close()

    async def disconnected(self) -> None:
        """Wait until the channel has seen its connection close (it is READY no more).

        A call made before that goes out on the dead connection and fails at once (right, but
        not what these tests are about). Reads the getter's channel: no public API has this.
        """
        deadline = time.monotonic() + 5.0
        while self._ready():
            assert time.monotonic() < deadline, "the channel stays READY with the server gone"
            await asyncio.sleep(0.005)

    def _ready(self) -> bool:
        """Whether the getter's channel still thinks it is connected (the asyncio getter's is
        the sync channel its calls are made on, in threads)."""
        ready = grpc.ChannelConnectivity.READY
        if self.sync is not None:
            return bool(self.sync._caller.line.state(False) == ready.value[0])
        assert self.aio is not None and self.aio._list_caller is not None
        return bool(self.aio._list_caller._caller.line.state(False) == ready.value[0])


async def wait_for_attempt(attempts: list[float], after: float) -> None:
    """Wait until the listener accepts a connection at ``after`` or later."""
    deadline = time.monotonic() + WAIT_MAX
    while not any(t >= after for t in attempts):
        assert time.monotonic() < deadline, f"no reconnect attempt after {after}: {attempts}"
        await asyncio.sleep(0.01)


# -- restarted after a long outage: the first call succeeds within its deadline --------------


@pytest.mark.parametrize("kind", KINDS)
async def test_first_call_after_a_long_outage_succeeds_within_its_deadline(
    kind: str, sock_dir: str
) -> None:
    path = f"{sock_dir}/restart.sock"
    first, second = canned(), canned()
    with grpc_runtime(first, path) as endpoint:
        getter = Getter(kind, endpoint, TIMEOUT)
        assert await getter.get_pods() == expected_pods(first)
    try:
        await getter.disconnected()
        down = time.monotonic()
        attempts: list[float] = []
        with raw_listener(path, close_at_once=True, accepted=attempts):
            with pytest.raises(RuntimeUnavailableError, match="closes them without answering"):
                await getter.get_pods()
            await wait_for_attempt(attempts, down + GROWN)
        # gRPC's next attempt is as far away as the last gap at least: past the deadline.
        assert attempts[-1] - attempts[-2] > TIMEOUT, attempts
        with grpc_runtime(second, path):
            pods = await getter.get_pods()
    finally:
        await getter.close()
    # It succeeded: a call left on the channel in backoff would have waited past its deadline
    # (the next attempt is further away than TIMEOUT, above) and raised RuntimeDeadlineError.
    assert pods == expected_pods(second)
    # The channel in backoff was replaced: the new one asks Version first, once.
    assert second.methods() == ["Version", "ListPodSandbox", "ListContainers"]


@pytest.mark.parametrize("kind", KINDS)
async def test_calls_waiting_on_a_replaced_channel_go_on_on_the_new_one(
    kind: str, sock_dir: str
) -> None:
    path = f"{sock_dir}/waiting.sock"
    first, second = canned(), canned()
    with grpc_runtime(first, path) as endpoint:
        getter = Getter(kind, endpoint, 10.0)  # long enough to wait through the outage
        assert await getter.get_pods() == expected_pods(first)
    try:
        await getter.disconnected()
        down = time.monotonic()
        attempts: list[float] = []
        with raw_listener(path, close_at_once=True, accepted=attempts):
            waiting = getter.start_get_pods()  # waits for the channel, which backs off
            await wait_for_attempt(attempts, down + 2.6)
        # The old channel's next attempt is more than a second away now.
        assert attempts[-1] - attempts[-2] > 0.8, attempts
        with grpc_runtime(second, path):
            assert await getter.get_pods() == expected_pods(second)  # replaces the channel
            assert await waiting() == expected_pods(second)
            answered = time.monotonic()
    finally:
        await getter.close()
    # gRPC's next attempt on the old channel comes at least one gap after its last (its backoff
    # only grows): answered before then, the waiting call did not stay on the old channel.
    gap = attempts[-1] - attempts[-2]
    assert answered < attempts[-1] + gap, f"{answered - attempts[-1]:.3f} s, gap {gap:.3f} s"
    assert second.methods().count("Version") == 1


# -- killed: a clear "not reachable" at once, never a hang ------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_runtime_killed_between_calls_is_not_reachable_at_once(
    kind: str, sock_dir: str
) -> None:
    path = f"{sock_dir}/killed.sock"
    with killable_runtime(path) as child:
        getter = Getter(kind, child.endpoint, KILLED_DEADLINE)
        try:
            assert await getter.get_pods() == PodList([])
            child.kill()
            await getter.disconnected()
            started = time.monotonic()
            with pytest.raises(RuntimeUnavailableError) as caught:
                await getter.get_pods()
            elapsed = time.monotonic() - started
        finally:
            await getter.close()
    message = str(caught.value)
    assert child.endpoint in message and "connection refused" in message, message
    assert elapsed < KILLED_DEADLINE / 2, f"{elapsed:.3f} s"


@pytest.mark.parametrize("kind", KINDS)
async def test_runtime_killed_during_a_call_is_not_reachable_at_once(
    kind: str, sock_dir: str
) -> None:
    path = f"{sock_dir}/killed-mid-call.sock"
    with killable_runtime(path, stall=True) as child:
        getter = Getter(kind, child.endpoint, KILLED_DEADLINE)
        try:
            pending = getter.start_get_pods()  # Version: the child takes it and never answers
            await asyncio.to_thread(child.wait_for, "Version")
            child.kill()
            killed = time.monotonic()
            with pytest.raises(RuntimeUnavailableError) as caught:
                await pending()
            elapsed = time.monotonic() - killed
        finally:
            await getter.close()
    message = str(caught.value)
    assert child.endpoint in message, message
    # Says "connection refused" too, unless the client's connect came while the kernel was still
    # closing the dying process's files (its listener among them): then the connect succeeded.
    assert "closed during Version" in message, message
    assert elapsed < KILLED_DEADLINE / 2, f"{elapsed:.3f} s"
