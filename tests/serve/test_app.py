"""The application in-process, through its ASGI interface, over AsyncFakeRuntime with fake clocks:
routing, validation, freshness arithmetic, ETags, auth, metrics and the catch-all 500.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache import AsyncFakeRuntime, Container, ContainerID, ContainerState, Pod
from podcache.errors import RuntimeUnavailableError
from podcache.jsonview import pod_to_json
from podcache.serve import App
from podcache.serve.asgi import asgi_app
from podcache.serve.auth import BearerAuth
from podcache.serve.response import Response

WALL_OFFSET = 1_700_000_000.0
TOKEN = b"0123456789abcdef-token"


class Clocks:
    """A monotonic clock and a wall clock WALL_OFFSET ahead of it, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now + WALL_OFFSET


def container(ident: str, name: str = "", *, runtime: str = "containerd") -> Container:
    return Container(id=ContainerID(runtime, ident), name=name, state=ContainerState.RUNNING)


def pod(uid: str, name: str, namespace: str, *ids: str, **labels: str) -> Pod:
    return Pod(
        id=uid,
        name=name,
        namespace=namespace,
        created_at=1_700_000_000_000_000_000,
        containers=[container(i, f"c-{i[:4]}") for i in ids],
        sandboxes=[container("sb" + uid.ljust(10, "0"))],
        labels=labels,
    )


PODS = [
    pod("uid-web", "web-1", "default", "aaaa1111", "aaaa2222", app="web", tier="frontend"),
    pod("uid-api", "api-1", "default", "bbbb1111", app="api", tier="backend"),
    pod("uid-db", "db-0", "data", "cccc1111", app="db"),
]


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


ENTRY = {"point": "server"}


@pytest.fixture(autouse=True, params=["server", "asgi"])
def entry_point(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test runs through both ways in: as podcache's server calls the app
    (``respond_now``, awaiting the coroutine it returns when it cannot answer at once) and
    through ASGI (``respond``)."""
    ENTRY["point"] = request.param
    yield
    ENTRY["point"] = "server"


async def call(
    app: App,
    path: str,
    query: str = "",
    *,
    method: str = "GET",
    headers: Sequence[tuple[str, str]] = (),
) -> Reply:
    """One request through the entry point of this run (``entry_point``)."""
    if ENTRY["point"] == "server":
        return await call_server(app, path, query, method=method, headers=headers)
    return await call_asgi(app, path, query, method=method, headers=headers)


async def call_server(
    app: App,
    path: str,
    query: str = "",
    *,
    method: str = "GET",
    headers: Sequence[tuple[str, str]] = (),
) -> Reply:
    """One request as ``http1`` makes it: ``respond_now``, else what it returned awaited."""
    items = [(k.lower(), v) for k, v in headers]
    answer = app.respond_now(method, path, query, items)
    assert type(answer) is Response or inspect.iscoroutine(answer), answer  # never None
    response = answer if isinstance(answer, Response) else await answer
    assert response.stream is None
    response_headers = dict(response.headers)
    assert len(response_headers) == len(response.headers)
    if response.status != 304:
        response_headers["content-length"] = str(len(response.body) + len(response.suffix))
    body = b"" if method == "HEAD" else response.body + response.suffix
    return Reply(response.status, response_headers, body)


async def call_asgi(
    app: App,
    path: str,
    query: str = "",
    *,
    method: str = "GET",
    headers: Sequence[tuple[str, str]] = (),
) -> Reply:
    """One request through the ASGI interface."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
    }
    await asgi_app(app)(scope, receive, send)
    start, body = sent
    assert start["type"] == "http.response.start"
    response_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return Reply(start["status"], response_headers, body["body"])


Make = Callable[..., App]


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def runtime() -> AsyncFakeRuntime:
    return AsyncFakeRuntime(PODS)


@pytest.fixture
def make(runtime: AsyncFakeRuntime, clocks: Clocks) -> Make:
    def build(period: float = 10.0, **kwargs: Any) -> App:
        return App(runtime, period, clock=clocks.monotonic, wall=clocks.wall, **kwargs)

    return build


def error(reply: Reply, status: int) -> str:
    assert reply.status == status, reply.body
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["status"] == status
    return str(body["error"])


# -- routing and shapes ------------------------------------------------------------------------
async def test_pods_body_is_items_cache_time_and_age(make: Make, clocks: Clocks) -> None:
    app = make()
    first = await call(app, "/pods")
    clocks.now += 1.5
    reply = await call(app, "/pods")
    body = reply.json()
    assert body["items"] == [pod_to_json(p) for p in PODS]
    assert body["cache_time"] == pytest.approx(100.0 + WALL_OFFSET)
    assert body["age_seconds"] == pytest.approx(1.5)
    assert reply.headers["x-podcache-age"] == "1.500"
    assert reply.headers["etag"] == first.headers["etag"]


async def test_each_snapshot_is_serialised_once(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make()
    await call(app, "/pods")
    view = app.memo
    assert view is not None
    head = view.items_head
    for _ in range(3):
        await call(app, "/pods")
    assert app.memo is view and view.items_head is head
    clocks.now += 11
    runtime.set_pods(PODS[:1])
    reply = await call(app, "/pods")
    assert app.memo is not view
    assert [item["id"] for item in reply.json()["items"]] == ["uid-web"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("namespace=default", ["uid-web", "uid-api"]),
        ("namespace=data", ["uid-db"]),
        ("namespace=none", []),
        ("label=app=web", ["uid-web"]),
        ("label=app==api", ["uid-api"]),
        ("label=tier", ["uid-web", "uid-api"]),
        ("label=tier&label=app=api", ["uid-api"]),
        ("label=tier&namespace=data", []),
        ("namespace=default&label=app%3Dweb", ["uid-web"]),
    ],
)
async def test_pod_filters(make: Make, query: str, expected: list[str]) -> None:
    reply = await call(make(), "/pods", query)
    assert reply.status == 200
    assert [item["id"] for item in reply.json()["items"]] == expected


async def test_lookups(make: Make) -> None:
    app = make()
    assert (await call(app, "/pods/uid-api")).json()["pod"] == pod_to_json(PODS[1])
    assert (await call(app, "/namespaces/data/pods/db-0")).json()["pod"] == pod_to_json(PODS[2])
    for ident in ("containerd://bbbb1111", "bbbb1111", "bbbb"):
        body = (await call(app, f"/containers/{ident}")).json()
        assert body["container"]["id"] == "containerd://bbbb1111"
        assert body["pod"] == pod_to_json(PODS[1])
    body = (await call(app, "/containers/sbuid-db")).json()  # a sandbox, by prefix
    assert body["container"]["id"] == "containerd://sbuid-db0000"


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/pods/nope", 404, "no pod with UID"),
        ("/namespaces/default/pods/nope", 404, "no pod 'nope'"),
        ("/containers/dddd", 404, "no container"),
        ("/containers/docker://bbbb1111", 404, "no container"),
        ("/containers/aaaa", 409, "ambiguous"),
        ("/containers/aa", 400, "too short"),
        ("/containers/containerd://", 400, "empty"),
        ("/namespaces/a_b/pods/x", 400, "'_'"),
        ("/nope", 404, "no such route"),
        ("/pods/", 404, "no such route"),
        ("/pods/a/b", 404, "no such route"),
        ("/namespaces/x/pods", 404, "no such route"),
        ("/namespaces/x/pod/y", 404, "no such route"),
        ("/pods/a\x00b", 400, "control"),
        ("/pods/\ufffd", 400, "UTF-8"),
    ],
)
async def test_errors_are_json_with_their_status(
    make: Make, path: str, status: int, words: str
) -> None:
    assert words in error(await call(make(), path), status)


async def test_a_404_from_a_snapshot_carries_its_time(make: Make) -> None:
    body = (await call(make(), "/pods/nope")).json()
    assert body["cache_time"] == pytest.approx(100.0 + WALL_OFFSET)
    assert body["age_seconds"] == 0


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("bogus=1", "unknown query parameter 'bogus'"),
        ("namespace=a&namespace=b", "more than once"),
        ("newer_than=abc", "unix seconds"),
        ("newer_than=inf", "unix seconds"),
        ("newer_than=1e400", "from 0 to"),
        ("newer_than=1_000", "unix seconds"),
        ("newer_than=-5", "from 0 to"),
        ("newer_than=2e12", "from 0 to"),
        ("fresh=2", "1 or 0"),
        ("label=bad key", "label selector"),
        ("label=-x=y", "label selector"),
        ("label=a=-b", "label selector"),
        ("namespace=%ZZ%FF", "UTF-8"),
        ("namespace=%01", "control"),
        ("&".join(f"label=k{i}" for i in range(17)), "more than 16 label"),
        ("&".join(f"label=k{i % 9}" for i in range(16)) + "&fresh=0" * 17, "more than 32"),
    ],
)
async def test_bad_queries_are_400(make: Make, query: str, words: str) -> None:
    assert words in error(await call(make(), "/pods", query), 400)


async def test_bad_queries_do_not_reach_the_runtime(make: Make, runtime: AsyncFakeRuntime) -> None:
    await call(make(), "/pods", "newer_than=x")
    assert runtime.calls == 0


async def test_sizes_are_bounded(make: Make) -> None:
    app = make()
    error(await call(app, "/pods/" + "x" * 3000), 414)
    error(await call(app, "/pods", "namespace=" + "x" * 3000), 414)
    error(await call(app, "/pods", headers=[(f"x-{i}", "1") for i in range(65)]), 431)
    error(await call(app, "/pods", headers=[("x-big", "v" * 9000)]), 431)
    assert (await call(app, "/pods", headers=[(f"x-{i}", "1") for i in range(60)])).status == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
async def test_only_get_and_head(make: Make, method: str) -> None:
    reply = await call(make(), "/pods", method=method)
    error(reply, 405)
    assert reply.headers["allow"] == "GET, HEAD"


async def test_a_refused_method_is_counted_under_its_route(make: Make) -> None:
    app = make()
    for path in ("/pods", "/pods/abc", "/pids/1", "/nowhere"):
        error(await call(app, path, method="POST"), 405)
    text = (await call(app, "/metrics")).body.decode()
    for route in ("/pods", "/pods/{uid}", "/pids/{pid}", "unmatched"):
        assert f'podcache_http_requests_total{{code="405",route="{route}"}} 1.0' in text, text


async def test_head_has_the_length_and_no_body(make: Make) -> None:
    app = make()
    get = await call(app, "/pods")
    head = await call(app, "/pods", method="HEAD")
    assert head.status == 200 and head.body == b""
    assert head.headers["content-length"] == str(len(get.body))


# -- freshness ---------------------------------------------------------------------------------
async def test_newer_than_maps_wall_time_onto_the_cache_clock(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make(60.0)
    await call(app, "/pods")  # filled at monotonic 100
    runtime.set_pods(PODS[:1])
    clocks.now = 105.0
    old = await call(app, "/pods", f"newer_than={WALL_OFFSET + 100.0}")  # not newer: cached
    assert len(old.json()["items"]) == 3 and runtime.calls == 1
    new = await call(app, "/pods", f"newer_than={WALL_OFFSET + 100.5}")
    assert len(new.json()["items"]) == 1 and runtime.calls == 2
    assert new.json()["cache_time"] == pytest.approx(105.0 + WALL_OFFSET)
    assert new.json()["age_seconds"] == 0


async def test_the_header_and_fresh_force_a_refresh_too(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make(60.0)
    await call(app, "/pods")
    clocks.now += 1
    header = [("X-Podcache-Newer-Than", str(WALL_OFFSET + 100.5))]
    await call(app, "/pods/uid-web", headers=header)
    assert runtime.calls == 2
    clocks.now += 1
    await call(app, "/containers/aaaa1111", "fresh=1")
    assert runtime.calls == 3
    await call(app, "/containers/aaaa1111", "fresh=0")
    assert runtime.calls == 3


async def test_the_later_of_header_and_parameter_wins(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make(60.0)
    await call(app, "/pods")
    clocks.now += 1
    header = [("x-podcache-newer-than", str(WALL_OFFSET + 100.5))]
    await call(app, "/pods", f"newer_than={WALL_OFFSET + 50}", headers=header)
    assert runtime.calls == 2


async def test_a_future_newer_than_counts_as_now(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make(60.0)
    await call(app, "/pods")
    clocks.now += 1
    reply = await call(app, "/pods", f"newer_than={WALL_OFFSET + 10_000}")  # no hang: one refresh
    assert reply.status == 200 and runtime.calls == 2
    assert reply.json()["cache_time"] == pytest.approx(101.0 + WALL_OFFSET)


async def test_runtime_errors_are_503_with_the_message(
    make: Make, runtime: AsyncFakeRuntime
) -> None:
    runtime.error = RuntimeUnavailableError("unix:///run/x.sock", "connection refused")
    app = make()
    for path in ("/pods", "/pods/x", "/readyz"):
        reply = await call(app, path)
        assert "unix:///run/x.sock" in error(reply, 503)
        assert reply.headers["retry-after"] == "1"
    assert (await call(app, "/healthz")).status == 200


async def test_a_runtime_that_hangs_is_503_after_the_wait(
    make: Make, runtime: AsyncFakeRuntime
) -> None:
    runtime.block()
    app = make(wait=0.05)
    assert "within 0.05 s" in error(await call(app, "/pods"), 503)
    runtime.release()


async def test_unexpected_failures_are_a_bare_500_and_logged(
    make: Make, runtime: AsyncFakeRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    runtime.error = RuntimeError("secret internal detail")
    with caplog.at_level(logging.ERROR, logger="podcache.serve"):
        reply = await call(make(), "/pods")
    message = error(reply, 500)
    assert "secret" not in message and "Traceback" not in reply.body.decode()
    assert "secret internal detail" in caplog.text


# -- ETags -------------------------------------------------------------------------------------
async def test_304_while_content_is_unchanged_even_across_refreshes(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make(1.0)
    etag = (await call(app, "/pods")).headers["etag"]
    clocks.now += 5
    reply = await call(app, "/pods", headers=[("if-none-match", etag)])
    assert reply.status == 304 and reply.body == b"" and runtime.calls == 2
    assert reply.headers["etag"] == etag
    assert (await call(app, "/pods/uid-db", headers=[("if-none-match", etag)])).status == 304
    runtime.set_pods(PODS[1:])
    clocks.now += 5
    changed = await call(app, "/pods", headers=[("if-none-match", etag)])
    assert changed.status == 200 and changed.headers["etag"] != etag
    missing = await call(app, "/pods/uid-web", headers=[("if-none-match", "*")])
    assert missing.status == 404


# -- auth --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer wrong", 401),
        ("Bearer " + TOKEN.decode() + "x", 401),
        ("Basic " + TOKEN.decode(), 401),
        ("Bearer " + TOKEN.decode(), 200),
        ("bearer  " + TOKEN.decode() + " ", 200),
        ("Bearer \u00e9" + TOKEN.decode(), 401),
    ],
)
async def test_bearer_token(make: Make, authorization: str | None, status: int) -> None:
    app = make(auth=BearerAuth(TOKEN))
    headers = [] if authorization is None else [("authorization", authorization)]
    for path in ("/pods", "/metrics", "/openapi.json", "/readyz"):
        reply = await call(app, path, headers=headers)
        assert reply.status == status
        if status == 401:
            assert reply.headers["www-authenticate"] == 'Bearer realm="podcache"'
    assert (await call(app, "/healthz")).status == 200


async def test_a_repeated_authorization_header_is_400(make: Make) -> None:
    app = make(auth=BearerAuth(TOKEN))
    headers = [("authorization", "Bearer " + TOKEN.decode())] * 2
    error(await call(app, "/pods", headers=headers), 400)


# -- health and metrics ------------------------------------------------------------------------
async def test_readyz_reports_the_snapshot_and_refreshes_when_it_is_old(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make(2.0)
    reply = await call(app, "/readyz")
    assert reply.json()["status"] == "ready" and runtime.calls == 1
    clocks.now += 3
    runtime.error = RuntimeUnavailableError("unix:///x", "gone")
    error(await call(app, "/readyz"), 503)


async def test_readyz_is_not_ready_on_a_stale_snapshot_even_after_a_ready_answer(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make(2.0)
    assert (await call(app, "/readyz")).status == 200
    assert (await call(app, "/readyz")).status == 200  # the same snapshot, still fresh
    clocks.now += 3
    runtime.error = RuntimeUnavailableError("unix:///x", "gone")
    reply = await call(app, "/readyz")
    assert "stale" in error(reply, 503)
    assert reply.headers["x-podcache-stale"] == "true"
    stale = await call(app, "/pods")  # the pods are still served, marked stale
    assert stale.status == 200 and stale.headers["x-podcache-stale"] == "true"


async def test_metrics_count_requests_by_route_and_code(
    make: Make, runtime: AsyncFakeRuntime
) -> None:
    app = make()
    await call(app, "/pods")
    await call(app, "/pods")
    await call(app, "/pods/nope")
    await call(app, "/containers/aaaa1111")
    await call(app, "/nowhere")
    text = (await call(app, "/metrics")).body.decode()
    assert 'podcache_http_requests_total{code="200",route="/pods"} 2.0' in text
    assert 'podcache_http_requests_total{code="404",route="/pods/{uid}"} 1.0' in text
    assert 'podcache_http_requests_total{code="200",route="/containers/{id}"} 1.0' in text
    assert 'podcache_http_requests_total{code="404",route="unmatched"} 1.0' in text
    assert "podcache_cache_refreshes_total 1.0" in text
    assert "podcache_cache_hits_total 3.0" in text
    assert "podcache_cache_misses_total 1.0" in text
    assert "podcache_pods 3.0" in text
    assert "podcache_containers 4.0" in text
    assert "podcache_refresh_duration_seconds_count 1.0" in text
    assert "podcache_snapshot_age_seconds 0.0" in text


# -- the response memo and the replay rule (App.respond_now) ---------------------------------
REPEATED = ["/pods", "/containers/aaaa1111", "/containers/bbbb", "/pods/uid-db", "/pods/nope"]


@pytest.mark.parametrize("path", REPEATED)
async def test_a_repeated_request_gets_the_same_answer_with_a_fresh_age(
    make: Make, clocks: Clocks, path: str
) -> None:
    app, fresh = make(), make()
    assert await fresh.warm() is None  # both caches filled at the same instant
    first = await call(app, path)
    assert app.memo is not None and path in app.memo.answers
    clocks.now += 0.25
    again = await call(app, path)
    reference = await call(fresh, path)  # answered the long way, at the same instant
    assert (again.status, again.headers, again.body) == (
        reference.status,
        reference.headers,
        reference.body,
    )
    assert again.headers["x-podcache-age"] == "0.250" != first.headers["x-podcache-age"]


async def test_a_replay_skips_routing_and_parsing(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make()
    assert (await call_server(app, "/pods", "namespace=data")).status == 200

    def no_routing(path: str) -> Any:
        raise AssertionError("routed")

    monkeypatch.setattr(app.router, "find", no_routing)
    response = app.respond_now("GET", "/pods", "namespace=data", [("host", "x")])
    assert isinstance(response, Response) and response.status == 200
    # If-None-Match is not replayed: the full path routes it (and fails here, as a 500).
    assert (
        await call_server(app, "/pods", "namespace=data", headers=[("if-none-match", "*")])
    ).status == 500


async def test_errors_that_are_not_snapshot_answers_are_not_remembered(make: Make) -> None:
    app = make()
    for path in ("/containers/aaaa", "/containers/abc", "/nowhere", "/healthz", "/metrics"):
        await call(app, path)
    assert app.memo is not None and app.memo.answers == {}


async def test_answers_to_freshness_requests_are_not_remembered(make: Make) -> None:
    app = make()
    await call(app, "/pods", "fresh=1")
    await call(app, "/pods/uid-db", f"newer_than={WALL_OFFSET}")
    assert app.memo is not None and app.memo.answers == {}


@pytest.mark.parametrize(
    ("path", "query"),
    [("/pods", "fresh=1"), ("/pods/uid-db", f"newer_than={WALL_OFFSET + 1e6}"), ("/readyz", "")],
)
async def test_a_request_that_waits_is_checked_and_parsed_once(
    make: Make, clocks: Clocks, monkeypatch: pytest.MonkeyPatch, path: str, query: str
) -> None:
    app = make(2.0)
    assert (await call(app, "/pods")).status == 200
    clocks.now += 3  # past the period: every route waits for a refresh
    begun: list[str] = []
    begin = app._begin

    def counted(method: str, path: str, *args: Any) -> Any:
        begun.append(path)
        return begin(method, path, *args)

    monkeypatch.setattr(app, "_begin", counted)
    assert (await call(app, path, query)).status == 200
    assert begun == [path]


async def test_a_new_snapshot_is_not_answered_from_the_old_one(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make()
    assert (await call(app, "/containers/cccc1111")).status == 200
    clocks.now += 11  # the cache period ends
    runtime.set_pods(PODS[:1])
    assert (await call(app, "/containers/cccc1111")).status == 404
    assert (await call(app, "/pods")).json()["items"] == [pod_to_json(PODS[0])]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([("If-None-Match", "*")], 304),
        ([("X-Podcache-Newer-Than", "0"), ("x-podcache-newer-than", "0")], 400),
        ([("X-Many", "x")] * 65, 431),
        ([("X-Big", "x" * 8200)], 431),
    ],
    ids=["If-None-Match", "a repeated newer-than", "too many fields", "too many bytes"],
)
async def test_requests_with_headers_that_matter_take_the_full_path(
    make: Make, headers: list[tuple[str, str]], status: int
) -> None:
    app = make()
    await call(app, "/pods")
    assert (await call(app, "/pods", headers=headers)).status == status


async def test_newer_than_still_refreshes_a_repeated_request(
    make: Make, runtime: AsyncFakeRuntime, clocks: Clocks
) -> None:
    app = make()
    await call(app, "/pods")
    clocks.now += 1
    await call(app, "/pods", headers=[("X-Podcache-Newer-Than", str(clocks.wall()))])
    clocks.now += 1
    await call(app, "/pods", "fresh=1")
    assert runtime.calls == 3


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        ([("Authorization", "Bearer " + TOKEN.decode())], 200),
        ([], 401),
        ([("Authorization", "Bearer wrong-token-0123456789")], 401),
        ([("Authorization", "Bearer " + TOKEN.decode())] * 2, 400),
    ],
    ids=["the token", "none", "a wrong one", "repeated"],
)
async def test_with_a_token_a_remembered_answer_is_still_checked(
    make: Make, authorization: list[tuple[str, str]], status: int
) -> None:
    app = make(auth=BearerAuth(TOKEN))
    good = [("Authorization", "Bearer " + TOKEN.decode())]
    assert (await call(app, "/pods/uid-db", headers=good)).status == 200
    assert app.memo is not None and "/pods/uid-db" in app.memo.answers
    assert (await call(app, "/pods/uid-db", headers=authorization)).status == status


async def test_remembered_answers_are_bounded(make: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("podcache.serve.snapshot.MEMO_LIMIT", 3)
    app = make()
    for i in range(7):
        await call(app, f"/pods/missing-{i}")
        assert app.memo is not None and 1 <= len(app.memo.answers) <= 3
    text = (await call(app, "/metrics")).body.decode()
    assert 'podcache_http_requests_total{code="404",route="/pods/{uid}"} 7.0' in text


TARGETS = [
    ("/pods", ""),
    ("/pods", "namespace=default"),
    ("/pods", "label=app=web"),
    ("/pods", "fresh=1"),
    ("/pods", "bogus=1"),
    ("/pods/uid-db", ""),
    ("/pods/nope", ""),
    ("/containers/aaaa", ""),
    ("/containers/bbbb", ""),
    ("/namespaces/data/pods/db-0", ""),
    ("/readyz", ""),
    ("/healthz", ""),
    ("/nowhere", ""),
]
HEADER_SETS = [
    [],
    [("Authorization", "Bearer " + TOKEN.decode())],
    [("Authorization", "Bearer nope-nope-nope-nope")],
    [("If-None-Match", "*")],
    [("X-A", "1")] * 65,
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    requests=st.lists(
        st.tuples(
            st.sampled_from(TARGETS),
            st.sampled_from(HEADER_SETS),
            st.sampled_from(["GET", "HEAD", "POST"]),
            st.sampled_from([0.0, 0.0, 4.0, 12.0]),
            st.sampled_from([None, None, "fail", "heal"]),
        ),
        max_size=12,
    ),
    token=st.booleans(),
)
async def test_replays_answer_exactly_as_the_full_path(
    requests: list[tuple[tuple[str, str], list[tuple[str, str]], str, float, str | None]],
    token: bool,
) -> None:
    """Model: the same App with its memo emptied before every request (so every answer is
    built the long way). Both see the same runtime and clocks, and the runtime fails and
    recovers (stale answers); the memo may change nothing but speed."""
    clocks = Clocks()
    runtime = AsyncFakeRuntime(PODS)
    auth = BearerAuth(TOKEN) if token else None
    # The clocks move only by hand: a forced refresh held for min_refresh_interval would wait
    # out the real DEFAULT_WAIT, so both start theirs at once.
    app, model = (
        App(
            runtime,
            10.0,
            clock=clocks.monotonic,
            wall=clocks.wall,
            auth=auth,
            min_refresh_interval=0,
        )
        for _ in range(2)
    )
    for (path, query), headers, method, advance, runtime_change in requests:
        clocks.now += advance
        if runtime_change is not None:  # failing: stale answers within max_stale, then 503
            failing = RuntimeUnavailableError("unix:///x", "gone")
            runtime.error = failing if runtime_change == "fail" else None
        got = await call_server(app, path, query, method=method, headers=headers)
        if model.memo is not None:
            model.memo.answers.clear()
        expected = await call_server(model, path, query, method=method, headers=headers)
        assert (got.status, got.body) == (expected.status, expected.body)
        got.headers.pop("x-podcache-age", None)
        expected.headers.pop("x-podcache-age", None)
        assert got.headers == expected.headers


async def test_repeated_requests_are_counted_under_their_route(make: Make) -> None:
    app = make()
    for _ in range(3):
        await call(app, "/containers/aaaa1111")
    text = (await call(app, "/metrics")).body.decode()
    assert 'podcache_http_requests_total{code="200",route="/containers/{id}"} 3.0' in text


async def test_the_asgi_lifespan_is_acknowledged(make: Make) -> None:
    app = make()
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await asgi_app(app)({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
