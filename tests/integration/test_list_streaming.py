"""CRI list streaming (KEP-5825) end to end: the getters over the simulator.

- A 1,000-pod node whose pods carry 16 KiB of annotations each (both list answers past gRPC's
  16 MiB message limit) is listed through StreamPodSandboxes and StreamContainers by both
  getters, and equals the node read from the unary answers (fetched here with a larger
  receive limit than a client has).
- The same node with streaming off (a runtime without KEP-5825) fails every listing with an
  error that says the answer was over the limit and the runtime does not stream.
- Differential: for drawn populations, chunkings and filters, the streamed items are the unary
  items, item for item, and a getter's streamed listing is its unary listing.
- Asked once per connection, as the kubelet's CRI client asks: a getter that found streaming
  UNIMPLEMENTED keeps the unary calls; a new connection asks again.
- CRI-O: it cuts a streamed list by 3,000 items, not by size, so a node's
  whole listing of 21 MiB comes as one message; both getters, ``podcache pods`` and ``serve``
  read it. One streamed message is bounded by ``MAX_STREAMED_MESSAGE_BYTES`` (at and past it);
  the unary calls keep gRPC's 16 MiB.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri import AsyncCRIRuntime, CRIRuntime, channels
from podcache.cri.convert import pods_from_responses
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.proto import services
from podcache.errors import CRIError
from podcache.model import PodList
from podcache.sim import SimRuntime
from podcache.sim.faults import STREAM_LIST_METHODS, Malformed
from tests.cli.conftest import Runner, podcache_path
from tests.serve.conftest import Client, ServeProcess, free_port

LIMIT = 16 * 1024 * 1024
PODS = 1_000
ANNOTATION_BYTES = 16 * 1024
TIMEOUT = 60.0  # a generous deadline: the machine may be loaded; speed is in benchmarks/


def stub_of(sim: SimRuntime) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(
        sim.target, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)]
    )
    return channel, services.stub(channel)


def without_ips(pods: PodList) -> list[Any]:
    """The pods as the lists give them (IPs come from PodSandboxStatus, not from a list)."""
    return [msgspec.structs.replace(pod, ips=(), host_network=False) for pod in pods]


def unary_pods(sim: SimRuntime) -> PodList:
    """The node (all) read from the unary list answers, received whole (no 16 MiB limit)."""
    channel, stub = stub_of(sim)
    with channel:
        sandboxes = stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=60)
        containers = stub.ListContainers(pb.ListContainersRequest(), timeout=60)
    return pods_from_responses(sim.flavor.runtime_name, sandboxes, containers)


@pytest.fixture(scope="module")
def big_node() -> Iterator[SimRuntime]:
    """1,000 pods, 16 KiB of annotations on each sandbox and container."""
    with SimRuntime(PODS, seed=31, annotation_bytes=ANNOTATION_BYTES) as sim:
        yield sim


@pytest.fixture
def node(big_node: SimRuntime) -> Iterator[SimRuntime]:
    big_node.faults.unimplemented = frozenset()
    big_node.reset_call_counts()
    yield big_node
    big_node.faults.unimplemented = frozenset()


def listed_by(kind: str, endpoint: str) -> tuple[PodList, bool | None]:
    """A full listing (all) by a fresh getter of this kind, and what it learnt of streaming."""
    if kind == "sync":
        with CRIRuntime(endpoint, timeout=TIMEOUT) as runtime:
            return runtime.get_pods(all=True), runtime.list_streaming

    async def listing() -> tuple[PodList, bool | None]:
        async with AsyncCRIRuntime(endpoint, timeout=TIMEOUT) as aruntime:
            return await aruntime.get_pods(all=True), aruntime.list_streaming

    return asyncio.run(listing())


def test_the_big_nodes_unary_answers_are_both_past_grpcs_limit(node: SimRuntime) -> None:
    channel, stub = stub_of(node)
    with channel:
        sandboxes = stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=60)
        containers = stub.ListContainers(pb.ListContainersRequest(), timeout=60)
    assert len(sandboxes.items) > PODS
    assert sandboxes.ByteSize() > LIMIT
    assert containers.ByteSize() > LIMIT


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_1000_pod_node_with_16_kib_annotations_is_listed_through_streaming(
    node: SimRuntime, kind: str
) -> None:
    pods, streaming = listed_by(kind, node.endpoint)
    assert streaming is True
    assert len(pods) == PODS
    calls, counts, messages = node.calls(), node.call_counts(), node.stream_messages()
    assert calls["StreamPodSandboxes"] == calls["StreamContainers"] == 1
    assert calls["ListPodSandbox"] == calls["ListContainers"] == 0
    assert counts["StreamPodSandboxes"]["unfiltered"]["bytes"] > LIMIT
    assert counts["StreamContainers"]["unfiltered"]["bytes"] > LIMIT
    assert messages["StreamPodSandboxes"] > 1  # no one message holds the whole answer
    assert messages["StreamContainers"] > 1
    assert without_ips(pods) == without_ips(unary_pods(node))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_same_node_without_streaming_fails_past_16_mib_with_the_clear_error(
    node: SimRuntime, kind: str
) -> None:
    node.faults.unimplemented = STREAM_LIST_METHODS
    with pytest.raises(CRIError) as raised:
        listed_by(kind, node.endpoint)
    message = str(raised.value)
    assert node.endpoint in message
    assert "its ListPodSandbox answer is over gRPC's 16 MiB message limit" in message
    assert "larger than max" in message
    assert "the runtime does not stream lists (StreamPodSandboxes is UNIMPLEMENTED" in message
    calls = node.calls()
    assert calls["StreamPodSandboxes"] == 1  # asked, refused
    assert calls["ListPodSandbox"] == 1  # then the unary call, refused by the client's limit


# -- asked once per connection -------------------------------------------------------------------
@pytest.fixture
def small_node() -> Iterator[SimRuntime]:
    with SimRuntime(30, seed=4, streaming=False) as sim:
        yield sim


def test_a_getter_that_found_no_streaming_keeps_the_unary_calls_and_a_new_one_asks_again(
    small_node: SimRuntime,
) -> None:
    with CRIRuntime(small_node.endpoint) as runtime:
        runtime.get_pods()
        assert runtime.list_streaming is False
        small_node.faults.unimplemented = frozenset()  # the runtime streams now
        unary = runtime.get_pods()  # this connection asked already: unary
        assert runtime.list_streaming is False
        assert small_node.calls()["StreamPodSandboxes"] == 1
        assert small_node.calls()["ListPodSandbox"] == 2
    with CRIRuntime(small_node.endpoint) as fresh:
        assert fresh.get_pods() == unary
        assert fresh.list_streaming is True
    assert small_node.calls()["StreamPodSandboxes"] == 2
    assert small_node.calls()["ListPodSandbox"] == 2


async def test_the_asyncio_getter_asks_once_per_connection_too(small_node: SimRuntime) -> None:
    async with AsyncCRIRuntime(small_node.endpoint) as runtime:
        first = await runtime.get_pods()
        second = await runtime.get_pods()
        assert first == second
        assert runtime.list_streaming is False
    assert small_node.calls()["StreamPodSandboxes"] == 1
    assert small_node.calls()["StreamContainers"] == 0  # one flag for both lists
    assert small_node.calls()["ListPodSandbox"] == small_node.calls()["ListContainers"] == 2


def test_concurrent_first_listings_on_one_getter_all_fall_back(small_node: SimRuntime) -> None:
    """Threads listing at once while the channel has not learnt it yet: each may ask and be
    refused (as the kubelet's), every one gets the node, and the channel learns False."""
    results: list[PodList] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)
    with CRIRuntime(small_node.endpoint) as runtime:

        def listing() -> None:
            start.wait()
            try:
                results.append(runtime.get_pods(all=True))
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=listing) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors
        assert runtime.list_streaming is False
    assert len(results) == 6 and all(pods == results[0] for pods in results)
    calls = small_node.calls()
    assert 1 <= calls["StreamPodSandboxes"] <= 6
    assert calls["ListPodSandbox"] == calls["ListContainers"] == 6


# -- differential: streamed items are the unary items ---------------------------------------------
def streamed_items(stub: Any, method: str, request: Any) -> list[Any]:
    field = "pod_sandboxes" if method == "StreamPodSandboxes" else "containers"
    messages = getattr(stub, method)(request, timeout=30)
    return [item for message in messages for item in getattr(message, field)]


_filters = st.sampled_from(["none", "ready", "one-pod", "one-id"])


def requests(kind: str, sim: SimRuntime) -> tuple[Any, Any]:
    """A sandbox filter and a container filter of this kind, on this population."""
    snapshot = sim.population.snapshot()
    if kind == "ready":
        return (
            pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY)),
            pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING)),
        )
    if kind == "one-pod" and snapshot.sandboxes:
        selector = {"io.kubernetes.pod.uid": snapshot.sandboxes[0].uid}
        return pb.PodSandboxFilter(label_selector=selector), pb.ContainerFilter(
            label_selector=selector
        )
    if kind == "one-id" and snapshot.containers:
        first = snapshot.containers[0]
        return pb.PodSandboxFilter(id=first.pod_sandbox_id), pb.ContainerFilter(
            pod_sandbox_id=first.pod_sandbox_id
        )
    return pb.PodSandboxFilter(), pb.ContainerFilter()


class Case(NamedTuple):
    """A drawn node: its population, how its streams are cut, and the filters listed."""

    pods: int
    seed: int
    max_items: int
    annotation_bytes: int
    malformed: frozenset[Malformed]
    churn: int
    filters: str


_cases = st.builds(
    Case,
    pods=st.integers(0, 60),
    seed=st.integers(0, 2**16),
    max_items=st.one_of(st.just(1), st.integers(2, 7), st.just(10_000)),
    annotation_bytes=st.sampled_from([0, 300, 40_000]),
    malformed=st.frozensets(st.sampled_from(list(Malformed)), max_size=2),
    churn=st.integers(0, 3),
    filters=_filters,
)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(_cases)
def test_streamed_listings_equal_unary_listings_item_for_item(case: Case) -> None:
    with SimRuntime(
        case.pods,
        seed=case.seed,
        stream_items=case.max_items,
        annotation_bytes=case.annotation_bytes,
        malformed=case.malformed,
    ) as sim:
        sim.churn_step(case.churn)
        sandbox_filter, container_filter = requests(case.filters, sim)
        channel, stub = stub_of(sim)
        with channel:
            unary_sandboxes = stub.ListPodSandbox(
                pb.ListPodSandboxRequest(filter=sandbox_filter), timeout=30
            ).items
            unary_containers = stub.ListContainers(
                pb.ListContainersRequest(filter=container_filter), timeout=30
            ).containers
            assert streamed_items(
                stub, "StreamPodSandboxes", pb.StreamPodSandboxesRequest(filter=sandbox_filter)
            ) == list(unary_sandboxes)
            assert streamed_items(
                stub, "StreamContainers", pb.StreamContainersRequest(filter=container_filter)
            ) == list(unary_containers)
        for all in (True, False):
            streamed = listed(sim, all)
            sim.faults.unimplemented = STREAM_LIST_METHODS
            unary = listed(sim, all)
            sim.faults.unimplemented = frozenset()
            assert streamed == unary


def listed(sim: SimRuntime, all: bool) -> tuple[PodList, PodList]:
    """The node as a fresh getter of each kind lists it (they must agree, too)."""
    with CRIRuntime(sim.endpoint, timeout=TIMEOUT) as runtime:
        threads = runtime.get_pods(all=all)

    async def listing() -> PodList:
        async with AsyncCRIRuntime(sim.endpoint, timeout=TIMEOUT) as aruntime:
            return await aruntime.get_pods(all=all)

    in_asyncio = asyncio.run(listing())
    assert threads == in_asyncio
    return threads, in_asyncio


# -- CRI-O: a whole listing in one message -------------------------------------------------------
CRIO_PODS = 80
CRIO_ANNOTATION_BYTES = 250 * 1024  # Kubernetes allows 256 KiB per object
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def crio_node() -> Iterator[SimRuntime]:
    """80 host-network pods with 250 KiB of annotations, on the simulator's CRI-O: about
    21 MiB of sandboxes and 57 MiB of containers, each list one streamed message."""
    with SimRuntime(
        CRIO_PODS,
        seed=39,
        flavor="crio",
        annotation_bytes=CRIO_ANNOTATION_BYTES,
        host_network=1.0,
    ) as sim:
        yield sim


@pytest.fixture
def crio(crio_node: SimRuntime) -> Iterator[SimRuntime]:
    crio_node.faults.unimplemented = frozenset()
    crio_node.reset_call_counts()
    yield crio_node
    crio_node.faults.unimplemented = frozenset()


def message_sizes(sim: SimRuntime) -> dict[str, int]:
    """Each streaming list's answer bytes: its one message's size, on this node."""
    counts = sim.call_counts()
    return {method: counts[method]["unfiltered"]["bytes"] for method in STREAM_LIST_METHODS}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_crio_listing_of_21_mib_in_one_3000_item_message_is_read(
    crio: SimRuntime, kind: str
) -> None:
    pods, streaming = listed_by(kind, crio.endpoint)
    assert streaming is True and len(pods) == CRIO_PODS
    assert crio.stream_messages() == {"StreamPodSandboxes": 1, "StreamContainers": 1}
    sizes = message_sizes(crio)
    assert sizes["StreamPodSandboxes"] > 20 * MIB and sizes["StreamContainers"] > 20 * MIB
    assert without_ips(pods) == without_ips(unary_pods(crio))


def test_one_streamed_message_is_read_at_its_bound_and_refused_past_it(
    crio: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed_by("sync", crio.endpoint)
    largest = max(message_sizes(crio).values())
    monkeypatch.setattr(channels, "MAX_STREAMED_MESSAGE_BYTES", largest)
    pods, _ = listed_by("sync", crio.endpoint)  # at the bound: read
    assert len(pods) == CRIO_PODS
    monkeypatch.setattr(channels, "MAX_STREAMED_MESSAGE_BYTES", largest - 1)
    with pytest.raises(CRIError) as raised:
        listed_by("sync", crio.endpoint)
    message = str(raised.value)
    assert "a message of its StreamContainers answer is over podcache's" in message
    assert "MAX_STREAMED_MESSAGE_BYTES" in message and crio.endpoint in message


def test_the_unary_calls_keep_grpcs_16_mib(crio: SimRuntime) -> None:
    crio.faults.unimplemented = STREAM_LIST_METHODS
    with pytest.raises(CRIError) as raised:
        listed_by("sync", crio.endpoint)
    assert "its ListPodSandbox answer is over gRPC's 16 MiB message limit" in str(raised.value)


def test_podcache_pods_and_serve_read_the_crio_listing(crio: SimRuntime, tmp_path: Path) -> None:
    run = Runner(podcache_path(), str(tmp_path))
    listed = run("pods", "-a", "-o", "json", "-r", crio.endpoint, timeout=TIMEOUT)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["items"]) == CRIO_PODS
    port = free_port()
    with ServeProcess(["-r", crio.endpoint, "--listen", f"127.0.0.1:{port}"]):
        client = Client(port=port)
        assert client.get("/readyz").status == 200
        answer = client.get("/pods?all=1")
        assert answer.status == 200
        assert len(answer.json()["items"]) == CRIO_PODS
