"""``podcache serve`` as a real process over the simulated runtime: every route, every error
status, read-your-writes under churn, ETags, the token rule, unix sockets and SIGTERM.

The simulated runtime runs in the test process (so tests change its pods and know the truth);
the server is a subprocess reached over real TCP loopback and unix sockets.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import stat
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from podcache.cri import CRIRuntime
from podcache.jsonview import pods_document
from podcache.serve.server import SHUTDOWN_GRACE
from podcache.sim import PodShape, SimRuntime
from tests.serve.conftest import Client, ServeProcess, free_port, run_serve

ServedFixture = tuple[ServeProcess, Client]


def all_ids(items: list[dict[str, object]]) -> list[str]:
    ids: list[str] = []
    for pod in items:
        for key in ("containers", "sandboxes"):
            for container in pod[key]:  # type: ignore[attr-defined]
                ids.append(container["id"])
    return ids


def check_error(reply: object, status: int) -> dict[str, Any]:
    """The reply has ``status`` and the JSON error body with the same status."""
    from tests.serve.conftest import Reply

    assert isinstance(reply, Reply)
    assert reply.status == status, reply
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["status"] == status
    assert isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in body["error"]
    return body  # type: ignore[no-any-return]


# -- the data ------------------------------------------------------------------------------------
def test_pods_are_exactly_the_runtimes_pods_in_the_shared_json_shape(
    sim: SimRuntime, served: ServedFixture
) -> None:
    _, client = served
    reply = client.get("/pods?fresh=1")
    assert reply.status == 200
    with CRIRuntime(sim.endpoint) as runtime:
        expected = pods_document(runtime.get_pods(False))["items"]
    body = reply.json()
    assert body["items"] == expected
    assert len(body["items"]) > 0
    assert set(body) == {"items", "revision", "cache_time", "age_seconds"}
    assert body["revision"] == int(reply.headers["x-podcache-revision"]) >= 1
    assert all("://" in ident for ident in all_ids(body["items"]))


def test_every_snapshot_answer_says_its_age_in_header_and_body(served: ServedFixture) -> None:
    _, client = served
    before = time.time()
    reply = client.get("/pods?fresh=1")
    body = reply.json()
    assert float(reply.headers["x-podcache-age"]) == pytest.approx(body["age_seconds"])
    assert 0 <= body["age_seconds"] < 5
    assert before - 0.01 <= body["cache_time"] <= time.time() + 0.01
    time.sleep(0.05)
    later = client.get("/pods").json()
    assert later["cache_time"] == body["cache_time"]
    assert later["age_seconds"] >= body["age_seconds"] + 0.04


def test_pod_by_uid_and_by_namespace_and_name(served: ServedFixture) -> None:
    _, client = served
    pod = client.get("/pods").json()["items"][0]
    by_uid = client.get(f"/pods/{pod['id']}")
    assert by_uid.status == 200
    assert by_uid.json()["pod"] == pod
    by_name = client.get(f"/namespaces/{pod['namespace']}/pods/{pod['name']}")
    assert by_name.status == 200
    assert by_name.json()["pod"] == pod
    assert set(by_name.json()) == {"pod", "cache_time", "age_seconds"}


def test_unknown_pods_are_404_with_the_snapshot_time(served: ServedFixture) -> None:
    _, client = served
    for target in ("/pods/no-such-uid", "/namespaces/default/pods/no-such-pod"):
        body = check_error(client.get(target), 404)
        assert body["cache_time"] > 0 and body["age_seconds"] >= 0


def test_pod_names_with_underscores_are_400(served: ServedFixture) -> None:
    _, client = served
    check_error(client.get("/namespaces/a_b/pods/c"), 400)


def test_container_by_full_id_encoded_or_not_bare_id_and_prefix(served: ServedFixture) -> None:
    _, client = served
    pod = client.get("/pods").json()["items"][0]
    container = pod["containers"][0]
    full = container["id"]
    bare = full.split("://", 1)[1]
    for ident in (urllib.parse.quote(full, safe=""), full, bare, bare[:12]):
        reply = client.get(f"/containers/{ident}")
        assert reply.status == 200, (ident, reply)
        assert reply.json()["container"] == container
        assert reply.json()["pod"] == pod
    sandbox = pod["sandboxes"][0]
    assert client.get(f"/containers/{sandbox['id']}").json()["container"] == sandbox


def test_container_lookup_errors(served: ServedFixture) -> None:
    _, client = served
    check_error(client.get("/containers/ffffffffffffffffffffff"), 404)
    check_error(client.get("/containers/other-runtime%3A%2F%2Fabcdef"), 404)
    check_error(client.get("/containers/abc"), 400)  # a prefix under 4 characters
    check_error(client.get("/containers/containerd%3A%2F%2F"), 400)  # empty id part


def test_an_ambiguous_container_prefix_is_409_listing_the_matches(
    sim: SimRuntime, served: ServedFixture
) -> None:
    _, client = served
    created: list[str] = []
    try:
        while True:  # add pods until two IDs share a 4-character prefix
            ids = sorted(
                i.split("://")[1] for i in all_ids(client.get("/pods?fresh=1").json()["items"])
            )
            shared = [a[:4] for a, b in itertools.pairwise(ids) if a[:4] == b[:4]]
            if shared:
                break
            for _ in range(20):
                created.append(sim.population.create_pod(PodShape.RUNNING)[0])
        body = check_error(client.get(f"/containers/{shared[0]}"), 409)
        assert shared[0] in str(body["error"]) and "ambiguous" in str(body["error"])
    finally:
        for uid in created:
            sim.population.remove_pod(uid)


# -- read-your-writes -----------------------------------------------------------------------------
def test_without_newer_than_a_long_period_serves_the_old_snapshot(
    sim: SimRuntime, served_polling: ServedFixture
) -> None:
    _, client = served_polling
    client.get("/pods?fresh=1")
    uid, _ = sim.population.create_pod(PodShape.RUNNING)
    try:
        assert client.get(f"/pods/{uid}").status == 404  # cached before the pod existed
        reply = client.get(f"/pods/{uid}?newer_than={time.time():.6f}")
        assert reply.status == 200
        assert client.get(f"/pods/{uid}").status == 200  # the refreshed snapshot is cached
    finally:
        sim.population.remove_pod(uid)


def test_the_newer_than_header_and_fresh_work_like_the_parameter(
    sim: SimRuntime, served_polling: ServedFixture
) -> None:
    _, client = served_polling
    client.get("/pods?fresh=1")
    uid, _ = sim.population.create_pod(PodShape.RUNNING)
    assert client.get(f"/pods/{uid}").status == 404
    assert client.get(f"/pods/{uid}", x_podcache_newer_than=f"{time.time():.6f}").status == 200
    sim.population.remove_pod(uid)
    assert client.get(f"/pods/{uid}").status == 200  # stale
    assert client.get(f"/pods/{uid}?fresh=1").status == 404


def test_newer_than_now_reflects_a_change_made_just_before_under_churn(
    sim: SimRuntime, served: ServedFixture
) -> None:
    _, client = served
    sim.churn = 100.0
    try:
        for round_ in range(20):
            uid, _ = sim.population.create_pod(PodShape.RUNNING)
            now = time.time()
            reply = client.get(f"/pods/{uid}?newer_than={now:.6f}")
            if reply.status == 404:  # only if churn removed it in between
                assert uid not in sim.population.pod_uids(), round_
            else:
                assert reply.status == 200, reply
                assert reply.json()["cache_time"] >= now - 0.001
            if uid in sim.population.pod_uids():
                sim.population.remove_pod(uid)
            now = time.time()
            reply = client.get(f"/pods/{uid}", x_podcache_newer_than=f"{now:.6f}")
            assert reply.status == 404, (round_, reply)
    finally:
        sim.churn = 0.0
        time.sleep(0.1)  # the churn thread may take one more tick at the old rate


# -- ETags ----------------------------------------------------------------------------------------
def test_etag_and_304_while_the_pods_are_unchanged(sim: SimRuntime, served: ServedFixture) -> None:
    _, client = served
    first = client.get("/pods?fresh=1")
    etag = first.headers["etag"]
    assert etag.startswith('W/"')
    same = client.get("/pods?fresh=1", if_none_match=etag)  # a new fetch, the same content
    assert same.status == 304
    assert same.body == b""
    assert same.headers["etag"] == etag
    assert "x-podcache-age" in same.headers
    assert client.get("/pods", if_none_match='"other", ' + etag).status == 304
    assert client.get("/pods", if_none_match="*").status == 304
    uid, _ = sim.population.create_pod(PodShape.RUNNING)
    try:
        changed = client.get("/pods?fresh=1", if_none_match=etag)
        assert changed.status == 200
        assert changed.headers["etag"] != etag
    finally:
        sim.population.remove_pod(uid)


def test_head_answers_the_get_headers_without_a_body(served: ServedFixture) -> None:
    _, client = served
    # serve subscribes to the runtime's events: a change made by an earlier test may still be
    # refreshing in; pair a GET and a HEAD of the same snapshot (same ETag).
    for _ in range(20):
        get = client.get("/pods")
        head = client.request("/pods", method="HEAD")
        if head.headers["etag"] == get.headers["etag"]:
            break
        time.sleep(0.05)
    assert head.status == 200
    assert head.body == b""
    assert head.headers["content-length"] == get.headers["content-length"]
    assert head.headers["etag"] == get.headers["etag"]


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_anything_but_get_and_head_is_405_with_allow(served: ServedFixture, method: str) -> None:
    _, client = served
    reply = client.request("/pods", method=method, body=b"{}")
    check_error(reply, 405)
    assert reply.headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize(
    "target",
    [
        "/pods?nope=1",
        "/pods?newer_than=soon",
        "/pods?newer_than=-1",
        "/pods?newer_than=nan",
        "/pods?newer_than=1&newer_than=2",
        "/pods?fresh=maybe",
        "/pods?label=",
        "/pods?label=a%20b=c",
        "/pods?namespace=",
        "/pods?namespace=%FF",
        "/pods/x%00y",
        "/healthz?verbose=1",
    ],
)
def test_bad_parameters_are_400(served: ServedFixture, target: str) -> None:
    _, client = served
    check_error(client.get(target), 400)


def test_a_bad_newer_than_header_is_400(served: ServedFixture) -> None:
    _, client = served
    check_error(client.get("/pods", x_podcache_newer_than="yesterday"), 400)


def test_unknown_routes_are_404(served: ServedFixture) -> None:
    _, client = served
    for target in ("/", "/pods/", "/pods/a/b", "/namespaces/a/pods", "/containers/", "/v1/pods"):
        check_error(client.get(target), 404)


def test_oversized_requests_are_414_and_431_in_json(served: ServedFixture) -> None:
    _, client = served
    check_error(client.get("/pods/" + "a" * 5000), 414)
    check_error(client.get("/pods?namespace=" + "a" * 5000), 414)
    check_error(client.request("/pods", headers=[(f"x-h{i}", "v") for i in range(70)]), 431)
    check_error(client.request("/pods", headers={"x-big": "v" * 10_000}), 431)


def test_requests_beyond_the_servers_own_limits_get_a_4xx_and_the_server_lives_on(
    served: ServedFixture,
) -> None:
    _, client = served
    answer = client.raw(b"GET /pods?" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 4"), answer[:100]
    answer = client.raw(
        b"GET /pods HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"v" * 100_000 + b"\r\n\r\n"
    )
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer[:100]
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
    assert client.raw(b"GET /pods HTTP/1.1\r\nHost: localhost\r\n" + many + b"\r\n")[:10] in (
        b"",
        b"HTTP/1.1 4",
    )
    assert client.raw(b"NOT HTTP\r\n\r\n")[:10] in (b"", b"HTTP/1.1 4")
    assert client.get("/healthz").status == 200


# -- health, metrics, the document ------------------------------------------------------------
def test_healthz_readyz_metrics_openapi(served: ServedFixture) -> None:
    _, client = served
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status == 200
    assert ready.json()["status"] == "ready"
    metrics = client.get("/metrics")
    assert metrics.status == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.body.decode()
    for name in (
        "podcache_cache_hits_total",
        "podcache_cache_misses_total",
        "podcache_cache_refreshes_total",
        "podcache_cache_refresh_errors_total",
        "podcache_refresh_duration_seconds_bucket",
        "podcache_snapshot_age_seconds",
        "podcache_pods ",
        "podcache_containers ",
        'podcache_http_requests_total{code="200",route="/healthz"}',
        'podcache_http_requests_total{code="404",route="/pods/{uid}"}',
    ):
        assert name in text, name
    document = client.get("/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert set(document["paths"]) == {
        "/pods",
        "/pods/{uid}",
        "/namespaces/{namespace}/pods/{name}",
        "/containers/{id}",
        "/ips/{ip}",
        "/pids/{pid}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    }


# -- a runtime that is down -----------------------------------------------------------------------
def test_a_runtime_that_is_down_is_503_with_its_message(tmp_socket_dir: Path) -> None:
    endpoint = f"unix://{tmp_socket_dir}/nothing.sock"
    port = free_port()
    with ServeProcess(["-r", endpoint, "--listen", f"127.0.0.1:{port}", "--timeout", "0.5"]):
        client = Client(port=port)
        for target in ("/pods", "/pods/x", "/containers/abcd", "/readyz"):
            reply = client.get(target)
            body = check_error(reply, 503)
            assert "nothing.sock" in str(body["error"]), body
            assert reply.headers["retry-after"] == "1"
        assert client.get("/healthz").status == 200
        metrics = client.get("/metrics").body.decode()
        assert "podcache_cache_refresh_errors_total 0.0" not in metrics


def test_a_runtime_that_goes_away_turns_answers_into_503(tmp_socket_dir: Path) -> None:
    port = free_port()
    runtime = SimRuntime(5, socket=str(tmp_socket_dir / "sim.sock")).start()
    try:
        args = ["-r", runtime.endpoint, "--listen", f"127.0.0.1:{port}", "--timeout", "0.5"]
        with ServeProcess([*args, "--cache-period", "200ms", "--max-stale", "0"]):
            client = Client(port=port)
            assert client.get("/pods?fresh=1").status == 200
            assert client.get("/readyz").status == 200
            runtime.stop()
            check_error(client.get("/pods?fresh=1"), 503)
            time.sleep(0.3)  # the runtime has not answered within the last period
            check_error(client.get("/readyz"), 503)
            check_error(client.get("/pods"), 503)
    finally:
        runtime.stop()


# -- unix sockets and SIGTERM ---------------------------------------------------------------------
def test_unix_socket_is_0600_serves_and_is_removed_on_sigterm(
    sim: SimRuntime, tmp_socket_dir: Path
) -> None:
    path = tmp_socket_dir / "podcache.sock"
    server = ServeProcess(["-r", sim.endpoint, "--listen", f"unix:{path}"]).start()
    try:
        mode = os.lstat(path).st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        client = Client(path=str(path))
        assert client.get("/pods").status == 200
        assert client.get("/healthz").json() == {"status": "ok"}
    finally:
        status = server.terminate()
    assert status == 0, server.stderr
    assert not path.exists()
    assert "Traceback" not in server.stderr


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"]
)
def test_each_ending_signal_removes_the_socket_and_the_simulations_directory(
    tmp_socket_dir: Path, signum: int
) -> None:
    path = tmp_socket_dir / "podcache.sock"
    server = ServeProcess(["--sim", "--sim-pods", "2", "--listen", f"unix:{path}"]).start()
    try:
        assert Client(path=str(path)).get("/healthz").status == 200
        found = re.search(r"at unix://(\S+)/sim\.sock", server.stderr)
        assert found is not None, server.stderr
        sim_dir = Path(found[1])
        assert sim_dir.is_dir()
    finally:
        assert server.process is not None
        server.process.send_signal(signum)
    assert server.wait_exit() == 0, server.stderr
    assert not path.exists()
    assert not sim_dir.exists()


def test_sim_without_churn_says_how_to_get_changes(tmp_socket_dir: Path) -> None:
    path = tmp_socket_dir / "podcache.sock"
    with ServeProcess(["--sim", "--listen", f"unix:{path}"]) as server:
        pass
    assert "churn 0/s: nothing changes; --sim-churn R replaces R pods a second" in server.stderr
    with ServeProcess(["--sim", "--sim-churn", "2", "--listen", f"unix:{path}"]) as churning:
        pass
    assert "churn 2/s" in churning.stderr and "nothing changes" not in churning.stderr


def test_sigterm_on_tcp_exits_0(sim: SimRuntime) -> None:
    port = free_port()
    server = ServeProcess(["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}"]).start()
    assert Client(port=port).get("/healthz").status == 200
    assert server.terminate() == 0, server.stderr
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_sigterm_with_an_idle_keep_alive_connection_open_exits_0_quickly(sim: SimRuntime) -> None:
    port = free_port()
    server = ServeProcess(["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}"]).start()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as idle:
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = idle.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
        assert b"\r\nconnection: close\r\n" not in answer.lower()  # kept alive
        started = time.monotonic()
        assert server.terminate() == 0, server.stderr
        assert time.monotonic() - started < SHUTDOWN_GRACE  # closed at once, not at the grace
        assert idle.recv(65536) == b""  # closed by the server, not left hanging
    assert "Traceback" not in server.stderr


def test_idle_timeout_closes_an_idle_keep_alive_connection(sim: SimRuntime) -> None:
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--idle-timeout", "1s"]
    with (
        ServeProcess(args),
        socket.create_connection(("127.0.0.1", port), timeout=10) as idle,
    ):
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert idle.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        started = time.monotonic()
        assert idle.recv(65536) == b""  # closed by the server
        assert time.monotonic() - started >= 0.9  # by the idle timer, never before it


def test_max_connections_answers_one_more_with_a_503(sim: SimRuntime) -> None:
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--max-connections", "1"]
    with (
        ServeProcess(args),
        socket.create_connection(("127.0.0.1", port), timeout=10) as held,
    ):
        held.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert held.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        reply = Client(port=port).get("/healthz")
        body = check_error(reply, 503)
        assert body["error"] == "the server has 1 connections: try again"
        assert reply.headers["connection"] == "close"


def test_a_stale_socket_is_replaced_and_a_live_one_refused(
    sim: SimRuntime, tmp_socket_dir: Path
) -> None:
    path = tmp_socket_dir / "podcache.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    with ServeProcess(["-r", sim.endpoint, "--listen", f"unix:{path}"]):
        assert Client(path=str(path)).get("/healthz").status == 200
        second = run_serve(["-r", sim.endpoint, "--listen", f"unix:{path}"])
        assert second.returncode == 1
        assert "another server is listening" in second.stderr
        assert Client(path=str(path)).get("/healthz").status == 200  # still ours


def test_a_port_in_use_is_a_clear_error(sim: SimRuntime, served: ServedFixture) -> None:
    _, client = served
    result = run_serve(["-r", sim.endpoint, "--listen", f"127.0.0.1:{client.port}"])
    assert result.returncode == 1
    assert "cannot listen on 127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr


def test_sim_flag_serves_a_simulation_and_says_so() -> None:
    port = free_port()
    with ServeProcess(["--sim", "--sim-pods", "7", "--listen", f"127.0.0.1:{port}"]) as server:
        found = re.search(r"SIMULATED runtime \(7 pods.*\) at (unix://\S+),", server.stderr)
        assert found, server.stderr
        with CRIRuntime(found[1]) as runtime:
            expected = pods_document(runtime.get_pods(False))["items"]
        assert Client(port=port).get("/pods?fresh=1").json()["items"] == expected


# -- the token rule -------------------------------------------------------------------------------
def test_listening_beyond_loopback_without_a_token_is_refused() -> None:
    result = run_serve(["--sim", "--listen", f"0.0.0.0:{free_port()}"])
    assert result.returncode == 2
    assert "--token-file" in result.stderr
    assert "refusing" in result.stderr


def test_with_a_token_every_route_but_healthz_needs_it(sim: SimRuntime, tmp_path: Path) -> None:
    token = "s3cret-token-0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"0.0.0.0:{port}", "--token-file", str(token_file)]
    with ServeProcess(args) as server:
        assert "bearer token required" in server.stderr
        client = Client(port=port)
        for target in ("/pods", "/readyz", "/metrics", "/openapi.json", "/containers/abcd"):
            reply = client.get(target)
            check_error(reply, 401)
            assert reply.headers["www-authenticate"].startswith("Bearer")
            check_error(client.get(target, authorization="Bearer wrong-token-0123456789"), 401)
            check_error(client.get(target, authorization=f"Basic {token}"), 401)
        assert client.get("/pods", authorization=f"Bearer {token}").status == 200
        assert client.get("/pods", authorization=f"bearer {token}").status == 200
        assert client.get("/healthz").status == 200
        document = client.get("/openapi.json", authorization=f"Bearer {token}").json()
        assert document["security"] == [{"bearer": []}]


# -- the Host header ------------------------------------------------------------------------------
def status_for_host(client: Client, *hosts: str) -> int:
    """The status of ``GET /healthz`` sent with these Host lines (none, one or several)."""
    lines = "".join(f"Host: {host}\r\n" for host in hosts)
    answer = client.raw(f"GET /healthz HTTP/1.1\r\n{lines}\r\n".encode())
    return int(answer.split(b" ", 2)[1])


def test_a_missing_or_repeated_host_is_400(served: ServedFixture) -> None:
    _, client = served
    assert status_for_host(client) == 400
    assert status_for_host(client, "localhost", "localhost") == 400
    assert status_for_host(client, "localhost") == 200


def test_without_a_token_only_hosts_naming_the_listener_are_served(
    served: ServedFixture,
) -> None:
    _, client = served
    port = client.port
    for host in ("localhost", "127.0.0.1", "[::1]", "LocalHost"):
        assert status_for_host(client, host) == 200, host
        assert status_for_host(client, f"{host}:{port}") == 200, host
    for host in ("evil.example", f"evil.example:{port}", "localhost:1", "127.0.0.1.nip.io", ""):
        assert status_for_host(client, host) == 421, host
    answer = client.raw(b"GET /pods HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\ncontent-type: application/json\r\n" in head
    assert b"does not name this server" in body and b'"status":421' in body


def test_allow_host_adds_names(sim: SimRuntime) -> None:
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}"]
    with ServeProcess([*args, "--allow-host", "podcache.local", "--allow-host", "Node-1"]):
        client = Client(port=port)
        for host in ("podcache.local", f"podcache.local:{port}", "node-1", "127.0.0.1"):
            assert status_for_host(client, host) == 200, host
        assert status_for_host(client, "other.local") == 421


def test_a_unix_socket_serves_any_host(sim: SimRuntime, tmp_socket_dir: Path) -> None:
    path = tmp_socket_dir / "podcache.sock"
    with ServeProcess(["-r", sim.endpoint, "--listen", f"unix:{path}"]):
        client = Client(path=str(path))
        assert status_for_host(client, "evil.example") == 200
        assert status_for_host(client) == 400  # but one Host there must be


def test_with_a_token_any_host_is_served(sim: SimRuntime, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-0123456789\n")
    token_file.chmod(0o600)
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--token-file", str(token_file)]
    with ServeProcess(args):
        assert status_for_host(Client(port=port), "evil.example") == 200  # /healthz: no token


# -- several listeners -----------------------------------------------------------------------------
def test_listen_twice_serves_a_unix_socket_and_a_port_with_their_own_host_rules(
    sim: SimRuntime, tmp_socket_dir: Path
) -> None:
    path = tmp_socket_dir / "podcache.sock"
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"unix:{path}", "--listen", f"127.0.0.1:{port}"]
    server = ServeProcess(args).start()
    try:
        unix, tcp = Client(path=str(path)), Client(port=port)
        assert status_for_host(unix, "evil.example") == 200  # a unix socket serves any Host
        assert status_for_host(tcp, "evil.example") == 421  # the port only its own names
        assert status_for_host(tcp, f"127.0.0.1:{port}") == 200
        first = unix.get("/pods").json()
        assert tcp.get("/pods").json()["revision"] == first["revision"]  # one cache
        metrics = tcp.get("/metrics").body.decode()
        # One cache: the listings both listeners' answers came from (the keeper may add one
        # per period, serve/keeper.py).
        refreshes = re.search(r"^podcache_cache_refreshes_total (\S+)$", metrics, re.MULTILINE)
        assert refreshes is not None and float(refreshes[1]) >= 1
        assert f"listening on unix:{path}, http://127.0.0.1:{port} " in server.stderr
    finally:
        status = server.terminate()
    assert status == 0, server.stderr
    assert not path.exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_listen_given_twice_the_same_is_a_usage_error(sim: SimRuntime) -> None:
    port = free_port()
    result = run_serve(["-r", sim.endpoint, *2 * ("--listen", f"127.0.0.1:{port}")])
    assert result.returncode == 2
    assert f"127.0.0.1:{port} is given twice" in result.stderr


def test_cri_listen_past_64_paths_is_a_usage_error(sim: SimRuntime, tmp_path: Path) -> None:
    paths = [str(tmp_path / f"{i}.sock") for i in range(65)]
    result = run_serve(["-r", sim.endpoint, *(a for p in paths for a in ("--cri-listen", p))])
    assert result.returncode == 2
    assert "--cri-listen" in result.stderr and "at most 64 paths" in result.stderr
    assert not any(os.path.exists(p) for p in paths)


def test_every_listener_beyond_loopback_needs_the_token(
    sim: SimRuntime, tmp_socket_dir: Path
) -> None:
    result = run_serve(
        ["-r", sim.endpoint, "--listen", f"unix:{tmp_socket_dir}/s.sock", "--listen", "0.0.0.0:1"]
    )
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0:1 without a token" in result.stderr


def test_a_listener_that_cannot_bind_stops_the_start_and_leaves_no_socket_behind(
    sim: SimRuntime, served: ServedFixture, tmp_socket_dir: Path
) -> None:
    _, client = served
    path = tmp_socket_dir / "podcache.sock"
    args = ["--listen", f"unix:{path}", "--listen", f"127.0.0.1:{client.port}"]  # the port's taken
    result = run_serve(["-r", sim.endpoint, *args])
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{client.port}" in result.stderr
    assert not path.exists()
