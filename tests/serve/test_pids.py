"""``GET /pids/{pid}`` in-process over AsyncFakeRuntime, fake clocks and a fixture ``/proc``:
shapes, 404s, 400s, no replay across PID reuse, one refresh for a newer process, metrics."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podcache import AsyncFakeRuntime, Container, ContainerID, ContainerState, Pod, procs
from podcache.cache import pids
from podcache.errors import RuntimeUnavailableError
from podcache.jsonview import container_to_json, pod_to_json
from podcache.serve import App
from tests.serve.test_app import WALL_OFFSET, Clocks, call, error
from tests.unit.procs.tree import ProcTree, cid, hybrid, uid

UPTIME = 3000.0


def make_pod(n: int) -> Pod:
    return Pod(
        id=uid(n),
        name=f"web-{n}",
        namespace="default",
        created_at=1_700_000_000_000_000_000 + n,
        containers=[
            Container(
                id=ContainerID("containerd", cid(n)), name="web", state=ContainerState.RUNNING
            )
        ],
        sandboxes=[
            Container(id=ContainerID("containerd", cid(n + 500)), state=ContainerState.RUNNING)
        ],
        labels={"app": "web"},
    )


A, B = make_pod(1), make_pod(2)


@pytest.fixture
def tree(tmp_path: Path) -> ProcTree:
    t = ProcTree(tmp_path, uptime=UPTIME)
    t.add(
        100, hybrid(f"/kubepods/burstable/pod{A.id}/{cid(1)}"), start_ticks=int((UPTIME - 60) * 100)
    )
    t.add(101, hybrid(f"/kubepods/burstable/pod{A.id}/{cid(501)}"), comm="pause")
    t.add(
        102,
        f"/kubepods.slice/kubepods-pod{A.id.replace('-', '_')}.slice/crio-conmon-{cid(1)}.scope",
    )
    t.add(103, hybrid("/system.slice/containerd.service"))
    t.add(104, hybrid(f"/kubepods/pod{uid(9)}/{cid(9)}"), start_ticks=int((UPTIME - 60) * 100))
    return t


@pytest.fixture
def runtime() -> AsyncFakeRuntime:
    return AsyncFakeRuntime([A])


@pytest.fixture
def app(runtime: AsyncFakeRuntime, clocks: Clocks, tree: ProcTree) -> App:
    return App(runtime, 10.0, clock=clocks.monotonic, wall=clocks.wall, proc_root=tree.path)


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


async def test_a_container_process(app: App, clocks: Clocks) -> None:
    reply = await call(app, "/pids/100")
    assert reply.status == 200, reply.body
    assert reply.json() == {
        "pid": 100,
        "pod": pod_to_json(A),
        "container": container_to_json(A.containers[0]),
        "cache_time": pytest.approx(clocks.now + WALL_OFFSET),
        "age_seconds": 0.0,
    }
    assert "etag" not in reply.headers


async def test_a_sandbox_process_and_a_pod_only_process(app: App) -> None:
    sandbox = (await call(app, "/pids/101")).json()
    assert sandbox["container"] == container_to_json(A.sandboxes[0])
    conmon = (await call(app, "/pids/102")).json()
    assert (conmon["pod"], conmon["container"]) == (pod_to_json(A), None)


@pytest.mark.parametrize(
    ("pid", "words", "reason"),
    [
        ("103", "is in no container", "not_in_container"),
        ("104", "the runtime does not list", "container_unknown"),
        ("999", "no process 999", "no_process"),
    ],
)
async def test_not_found_is_404_json_with_the_reason(
    app: App, pid: str, words: str, reason: str
) -> None:
    reply = await call(app, f"/pids/{pid}")
    assert words in error(reply, 404)
    assert reply.json()["reason"] == reason


@pytest.mark.parametrize(
    "pid", ["0", "-1", "01", "+5", "abc", "1.5", "", "4194305", "99999999", "1%20"]
)
async def test_a_bad_pid_is_400(app: App, runtime: AsyncFakeRuntime, pid: str) -> None:
    assert "PID" in error(await call(app, f"/pids/{pid}"), 400)


async def test_an_unparsable_proc_file_is_503_naming_the_process(app: App, tree: ProcTree) -> None:
    """A ProcFormatError (a PodcacheError too) is about the process, not the runtime."""
    tree.write_raw(105, "stat", b"105 (sleep")
    tree.write_raw(105, "cgroup", f"0::/kubepods/pod{A.id}/{cid(1)}\n".encode())
    assert "cannot read process 105" in error(await call(app, "/pids/105"), 503)


async def test_the_largest_pid_is_a_pid(app: App) -> None:
    assert "no process" in error(await call(app, f"/pids/{procs.PID_MAX}"), 404)


async def test_a_reused_pid_is_never_answered_from_a_remembered_reply(
    app: App, tree: ProcTree
) -> None:
    first = (await call(app, "/pids/100")).json()
    assert first["pod"]["id"] == A.id
    tree.add(
        100, hybrid("/user.slice/user-0.slice/session-1.scope"), start_ticks=int((UPTIME - 1) * 100)
    )
    assert "is in no container" in error(await call(app, "/pids/100"), 404)


async def test_a_process_newer_than_the_snapshot_asks_the_runtime_about_its_pod_only(
    app: App, runtime: AsyncFakeRuntime, clocks: Clocks, tree: ProcTree
) -> None:
    """A container missing from a snapshot older than its process costs one pod's
    listing (``get_pod``), never a relist of the node."""
    assert (await call(app, "/pids/100")).status == 200
    assert runtime.calls == 1
    runtime.set_pods([B, A])
    clocks.now += 1.0
    tree.set_uptime(UPTIME + 1.0)
    tree.add(200, hybrid(f"/kubepods/pod{B.id}/{cid(2)}"), start_ticks=int((UPTIME + 0.5) * 100))
    reply = await call(app, "/pids/200")
    assert reply.status == 200, reply.body
    assert reply.json()["pod"]["id"] == B.id
    assert (runtime.calls, runtime.pod_calls, runtime.probe_calls) == (1, 1, 0)  # uid in path
    # An unknown container in an older process: the runtime is not asked at all.
    assert (await call(app, "/pids/104")).status == 404
    assert (runtime.calls, runtime.pod_calls) == (1, 1)
    metrics = (await call(app, "/metrics")).body.decode()
    assert 'podcache_pid_lookups_total{outcome="found"} 2.0' in metrics
    assert 'podcache_pid_lookups_total{outcome="unknown"} 1.0' in metrics
    assert "podcache_pid_lookup_refreshes_total 0.0" in metrics
    assert "podcache_pid_lookup_probes_total 1.0" in metrics
    assert 'podcache_http_requests_total{code="200",route="/pids/{pid}"} 2.0' in metrics


@pytest.mark.parametrize("named", ["scope", "pod-and-id"])
async def test_a_crafted_cgroup_naming_an_unknown_container_costs_one_probe_then_nothing(
    app: App, runtime: AsyncFakeRuntime, clocks: Clocks, tree: ProcTree, named: str
) -> None:
    """The crafted-cgroup attack: processes in a cgroup named like a container the runtime
    does not know, each newer than the snapshot. The first lookup asks the runtime about that
    one ID; later ones (new processes in it, for ``pids.UNKNOWN_FOR`` seconds) ask nothing;
    no lookup ever relists the node."""
    fake_id = cid(77)
    path = (
        f"/system.slice/cri-containerd-{fake_id}.scope"
        if named == "scope"
        else f"/kubepods/pod{A.id}/{fake_id}"
    )
    await call(app, "/pods")
    assert runtime.calls == 1
    for n in range(50):
        clocks.now += 0.01
        tree.set_uptime(UPTIME + 1.0 + n)
        tree.add(300 + n, hybrid(path), start_ticks=int((UPTIME + 0.5 + n) * 100))
        assert (await call(app, f"/pids/{300 + n}")).status == 404
    assert runtime.calls == 1  # never a relist of the node
    assert runtime.probe_calls + runtime.pod_calls == 1  # one probe for the ID, then none


async def test_a_start_time_in_the_future_is_taken_as_now(
    app: App, runtime: AsyncFakeRuntime, clocks: Clocks, tree: ProcTree
) -> None:
    """A crafted proc root whose stat says the process starts after now: one probe, then the
    ID is remembered; the same PID queried again costs nothing."""
    await call(app, "/pods")
    tree.add(500, hybrid(f"/kubepods/pod{uid(9)}/{cid(9)}"), start_ticks=int((UPTIME * 10) * 100))
    for _ in range(20):
        clocks.now += 0.01  # the process is always "newer" than the snapshot
        assert (await call(app, "/pids/500")).status == 404
    assert runtime.calls == 1 and runtime.probe_calls + runtime.pod_calls == 1


async def test_the_document_describes_the_route(app: App) -> None:
    document = (await call(app, "/openapi.json")).json()
    operation = document["paths"]["/pids/{pid}"]["get"]
    assert set(operation["responses"]) >= {"200", "400", "404", "503"}
    schema = document["components"]["schemas"]["ProcessResponse"]
    assert set(schema["required"]) == {"pid", "pod", "container", "cache_time", "age_seconds"}


async def test_a_stale_answer_is_marked_whatever_other_requests_found_meanwhile(
    app: App, runtime: AsyncFakeRuntime, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staleness is the request's own: while this lookup awaits, another request is answered
    from a fresh snapshot, and this answer (from the stale one) still says it is stale."""
    assert (await call(app, "/pids/100")).status == 200
    clocks.now += 11.0  # past the 10 s period
    runtime.error = RuntimeUnavailableError("unix:///x.sock", "gone")
    lookup = app.lookups.lookup_pid

    async def lookup_then_recover(pid: int) -> pids.LookupResult:
        result = await lookup(pid)  # answered from the last good (stale) snapshot
        runtime.error = None
        runtime.set_pods([A])  # the same state, as a new listing (a real runtime's is new)
        fresh = await app.respond("GET", "/pods", "fresh=1", [])
        assert fresh.status == 200 and ("x-podcache-stale", "true") not in fresh.headers
        return result

    monkeypatch.setattr(app.lookups, "lookup_pid", lookup_then_recover)
    reply = await call(app, "/pids/100")
    assert reply.status == 200, reply.body
    assert reply.headers.get("x-podcache-stale") == "true"
    assert float(reply.headers["x-podcache-age"]) >= 11.0


@pytest.mark.timeout(30)  # on the code before the fix, open() blocked the loop for good
@pytest.mark.parametrize("name", ["cgroup", "stat"])
async def test_a_fifo_in_the_proc_root_is_503_and_blocks_nothing(
    app: App, tree: ProcTree, name: str
) -> None:
    """A crafted proc root holding a FIFO: refused without opening it for a
    blocking read; the loop goes on (the same request path, /healthz, answers after)."""
    tree.add(106, hybrid(f"/kubepods/pod{A.id}/{cid(1)}"))
    fifo = Path(tree.path) / "106" / name
    fifo.unlink()
    os.mkfifo(fifo)
    assert "not a regular file" in error(await call(app, "/pids/106"), 503)
    assert (await call(app, "/healthz")).status == 200
