"""The hub's followers through an upstream end (``serve/eventhub.py`` rule 1): a follower that
joins while the runtime's stream has ended but the hub has not read that end yet (``_open``
finds its reader still running) shares the end, never stays on the dead stream; the next one
to join opens a new stream. Over a fake upstream (unit test: the hub's own logic only)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Self

import pytest

from podcache.errors import RuntimeUnavailableError
from podcache.serve.eventhub import EventHub, HubFollower

ENDPOINT = "unix:///run/fake.sock"
SAFETY = 10.0  # seconds: a hung follower fails the test instead of hanging it (no bound)


class FakeUpstream:
    """A fake of the runtime's stream: sends nothing; ``die(error)`` ends it."""

    connected = True

    def __init__(self) -> None:
        self._ended = asyncio.Event()
        self._error: BaseException | None = None

    def die(self, error: BaseException) -> None:
        self._error = error
        self._ended.set()

    async def open(self) -> None:
        return None

    def set_raw_sink(self, sink: Callable[[bytes], None]) -> None:
        del sink

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> object:
        await self._ended.wait()
        if self._error is not None:
            raise self._error
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._ended.set()


class FakeRuntime:
    """A fake runtime: each ``container_events()`` a new ``FakeUpstream``, kept in order."""

    endpoint = ENDPOINT

    def __init__(self) -> None:
        self.streams: list[FakeUpstream] = []

    def container_events(self) -> FakeUpstream:
        self.streams.append(FakeUpstream())
        return self.streams[-1]


async def _end_of(follower: HubFollower) -> BaseException | None:
    """How ``follower``'s iteration ends (the error it raises, None for a clean end)."""
    try:
        async for _ in follower:
            pass
    except RuntimeUnavailableError as error:
        return error
    return None


def test_a_follower_joining_a_stream_that_just_died_ends_with_it_and_the_next_opens_anew() -> None:
    async def scenario() -> None:
        runtime = FakeRuntime()
        hub = EventHub(runtime)
        first = hub.follower()
        await first.open()
        lost = RuntimeUnavailableError(ENDPOINT, "the runtime was killed")
        runtime.streams[0].die(lost)
        late = hub.follower()
        await late.open()  # in the same turn: the hub has not read the end yet
        assert len(runtime.streams) == 1  # it joined the stream that died
        ends = await asyncio.wait_for(asyncio.gather(_end_of(first), _end_of(late)), SAFETY)
        assert list(ends) == [lost, lost]
        await first.aclose()
        await late.aclose()
        again = hub.follower()
        await again.open()
        assert (len(runtime.streams), hub.subscriptions) == (2, 2)
        await again.aclose()
        await hub.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("error", [None, RuntimeUnavailableError(ENDPOINT, "killed")])
def test_every_follower_of_an_ended_stream_is_told_how_it_ended(
    error: RuntimeUnavailableError | None,
) -> None:
    async def scenario() -> None:
        runtime = FakeRuntime()
        hub = EventHub(runtime)
        followers = [hub.follower() for _ in range(3)]
        for follower in followers:
            await follower.open()
        assert len(runtime.streams) == 1  # one stream, shared
        if error is None:
            await runtime.streams[0].aclose()  # the runtime ended it cleanly
        else:
            runtime.streams[0].die(error)
        ends = await asyncio.wait_for(asyncio.gather(*map(_end_of, followers)), SAFETY)
        assert ends == [error] * 3
        await hub.aclose()

    asyncio.run(scenario())
