"""The CRI socket's bounds, at and past their limits (docs/architecture.md §10 rules 3 and 5):
a subscriber's queue (events and bytes), the item store's pruning."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.wireitems import SLACK, WireItems
from podcache.model import Container, ContainerID, ContainerState, Pod, PodList
from podcache.serve.eventhub import EventBuffer, EventClient


class _NoHub:
    """Stands for the hub a client detaches from (a fake: these tests hold one client)."""

    def detach(self, client: Any) -> None:
        pass


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The loop a client is read on (each read here is answered at once)."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _client(loop: asyncio.AbstractEventLoop, events: int, size: int) -> EventClient:
    return EventClient(_NoHub(), EventBuffer(events, size), loop)  # type: ignore[arg-type]


def _next(loop: asyncio.AbstractEventLoop, client: EventClient) -> bytes | None:
    return loop.run_until_complete(client.next())


def test_a_queue_holds_exactly_its_events_bound_and_is_cut_past_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    client = _client(loop, 3, 1 << 20)
    assert all(client.push(b"e") for _ in range(3))
    assert client.end is None
    assert not client.push(b"e")  # the fourth: past the bound
    assert client.end is not None and client.end[0] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _next(loop, client) is None  # a cut client is sent nothing more


def test_a_queue_holds_exactly_its_bytes_bound_and_is_cut_past_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    client = _client(loop, 100, 10)
    assert client.push(b"12345") and client.push(b"12345")  # exactly 10 bytes
    assert not client.push(b"1")
    assert client.end is not None and client.end[0] is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_read_frees_room_in_the_queue(loop: asyncio.AbstractEventLoop) -> None:
    client = _client(loop, 1, 100)
    assert client.push(b"a")
    assert _next(loop, client) == b"a"
    assert client.push(b"b")
    assert client.end is None


def test_a_finished_stream_sends_what_it_queued_first(loop: asyncio.AbstractEventLoop) -> None:
    client = _client(loop, 10, 100)
    client.push(b"a")
    client.finish(grpc.StatusCode.UNAVAILABLE, "gone")
    assert _next(loop, client) == b"a"
    assert _next(loop, client) is None
    assert client.end == (grpc.StatusCode.UNAVAILABLE, "gone")


def _listing(ids: range) -> tuple[bytes, list[pb.PodSandbox]]:
    items = [pb.PodSandbox(id=f"s{i}", state=pb.SANDBOX_READY, labels={"n": str(i)}) for i in ids]
    return pb.ListPodSandboxResponse(items=items).SerializeToString(), items


def _pods(ids: range) -> PodList:
    def sandbox(i: int) -> Container:
        return Container(id=ContainerID("t", f"s{i}"), state=ContainerState.RUNNING)

    return PodList([Pod(id=f"u{i}", sandboxes=[sandbox(i)]) for i in ids])


def test_the_store_keeps_each_item_as_listed() -> None:
    store = WireItems()
    data, items = _listing(range(3))
    store.learn("ListPodSandbox", data, items)
    kept = store.get(0, "s1", ContainerState.RUNNING)
    assert kept is not None
    assert pb.ListPodSandboxResponse.FromString(kept.entry).items[0] == items[1]
    assert kept.labels == {"n": "1"}
    assert store.get(0, "s1", ContainerState.EXITED) is None  # another state: not held


def test_the_store_is_pruned_to_the_snapshot_past_its_bound() -> None:
    store = WireItems()
    data, items = _listing(range(SLACK))
    store.learn("ListPodSandbox", data, items)
    store.prune(_pods(range(10)))
    assert len(store) == SLACK  # at the bound: nothing dropped
    data, items = _listing(range(SLACK, SLACK + 1))
    store.learn("ListPodSandbox", data, items)
    store.prune(_pods(range(10)))  # past it: only the snapshot's items stay
    assert len(store) == 10
    assert store.get(0, "s9", ContainerState.RUNNING) is not None
    assert store.get(0, f"s{SLACK}", ContainerState.RUNNING) is None


def test_rows_that_do_not_line_up_teach_nothing() -> None:
    store = WireItems()
    data, items = _listing(range(3))
    store.learn("ListPodSandbox", data, items[:2])
    assert len(store) == 0


def test_each_message_of_a_streamed_listing_teaches_its_items() -> None:
    # A getter that streams lists (KEP-5825) reads StreamPodSandboxes / StreamContainers: their
    # messages hold whole items in field 1, as the unary answers do.
    store = WireItems()
    first, first_items = _listing(range(2))
    second, second_items = _listing(range(2, 3))
    store.learn("StreamPodSandboxes", first, first_items)
    store.learn("StreamPodSandboxes", second, second_items)
    assert len(store) == 3
    kept = store.get(0, "s2", ContainerState.RUNNING)
    assert kept is not None
    assert pb.ListPodSandboxResponse.FromString(kept.entry).items[0] == second_items[0]
    containers = [pb.Container(id="c0", pod_sandbox_id="s0", state=pb.CONTAINER_RUNNING)]
    data = pb.ListContainersResponse(containers=containers).SerializeToString()
    store.learn("StreamContainers", data, containers)
    found = store.get(1, "c0", ContainerState.RUNNING)
    assert found is not None
    assert found.pod_sandbox_id == "s0"
