"""``GET /pods?watch=1`` over real sockets: chunked framing parsed byte by byte, the first
ADDED lines against ``/pods``, bookmarks, ``since``, 410 before and during a stream, filters,
the token rule, metrics, a non-reading watcher cut off, and SIGTERM ending streams cleanly.

In-process tests run the application on podcache's HTTP server in a loop thread over a fake
runtime the test changes; the process tests run ``podcache serve`` over a simulated runtime.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from podcache import AsyncFakeRuntime, AsyncRuntimeCache, FakeRuntime, Pod
from podcache.cri import CRIRuntime
from podcache.errors import RuntimeUnavailableError
from podcache.jsonview import pod_to_json
from podcache.serve.app import App
from podcache.serve.watchstream import WatchRequest, WatchStreams
from podcache.sim import SimRuntime
from tests.serve.conftest import Client, ServeProcess, free_port
from tests.serve.test_http1 import Served, serving
from tests.unit.cache.drivers import make_pod

NDJSON = "application/x-ndjson"


class Stream:
    """A raw-socket watch: the head parsed, then the chunked body read strictly (size line,
    data, CRLF) and split into JSON lines."""

    def __init__(
        self,
        port: int,
        target: str,
        headers: tuple[tuple[str, str], ...] = (),
        *,
        rcvbuf: int | None = None,
    ) -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        host = f"127.0.0.1:{port}"  # a TCP listener without a token serves only its own names
        self.sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
        self._raw = b""
        head = self._until(b"\r\n\r\n")  # then the status: tests check it
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        self._text = b""
        self.ended = False

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self._raw += data

    def _until(self, marker: bytes) -> bytes:
        while marker not in self._raw:
            self._fill()
        found, _, self._raw = self._raw.partition(marker)
        return found

    def _exactly(self, size: int) -> bytes:
        while len(self._raw) < size:
            self._fill()
        data, self._raw = self._raw[:size], self._raw[size:]
        return data

    def body(self) -> bytes:
        """A plain (content-length) body."""
        return self._exactly(int(self.headers["content-length"]))

    def chunk(self) -> bytes:
        """The next chunk's data (b"" for the last chunk)."""
        assert self.status == 200, f"not a stream: {self.status} {self._raw[:300]!r}"
        size_line = self._until(b"\r\n")
        size = int(size_line, 16)
        assert size_line == b"%x" % size, size_line  # lower-case hex, no extensions
        data = self._exactly(size)
        assert self._exactly(2) == b"\r\n"
        if size == 0:
            self.ended = True
        return data

    def line(self) -> dict[str, Any]:
        """The next JSON line (lines end with a newline; chunks hold whole lines)."""
        while b"\n" not in self._text:
            data = self.chunk()
            if not data:
                raise EOFError("the stream ended")
            self._text += data
        line, _, self._text = self._text.partition(b"\n")
        item: dict[str, Any] = json.loads(line)
        return item

    def until(self, kind: str) -> list[dict[str, Any]]:
        """Lines up to and including the next one of type ``kind``."""
        seen = [self.line()]
        while seen[-1]["type"] != kind:
            seen.append(self.line())
        return seen

    def close(self) -> None:
        self.sock.close()


def _state(lines: list[dict[str, Any]], state: dict[str, Any] | None = None) -> dict[str, Any]:
    state = {} if state is None else state
    for item in lines:
        if item["type"] in ("ADDED", "MODIFIED"):
            state[item["object"]["id"]] = item["object"]
        elif item["type"] == "DELETED":
            del state[item["object"]["id"]]
    return state


# -- in process, over a fake runtime -----------------------------------------------------------


@contextmanager
def app_served(pods: list[Pod], **options: Any) -> Iterator[tuple[Served, App, AsyncFakeRuntime]]:
    fake = AsyncFakeRuntime(pods)
    options.setdefault("first_revision", 0)  # revisions 1, 2... (serve's start from the clock)
    app = App(fake, 0.05, **options)
    with serving(app.respond, respond_now=app.respond_now) as served:
        yield served, app, fake
        served.loop.run(app.aclose())


def test_list_then_watch_from_its_revision() -> None:
    with app_served([make_pod(1), make_pod(2)]) as (served, _app, fake):
        client = Client(port=served.port)
        listed = client.get("/pods")
        revision = int(listed.headers["x-podcache-revision"])
        assert listed.json()["revision"] == revision == 1
        stream = Stream(served.port, f"/pods?watch=1&since={revision}")
        assert stream.status == 200
        assert stream.headers["content-type"] == NDJSON
        assert stream.headers["transfer-encoding"] == "chunked"
        assert stream.line() == {"type": "BOOKMARK", "revision": 1}  # opened with since
        fake.set_pods([make_pod(2), make_pod(3)])  # the refresher finds it: nobody polls
        lines = stream.until("BOOKMARK")
        assert lines[-1] == {"type": "BOOKMARK", "revision": 2}
        state = _state(lines, {p["id"]: p for p in listed.json()["items"]})
        assert state == {p.id: pod_to_json(p) for p in (make_pod(2), make_pod(3))}
        assert [item["revision"] for item in lines] == [2, 2, 2]
        assert client.get("/pods").headers["x-podcache-revision"] == "2"
        stream.close()


def test_watch_without_since_starts_with_every_pod_then_a_bookmark() -> None:
    with app_served([make_pod(n) for n in range(5)]) as (served, _app, _fake):
        stream = Stream(served.port, "/pods?watch=1")
        lines = stream.until("BOOKMARK")
        assert {item["type"] for item in lines[:-1]} == {"ADDED"}
        assert _state(lines) == {
            p["id"]: p for p in Client(port=served.port).get("/pods").json()["items"]
        }
        assert lines[-1]["revision"] == int(stream.headers["x-podcache-revision"]) == 1
        stream.close()


def test_bookmarks_come_at_least_every_interval() -> None:
    with app_served([make_pod(1)], bookmark_interval=0.2) as (served, _, _):
        assert Client(port=served.port).get("/pods").headers["x-podcache-revision"] == "1"
        stream = Stream(served.port, "/pods?watch=1&since=1")
        # Nothing changes: only the bookmark timer can send these lines (without it the read
        # would wait for the socket's 10 s timeout and fail).
        marks = [stream.line() for _ in range(4)]
        assert marks == [{"type": "BOOKMARK", "revision": 1}] * 4
        stream.close()


@pytest.mark.parametrize("since", ["5", "99999999"])
def test_a_since_the_cache_never_reached_is_410_in_json(since: str) -> None:
    with app_served([make_pod(1)]) as (served, _app, _fake):
        reply = Client(port=served.port).get(f"/pods?watch=1&since={since}")
        assert reply.status == 410
        assert reply.headers["content-type"] == "application/json"
        body = reply.json()
        assert body["status"] == 410 and f"revision {since}" in body["error"]


@pytest.mark.parametrize(
    "query",
    ["watch=1&since=-1", "watch=1&since=x", "watch=1&fresh=1", "watch=2", "since=1.5"],
)
def test_bad_watch_parameters_are_400(query: str) -> None:
    with app_served([make_pod(1)]) as (served, _app, _fake):
        assert Client(port=served.port).get(f"/pods?{query}").status == 400


def test_a_filtered_watch_sees_pods_enter_and_leave_its_view() -> None:
    web = Pod(id="w", name="web", namespace="a", labels={"app": "web"})
    with app_served([web, make_pod(1)]) as (served, _app, fake):
        stream = Stream(served.port, "/pods?watch=1&namespace=a&label=app=web")
        first = stream.until("BOOKMARK")
        assert [(i["type"], i["object"]["id"]) for i in first[:-1]] == [("ADDED", "w")]
        fake.set_pods([Pod(id="w", name="web", namespace="a", labels={"app": "db"}), make_pod(1)])
        left = stream.until("BOOKMARK")
        assert [(i["type"], i["object"]["id"]) for i in left[:-1]] == [("DELETED", "w")]
        stream.close()


def test_streams_are_counted_in_the_metrics() -> None:
    with app_served([make_pod(1)]) as (served, _app, _fake):
        stream = Stream(served.port, "/pods?watch=1")
        stream.until("BOOKMARK")
        text = Client(port=served.port).get("/metrics").body.decode()
        assert "podcache_watchers 1.0" in text
        assert "podcache_watch_changes_sent_total 1.0" in text
        stream.close()
        deadline = time.monotonic() + 5
        while "podcache_watchers 0.0" not in Client(port=served.port).get("/metrics").body.decode():
            assert time.monotonic() < deadline, "the closed stream is still counted"
            time.sleep(0.05)


def test_a_watcher_that_does_not_read_is_cut_off() -> None:
    big = [make_pod(n, containers=20) for n in range(200)]
    with app_served(big) as (served, app, fake):
        app.streams.max_unsent = 256 * 1024
        Client(port=served.port).get("/pods")
        stream = Stream(served.port, "/pods?watch=1&since=1", rcvbuf=4096)
        for round_ in range(2, 40):  # every pod changes, every refresh: lines pile up unread
            fake.set_pods([make_pod(n + 1000 * round_, containers=20) for n in range(200)])
            time.sleep(0.06)
            if app.streams.counters.cut_off:
                break
        assert app.streams.counters.cut_off == app.streams.counters.cut_off_by["unread"] == 1
        assert app.streams.counters.open == 0
        stream.sock.settimeout(2)
        with pytest.raises((ConnectionResetError, EOFError, AssertionError, ValueError)):
            while True:
                stream.line()
        stream.close()


def test_a_watcher_too_far_behind_gets_an_error_line_then_the_end() -> None:
    """The library's max_lag, seen through the stream: an ERROR line (410) ends it."""

    async def scenario() -> list[bytes]:
        fake = FakeRuntime([make_pod(1)])
        cache = AsyncRuntimeCache(fake, 1e9, max_lag=2)
        await cache.get_pods()
        streams = WatchStreams(cache)
        response = await streams.open(WatchRequest("/pods", 1, None, ()))
        assert response.stream is not None
        chunks = [await anext(response.stream)]
        for n in range(2, 6):
            fake.set_pods([make_pod(n)])
            await cache.force_update_if_older(float("inf") * 0 + time.monotonic())
        chunks += [chunk async for chunk in response.stream]
        assert streams.counters.cut_off == streams.counters.cut_off_by["lagged"] == 1
        assert streams.counters.open == 0
        await cache.aclose()
        return chunks

    chunks = asyncio.run(scenario())
    assert json.loads(chunks[0]) == {"type": "BOOKMARK", "revision": 1}
    last = json.loads(chunks[-1])
    assert last["type"] == "ERROR" and last["code"] == 410 and "max_lag 2" in last["message"]
    assert len(chunks) == 2


# -- podcache serve, a real process ------------------------------------------------------------


def test_sigterm_ends_open_streams_cleanly() -> None:
    with SimRuntime(10, seed=5) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "100ms"]
        server = ServeProcess(args).start()
        streams = [Stream(port, "/pods?watch=1") for _ in range(3)]
        for stream in streams:
            stream.until("BOOKMARK")
        assert server.terminate() == 0, server.stderr
        for stream in streams:
            while not stream.ended:
                stream.chunk()  # every chunk well formed, then the last chunk
            stream.sock.settimeout(5)
            assert stream.sock.recv(1) == b""  # then the server closes
            stream.close()
        assert "Traceback" not in server.stderr


def test_the_token_rule_applies_to_streams(tmp_path: Any) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token-for-watching\n")
    token.chmod(0o600)
    with SimRuntime(3, seed=5) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--token-file", str(token)]
        with ServeProcess(args):
            assert Client(port=port).get("/pods?watch=1").status == 401
            auth = (("Authorization", "Bearer s3cret-token-for-watching"),)
            stream = Stream(port, "/pods?watch=1", auth)
            assert stream.status == 200 and len(stream.until("BOOKMARK")) == 4
            stream.close()


def test_a_served_stream_follows_the_runtime() -> None:
    with SimRuntime(6, seed=9) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "100ms"]
        with ServeProcess(args), CRIRuntime(sim.endpoint) as runtime:
            stream = Stream(port, "/pods?watch=1")
            state = _state(stream.until("BOOKMARK"))
            sim.population.remove_pod(sim.population.pod_uids()[0])
            sim.population.create_pod()
            truth = {pod.id: pod_to_json(pod) for pod in runtime.get_pods(False)}
            deadline = time.monotonic() + 10
            while state != truth:
                assert time.monotonic() < deadline, "the stream never caught up"
                state = _state(stream.until("BOOKMARK"), state)
            stream.close()


def test_revisions_start_from_the_clock_so_a_restart_never_reuses_one() -> None:
    """A since from before a restart is older than the new server's first revision: 410."""
    with app_served([make_pod(1)], first_revision=None) as (first, _, _):
        before = int(Client(port=first.port).get("/pods").headers["x-podcache-revision"])
    assert abs(before - time.time() * 1000) < 60_000
    time.sleep(0.01)
    with app_served([make_pod(2)], first_revision=None) as (second, _, _):
        client = Client(port=second.port)
        after = int(client.get("/pods").headers["x-podcache-revision"])
        assert after > before
        assert client.get(f"/pods?watch=1&since={before}").status == 410


def test_head_of_a_watch_sends_the_head_and_closes_the_watch() -> None:
    with app_served([make_pod(1)]) as (served, app, _):
        reply = Client(port=served.port).request("/pods?watch=1", method="HEAD")
        assert reply.status == 200 and reply.body == b""
        assert reply.headers["content-type"] == NDJSON
        deadline = time.monotonic() + 5
        while app.streams.counters.open or app.cache._core.changes.cursors:
            assert time.monotonic() < deadline, "the HEAD's watch stays open"
            time.sleep(0.02)


def test_a_first_chunk_larger_than_the_unsent_bound_still_reaches_a_reading_client() -> None:
    big = [make_pod(n, containers=20) for n in range(300)]  # about 1.5 MB of ADDED lines
    with app_served(big) as (served, app, _):
        app.streams.max_unsent = 64 * 1024
        stream = Stream(served.port, "/pods?watch=1", rcvbuf=16 * 1024)
        lines = stream.until("BOOKMARK")
        assert len(lines) == 301 and app.streams.counters.cut_off == 0
        stream.close()


def test_watch_with_all_follows_the_not_ready_pods_that_the_default_drops() -> None:
    """?all=1 equals the runtime's get_pods(True); a pod that stops is MODIFIED in its stream
    and DELETED in the default one; a since of one view is 410 in the other."""
    own_sim = SimRuntime(8, seed=3).start()
    port = free_port()
    args = ["-r", own_sim.endpoint, "--listen", f"127.0.0.1:{port}", "--events", "off"]
    with ServeProcess([*args, "--cache-period", "100ms"]), CRIRuntime(own_sim.endpoint) as cri:
        client = Client(port=port)
        listed = client.get("/pods?all=1&fresh=1").json()
        assert listed["items"] == [pod_to_json(p) for p in cri.get_pods(True)]
        assert [i["id"] for i in client.get("/pods?fresh=1").json()["items"]] == [
            p.id for p in cri.get_pods(False)
        ]
        everything = Stream(port, f"/pods?watch=1&all=1&since={listed['revision']}")
        default = Stream(port, "/pods?watch=1")
        try:
            state = _state(default.until("BOOKMARK"))
            everything.until("BOOKMARK")
            uid = next(iter(state))
            own_sim.population.stop_pod(uid)
            change = everything.line()
            assert (change["type"], change["object"]["id"]) == ("MODIFIED", uid)
            # A poll between the listing's two calls (sandboxes, then containers) sees the
            # containers exited beside a sandbox still ready: one MODIFIED before the DELETED.
            lines = default.until("DELETED")
            assert [(i["type"], i["object"]["id"]) for i in lines][-1] == ("DELETED", uid)
            assert [(i["type"], i["object"]["id"]) for i in lines[:-1]] in ([], [("MODIFIED", uid)])
        finally:
            everything.close()
            default.close()
        cut = client.get(f"/pods?watch=1&since={listed['revision']}")  # the other view's
        assert cut.status == 410, cut
    own_sim.stop()


async def test_a_watch_whose_first_listing_fails_is_503_naming_the_runtime() -> None:
    failing = RuntimeUnavailableError("unix:///run/x.sock", "connection refused")
    cache = AsyncRuntimeCache(AsyncFakeRuntime([make_pod(1)], error=failing), 10.0)
    response = await WatchStreams(cache).open(WatchRequest("/pods", None, None, ()))
    assert (response.status, response.stream) == (503, None)
    assert ("retry-after", "1") in response.headers
    assert json.loads(response.body) == {"error": str(failing), "status": 503}
    await cache.close()


async def test_a_watch_whose_first_listing_takes_longer_than_its_wait_is_503() -> None:
    cache = AsyncRuntimeCache(AsyncFakeRuntime([make_pod(1)], latency=0.5), 10.0)
    streams = WatchStreams(cache, wait=0.05)
    response = await streams.open(WatchRequest("/pods", None, None, ()))
    assert (response.status, response.stream) == (503, None)
    assert ("retry-after", "1") in response.headers
    message = "the container runtime did not answer within 0.05 s"
    assert json.loads(response.body) == {"error": message, "status": 503}
    await cache.close()
