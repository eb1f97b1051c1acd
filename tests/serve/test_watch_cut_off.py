"""Every way the server ends a watch stream early is counted, by reason:
``podcache_watchers_cut_off_total{reason}`` with ``lagged``, ``unread``, ``budget`` (the global
``--max-buffered``) and ``stalled`` (unsent bytes stuck for ``--idle-timeout``). A client that
closes its stream is not cut off.

Real loopback sockets; the application over a fake runtime on podcache's HTTP server. The
``unread`` and ``lagged`` cases are in test_watch_stream.py, beside the bounds they test.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from podcache import AsyncFakeRuntime
from podcache.serve.app import App
from podcache.serve.watchstream import CUT_OFF_REASONS, WatchCounters
from tests.serve.conftest import Client
from tests.serve.test_http1 import Served, serving
from tests.unit.cache.drivers import make_pod

WAIT = 10.0  # most seconds to wait for a state the server must reach (never a speed bound)
BIG_NODE = [make_pod(n, containers=20) for n in range(200)]  # a first chunk of ~1 MB


@contextmanager
def app_on(http: dict[str, Any]) -> Iterator[tuple[Served, App]]:
    """The application over ``BIG_NODE`` on an HTTP server with the options ``http``."""
    app = App(AsyncFakeRuntime(BIG_NODE), 60.0, first_revision=0)
    with serving(app.respond, respond_now=app.respond_now, **http) as served:
        yield served, app
        served.loop.run(app.aclose())


def _non_reading_watch(port: int) -> socket.socket:
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel keeps little
    client.connect(("127.0.0.1", port))
    client.sendall(f"GET /pods?watch=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return client


def _cut_off(app: App, reason: str) -> None:
    counters = app.streams.counters
    deadline = time.monotonic() + WAIT
    while not counters.cut_off_by[reason]:
        assert time.monotonic() < deadline, f"no stream cut off for {reason}: {counters}"
        time.sleep(0.02)


def _metric(served: Served, reason: str) -> str:
    text = Client(port=served.port).get("/metrics").body.decode()
    lines = [
        line
        for line in text.splitlines()
        if line.startswith(f'podcache_watchers_cut_off_total{{reason="{reason}"}}')
    ]
    assert len(lines) == 1, text
    return lines[0].rsplit(" ", 1)[1]


def test_a_stream_reset_for_the_global_byte_budget_is_counted_as_budget() -> None:
    with app_on({"max_buffered": 64 * 1024}) as (served, app):
        client = _non_reading_watch(served.port)
        _cut_off(app, "budget")
        assert app.streams.counters.cut_off_by == {
            "lagged": 0,
            "unread": 0,
            "budget": 1,
            "stalled": 0,
        }
        assert _metric(served, "budget") == "1.0"
        assert app.streams.counters.open == 0
        client.close()


def test_a_stream_whose_unsent_bytes_stall_is_counted_as_stalled() -> None:
    with app_on({"idle_timeout": 0.5}) as (served, app):
        client = _non_reading_watch(served.port)
        _cut_off(app, "stalled")
        assert app.streams.counters.cut_off == 1
        assert _metric(served, "stalled") == "1.0"
        client.close()


def test_every_reason_is_in_the_metrics_from_the_start() -> None:
    with app_on({}) as (served, _app):
        for reason in CUT_OFF_REASONS:
            assert _metric(served, reason) == "0.0"


def test_an_unknown_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown cut-off reason 'bored'"):
        WatchCounters().count_cut_off("bored")
