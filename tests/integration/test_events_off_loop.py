"""``AsyncCRIRuntime.container_events()`` receives, reads and checks every message off the event
loop, over real CRI (the simulated runtime on a unix socket): the reader runs in
the stream's own thread, a big event (megabytes of labels) reaches the loop as one small
``ContainerEvent``, and the loop keeps running while it is read. The pending bound is tested
with a fake sync stream (named as such).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import cast

import pytest

from podcache import ContainerEvent, ContainerEventType
from podcache.cri import AsyncCRIRuntime, eventstream, eventwire
from podcache.cri.eventstream import AsyncContainerEventStream, ContainerEventStream
from podcache.sim import SimRuntime
from podcache.sim.population import SimEvent, SimEventType, SimSandbox, SimSandboxState


def _big_sandbox(labels: int) -> SimSandbox:
    return SimSandbox(
        id="b" * 64,
        name="big",
        uid="u-big",
        namespace="default",
        attempt=0,
        state=SimSandboxState.READY,
        created_at=1,
        labels={f"k{n:06d}": "v" * 200 for n in range(labels)},
        annotations={},
    )


def test_big_events_are_read_in_the_streams_thread_not_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readers: list[str] = []
    real = eventwire.event_fields

    def recording(data: bytes) -> object:
        readers.append(threading.current_thread().name)
        return real(data)

    monkeypatch.setattr(eventstream, "event_fields", recording)
    sandbox = _big_sandbox(20_000)  # about 4.5 MB of labels

    async def scenario(sim: SimRuntime) -> tuple[ContainerEvent, int]:
        loop_thread = threading.current_thread().name
        async with AsyncCRIRuntime(sim.endpoint) as runtime:
            stream = runtime.container_events()
            await stream.open()
            sim.wait_for_event_subscribers(1)
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.001)

            ticker = asyncio.get_running_loop().create_task(tick())
            sent = SimEvent(
                container_id="c" * 64,
                type=SimEventType.STARTED,
                created_at=time.time_ns(),
                sandbox=sandbox,
                containers=(),
            )
            await asyncio.to_thread(sim.send_events, [sent])
            event = await anext(stream)
            ticker.cancel()
            await stream.aclose()
            assert loop_thread not in readers
            return event, ticks

    with SimRuntime(5, seed=1) as sim:
        event, ticks = asyncio.run(scenario(sim))
    assert event == ContainerEvent(
        type=ContainerEventType.STARTED,
        container_id="c" * 64,
        pod_sandbox_id="b" * 64,
        created_at=event.created_at,
        pod_uid="u-big",
        pod=event.pod,
    )
    assert event.pod is not None and event.pod.id == "u-big"
    assert readers == ["podcache-events"]
    assert ticks >= 1  # the loop ran while the event was on its way


class FakeSyncStream:
    """A fake sync stream: ``count`` events at once, then the end (no runtime)."""

    endpoint = "fake://"
    connected = True

    def __init__(self, count: int) -> None:
        self._count = count
        self.all_sent = threading.Event()

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __iter__(self) -> Iterator[ContainerEvent]:
        for n in range(self._count):
            yield ContainerEvent(type=ContainerEventType.CREATED, container_id=f"c{n}")
        self.all_sent.set()


def test_past_the_pending_bound_the_oldest_events_are_dropped_and_counted() -> None:
    async def scenario() -> tuple[list[str], int]:
        fake = FakeSyncStream(10)
        stream = AsyncContainerEventStream(cast(ContainerEventStream, fake), pending=3)
        await stream.open()
        await asyncio.to_thread(fake.all_sent.wait, 10)
        await asyncio.sleep(0.05)  # the thread's hand-overs run on the loop now
        got = [event.container_id async for event in stream]
        return got, stream.dropped

    got, dropped = asyncio.run(scenario())
    assert got == ["c7", "c8", "c9"] and dropped == 7
