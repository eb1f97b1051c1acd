"""``ContainerStatus`` and ``PodSandboxStatus`` through ``podcache serve --cri-listen`` over real
containerd 1.7 and 2.1 (docs/architecture.md §10 rules 8 and 9): equal to containerd's own
answers at quiescence, verbose ``info`` included; what changes a status without an event
(``UpdateContainerResources``) is seen within the period; an event's change at once; and with
``--cri-keep-departed`` a container removed right after it exited still answers its last
status, with the time it left.

Every pod made here is removed here.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.departedstatus import rfc3339
from tests.containerd import criwire
from tests.containerd.conftest import EVENT_VERSIONS, Containerd
from tests.containerd.harness import EXITING_COMMAND, ContainerRecord, CRIHarness, SandboxRecord
from tests.containerd.test_crisock import Sides as Served
from tests.containerd.test_crisock import Socket, serve_socket, until
from tests.crisocket import EventWatcher, task_events
from tests.serve.conftest import Client, ServeProcess

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(300)]
with_events = pytest.mark.parametrize("containerd", EVENT_VERSIONS, indirect=True)

PERIOD = 2.0
"""serve's --cache-period here: the bound on what changes a status without an event."""
RESOURCES = 16  # ContainerStatus.resources, a field podcache's proto lacks (criwire reads it)


def _serve(containerd: Containerd, *extra: str) -> Iterator[Served]:
    with serve_socket(containerd, "--cache-period", f"{PERIOD:g}s", *extra) as served:
        yield served


@pytest.fixture
def served(containerd: Containerd) -> Iterator[Served]:
    yield from _serve(containerd)


@pytest.fixture
def keeping(containerd: Containerd) -> Iterator[Served]:
    yield from _serve(containerd, "--cri-keep-departed", "5m")


def _metrics(http: Client) -> bytes:
    body: bytes = http.get("/metrics").body
    return body


def _from_cache(served: Served, method: str) -> float:
    wanted = f'podcache_cri_status_answers_total{{method="{method}",source="cache"}} '
    for line in _metrics(served.http).decode().splitlines():
        if line.startswith(wanted):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {wanted}")


def _container(ident: str, verbose: bool = False) -> bytes:
    return pb.ContainerStatusRequest(container_id=ident, verbose=verbose).SerializeToString()


def _sandbox(ident: str, verbose: bool = False) -> bytes:
    return pb.PodSandboxStatusRequest(pod_sandbox_id=ident, verbose=verbose).SerializeToString()


def _same(mine: bytes, theirs: bytes, kind: Any) -> bool:
    """Protobuf-equal: both parsed (fields podcache's proto lacks kept as they came)."""
    return bool(kind.FromString(mine) == kind.FromString(theirs)) and _unknown(mine, kind) == (
        _unknown(theirs, kind)
    )


def _unknown(data: bytes, kind: Any) -> bytes:
    """The status's fields podcache's proto lacks (resources, mounts, user...), as bytes."""
    status = criwire.read_fields(data).get(1, [b""])[0]
    assert isinstance(status, bytes)
    fields = criwire.read_fields(status)
    known = {f.number for f in kind.DESCRIPTOR.fields_by_name["status"].message_type.fields}
    return repr(sorted((n, v) for n, v in fields.items() if n not in known)).encode()


class Watcher(EventWatcher):
    """A GetContainerEvents client of podcache's socket (``EventWatcher``)."""

    def __init__(self, socket: Socket) -> None:
        super().__init__(socket.events())

    def wait_for(self, ident: str, kind: int) -> pb.ContainerEventResponse:
        until(lambda: self.got(ident, kind) is not None)
        found = self.got(ident, kind)
        assert found is not None
        return found


@pytest.fixture
def pod(cri_harness: CRIHarness) -> Iterator[SandboxRecord]:
    sandbox = cri_harness.run_pod("status", "crisock-status")
    yield sandbox
    cri_harness.remove_all([sandbox.id])


@with_events
def test_statuses_equal_containerds_verbose_included_and_come_from_the_cache(
    served: Served, pod: SandboxRecord, cri_harness: CRIHarness
) -> None:
    watcher = Watcher(served.proxy)
    try:
        running = cri_harness.create_container(pod, "app")
        done = cri_harness.create_container(pod, "done", command=EXITING_COMMAND)
        cri_harness.wait_exited(done, timeout=120)
        watcher.wait_for(done.id, pb.CONTAINER_STOPPED_EVENT)
    finally:
        watcher.close()
    calls = [
        ("ContainerStatus", _container(c.id, v), pb.ContainerStatusResponse)
        for c in (running, done)
        for v in (False, True)
    ] + [
        ("PodSandboxStatus", _sandbox(pod.id, v), pb.PodSandboxStatusResponse)
        for v in (False, True)
    ]
    for method, request, kind in calls:
        path = f"/runtime.v1.RuntimeService/{method}"
        first = served.proxy.call(method, request)
        before = _from_cache(served, method)
        again = served.proxy.call(method, request)
        theirs = served.direct.call(method, request)
        assert _same(first, theirs, kind), (path, kind.FromString(first), kind.FromString(theirs))
        assert _same(again, theirs, kind), path
        assert _from_cache(served, method) == before + 1, path


def _resources(answer: bytes) -> bytes:
    status = criwire.read_fields(answer)[1][0]
    assert isinstance(status, bytes)
    value = criwire.read_fields(status).get(RESOURCES, [b""])[0]
    assert isinstance(value, bytes)
    return value


def _changed_without_event(
    served: Served,
    cri_harness: CRIHarness,
    watcher: Watcher,
    app: ContainerRecord,
    change: Callable[[], object],
) -> pb.ContainerStatusResponse:
    """``change`` the running ``app`` after the socket's answer is kept: the runtime's status
    changes and no CRI event names the container (one made after the change has come, so
    every event of the change would have come before it); containerd's own event of the change
    reaches serve (``taskevents``), and the socket's next answer is the runtime's, with no
    wait for the period. Returns that answer."""
    request = _container(app.id, verbose=True)
    before = served.proxy.call("ContainerStatus", request)
    assert served.proxy.call("ContainerStatus", request) == before  # kept
    seen_task_events = task_events(served.http).events
    seen = len(watcher.events)
    change()
    theirs = served.direct.call("ContainerStatus", request)
    assert not _same(theirs, before, pb.ContainerStatusResponse)  # the change shows
    marker = cri_harness.create_container(
        cri_harness.sandboxes[app.sandbox_id],
        f"marker-{seen}",
        command=EXITING_COMMAND,
        start=False,
    )
    watcher.wait_for(marker.id, pb.CONTAINER_CREATED_EVENT)
    named = [e for e in watcher.events[seen:] if e.container_id == app.id]
    assert named == [], [(e.container_event_type, list(e.containers_statuses)) for e in named]
    # the change's event comes before the marker's
    until(lambda: task_events(served.http).events > seen_task_events)
    after = served.proxy.call("ContainerStatus", request)
    assert _same(after, theirs, pb.ContainerStatusResponse)
    return pb.ContainerStatusResponse.FromString(after)


@with_events
def test_a_resize_sends_no_event_and_shows_within_the_period_a_stop_at_once(
    served: Served, pod: SandboxRecord, cri_harness: CRIHarness
) -> None:
    """UpdateContainerResources (in-place resize) changes the status's resources and sends no
    event: the socket shows it once its kept answer is older than the period. A stop sends
    STOPPED: the socket's next answer after the event shows it, with no wait."""
    watcher = Watcher(served.proxy)
    try:
        app = cri_harness.create_container(pod, "app")
        watcher.wait_for(app.id, pb.CONTAINER_STARTED_EVENT)
        update = criwire.str_field(1, app.id) + criwire.message_field(
            2, criwire.int_field(3, 512), criwire.int_field(4, 256 * 1024 * 1024)
        )
        after = _changed_without_event(
            served,
            cri_harness,
            watcher,
            app,
            lambda: served.direct.call("UpdateContainerResources", update),
        )
        assert _resources(after.SerializeToString()) != b""
        cri_harness.stop_container(app)
        watcher.wait_for(app.id, pb.CONTAINER_STOPPED_EVENT)
        request = _container(app.id, verbose=True)
        stopped = pb.ContainerStatusResponse.FromString(
            served.proxy.call("ContainerStatus", request)
        )
        assert stopped.status.state == pb.CONTAINER_EXITED
    finally:
        watcher.close()


@with_events
def test_an_oom_kill_inside_a_running_container_sends_no_event_and_shows_within_the_period(
    served: Served, pod: SandboxRecord, cri_harness: CRIHarness
) -> None:
    """A process of a running container killed for memory (here an exec past the container's
    16 MiB) sets its status's reason to OOMKilled while it runs on, and sends no event (measured
    on containerd 1.7 and 2.1; an OOM kill of the container's own process sends STOPPED with
    the reason)."""
    watcher = Watcher(served.proxy)
    try:
        limit = criwire.Resources(memory_limit_in_bytes=16 * 1024 * 1024)
        app = cri_harness.create_container(
            pod, "app", extras=criwire.ContainerExtras(resources=limit)
        )
        watcher.wait_for(app.id, pb.CONTAINER_STARTED_EVENT)
        # The eater offers itself to the OOM killer first: the container's own process lives.
        eat = [
            "sh",
            "-c",
            "echo 1000 >/proc/self/oom_score_adj; x=$(head -c 99999999 /dev/zero | tr '\\0' x)",
        ]
        after = _changed_without_event(
            served, cri_harness, watcher, app, lambda: cri_harness.exec_sync(app, eat)
        )
        assert after.status.state == pb.CONTAINER_RUNNING
        assert after.status.reason == "OOMKilled"
    finally:
        watcher.close()


def _sandbox_resized(served: Served, sandbox: str) -> str:
    """``UpdatePodSandboxResources`` on ``sandbox`` (pod-level in-place resize): "OK", or the
    code containerd answers it with when it does not do it."""
    cpu_and_memory = criwire.int_field(3, 512) + criwire.int_field(4, 256 * 1024 * 1024)
    request = criwire.str_field(1, sandbox) + criwire.message_field(3, cpu_and_memory)
    try:
        served.direct.call("UpdatePodSandboxResources", request)
    except grpc.RpcError as error:
        return str(error.code().name)
    return "OK"


@with_events
def test_a_sandbox_status_changes_only_with_its_state_so_a_listing_confirms_it_past_the_period(
    served: Served, pod: SandboxRecord, cri_harness: CRIHarness, containerd: Containerd
) -> None:
    """What changes a container's status without an event (a resize, an OOM kill inside it,
    an exec) and a pod-level resize leave containerd's plain ``PodSandboxStatus`` as it was;
    so past the period the socket gives its kept answer while the listing shows the sandbox
    READY (§10 rule 8), equal to containerd's."""
    watcher = Watcher(served.proxy)
    try:
        app = cri_harness.create_container(pod, "app")
        watcher.wait_for(app.id, pb.CONTAINER_STARTED_EVENT)
    finally:
        watcher.close()
    request = _sandbox(pod.id)
    before = served.direct.call("PodSandboxStatus", request)
    served.proxy.call("PodSandboxStatus", request)
    update = criwire.str_field(1, app.id) + criwire.message_field(
        2, criwire.int_field(3, 512), criwire.int_field(4, 256 * 1024 * 1024)
    )
    served.direct.call("UpdateContainerResources", update)
    cri_harness.exec_sync(app, ["true"])
    resized = _sandbox_resized(served, pod.id)
    assert resized in ("OK", "UNIMPLEMENTED"), (containerd.version, resized)  # 1.7, 2.1: the latter
    learnt = time.monotonic()
    assert _same(
        served.direct.call("PodSandboxStatus", request), before, pb.PodSandboxStatusResponse
    )
    until(lambda: time.monotonic() - learnt > PERIOD)
    cached = _from_cache(served, "PodSandboxStatus")
    mine = served.proxy.call("PodSandboxStatus", request)
    assert _from_cache(served, "PodSandboxStatus") == cached + 1
    assert _same(mine, served.direct.call("PodSandboxStatus", request), pb.PodSandboxStatusResponse)
    assert _plain_from_verbose(served, app.id)
    assert _container_past_the_period(served, app.id)


def _container_past_the_period(served: Served, container: str) -> bool:
    """While serve follows containerd's own events, a container's answer learnt after the
    subscription settled outlives the period (the listing shows it RUNNING still), equal to
    containerd's."""
    until(lambda: task_events(served.http).state == "following")
    _past_the_period(time.monotonic())  # the subscription's settle (taskevents rule 1)
    request = _container(container, verbose=True)
    served.proxy.call("ContainerStatus", request)
    _past_the_period(time.monotonic())
    cached = _from_cache(served, "ContainerStatus")
    mine = served.proxy.call("ContainerStatus", request)
    theirs = served.direct.call("ContainerStatus", request)
    assert _same(mine, theirs, pb.ContainerStatusResponse)
    return _from_cache(served, "ContainerStatus") == cached + 1


def _past_the_period(since: float) -> None:
    until(lambda: time.monotonic() - since > PERIOD)


def _plain_from_verbose(served: Served, container: str) -> bool:
    """A container's plain answer asked within the period of its verbose one is the verbose
    one's status, from the cache, equal to containerd's plain answer (tried until both calls
    fit in the period: a loaded machine may take longer; the verbose one is asked of
    containerd each try, its kept answer older than the period by then)."""
    for _ in range(20):
        began = time.monotonic()  # the verbose answer is learnt after this
        served.proxy.call("ContainerStatus", _container(container, verbose=True))
        cached = _from_cache(served, "ContainerStatus")
        plain = served.proxy.call("ContainerStatus", _container(container))
        fresh = _from_cache(served, "ContainerStatus") == cached + 1
        theirs = served.direct.call("ContainerStatus", _container(container))
        assert _same(plain, theirs, pb.ContainerStatusResponse)
        if time.monotonic() - began <= PERIOD:
            return fresh
        _past_the_period(began)  # the next verbose one is asked anew
    raise AssertionError("no two calls within the period in 20 tries")


RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z")


@with_events
def test_twenty_containers_removed_as_they_exit_still_answer_their_last_status(
    keeping: Served, pod: SandboxRecord, cri_harness: CRIHarness
) -> None:
    """20 containers whose command exits at once, each removed right after it exits: with
    --cri-keep-departed, ContainerStatus (verbose, what ``crictl inspect ID`` asks) through the
    socket answers each one's last status, EXITED, with podcache-departed: the time containerd
    says it was deleted; containerd itself answers NotFound."""
    watcher = Watcher(keeping.proxy)
    gone = []
    try:
        for n in range(20):
            container = cri_harness.create_container(pod, f"short-{n}", command=EXITING_COMMAND)
            cri_harness.wait_exited(container, timeout=120)
            cri_harness.remove_container(container)
            gone.append(container)
        for container in gone:
            deleted = watcher.wait_for(container.id, pb.CONTAINER_DELETED_EVENT)
            request = _container(container.id, verbose=True)
            with pytest.raises(grpc.RpcError) as theirs:
                keeping.direct.call("ContainerStatus", request)
            assert theirs.value.code() is grpc.StatusCode.NOT_FOUND
            method = keeping.proxy.channel.unary_unary(
                "/runtime.v1.RuntimeService/ContainerStatus",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            data, call = method.with_call(request, timeout=10)
            answer = pb.ContainerStatusResponse.FromString(data)
            assert answer.status.id == container.id
            assert answer.status.state == pb.CONTAINER_EXITED
            assert answer.status.exit_code == 0
            assert answer.status.metadata.name == container.name
            assert answer.status.image.image or answer.status.image_ref
            left = str(dict(call.trailing_metadata())["podcache-departed"])
            assert RFC3339.fullmatch(left)
            assert left == rfc3339(deleted.created_at)
    finally:
        watcher.close()


@with_events
def test_without_keep_departed_a_removed_container_is_containerds_not_found(
    served: Served, pod: SandboxRecord, cri_harness: CRIHarness
) -> None:
    watcher = Watcher(served.proxy)
    try:
        container = cri_harness.create_container(pod, "short", command=EXITING_COMMAND)
        cri_harness.wait_exited(container, timeout=120)
        cri_harness.remove_container(container)
        watcher.wait_for(container.id, pb.CONTAINER_DELETED_EVENT)
    finally:
        watcher.close()
    failures = []
    for socket in (served.proxy, served.direct):
        with pytest.raises(grpc.RpcError) as caught:
            socket.call("ContainerStatus", _container(container.id, verbose=True))
        failures.append((caught.value.code(), caught.value.details()))
    assert failures[0] == failures[1]
    assert failures[0][0] is grpc.StatusCode.NOT_FOUND


def _departed(served: Served, method: str, request: bytes) -> tuple[bytes, str]:
    """The socket's answer and its podcache-departed trailer."""
    call = served.proxy.channel.unary_unary(
        f"/runtime.v1.RuntimeService/{method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    data, outcome = call.with_call(request, timeout=10)
    return data, str(dict(outcome.trailing_metadata())["podcache-departed"])


@with_events
def test_a_removed_pod_answers_the_last_status_of_its_sandbox_and_every_container(
    keeping: Served, cri_harness: CRIHarness
) -> None:
    """The kubelet's teardown: StopPodSandbox stops every container (each STOPPED names the
    sandbox, so each sibling's event ends the others' kept answers), RemovePodSandbox removes
    them all: every container answers EXITED and the sandbox NOTREADY, with their deletion
    times."""
    watcher = Watcher(keeping.proxy)
    try:
        sandbox = cri_harness.run_pod("gone", "crisock-status")
        containers = [cri_harness.create_container(sandbox, f"c{n}") for n in range(3)]
        cri_harness.remove_pod(sandbox)
        deleted = {
            ident: watcher.wait_for(ident, pb.CONTAINER_DELETED_EVENT)
            for ident in [sandbox.id, *(c.id for c in containers)]
        }
    finally:
        watcher.close()
    for container in containers:
        data, left = _departed(keeping, "ContainerStatus", _container(container.id, True))
        last = pb.ContainerStatusResponse.FromString(data).status
        assert (last.id, last.state) == (container.id, pb.CONTAINER_EXITED)
        assert last.metadata.name == container.name
        assert left == rfc3339(deleted[container.id].created_at)
    request = _sandbox(sandbox.id)
    with pytest.raises(grpc.RpcError) as theirs:
        keeping.direct.call("PodSandboxStatus", request)
    assert theirs.value.code() is grpc.StatusCode.NOT_FOUND
    data, left = _departed(keeping, "PodSandboxStatus", request)
    pod = pb.PodSandboxStatusResponse.FromString(data).status
    assert (pod.id, pod.state) == (sandbox.id, pb.SANDBOX_NOTREADY)
    assert pod.metadata.uid == sandbox.uid
    assert pod.created_at == sandbox.created_at
    assert left == rfc3339(deleted[sandbox.id].created_at)


@pytest.mark.parametrize("containerd", ["1.6"], indirect=True)
def test_containerd_1_6_has_no_events_so_every_status_is_its_own_answer_forwarded(
    containerd: Containerd, cri_harness: CRIHarness
) -> None:
    sandbox = cri_harness.run_pod("no-events", "crisock-status")
    try:
        app = cri_harness.create_container(sandbox, "app")
        with tempfile.TemporaryDirectory(prefix="pc-cri-") as tmp:
            path = os.path.join(tmp, "cri.sock")
            http = Client(path=f"{tmp}/http.sock")
            args = ["-r", containerd.endpoint, "--listen", f"unix:{tmp}/http.sock"]
            with ServeProcess([*args, "--cri-listen", path]) as server:
                proxy, direct = Socket(path), Socket(containerd.socket_path)
                served = Served(proxy, direct, http)
                try:
                    request = _container(app.id, verbose=True)
                    for _ in range(2):
                        mine = proxy.call("ContainerStatus", request)
                        theirs = direct.call("ContainerStatus", request)
                        assert _same(mine, theirs, pb.ContainerStatusResponse)
                    assert _from_cache(served, "ContainerStatus") == 0
                finally:
                    proxy.close()
                    direct.close()
            assert "Traceback" not in server.stderr, server.stderr
    finally:
        cri_harness.remove_all([sandbox.id])
