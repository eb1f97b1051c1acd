"""One runtime call per key on the CRI socket (``serve/crisock/statuscalls.py``), and the rule
that keeps it honest: a caller joins the call in the air only if no event named the item since
that call began (docs/architecture.md §10 rule 8). A caller told of an event must get an
answer begun after it, not one the runtime may have made before the change.

The runtime here is ``FakeForwarder``, a unit-test fake: each call waits until the test
answers it, so the order of calls, events and answers is the test's own.
"""

from __future__ import annotations

import asyncio
from typing import cast

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.forward import Forwarder
from podcache.serve.crisock.statuscalls import ListedItem, StatusCalls
from podcache.serve.crisock.statuses import StatusStore
from tests.unit.crisock.test_statuses import (
    IDS,
    PERIOD,
    SANDBOX_ID,
    Clock,
    answer,
    event,
    status,
)

PATH = "/runtime.v1.RuntimeService/ContainerStatus"
SANDBOX_PATH = "/runtime.v1.RuntimeService/PodSandboxStatus"
ASKED = pb.ContainerStatusRequest(container_id=IDS[0], verbose=True).SerializeToString()


class FakeForwarder:
    """Stands in for ``forward.Forwarder``: every call waits for the test's answer."""

    endpoint = "fake://runtime"

    def __init__(self) -> None:
        self.calls: list[asyncio.Future[bytes]] = []
        self.saved = 0

    def count_saved(self, path: str) -> None:
        self.saved += 1

    async def call(self, path: str, request: bytes, remaining: float | None, keep: bool) -> bytes:
        answered: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.calls.append(answered)
        return await answered


async def _calls_reach(fake: FakeForwarder, count: int) -> None:
    while len(fake.calls) < count:
        await asyncio.sleep(0)


def _setup() -> tuple[StatusStore, FakeForwarder, StatusCalls]:
    store = StatusStore(60.0)
    store.stream_opened()
    fake = FakeForwarder()
    return store, fake, StatusCalls(store, cast(Forwarder, fake), {})


def test_a_caller_told_of_an_event_does_not_join_a_call_begun_before_it() -> None:
    async def scenario() -> None:
        store, fake, calls = _setup()
        before = asyncio.create_task(calls.answer(PATH, ASKED, None))
        await _calls_reach(fake, 1)
        stopped = status(IDS[0], pb.CONTAINER_EXITED, exit_code=137)
        store.event(event(IDS[0], pb.CONTAINER_STOPPED_EVENT, statuses=[stopped]))
        after = asyncio.create_task(calls.answer(PATH, ASKED, None))
        await _calls_reach(fake, 2)  # a call of its own, not the one in the air
        fake.calls[0].set_result(answer(IDS[0], 0, True))
        fake.calls[1].set_result(answer(IDS[0], 137, True))
        assert (await before).data == answer(IDS[0], 0, True)
        assert (await after).data == answer(IDS[0], 137, True)
        again = await calls.answer(PATH, ASKED, None)  # the later answer was kept
        assert again.data == answer(IDS[0], 137, True)
        assert len(fake.calls) == 2

    asyncio.run(scenario())


def test_callers_with_no_event_between_share_the_call_in_the_air() -> None:
    async def scenario() -> None:
        store, fake, calls = _setup()
        first = asyncio.create_task(calls.answer(PATH, ASKED, None))
        await _calls_reach(fake, 1)
        store.event(event(IDS[1], pb.CONTAINER_STARTED_EVENT, statuses=[]))  # another item
        second = asyncio.create_task(calls.answer(PATH, ASKED, None))
        await asyncio.sleep(0)
        fake.calls[0].set_result(answer(IDS[0], 0, True))
        assert (await first).data == (await second).data == answer(IDS[0], 0, True)
        assert len(fake.calls) == 1
        assert fake.saved == 1

    asyncio.run(scenario())


def test_a_prefix_is_not_joined_across_any_event() -> None:
    """No event names a prefix: any event since the call began may be about its item."""

    async def scenario() -> None:
        store, fake, calls = _setup()
        prefix = pb.ContainerStatusRequest(container_id=IDS[0][:12]).SerializeToString()
        first = asyncio.create_task(calls.answer(PATH, prefix, None))
        await _calls_reach(fake, 1)
        store.event(event(IDS[1], pb.CONTAINER_STARTED_EVENT, statuses=[]))
        second = asyncio.create_task(calls.answer(PATH, prefix, None))
        await _calls_reach(fake, 2)
        for each in fake.calls:
            each.set_result(answer(IDS[0], 0, False))
        await first
        await second

    asyncio.run(scenario())


def test_a_plain_caller_joins_the_verbose_call_in_the_air_and_takes_its_status() -> None:
    async def scenario() -> None:
        _, fake, calls = _setup()
        plain = pb.ContainerStatusRequest(container_id=IDS[0]).SerializeToString()
        verbose = asyncio.create_task(calls.answer(PATH, ASKED, None))
        await _calls_reach(fake, 1)
        joined = asyncio.create_task(calls.answer(PATH, plain, None))
        await asyncio.sleep(0)
        fake.calls[0].set_result(answer(IDS[0], 3, True))
        assert (await verbose).data == answer(IDS[0], 3, True)
        assert (await joined).data == answer(IDS[0], 3, False)  # the status alone
        assert len(fake.calls) == 1

    asyncio.run(scenario())


def test_a_plain_caller_told_of_an_event_does_not_join_a_verbose_call_begun_before_it() -> None:
    async def scenario() -> None:
        store, fake, calls = _setup()
        plain = pb.ContainerStatusRequest(container_id=IDS[0]).SerializeToString()
        verbose = asyncio.create_task(calls.answer(PATH, ASKED, None))
        await _calls_reach(fake, 1)
        store.event(event(IDS[0], pb.CONTAINER_STOPPED_EVENT, statuses=[]))
        after = asyncio.create_task(calls.answer(PATH, plain, None))
        await _calls_reach(fake, 2)
        fake.calls[0].set_result(answer(IDS[0], 0, True))
        fake.calls[1].set_result(answer(IDS[0], 137, False))
        await verbose
        assert (await after).data == answer(IDS[0], 137, False)

    asyncio.run(scenario())


def test_an_event_during_the_listings_wait_gives_its_status_not_a_runtime_call() -> None:
    """A sandbox's answer past the period waits for a listing within it; an event naming the
    sandbox meanwhile ends that answer and brings the sandbox's status: that is given, and
    the runtime is not asked."""

    async def scenario() -> None:
        clock = Clock()
        store = StatusStore(PERIOD, clock=clock, sandbox_extras=False)
        store.stream_opened()
        fake = FakeForwarder()
        listing = asyncio.Event()

        async def listed(sandbox: bool, ident: str, remaining: float | None) -> ListedItem:
            await listing.wait()
            return ListedItem(pb.SANDBOX_READY, clock.now + PERIOD)

        calls = StatusCalls(store, cast(Forwarder, fake), {}, listed)
        store.event(event(IDS[0], pb.CONTAINER_STARTED_EVENT, statuses=[]))  # keeps the sandbox's
        clock.now += PERIOD + 1
        asked = pb.PodSandboxStatusRequest(pod_sandbox_id=SANDBOX_ID).SerializeToString()
        waiting = asyncio.create_task(calls.answer(SANDBOX_PATH, asked, None))
        await asyncio.sleep(0)
        stopped = pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_NOTREADY)
        store.event(
            pb.ContainerEventResponse(
                container_id=SANDBOX_ID,
                container_event_type=pb.CONTAINER_STOPPED_EVENT,
                pod_sandbox_status=stopped,
            ).SerializeToString()
        )
        listing.set()  # a listing that began before the stop
        expected = pb.PodSandboxStatusResponse(status=stopped).SerializeToString()
        assert (await waiting).data == expected
        assert fake.calls == []

    asyncio.run(scenario())
