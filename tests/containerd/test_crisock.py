"""The read-only CRI socket (``podcache serve --cri-listen``) over real containerd 1.7 and 2.1
(docs/architecture.md §10): its lists equal containerd's own answers once the node is quiet,
for every filter combination hypothesis draws; a RemovePodSandbox through it fails and the pod
is still there; three subscribers of its GetContainerEvents each see every event, where direct
subscribers of 1.7 would each see only some (containerd#7318); a SIGKILL and restart of the
runtime is one resubscription of the caches through the hub.

Every pod made here is removed here.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from tests.containerd.conftest import EVENT_VERSIONS, VERSIONS, Containerd
from tests.containerd.harness import CRIHarness, SandboxRecord
from tests.crisocket import SUBSCRIBED, EventWatcher, Subscriptions, subscriptions
from tests.serve.conftest import Client, ServeProcess

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(300)]
LONG_PERIOD = 60.0
with_events = pytest.mark.parametrize("containerd", EVENT_VERSIONS, indirect=True)

LISTS: dict[str, tuple[Any, Any, str]] = {
    "ListPodSandbox": (pb.ListPodSandboxRequest, pb.ListPodSandboxResponse, "items"),
    "ListContainers": (pb.ListContainersRequest, pb.ListContainersResponse, "containers"),
}


def _identity(data: bytes) -> bytes:
    return data


class Socket:
    """A grpcio client of a CRI socket, raw bytes."""

    def __init__(self, path: str) -> None:
        self.channel = grpc.insecure_channel(f"unix://{path}")

    def call(self, method: str, request: bytes) -> bytes:
        call = self.channel.unary_unary(
            f"/runtime.v1.RuntimeService/{method}",
            request_serializer=_identity,
            response_deserializer=_identity,
        )
        answer: bytes = call(request, timeout=10)
        return answer

    def listed(self, method: str, request: Any) -> list[bytes]:
        _, response_type, field = LISTS[method]
        answer = response_type.FromString(self.call(method, request.SerializeToString()))
        return sorted(item.SerializeToString(deterministic=True) for item in getattr(answer, field))

    def events(self) -> Any:
        call = self.channel.unary_stream(
            "/runtime.v1.RuntimeService/GetContainerEvents",
            request_serializer=_identity,
            response_deserializer=_identity,
        )
        return call(b"")

    def close(self) -> None:
        self.channel.close()


class Served(NamedTuple):
    proxy: Socket
    direct: Socket
    path: str
    direct_path: str


@pytest.fixture
def served(containerd: Containerd) -> Iterator[Served]:
    """``podcache serve --cri-listen`` over the instance (a 60 s period: events keep it)."""
    with tempfile.TemporaryDirectory(prefix="pc-cri-") as tmp:
        path = os.path.join(tmp, "cri.sock")
        args = ["-r", containerd.endpoint, "--listen", f"unix:{tmp}/http.sock"]
        with ServeProcess([*args, "--cache-period", "60s", "--cri-listen", path]) as server:
            proxy, direct = Socket(path), Socket(containerd.socket_path)
            try:
                yield Served(proxy, direct, path, containerd.socket_path)
            finally:
                proxy.close()
                direct.close()
        assert "Traceback" not in server.stderr, server.stderr


class Sides(NamedTuple):
    """podcache's socket, containerd's own, and serve's HTTP."""

    proxy: Socket
    direct: Socket
    http: Client


@contextmanager
def serve_socket(containerd: Containerd, *args: str) -> Iterator[Sides]:
    """``podcache serve --cri-listen`` over ``containerd`` with ``args``, once its event
    stream is open."""
    with tempfile.TemporaryDirectory(prefix="pc-cri-") as tmp:
        path = os.path.join(tmp, "cri.sock")
        http = Client(path=f"{tmp}/http.sock")
        command = ["-r", containerd.endpoint, "--listen", f"unix:{tmp}/http.sock"]
        with ServeProcess([*command, "--cri-listen", path, *args]) as server:
            proxy, direct = Socket(path), Socket(containerd.socket_path)
            try:
                until(lambda: SUBSCRIBED in http.get("/metrics").body)
                yield Sides(proxy, direct, http)
            finally:
                proxy.close()
                direct.close()
        assert "Traceback" not in server.stderr, server.stderr


@pytest.fixture
def node(cri_harness: CRIHarness) -> Iterator[list[SandboxRecord]]:
    """Two pods: one running with a running and an exited container, one stopped (NotReady,
    its container exited)."""
    running = cri_harness.run_pod("cri-running", "crisock", labels={"tier": "web"})
    cri_harness.create_container(running, "app")
    done = cri_harness.create_container(running, "done", command=("true",))
    cri_harness.wait_exited(done, timeout=120)
    stopped = cri_harness.run_pod("cri-stopped", "crisock", labels={"tier": "batch"})
    cri_harness.create_container(stopped, "job")
    cri_harness.stop_pod(stopped)
    yield [running, stopped]
    cri_harness.remove_all([running.id, stopped.id])


def until(condition: Callable[[], bool], timeout: float = 240.0) -> None:
    """Wait until ``condition()`` (the timeout is a safety net, not a bound)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within the safety timeout")
        time.sleep(0.05)


def _quiet(served: Served) -> None:
    """Until the socket answers as containerd does (its events are in: quiescence)."""

    def same() -> bool:
        return all(
            served.proxy.listed(m, t[0]()) == served.direct.listed(m, t[0]())
            for m, t in LISTS.items()
        )

    until(same)


def _filters(served: Served) -> st.SearchStrategy[tuple[str, Any]]:
    sandboxes = [
        pb.PodSandbox.FromString(b)
        for b in served.direct.listed("ListPodSandbox", pb.ListPodSandboxRequest())
    ]
    containers = [
        pb.Container.FromString(b)
        for b in served.direct.listed("ListContainers", pb.ListContainersRequest())
    ]
    all_ids = [s.id for s in sandboxes] + [c.id for c in containers]
    labels = sorted({p for s in sandboxes for p in s.labels.items()})
    labels += sorted({p for c in containers for p in c.labels.items()})
    ids = st.one_of(
        st.just(""),
        st.sampled_from(all_ids),
        st.sampled_from(all_ids).map(lambda i: i[:12]),
        st.just("0" * 64),
    )
    selector = st.lists(st.sampled_from(labels), max_size=2).map(dict)
    sandbox_filter = st.builds(
        pb.PodSandboxFilter,
        id=ids,
        state=st.none() | st.builds(pb.PodSandboxStateValue, state=st.sampled_from([0, 1])),
        label_selector=selector,
    )
    container_filter = st.builds(
        pb.ContainerFilter,
        id=ids,
        state=st.none() | st.builds(pb.ContainerStateValue, state=st.sampled_from([0, 1, 2, 3])),
        pod_sandbox_id=ids,
        label_selector=selector,
    )
    return st.one_of(
        st.tuples(
            st.just("ListPodSandbox"), st.builds(pb.ListPodSandboxRequest, filter=sandbox_filter)
        ),
        st.tuples(
            st.just("ListContainers"),
            st.builds(pb.ListContainersRequest, filter=container_filter),
        ),
    )


@with_events
def test_lists_equal_containerds_for_every_filter_after_quiescence(
    served: Served, node: list[SandboxRecord]
) -> None:
    _quiet(served)
    states = {
        pb.PodSandbox.FromString(b).state
        for b in served.proxy.listed("ListPodSandbox", pb.ListPodSandboxRequest())
    }
    assert states == {pb.SANDBOX_READY, pb.SANDBOX_NOTREADY}

    @settings(max_examples=150, suppress_health_check=list(HealthCheck))
    @given(case=_filters(served))
    def check(case: tuple[str, Any]) -> None:
        method, request = case
        assert served.proxy.listed(method, request) == served.direct.listed(method, request)

    check()


@with_events
def test_remove_pod_sandbox_through_the_socket_fails_and_the_pod_stays(
    served: Served, node: list[SandboxRecord], cri_harness: CRIHarness
) -> None:
    victim = node[0]
    request = pb.RemovePodSandboxRequest(pod_sandbox_id=victim.id).SerializeToString()
    with pytest.raises(grpc.RpcError) as caught:
        served.proxy.call("RemovePodSandbox", request)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "RemovePodSandbox" in str(caught.value.details())
    assert victim.id in {s.id for s in cri_harness.list_sandboxes()}


@with_events
def test_three_subscribers_each_see_every_event(served: Served, cri_harness: CRIHarness) -> None:
    sockets = [Socket(served.path) for _ in range(3)]
    readers = [EventWatcher(s.events()) for s in sockets]
    made: list[SandboxRecord] = []
    try:
        time.sleep(1.0)  # the three streams are open (containerd sends nothing before a change)
        sandbox = cri_harness.run_pod("cri-fanout", "crisock", labels={"test": "fanout"})
        made.append(sandbox)
        container = cri_harness.create_container(sandbox, "app")
        cri_harness.stop_container(container)
        cri_harness.remove_container(container)
        # Every reader sees the container's whole life: created, started, stopped, deleted.
        until(lambda: all(r.ids().count(container.id) >= 4 for r in readers))
        time.sleep(0.5)  # whatever else the change made has arrived too
        first = readers[0].raw
        for reader in readers[1:]:
            assert reader.raw == first  # the same events, the same order, the same bytes
    finally:
        for reader in readers:
            reader.close()
        for socket in sockets:
            socket.close()
        cri_harness.remove_all([s.id for s in made])


@pytest.mark.parametrize("containerd", ["1.7"], indirect=True)
def test_on_17_each_event_goes_to_one_upstream_subscriber_and_the_sockets_share_its(
    served: Served, cri_harness: CRIHarness
) -> None:
    """containerd 1.7 hands each event to one of its subscribers (containerd#7318): with two
    direct subscribers next to podcache's one, the three get disjoint parts of the events, so
    each direct one misses some; the three subscribers of the socket all get podcache's part,
    the same events in the same order. (So on 1.7 every agent must move to the socket: a
    direct subscriber takes events from podcache too.)"""
    direct = [Socket(served.direct_path) for _ in range(2)]
    proxied = [Socket(served.path) for _ in range(3)]
    direct_readers = [EventWatcher(s.events()) for s in direct]
    readers = [EventWatcher(s.events()) for s in proxied]
    made: list[SandboxRecord] = []
    try:
        time.sleep(1.0)  # the five streams are open (containerd sends nothing before a change)
        for n in range(3):
            sandbox = cri_harness.run_pod(f"cri-split-{n}", "crisock", labels={"test": "split"})
            made.append(sandbox)
            container = cri_harness.create_container(sandbox, "app")
            cri_harness.stop_container(container)
            cri_harness.remove_container(container)
        everyone = [*readers, *direct_readers]
        until(lambda: all(r.raw for r in everyone))  # each upstream subscriber got a part
        time.sleep(1.0)  # whatever else the changes made has arrived too
        ours, first, second = (set(r.raw) for r in (readers[0], *direct_readers))
        assert not ours & first and not ours & second and not first & second
        for reader in readers:
            assert reader.raw == readers[0].raw
    finally:
        for reader in [*readers, *direct_readers]:
            reader.close()
        for socket in [*proxied, *direct]:
            socket.close()
        cri_harness.remove_all([s.id for s in made])


# -- serve --cri-redact-env ---------------------------------------------------------------------

SECRETS = {"DB_PASSWORD": "hunter2-not-for-agents", "EMPTY": "", "WITH_EQUALS": "a=b=c"}
# A file to save containerd's own answer in: how tests/serve/data's recording was made.
RECORDED_ANSWER = os.environ.get("PODCACHE_RECORD_CONTAINER_STATUS")


def expected_redaction(info: dict[str, Any]) -> dict[str, Any]:
    """containerd's verbose ``info`` JSON with the values taken out at the two places it keeps
    the environment, found by their paths (not by the module's walk): the OCI spec's
    ``process.env`` and the CRI config's ``envs``."""
    redacted: dict[str, Any] = json.loads(json.dumps(info))
    process = redacted["runtimeSpec"]["process"]
    process["env"] = [f"{item.partition('=')[0]}=<redacted>" for item in process["env"]]
    for pair in redacted["config"]["envs"]:
        pair["value"] = "<redacted>"
    return redacted


@pytest.mark.parametrize("containerd", ["2.1"], indirect=True)
def test_redact_env_takes_every_value_out_of_containerds_verbose_status_and_nothing_else(
    containerd: Containerd, cri_harness: CRIHarness
) -> None:
    pod = cri_harness.run_pod("cri-env", "crisock")
    try:
        app = cri_harness.create_container(pod, "app", envs=SECRETS)
        request = pb.ContainerStatusRequest(container_id=app.id, verbose=True).SerializeToString()
        with tempfile.TemporaryDirectory(prefix="pc-cri-") as tmp:
            path = os.path.join(tmp, "cri.sock")
            args = ["-r", containerd.endpoint, "--listen", f"unix:{tmp}/http.sock"]
            with ServeProcess([*args, "--cri-listen", path, "--cri-redact-env"]):
                proxy, direct = Socket(path), Socket(containerd.socket_path)
                redacted, original = (s.call("ContainerStatus", request) for s in (proxy, direct))
                proxy.close()
                direct.close()
    finally:
        cri_harness.remove_all([pod.id])
    if RECORDED_ANSWER:
        with open(RECORDED_ANSWER, "wb") as record:
            record.write(original)
    assert SECRETS["DB_PASSWORD"].encode() in original  # what the option is for
    assert SECRETS["DB_PASSWORD"].encode() not in redacted and b"a=b=c" not in redacted
    direct_answer = pb.ContainerStatusResponse.FromString(original)
    answer = pb.ContainerStatusResponse.FromString(redacted)
    assert answer.status.SerializeToString(deterministic=True) == (
        direct_answer.status.SerializeToString(deterministic=True)
    )  # containerd orders its maps at random: each call, another order
    assert sorted(answer.info) == sorted(direct_answer.info) == ["info"]
    info = json.loads(answer.info["info"])
    assert info == expected_redaction(json.loads(direct_answer.info["info"]))
    env = info["runtimeSpec"]["process"]["env"]
    assert {f"{name}=<redacted>" for name in SECRETS} <= set(env)


# -- a runtime restart under the socket ----------------------------------------------------------


def _listed(client: Client, uid: str, target: str) -> bool:
    reply = client.get(target)
    return reply.status == 200 and uid in {pod["id"] for pod in reply.json()["items"]}


@pytest.mark.parametrize("containerd", VERSIONS, indirect=True)
def test_a_restart_is_one_resubscription_through_the_hub_and_1_6_stays_without_events(
    containerd: Containerd, cri_harness: CRIHarness
) -> None:
    """serve --cri-listen (every cache follows the hub's one stream) through a SIGKILL and
    restart of containerd with a pod running: on 1.7 and 2.1 the caches lose the stream and
    subscribe again once (one resubscription), the hub opening another stream to the runtime,
    and a pod made afterwards shows by its events (the period is 60 s); on 1.6 nothing
    subscribes before or after."""
    events = containerd.version in EVENT_VERSIONS
    running = cri_harness.run_pod("cri-restart-running", "crisock")
    made = [running]
    try:
        with tempfile.TemporaryDirectory(prefix="pc-cri-") as tmp:
            http = f"{tmp}/http.sock"
            args = ["-r", containerd.endpoint, "--listen", f"unix:{http}", "--cache-period", "60s"]
            with ServeProcess([*args, "--cri-listen", f"{tmp}/cri.sock"]) as server:
                client = Client(path=http)
                first = "subscribed" if events else "unsupported"
                until(lambda: subscriptions(client).state == first)
                before = subscriptions(client)
                containerd.kill()
                try:
                    if events:  # the loss is seen before the runtime is back
                        until(lambda: subscriptions(client).state == "reconnecting")
                finally:
                    containerd.start()
                late = cri_harness.run_pod("cri-restart-late", "crisock")
                made.append(late)
                # Without events only a reader's ?fresh=1 lists the node before the period.
                target = "/pods" if events else "/pods?fresh=1"
                until(lambda: _listed(client, late.uid, target), LONG_PERIOD / 2)
                after = subscriptions(client)
        assert "Traceback" not in server.stderr, server.stderr
    finally:
        cri_harness.remove_all([s.id for s in made])
    if events:
        assert before == Subscriptions("subscribed", 0, 1)
        assert (after.state, after.resubscriptions) == ("subscribed", 1)
        assert after.upstream >= 2
    else:
        assert before == after == Subscriptions("unsupported", 0, 0)
