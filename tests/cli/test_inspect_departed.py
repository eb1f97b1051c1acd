"""``podcache inspect ID --departed``: a pod the runtime no longer lists, asked of the node's
``podcache serve`` (a real one, over the same simulated runtime, on real sockets), which says
when it left (issue 23 §4; docs/architecture.md §3 rule 12)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from podcache import AsyncFakeRuntime, Container, ContainerID, Pod
from podcache.serve import App
from podcache.sim import SimRuntime
from tests.cli.conftest import Runner
from tests.serve.conftest import Client, ServeProcess, free_port, settle_subscription
from tests.serve.test_http1 import serving


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[SimRuntime, Client, str]]:
    with SimRuntime(12, seed=5) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
        with ServeProcess(args):
            client = Client(port=port)
            settle_subscription(client)
            yield sim, client, f"http://127.0.0.1:{port}"


def _remove_one(sim: SimRuntime, client: Client) -> tuple[str, str]:
    """A running pod removed from the runtime, once serve saw it leave: (UID, container ID)."""
    listed = client.get("/pods").json()["items"]
    uid, container = listed[0]["id"], listed[0]["containers"][0]["id"]
    sim.population.remove_pod(uid)
    deadline = time.monotonic() + 30
    while client.get(f"/pods/{uid}", **{}).status != 404:
        assert time.monotonic() < deadline, "serve never saw the pod leave"
        time.sleep(0.02)
    return uid, container


def test_a_departed_pod_is_found_with_when_it_left(
    run: Runner, node: tuple[SimRuntime, Client, str]
) -> None:
    sim, client, server = node
    uid, container = _remove_one(sim, client)
    plain = run("inspect", uid, "-r", sim.endpoint)
    assert plain.returncode == 3, plain  # the runtime lists it no more
    found = run("inspect", uid, "--departed", "--server", server, "-r", sim.endpoint)
    assert found.returncode == 0, found
    item = json.loads(found.stdout)
    assert item["id"] == uid and item["departed_at"].endswith("Z")
    by_id = run("inspect", container, "--departed", "--server", server, "-r", sim.endpoint)
    assert by_id.returncode == 0, by_id
    assert json.loads(by_id.stdout)["departed_container"]["id"] == container
    table = run("inspect", uid, "--departed", "--server", server, "-r", sim.endpoint, "-o", "table")
    assert table.returncode == 0 and f"Departed: {item['departed_at']}" in table.stdout


def test_nothing_known_is_exit_3_and_an_unreachable_server_exit_1_naming_it(
    run: Runner, node: tuple[SimRuntime, Client, str]
) -> None:
    sim, _, server = node
    nobody = run("inspect", "no-such-uid", "--departed", "--server", server, "-r", sim.endpoint)
    assert nobody.returncode == 3 and "departed" in nobody.stderr
    dead = f"http://127.0.0.1:{free_port()}"
    unreachable = run("inspect", "no-such-uid", "--departed", "--server", dead, "-r", sim.endpoint)
    assert unreachable.returncode == 1 and dead in unreachable.stderr


def test_a_prefix_several_listed_or_departed_ids_share_exits_2_listing_them(
    run: Runner, node: tuple[SimRuntime, Client, str]
) -> None:
    """Issue 30 §2: the ambiguity rule of listed IDs holds for departed ones (exit 2, the
    candidates listed), here a listed and a departed ID of serve's (an App over a fake runtime,
    served by podcache's HTTP server on a real socket)."""
    sim = node[0]
    shared = "abcd1234"
    listed, departed = shared + "1" * 56, shared + "2" * 56
    runtime = AsyncFakeRuntime([_pod("uid-a", listed), _pod("uid-b", departed)])
    app = App(runtime, 60.0)
    with serving(app.respond) as served:
        client = Client(port=served.port)
        assert client.get("/pods").status == 200
        runtime.set_pods([_pod("uid-a", listed)])
        assert client.get("/pods?fresh=1").status == 200  # uid-b leaves
        server = f"http://127.0.0.1:{served.port}"
        one = run("inspect", departed[:12], "--departed", "--server", server, "-r", sim.endpoint)
        assert one.returncode == 0, one
        assert json.loads(one.stdout)["departed_container"]["id"].endswith(departed)
        both = run("inspect", shared, "--departed", "--server", server, "-r", sim.endpoint)
        assert both.returncode == 2, both
        assert listed in both.stderr and departed in both.stderr
        served.loop.run(app.aclose())


def _pod(uid: str, ident: str) -> Pod:
    return Pod(
        id=uid,
        name=uid,
        namespace="default",
        containers=[Container(id=ContainerID("containerd", ident), name="app")],
    )
