"""``GET /pids/{pid}`` in-process over AsyncFakeRuntime, fake clocks and a fixture ``/proc``:
shapes, 404s, 400s, no replay across PID reuse, one refresh for a newer process, metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from podcache import AsyncFakeRuntime, Container, ContainerID, ContainerState, Pod, procs
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


async def test_a_process_newer_than_the_snapshot_costs_one_refresh(
    app: App, runtime: AsyncFakeRuntime, clocks: Clocks, tree: ProcTree
) -> None:
    assert (await call(app, "/pids/100")).status == 200
    assert runtime.calls == 1
    runtime.set_pods([B, A])
    clocks.now += 1.0
    tree.set_uptime(UPTIME + 1.0)
    tree.add(200, hybrid(f"/kubepods/pod{B.id}/{cid(2)}"), start_ticks=int((UPTIME + 0.5) * 100))
    reply = await call(app, "/pids/200")
    assert reply.status == 200, reply.body
    assert reply.json()["pod"]["id"] == B.id
    assert runtime.calls == 2
    # An unknown container in an older process: no refresh at all.
    assert (await call(app, "/pids/104")).status == 404
    assert runtime.calls == 2
    metrics = (await call(app, "/metrics")).body.decode()
    assert 'podcache_pid_lookups_total{outcome="found"} 2.0' in metrics
    assert 'podcache_pid_lookups_total{outcome="unknown"} 1.0' in metrics
    assert "podcache_pid_lookup_refreshes_total 1.0" in metrics
    assert 'podcache_http_requests_total{code="200",route="/pids/{pid}"} 2.0' in metrics


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
    lookup = app._lookup_pid

    async def lookup_then_recover(pid: int) -> procs.LookupResult:
        result = await lookup(pid)  # answered from the last good (stale) snapshot
        runtime.error = None
        runtime.set_pods([A])  # the same state, as a new listing (a real runtime's is new)
        fresh = await app.respond("GET", "/pods", "fresh=1", [])
        assert fresh.status == 200 and ("x-podcache-stale", "true") not in fresh.headers
        return result

    monkeypatch.setattr(app, "_lookup_pid", lookup_then_recover)
    reply = await call(app, "/pids/100")
    assert reply.status == 200, reply.body
    assert reply.headers.get("x-podcache-stale") == "true"
    assert float(reply.headers["x-podcache-age"]) >= 11.0
