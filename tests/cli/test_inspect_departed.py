"""``podcache inspect ID --departed``: a pod the runtime no longer lists, asked of the node's
``podcache serve`` (a real one, over the same simulated runtime, on real sockets), which says
when it left (docs/architecture.md §3 rule 12)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def trickling_server(every: float, lasting: float) -> Iterator[str]:
    """A real HTTP server on loopback that reads a request and then sends its answer's head one
    byte every ``every`` seconds for ``lasting`` seconds, then hangs up: each read gets a
    byte long before a per-read timeout, but the answer takes ``lasting``."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            end = time.monotonic() + lasting
            while time.monotonic() < end and not stop.wait(every):
                try:
                    conn.sendall(b"a")
                except OSError:
                    return  # the client gave up

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_timeout_bounds_the_whole_command_not_each_read(run: Runner) -> None:
    """A server sending a byte every 0.2 s for 20 s, asked with --timeout 1.
    With a per-read timeout the command waits the 20 s and fails for the hang-up; with the
    command's timeout it ends with the timeout's error. The outcome is asserted, not the time
    it took."""
    with SimRuntime(3, seed=1) as sim, trickling_server(0.2, 20.0) as server:
        result = run(
            "inspect",
            "no-such-uid",
            "--departed",
            "--server",
            server,
            "-r",
            sim.endpoint,
            "--timeout",
            "1",
        )
    assert result.returncode == 1, result
    assert f"podcache serve at {server} did not answer within 1 s" in result.stderr, result


def test_a_prefix_several_listed_or_departed_ids_share_exits_2_listing_them(
    run: Runner, node: tuple[SimRuntime, Client, str]
) -> None:
    """The ambiguity rule of listed IDs holds for departed ones (exit 2, the
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
