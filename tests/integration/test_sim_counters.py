"""The simulated runtime's call counts: calls and answer bytes per RPC, filtered or unfiltered,
read in process (``SimRuntime.call_counts``) and from outside (``podcache sim --stats-file``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from podcache.cri import CRIRuntime
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.proto import services
from podcache.sim import SimRuntime

MAX_MESSAGE = 64 * 1024 * 1024
UID_LABEL = "io.kubernetes.pod.uid"


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(pods=40, seed=5) as runtime:
        yield runtime


@pytest.fixture
def stub(sim: SimRuntime) -> Iterator[Any]:
    channel = grpc.insecure_channel(
        sim.target, options=[("grpc.max_receive_message_length", MAX_MESSAGE)]
    )
    with channel:
        yield services.stub(channel)


def slot(sim: SimRuntime, method: str, kind: str) -> dict[str, int]:
    return sim.call_counts()[method][kind]


def test_every_count_starts_at_zero(sim: SimRuntime) -> None:
    counts = sim.call_counts()
    assert set(counts) == {
        "ListPodSandbox",
        "ListContainers",
        "StreamPodSandboxes",
        "StreamContainers",
        "PodSandboxStatus",
        "ContainerStatus",
    }
    for kinds in counts.values():
        assert kinds == {
            "filtered": {"calls": 0, "bytes": 0},
            "unfiltered": {"calls": 0, "bytes": 0},
        }
    assert sim.stream_messages() == {"StreamPodSandboxes": 0, "StreamContainers": 0}


def test_a_full_listing_counts_one_unfiltered_call_of_each_list_with_its_answer_bytes(
    sim: SimRuntime, stub: Any
) -> None:
    sandboxes = stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=5)
    containers = stub.ListContainers(pb.ListContainersRequest(), timeout=5)
    assert slot(sim, "ListPodSandbox", "unfiltered") == {
        "calls": 1,
        "bytes": len(sandboxes.SerializeToString()),
    }
    assert slot(sim, "ListContainers", "unfiltered") == {
        "calls": 1,
        "bytes": len(containers.SerializeToString()),
    }
    assert slot(sim, "ListPodSandbox", "filtered")["calls"] == 0


def test_a_state_filter_alone_is_still_a_full_listing_of_the_node(
    sim: SimRuntime, stub: Any
) -> None:
    ready = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
    running = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    stub.ListPodSandbox(pb.ListPodSandboxRequest(filter=ready), timeout=5)
    stub.ListContainers(pb.ListContainersRequest(filter=running), timeout=5)
    assert slot(sim, "ListPodSandbox", "unfiltered")["calls"] == 1
    assert slot(sim, "ListContainers", "unfiltered")["calls"] == 1


def test_the_kubelets_listing_through_the_client_counts_as_unfiltered(sim: SimRuntime) -> None:
    """The client streams a node's listing (the sim streams lists): the streaming calls are
    counted, as unfiltered, with their messages' bytes."""
    with CRIRuntime(sim.endpoint) as runtime:
        runtime.get_pods(all=True)
        runtime.get_pods(all=False)
    assert slot(sim, "StreamPodSandboxes", "unfiltered")["calls"] == 2
    assert slot(sim, "StreamContainers", "unfiltered")["calls"] == 2
    assert slot(sim, "StreamPodSandboxes", "unfiltered")["bytes"] > 40 * 100
    assert slot(sim, "ListPodSandbox", "unfiltered")["calls"] == 0
    assert sim.stream_messages()["StreamContainers"] >= 2


def test_a_streamed_listing_counts_its_messages_and_the_bytes_of_all_of_them(
    sim: SimRuntime, stub: Any
) -> None:
    sim.chunking.max_items = 3
    messages = list(stub.StreamContainers(pb.StreamContainersRequest(), timeout=5))
    unary = stub.ListContainers(pb.ListContainersRequest(), timeout=5)
    assert len(messages) > 1
    assert slot(sim, "StreamContainers", "unfiltered") == {
        "calls": 1,
        "bytes": sum(len(m.SerializeToString()) for m in messages),
    }
    assert sum(len(m.SerializeToString()) for m in messages) == len(unary.SerializeToString())
    assert sim.stream_messages() == {"StreamPodSandboxes": 0, "StreamContainers": len(messages)}


def test_label_selector_id_and_sandbox_filters_count_as_filtered(
    sim: SimRuntime, stub: Any
) -> None:
    record = sim.population.snapshot().sandboxes[0]
    by_uid = {UID_LABEL: record.uid}
    one_pod = stub.ListPodSandbox(
        pb.ListPodSandboxRequest(filter=pb.PodSandboxFilter(label_selector=by_uid)), timeout=5
    )
    stub.ListPodSandbox(
        pb.ListPodSandboxRequest(filter=pb.PodSandboxFilter(id=record.id)), timeout=5
    )
    pod_containers = stub.ListContainers(
        pb.ListContainersRequest(filter=pb.ContainerFilter(label_selector=by_uid)), timeout=5
    )
    stub.ListContainers(
        pb.ListContainersRequest(filter=pb.ContainerFilter(pod_sandbox_id=record.id)), timeout=5
    )
    sandbox_slot = slot(sim, "ListPodSandbox", "filtered")
    assert sandbox_slot["calls"] == 2
    assert sandbox_slot["bytes"] == 2 * len(one_pod.SerializeToString()) > 0
    container_slot = slot(sim, "ListContainers", "filtered")
    assert container_slot["calls"] == 2
    assert container_slot["bytes"] >= len(pod_containers.SerializeToString())
    assert slot(sim, "ListPodSandbox", "unfiltered")["calls"] == 0
    assert slot(sim, "ListContainers", "unfiltered")["calls"] == 0


def test_status_calls_are_counted_and_a_not_found_one_with_no_bytes(
    sim: SimRuntime, stub: Any
) -> None:
    snapshot = sim.population.snapshot()
    status = stub.PodSandboxStatus(
        pb.PodSandboxStatusRequest(pod_sandbox_id=snapshot.sandboxes[0].id), timeout=5
    )
    container = stub.ContainerStatus(
        pb.ContainerStatusRequest(container_id=snapshot.containers[0].id), timeout=5
    )
    with pytest.raises(grpc.RpcError):
        stub.ContainerStatus(pb.ContainerStatusRequest(container_id="0" * 64), timeout=5)
    # the sandbox status carries a timestamp of its own: its size is that of the answer sent
    assert slot(sim, "PodSandboxStatus", "filtered") == {
        "calls": 1,
        "bytes": len(status.SerializeToString()),
    }
    assert slot(sim, "ContainerStatus", "filtered") == {
        "calls": 2,
        "bytes": len(container.SerializeToString()),
    }


def test_a_failed_list_call_is_counted_with_no_bytes(sim: SimRuntime, stub: Any) -> None:
    sim.faults.fail_rate = 1.0
    with pytest.raises(grpc.RpcError):
        stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=5)
    assert slot(sim, "ListPodSandbox", "unfiltered") == {"calls": 1, "bytes": 0}


def test_reset_sets_every_count_back_to_zero(sim: SimRuntime, stub: Any) -> None:
    stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=5)
    sim.reset_call_counts()
    assert slot(sim, "ListPodSandbox", "unfiltered") == {"calls": 0, "bytes": 0}
    stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=5)
    assert slot(sim, "ListPodSandbox", "unfiltered")["calls"] == 1


def wait_for_file(path: Path, process: subprocess.Popen[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert process.poll() is None, "podcache sim exited"
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.01)
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def test_the_command_writes_its_counts_to_the_stats_file_on_sigusr1_and_on_exit(
    tmp_path: Path,
) -> None:
    socket_path, stats = tmp_path / "sim.sock", tmp_path / "stats.json"
    code = "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))"
    args = ["--socket", str(socket_path), "--pods", "7", "--stats-file", str(stats)]
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        with CRIRuntime(endpoint) as runtime:
            runtime.get_pods(all=True)
        process.send_signal(signal.SIGUSR1)
        document = wait_for_file(stats, process)
        assert document["pods"] == 7
        assert document["calls"]["StreamPodSandboxes"]["unfiltered"]["calls"] == 1
        assert document["calls"]["StreamContainers"]["unfiltered"]["bytes"] > 0
        assert document["stream_messages"]["StreamContainers"] >= 1
        stats.unlink()
        with CRIRuntime(endpoint) as runtime:
            runtime.get_pods(all=True)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        final = json.loads(stats.read_text())
        assert final["calls"]["StreamPodSandboxes"]["unfiltered"]["calls"] == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
