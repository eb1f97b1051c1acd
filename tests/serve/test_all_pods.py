"""``?all=1``: the NotReady pods ``podcache pods -a`` shows, on ``/pods``, the lookups and the
watch stream. In-process over AsyncFakeRuntime (its ``all_pods`` answer ``get_pods(True)``)
through both ways into the app; then ``podcache serve`` over a simulated runtime and real
sockets (in test_watch_stream.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from podcache import AsyncFakeRuntime, Container, ContainerID, ContainerState, Pod, PodList
from podcache.jsonview import pod_to_json
from podcache.serve import App
from podcache.serve.app import ALL_REVISIONS_FROM
from tests.serve.test_app import (
    PODS,
    Clocks,
    call,
    entry_point,  # noqa: F401 -- both ways in, for every test
    error,
)
from tests.unit.procs.tree import ProcTree, hybrid

STOPPED = Pod(
    id="0f0f0f0f-0000-4000-8000-000000000001",
    name="job-1",
    namespace="batch",
    created_at=1_600_000_000_000_000_000,
    containers=[
        Container(id=ContainerID("containerd", "d" * 64), name="c", state=ContainerState.EXITED)
    ],
    sandboxes=[Container(id=ContainerID("containerd", "e" * 64), state=ContainerState.EXITED)],
)
ALL = [*PODS, STOPPED]


@pytest.fixture
def runtime() -> AsyncFakeRuntime:
    return AsyncFakeRuntime(PODS, all_pods=ALL)


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


UPTIME = 3000.0


@pytest.fixture
def tree(tmp_path: Path) -> ProcTree:
    tree = ProcTree(tmp_path, uptime=UPTIME)
    # 100 runs in the container the runtime reports exited (a process that outlives its exit)
    tree.add(100, hybrid(f"/kubepods/pod{STOPPED.id}/{'d' * 64}"), start_ticks=100)
    return tree


@pytest.fixture
def app(runtime: AsyncFakeRuntime, clocks: Clocks, tree: ProcTree) -> Iterator[App]:
    yield App(runtime, 10.0, clock=clocks.monotonic, wall=clocks.wall, proc_root=tree.path)


def ids(reply_json: dict[str, object]) -> list[object]:
    items = reply_json["items"]
    assert isinstance(items, list)
    return [item["id"] for item in items]


async def test_all_lists_the_not_ready_pods_and_the_default_does_not(app: App) -> None:
    assert ids((await call(app, "/pods", "all=1")).json()) == [p.id for p in ALL]
    assert ids((await call(app, "/pods", "all=true")).json()) == [p.id for p in ALL]
    assert ids((await call(app, "/pods")).json()) == [p.id for p in PODS]
    assert ids((await call(app, "/pods", "all=0")).json()) == [p.id for p in PODS]
    filtered = await call(app, "/pods", "namespace=batch&all=1")
    assert filtered.json()["items"] == [pod_to_json(STOPPED)]


async def test_all_lookups_find_what_only_all_lists(app: App) -> None:
    for path in (
        f"/pods/{STOPPED.id}",
        "/namespaces/batch/pods/job-1",
        "/containers/dddd",
        f"/containers/containerd://{'e' * 64}",
    ):
        found = await call(app, path, "all=1")
        assert found.status == 200, (path, found.body)
        assert found.json()["pod"] == pod_to_json(STOPPED)
        error(await call(app, path), 404)
        error(await call(app, path, "all=0"), 404)


async def test_all_answers_come_from_a_cache_of_get_pods_true(
    app: App, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    await call(app, "/pods")
    for _ in range(3):
        await call(app, "/pods", "all=1")
        await call(app, f"/pods/{STOPPED.id}", "all=1")
    assert runtime.all_args == [False, True]  # one listing each, within the period
    clocks.now += 11.0
    await call(app, "/pods", "all=1")
    assert runtime.all_args == [False, True, True]


async def test_all_revisions_are_of_their_own_range(app: App) -> None:
    default = (await call(app, "/pods")).json()["revision"]
    everything = await call(app, "/pods", "all=1")
    revision = everything.json()["revision"]
    assert default < ALL_REVISIONS_FROM <= revision < 2**53
    assert everything.headers["x-podcache-revision"] == str(revision)


@pytest.mark.parametrize("query", ["all=2", "all=yes", "all=1&all=1", "all=0&all=1", "all="])
async def test_a_bad_or_repeated_all_is_400(app: App, query: str) -> None:
    assert "all" in error(await call(app, "/pods", query), 400)


async def test_all_is_not_a_parameter_of_the_service_routes(app: App) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert "unknown query parameter 'all'" in error(await call(app, path, "all=1"), 400)


async def test_pids_with_all_finds_a_process_of_a_not_ready_pod(app: App) -> None:
    missed = await call(app, "/pids/100")
    assert missed.status == 404 and missed.json()["reason"] == "container_unknown"
    found = await call(app, "/pids/100", "all=1")
    assert found.status == 200, found.body
    assert found.json()["pod"] == pod_to_json(STOPPED)
    assert found.json()["container"]["state"] == "exited"


async def test_pids_with_all_asks_the_runtime_about_one_pod_never_the_node(
    app: App, runtime: AsyncFakeRuntime, clocks: Clocks, tree: ProcTree
) -> None:
    """The all view keeps the probe rule: a process newer than its snapshot, in a container
    that snapshot lacks, costs one pod's listing (``get_pod(uid, all=True)``)."""
    assert (await call(app, "/pods", "all=1")).status == 200
    assert runtime.all_args == [True]
    running = Container(
        id=ContainerID("containerd", "7" * 64), name="c", state=ContainerState.RUNNING
    )
    late = Pod(
        id="0f0f0f0f-0000-4000-8000-000000000002",
        name="late",
        namespace="batch",
        containers=[running],
    )
    runtime.all_pods = PodList([*ALL, late])
    clocks.now += 1.0
    tree.set_uptime(UPTIME + 1.0)
    tree.add(
        200, hybrid(f"/kubepods/pod{late.id}/{'7' * 64}"), start_ticks=int((UPTIME + 0.5) * 100)
    )
    reply = await call(app, "/pids/200", "all=1")
    assert reply.status == 200, reply.body
    assert reply.json()["pod"]["id"] == late.id
    assert runtime.all_args == [True]  # no relist of the node
    assert runtime.pod_calls == 1


async def test_all_requests_count_in_the_one_metrics(app: App) -> None:
    await call(app, "/pods", "all=1")
    await call(app, f"/pods/{STOPPED.id}", "all=1")
    await call(app, "/pods/nobody", "all=1")
    text = (await call(app, "/metrics")).body.decode()
    assert 'podcache_http_requests_total{code="200",route="/pods"} 1.0' in text
    assert 'podcache_http_requests_total{code="200",route="/pods/{uid}"} 1.0' in text
    assert 'podcache_http_requests_total{code="404",route="/pods/{uid}"} 1.0' in text


async def test_the_document_offers_all_on_the_pod_routes_only(app: App) -> None:
    document = (await call(app, "/openapi.json")).json()
    for path, operation in document["paths"].items():
        names = {p["name"] for p in operation["get"].get("parameters", ())}
        assert ("all" in names) == (
            path not in ("/healthz", "/readyz", "/metrics", "/openapi.json")
        )
    not_found = document["paths"]["/pids/{pid}"]["get"]["responses"]["404"]
    schema = not_found["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    reasons = document["components"]["schemas"][schema]["properties"]["reason"]["enum"]
    assert reasons == ["container_unknown", "no_process", "not_in_container"]
