"""The simulated runtime over a real unix socket, spoken to with the raw generated gRPC stubs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.proto import services
from podcache.sim import (
    Faults,
    Malformed,
    SimContainer,
    SimContainerState,
    SimRuntime,
    SimSandbox,
    SimSandboxState,
    cli_main,
)

MAX_MESSAGE = 64 * 1024 * 1024
READY = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
RUNNING = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(pods=60, seed=21) as runtime:
        yield runtime


def connect(runtime: SimRuntime) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(
        runtime.target, options=[("grpc.max_receive_message_length", MAX_MESSAGE)]
    )
    return channel, services.stub(channel)


@pytest.fixture
def stub(sim: SimRuntime) -> Iterator[Any]:
    channel, runtime_stub = connect(sim)
    with channel:
        yield runtime_stub


def list_sandboxes(stub: Any, f: pb.PodSandboxFilter | None = None) -> list[pb.PodSandbox]:
    response: pb.ListPodSandboxResponse = stub.ListPodSandbox(
        pb.ListPodSandboxRequest(filter=f), timeout=5
    )
    return list(response.items)


def list_containers(stub: Any, f: pb.ContainerFilter | None = None) -> list[pb.Container]:
    response: pb.ListContainersResponse = stub.ListContainers(
        pb.ListContainersRequest(filter=f), timeout=5
    )
    return list(response.containers)


def expected_sandbox(record: SimSandbox) -> pb.PodSandbox:
    return pb.PodSandbox(
        id=record.id,
        metadata=pb.PodSandboxMetadata(
            name=record.name, uid=record.uid, namespace=record.namespace, attempt=record.attempt
        ),
        state=pb.SANDBOX_READY if record.state is SimSandboxState.READY else pb.SANDBOX_NOTREADY,
        created_at=record.created_at,
        labels=dict(record.labels),
        annotations=dict(record.annotations),
    )


def expected_container(record: SimContainer) -> pb.Container:
    return pb.Container(
        id=record.id,
        pod_sandbox_id=record.pod_sandbox_id,
        metadata=pb.ContainerMetadata(name=record.name, attempt=record.attempt),
        image=pb.ImageSpec(image=record.image),
        image_ref=record.image_ref,
        state=int(record.state),  # type: ignore[arg-type]
        created_at=record.created_at,
        labels=dict(record.labels),
        annotations=dict(record.annotations),
        image_id=record.image_id,
    )


def code_of(call: Any, *args: Any, **kwargs: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    error: Any = caught.value
    code: grpc.StatusCode = error.code()
    return code


def ambiguous_prefix(ids: list[str]) -> str:
    firsts: dict[str, int] = {}
    for ident in ids:
        firsts[ident[0]] = firsts.get(ident[0], 0) + 1
    return next(char for char, count in firsts.items() if count > 1)


# -- identity ---------------------------------------------------------------------------------
def test_version_names_the_simulator(stub: Any) -> None:
    response: pb.VersionResponse = stub.Version(pb.VersionRequest(version="0.1.0"), timeout=5)
    assert (response.version, response.runtime_name, response.runtime_api_version) == (
        "0.1.0",
        "podcache-sim",
        "v1",
    )
    assert response.runtime_version == "0.1.0"


def test_status_reports_the_runtime_and_the_network_ready(stub: Any) -> None:
    response: pb.StatusResponse = stub.Status(pb.StatusRequest(), timeout=5)
    assert {(c.type, c.status) for c in response.status.conditions} == {
        ("RuntimeReady", True),
        ("NetworkReady", True),
    }


def test_rpcs_the_simulator_does_not_serve_are_unimplemented(stub: Any) -> None:
    assert code_of(stub.RunPodSandbox, pb.RunPodSandboxRequest(), timeout=5) == (
        grpc.StatusCode.UNIMPLEMENTED
    )
    assert code_of(stub.RemoveContainer, pb.RemoveContainerRequest(), timeout=5) == (
        grpc.StatusCode.UNIMPLEMENTED
    )


# -- lists --------------------------------------------------------------------------------------
def test_unfiltered_lists_return_every_record_field_for_field(sim: SimRuntime, stub: Any) -> None:
    snapshot = sim.population.snapshot()
    sandboxes = {s.id: s for s in list_sandboxes(stub)}
    containers = {c.id: c for c in list_containers(stub)}
    assert sandboxes == {s.id: expected_sandbox(s) for s in snapshot.sandboxes}
    assert containers == {c.id: expected_container(c) for c in snapshot.containers}


def test_the_kubelets_running_only_lists_return_ready_sandboxes_and_running_containers(
    sim: SimRuntime, stub: Any
) -> None:
    snapshot = sim.population.snapshot()
    assert {s.id for s in list_sandboxes(stub, READY)} == {
        s.id for s in snapshot.sandboxes if s.state is SimSandboxState.READY
    }
    assert {c.id for c in list_containers(stub, RUNNING)} == {
        c.id for c in snapshot.containers if c.state is SimContainerState.RUNNING
    }


@pytest.mark.parametrize("state", list(SimSandboxState))
def test_sandbox_state_filter_is_honoured(
    sim: SimRuntime, stub: Any, state: SimSandboxState
) -> None:
    f = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=int(state)))  # type: ignore[arg-type]
    listed = list_sandboxes(stub, f)
    assert listed
    assert {s.id for s in listed} == {
        s.id for s in sim.population.snapshot().sandboxes if s.state is state
    }


@pytest.mark.parametrize("state", list(SimContainerState))
def test_container_state_filter_is_honoured(
    sim: SimRuntime, stub: Any, state: SimContainerState
) -> None:
    f = pb.ContainerFilter(state=pb.ContainerStateValue(state=int(state)))  # type: ignore[arg-type]
    listed = list_containers(stub, f)
    assert listed
    assert {c.id for c in listed} == {
        c.id for c in sim.population.snapshot().containers if c.state is state
    }


def test_id_filters_take_an_exact_id_or_a_unique_prefix_like_containerd(
    sim: SimRuntime, stub: Any
) -> None:
    snapshot = sim.population.snapshot()
    sandbox = snapshot.sandboxes[3]
    container = snapshot.containers[5]
    for wanted in (sandbox.id, sandbox.id[:12]):
        assert [s.id for s in list_sandboxes(stub, pb.PodSandboxFilter(id=wanted))] == [sandbox.id]
    for wanted in (container.id, container.id[:12]):
        assert [c.id for c in list_containers(stub, pb.ContainerFilter(id=wanted))] == [
            container.id
        ]
    ambiguous = ambiguous_prefix([c.id for c in snapshot.containers])
    assert list_containers(stub, pb.ContainerFilter(id=ambiguous)) == []
    assert list_sandboxes(stub, pb.PodSandboxFilter(id="not-an-id")) == []


def test_pod_sandbox_id_filter_selects_the_containers_of_one_sandbox(
    sim: SimRuntime, stub: Any
) -> None:
    snapshot = sim.population.snapshot()
    sandbox = next(s for s in snapshot.sandboxes if s.state is SimSandboxState.READY)
    expected = {c.id for c in snapshot.containers if c.pod_sandbox_id == sandbox.id}
    assert expected
    for wanted in (sandbox.id, sandbox.id[:10]):
        listed = list_containers(stub, pb.ContainerFilter(pod_sandbox_id=wanted))
        assert {c.id for c in listed} == expected
    combined = pb.ContainerFilter(
        pod_sandbox_id=sandbox.id, state=pb.ContainerStateValue(state=pb.CONTAINER_EXITED)
    )
    assert {c.id for c in list_containers(stub, combined)} == {
        c.id
        for c in snapshot.containers
        if c.pod_sandbox_id == sandbox.id and c.state is SimContainerState.EXITED
    }


def test_a_label_selector_must_match_every_pair(sim: SimRuntime, stub: Any) -> None:
    snapshot = sim.population.snapshot()
    container = snapshot.containers[0]
    uid = container.pod_uid
    by_uid = {"io.kubernetes.pod.uid": uid}
    assert {c.id for c in list_containers(stub, pb.ContainerFilter(label_selector=by_uid))} == {
        c.id for c in snapshot.containers if c.pod_uid == uid
    }
    both = by_uid | {"io.kubernetes.container.name": container.name}
    assert {c.id for c in list_containers(stub, pb.ContainerFilter(label_selector=both))} == {
        c.id for c in snapshot.containers if c.pod_uid == uid and c.name == container.name
    }
    wrong = by_uid | {"io.kubernetes.container.name": "no-such-container"}
    assert list_containers(stub, pb.ContainerFilter(label_selector=wrong)) == []
    pod_labels = {"app": snapshot.sandboxes[0].labels["app"]}
    assert {s.id for s in list_sandboxes(stub, pb.PodSandboxFilter(label_selector=pod_labels))} == {
        s.id for s in snapshot.sandboxes if s.labels["app"] == pod_labels["app"]
    }


def test_a_pod_uid_selector_lists_that_pods_items_in_list_order_and_nothing_else(
    sim: SimRuntime, stub: Any
) -> None:
    snapshot = sim.population.snapshot()
    for uid in {s.uid for s in snapshot.sandboxes}:  # re-created sandboxes included
        by_uid = {"io.kubernetes.pod.uid": uid}
        sandboxes = list_sandboxes(stub, pb.PodSandboxFilter(label_selector=by_uid))
        containers = list_containers(stub, pb.ContainerFilter(label_selector=by_uid))
        assert [x.id for x in sandboxes] == [x.id for x in snapshot.sandboxes if x.uid == uid]
        assert [x.id for x in containers] == [x.id for x in snapshot.containers if x.pod_uid == uid]
    nobody = {"io.kubernetes.pod.uid": "no-such-pod"}
    assert list_sandboxes(stub, pb.PodSandboxFilter(label_selector=nobody)) == []
    uid = snapshot.sandboxes[0].uid
    ready = pb.PodSandboxFilter(
        label_selector={"io.kubernetes.pod.uid": uid},
        state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY),
    )
    assert [x.id for x in list_sandboxes(stub, ready)] == [
        x.id for x in snapshot.sandboxes if x.uid == uid and x.state is SimSandboxState.READY
    ]


def test_lists_follow_changes_of_the_population(sim: SimRuntime, stub: Any) -> None:
    before = {s.id for s in list_sandboxes(stub)}
    sim.churn_step(3)
    after = {s.id for s in list_sandboxes(stub)}
    assert after == {s.id for s in sim.population.snapshot().sandboxes}
    assert after != before


# -- statuses -----------------------------------------------------------------------------------
def test_pod_sandbox_status_describes_the_sandbox_and_its_containers(
    sim: SimRuntime, stub: Any
) -> None:
    snapshot = sim.population.snapshot()
    sandbox = snapshot.sandboxes[2]
    response: pb.PodSandboxStatusResponse = stub.PodSandboxStatus(
        pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id[:16]), timeout=5
    )
    status = response.status
    assert (status.id, status.metadata.uid, status.metadata.name, status.created_at) == (
        sandbox.id,
        sandbox.uid,
        sandbox.name,
        sandbox.created_at,
    )
    assert status.network.ip == sandbox.ip
    assert dict(status.labels) == dict(sandbox.labels)
    # containerd 1.7 and 2.1 answer the status alone (no containers' statuses, no timestamp)
    assert not response.containers_statuses and not response.timestamp


def test_a_crio_sandbox_status_lists_its_containers_statuses() -> None:
    with SimRuntime(pods=12, seed=21, flavor="crio") as runtime:
        channel, stub = connect(runtime)
        try:
            snapshot = runtime.population.snapshot()
            sandbox = snapshot.sandboxes[2]
            response: pb.PodSandboxStatusResponse = stub.PodSandboxStatus(
                pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id), timeout=30
            )
        finally:
            channel.close()
    assert response.status.id == sandbox.id and response.timestamp > 0
    assert {c.id for c in response.containers_statuses} == {
        c.id for c in snapshot.containers if c.pod_sandbox_id == sandbox.id
    }


def test_container_status_describes_the_container(sim: SimRuntime, stub: Any) -> None:
    container = next(
        c for c in sim.population.snapshot().containers if c.state is SimContainerState.EXITED
    )
    response: pb.ContainerStatusResponse = stub.ContainerStatus(
        pb.ContainerStatusRequest(container_id=container.id), timeout=5
    )
    status = response.status
    assert (status.id, status.metadata.name, status.state, status.exit_code) == (
        container.id,
        container.name,
        pb.CONTAINER_EXITED,
        container.exit_code,
    )
    assert status.finished_at == container.finished_at > status.started_at > 0
    assert status.reason == container.reason
    assert status.log_path == container.log_path
    assert (status.image.image, status.image_ref) == (container.image, container.image_ref)


def test_statuses_of_unknown_ids_are_not_found(sim: SimRuntime, stub: Any) -> None:
    assert code_of(
        stub.ContainerStatus, pb.ContainerStatusRequest(container_id="f" * 64), timeout=5
    ) == (grpc.StatusCode.NOT_FOUND)
    assert code_of(
        stub.PodSandboxStatus, pb.PodSandboxStatusRequest(pod_sandbox_id="nope"), timeout=5
    ) == (grpc.StatusCode.NOT_FOUND)
    ambiguous = ambiguous_prefix([c.id for c in sim.population.snapshot().containers])
    assert code_of(
        stub.ContainerStatus, pb.ContainerStatusRequest(container_id=ambiguous), timeout=5
    ) == (grpc.StatusCode.NOT_FOUND)


# -- events -------------------------------------------------------------------------------------
def test_the_event_stream_carries_every_change_of_a_churn_step(sim: SimRuntime, stub: Any) -> None:
    stream = stub.GetContainerEvents(pb.GetEventsRequest(), timeout=10)
    sim.wait_for_event_subscribers(1)
    events = sim.churn_step(2)
    received: list[pb.ContainerEventResponse] = [next(stream) for _ in events]
    stream.cancel()
    assert [(r.container_id, r.container_event_type, r.created_at) for r in received] == [
        (e.container_id, int(e.type), e.created_at) for e in events
    ]
    for response, event in zip(received, events, strict=True):
        assert event.sandbox is not None
        assert response.pod_sandbox_status.id == event.sandbox.id
        assert response.pod_sandbox_status.metadata.uid == event.sandbox.uid
        assert [c.id for c in response.containers_statuses] == [c.id for c in event.containers]
    assert {r.container_event_type for r in received} >= {
        pb.CONTAINER_CREATED_EVENT,
        pb.CONTAINER_STOPPED_EVENT,
        pb.CONTAINER_DELETED_EVENT,
    }


def test_background_churn_reaches_every_event_subscriber() -> None:
    with SimRuntime(pods=30, seed=2, churn=40.0) as sim:
        channel, stub = connect(sim)
        with channel:
            streams = [stub.GetContainerEvents(pb.GetEventsRequest(), timeout=10) for _ in "ab"]
            sim.wait_for_event_subscribers(2)
            firsts = [[next(stream).container_id for _ in range(10)] for stream in streams]
            for stream in streams:
                stream.cancel()
    assert firsts[0] == firsts[1]


def test_an_open_event_stream_ends_when_the_simulator_stops() -> None:
    sim = SimRuntime(pods=5, seed=1).start()
    channel, stub = connect(sim)
    with channel:
        stream = stub.GetContainerEvents(pb.GetEventsRequest(), timeout=60)
        sim.wait_for_event_subscribers(1)
        started = time.monotonic()
        sim.stop()
        assert time.monotonic() - started < 30  # long before the stream's 60 s deadline
        with pytest.raises(grpc.RpcError) as ended:
            next(stream)
        assert ended.value.code() != grpc.StatusCode.DEADLINE_EXCEEDED  # ended by the stop


def test_a_new_stream_first_receives_the_replayed_past_events_like_containerd_2(
    sim: SimRuntime, stub: Any
) -> None:
    past = sim.churn_step(3)  # nobody subscribed: sent to no stream
    sim.faults.event_replay = 4
    stream = stub.GetContainerEvents(pb.GetEventsRequest(), timeout=10)
    sim.wait_for_event_subscribers(1)
    live = sim.churn_step(1)
    received = [next(stream).container_id for _ in range(4 + len(live))]
    stream.cancel()
    assert received == [e.container_id for e in past[-4:]] + [e.container_id for e in live]


def test_without_replay_a_new_stream_receives_only_later_events(sim: SimRuntime, stub: Any) -> None:
    sim.churn_step(3)
    stream = stub.GetContainerEvents(pb.GetEventsRequest(), timeout=10)
    sim.wait_for_event_subscribers(1)
    live = sim.churn_step(1)
    received = [next(stream).container_id for _ in live]
    stream.cancel()
    assert received == [e.container_id for e in live]


def test_the_event_stream_can_be_unimplemented_like_containerd_1_6(
    sim: SimRuntime, stub: Any
) -> None:
    sim.faults.unimplemented = {"GetContainerEvents"}
    stream = stub.GetContainerEvents(pb.GetEventsRequest(), timeout=5)
    assert code_of(next, stream) == grpc.StatusCode.UNIMPLEMENTED


# -- faults -------------------------------------------------------------------------------------
def test_latency_is_added_to_every_call(sim: SimRuntime, stub: Any) -> None:
    sim.faults.latency = 0.25
    for call, request in ((stub.Version, pb.VersionRequest()), (stub.ListPodSandbox, None)):
        started = time.monotonic()
        call(request if request is not None else pb.ListPodSandboxRequest(), timeout=5)
        assert time.monotonic() - started >= 0.25  # the latency is never skipped


def test_the_fail_rate_makes_about_that_fraction_of_list_calls_unavailable(
    sim: SimRuntime, stub: Any
) -> None:
    sim.faults.fail_rate = 0.3
    codes = []
    for _ in range(200):
        try:
            stub.ListPodSandbox(pb.ListPodSandboxRequest(filter=READY), timeout=5)
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            codes.append(error.code())
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}
    assert 0.2 < codes.count(grpc.StatusCode.UNAVAILABLE) / len(codes) < 0.4
    for _ in range(20):  # only list calls fail
        stub.Version(pb.VersionRequest(), timeout=5)


def test_the_fail_rate_draws_are_seeded() -> None:
    def draws(seed: int) -> list[bool]:
        faults = Faults(seed=seed, fail_rate=0.5)
        return [faults.roll_failure() for _ in range(50)]

    assert draws(1) == draws(1)
    assert draws(1) != draws(2)


def test_a_hung_call_ends_at_the_clients_deadline(sim: SimRuntime, stub: Any) -> None:
    sim.faults.hang()
    started = time.monotonic()
    assert code_of(stub.ListContainers, pb.ListContainersRequest(), timeout=0.3) == (
        grpc.StatusCode.DEADLINE_EXCEEDED
    )
    assert time.monotonic() - started >= 0.3  # by the deadline, not before it
    sim.faults.release()
    stub.ListContainers(pb.ListContainersRequest(), timeout=5)


def test_releasing_a_hang_lets_waiting_calls_finish(sim: SimRuntime, stub: Any) -> None:
    results: list[object] = []
    with sim.faults.hung():
        worker = threading.Thread(
            target=lambda: results.append(stub.Version(pb.VersionRequest(), timeout=10))
        )
        worker.start()
        time.sleep(0.2)
        assert results == []
    worker.join(5)
    assert len(results) == 1


def test_stopping_never_waits_for_hung_calls() -> None:
    sim = SimRuntime(pods=5, seed=1).start()
    channel, stub = connect(sim)
    codes: list[grpc.StatusCode] = []
    with channel:
        sim.faults.hang()
        worker = threading.Thread(
            target=lambda: codes.append(code_of(stub.Version, pb.VersionRequest(), timeout=30))
        )
        worker.start()
        time.sleep(0.2)  # the call is most likely held by now; if not, it fails UNAVAILABLE
        started = time.monotonic()
        sim.stop()
        assert time.monotonic() - started < 15  # long before the hung call's 30 s deadline
        worker.join(15)
    assert codes in ([grpc.StatusCode.UNAVAILABLE], [grpc.StatusCode.CANCELLED])


def test_malformed_items_are_added_to_lists(sim: SimRuntime, stub: Any) -> None:
    sim.faults.malformed = set(Malformed)
    sandboxes = list_sandboxes(stub, READY)
    containers = list_containers(stub, RUNNING)
    assert any(not s.HasField("metadata") for s in sandboxes)
    assert any(s.id == "" and s.metadata.name for s in sandboxes)
    assert any(not c.HasField("metadata") for c in containers)
    assert any(not c.HasField("image") and c.id for c in containers)
    assert any(c.id == "" for c in containers)
    assert any("io.kubernetes.pod.uid" not in c.labels for c in containers)
    hashes = {c.annotations["io.kubernetes.container.hash"] for c in containers}
    assert "not-hex!" in hashes
    extra_sandboxes, extra_containers = sim.faults.malformed_items()
    snapshot = sim.population.snapshot()
    assert len(list_sandboxes(stub)) == len(snapshot.sandboxes) + len(extra_sandboxes)
    assert len(list_containers(stub)) == len(snapshot.containers) + len(extra_containers)
    sim.faults.malformed = set()
    assert len(list_containers(stub)) == len(snapshot.containers)


def test_an_unimplemented_version_looks_like_a_server_that_is_not_a_cri_runtime(
    sim: SimRuntime, stub: Any
) -> None:
    sim.faults.unimplemented = {"Version"}
    assert code_of(stub.Version, pb.VersionRequest(), timeout=5) == (grpc.StatusCode.UNIMPLEMENTED)
    list_sandboxes(stub)  # the rest still answers


def test_fault_settings_are_validated() -> None:
    faults = Faults()
    with pytest.raises(ValueError, match="not RuntimeService RPCs"):
        faults.unimplemented = {"Versoin"}
    with pytest.raises(ValueError, match="fail_rate"):
        faults.fail_rate = 1.5
    with pytest.raises(ValueError, match="latency"):
        faults.latency = -1
    faults.event_replay = 1000  # MAX_EVENT_REPLAY: at the bound
    with pytest.raises(ValueError, match=r"event_replay must be within 0\.\.1000"):
        faults.event_replay = 1001
    with pytest.raises(ValueError, match="event_replay"):
        faults.event_replay = -1


# -- lifecycle ----------------------------------------------------------------------------------
def sim_threads(before: set[threading.Thread]) -> list[str]:
    """Names of simulator threads started since ``before`` (other tests' sims may still run)."""
    return [
        t.name
        for t in threading.enumerate()
        if t not in before and t.name.startswith("podcache-sim")
    ]


def test_stopping_removes_the_socket_and_joins_every_thread() -> None:
    before = set(threading.enumerate())
    sim = SimRuntime(pods=10, seed=1, churn=20.0).start()
    path = sim.socket_path
    assert path is not None
    assert sim.endpoint == f"unix://{path}"
    assert Path(path).is_socket()
    channel, stub = connect(sim)
    with channel:
        stub.Version(pb.VersionRequest(), timeout=5)
    sim.stop()
    sim.stop()  # idempotent
    assert not Path(path).exists()
    assert not Path(path).parent.exists()  # the temporary directory too
    assert sim_threads(before) == []
    with pytest.raises(RuntimeError, match="starts once"):
        sim.start()


def test_a_given_socket_path_is_used_and_a_stale_socket_replaced(tmp_path: Path) -> None:
    path = tmp_path / "cri.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a socket file nobody listens on
    with SimRuntime(pods=3, socket=f"unix://{path}") as sim:
        assert sim.endpoint == f"unix://{path}"
        channel, stub = connect(sim)
        with channel:
            stub.Version(pb.VersionRequest(), timeout=5)
        with pytest.raises(OSError, match="another server is listening"):
            SimRuntime(pods=1, socket=path).start()
    assert not path.exists()
    assert tmp_path.exists()


def test_a_path_that_is_not_a_socket_is_refused(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        SimRuntime(pods=1, socket=tmp_path / "file").start()
    with pytest.raises(FileNotFoundError):
        SimRuntime(pods=1, socket=tmp_path / "missing" / "s.sock").start()
    assert sim_threads(before) == []


def test_loopback_tcp_reports_the_bound_port() -> None:
    with SimRuntime(pods=3, tcp=True) as sim:
        assert sim.port is not None
        assert sim.port > 0
        assert sim.endpoint == f"tcp://127.0.0.1:{sim.port}"
        assert sim.socket_path is None
        channel, stub = connect(sim)
        with channel:
            response: pb.VersionResponse = stub.Version(pb.VersionRequest(), timeout=5)
        assert response.runtime_name == "podcache-sim"


def test_five_thousand_pods_list_within_sixteen_mebibytes() -> None:
    with SimRuntime(pods=5000, seed=3) as sim:
        channel = grpc.insecure_channel(
            sim.target, options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)]
        )
        with channel:
            stub: Any = services.stub(channel)
            listed = list_containers(stub)
            sandboxes = list_sandboxes(stub)
        snapshot = sim.population.snapshot()
        assert len(listed) == len(snapshot.containers) > 10_000
        assert len(sandboxes) == len(snapshot.sandboxes)  # (how fast: benchmarks/)


# -- command line -------------------------------------------------------------------------------
def test_the_command_serves_until_sigterm_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "sim.sock"
    code = "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))"
    for signum in (signal.SIGTERM, signal.SIGINT):
        process = subprocess.Popen(
            [sys.executable, "-c", code, "--socket", str(path), "--pods", "7", "--churn", "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            endpoint = process.stdout.readline().strip()
            assert endpoint == f"unix://{path}"
            channel = grpc.insecure_channel(endpoint)
            with channel:
                stub: Any = services.stub(channel)
                response: pb.ListPodSandboxResponse = stub.ListPodSandbox(
                    pb.ListPodSandboxRequest(), timeout=5
                )
                assert len({s.metadata.uid for s in response.items}) == 7
            process.send_signal(signum)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert not path.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["--pods", "-1"],
        ["--fail-rate", "2"],
        ["--latency", "soon"],
        ["--socket", "/tmp/x.sock", "--tcp"],
        ["--no-such-flag"],
    ],
)
def test_bad_flags_are_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(argv) == 2
    assert "Usage:" in capsys.readouterr().err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--fail-rate" in out
    assert "--churn" in out


def test_no_socket_file_is_left_by_a_failed_start(tmp_path: Path) -> None:
    before = set(os.listdir(tmp_path))
    with pytest.raises(FileNotFoundError):
        SimRuntime(pods=1, socket=tmp_path / "no" / "dir.sock").start()
    assert set(os.listdir(tmp_path)) == before


def test_a_relist_of_one_pod_answers_as_the_nodes_view_does(sim: SimRuntime, stub: Any) -> None:
    """The one-pod path (a pod-UID selector alone: O(pod), no view of the node) gives the very
    bytes the view's filtered answer gives, for every pod, a missing one, with a state and an
    extra label, after churn and crash loops."""
    servicer = sim._server.servicer  # type: ignore[union-attr]
    for step in range(3):
        snapshot = sim.population.snapshot()
        uids = [*sorted({s.uid for s in snapshot.sandboxes}), "no-such-pod"]
        if step:
            sim.churn_step(2)
            sim.population.crash_container(uids[step])
        view = servicer.view()
        for uid in uids:
            by_uid = {"io.kubernetes.pod.uid": uid}
            for extra in ({}, {"io.kubernetes.container.name": "app"}):
                for state in (None, pb.SANDBOX_READY):
                    sf = pb.PodSandboxFilter(label_selector=by_uid | extra)
                    cf = pb.ContainerFilter(label_selector=by_uid | extra)
                    if state is not None:
                        sf.state.state = state
                        cf.state.state = pb.CONTAINER_RUNNING
                    fast = stub.ListPodSandbox(pb.ListPodSandboxRequest(filter=sf), timeout=5)
                    slow = pb.ListPodSandboxResponse.FromString(
                        b"".join(servicer.view().list_sandboxes(sf))
                    )
                    assert fast == slow
                    listed = stub.ListContainers(pb.ListContainersRequest(filter=cf), timeout=5)
                    made = pb.ListContainersResponse.FromString(
                        b"".join(servicer.view().list_containers(cf))
                    )
                    assert listed == made
                    assert len(listed.containers) <= len(view.containers)
