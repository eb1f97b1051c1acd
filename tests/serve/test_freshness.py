"""``podcache serve``'s freshness options as a real process over the simulated runtime.

Forced refreshes are rate-limited (``--min-refresh-interval``), and a runtime that
goes away is answered from the last good snapshot for ``--max-stale``, marked stale, while
/readyz says not ready and requests for newer data get 503.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from podcache import AsyncFakeRuntime
from podcache.errors import RuntimeUnavailableError
from podcache.serve import App
from podcache.sim import SimRuntime
from tests.serve.conftest import (
    Client,
    ServeProcess,
    free_port,
    run_serve,
    settle_subscription,
)
from tests.serve.test_http1 import serving
from tests.serve.test_server import check_error

_CALLS = re.compile(r"^podcache_refresh_duration_seconds_count ([0-9.e+]+)$", re.MULTILINE)


def runtime_calls(client: Client) -> int:
    """Runtime calls the server has made (its refresh histogram counts every one)."""
    match = _CALLS.search(client.get("/metrics").body.decode())
    assert match is not None
    return int(float(match[1]))


def hammer_fresh(client: Client, seconds: float, threads: int) -> list[tuple[float, float]]:
    """``threads`` loopback clients asking ``/pods?fresh=1`` for ``seconds``: for each answer,
    (the client's unix time just before sending, the answer's cache_time)."""
    answers: list[tuple[float, float]] = []
    stop = time.monotonic() + seconds

    def one_client() -> None:
        while time.monotonic() < stop:
            arrival = time.time()
            reply = client.get("/pods?fresh=1")
            assert reply.status == 200, reply
            answers.append((arrival, reply.json()["cache_time"]))

    workers = [threading.Thread(target=one_client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return answers


def test_clients_hammering_fresh_cause_at_most_one_refresh_per_interval(
    sim: SimRuntime,
) -> None:
    port = free_port()
    interval, seconds = 0.2, 2.0
    args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
    with ServeProcess([*args, "--min-refresh-interval", "200ms"]):
        client = Client(port=port)
        client.get("/pods")
        settle_subscription(client)  # its own refresh (events are on) is not the hammering's
        before = runtime_calls(client)
        began = time.monotonic()
        answers = hammer_fresh(client, seconds, threads=16)
        calls = runtime_calls(client) - before
        lasted = time.monotonic() - began  # over ``seconds`` on a loaded machine
    assert len(answers) > 3 * calls  # many requests shared each refresh
    # One forced refresh per interval of the run as it lasted, and one more as it ended.
    assert 1 <= calls <= lasted / interval + 1
    # Every answer holds data fetched after its request was sent (cache_time has 6 decimals).
    late = [(arrival, cache_time) for arrival, cache_time in answers if cache_time < arrival - 1e-6]
    assert late == []


def test_a_fake_runtime_counts_at_most_one_call_per_interval_under_fresh_hammering() -> None:
    runtime = AsyncFakeRuntime(latency=0.002)
    interval, seconds = 0.2, 2.0
    app = App(runtime, 60.0, min_refresh_interval=interval)
    with serving(app.respond) as served:
        client = Client(port=served.port)
        assert client.get("/pods").status == 200
        before = runtime.calls
        answers = hammer_fresh(client, seconds, threads=16)
        calls = runtime.calls - before
    assert len(answers) > 3 * calls
    assert 1 <= calls <= seconds / interval + 1
    assert [a for a in answers if a[1] < a[0] - 1e-6] == []
    assert runtime.max_in_flight == 1


def test_runtime_gone_serves_stale_with_headers_and_readyz_503_until_it_is_back(
    tmp_socket_dir: Path,
) -> None:
    socket_path = str(tmp_socket_dir / "sim.sock")
    runtime = SimRuntime(5, socket=socket_path).start()
    port = free_port()
    args = ["-r", runtime.endpoint, "--listen", f"127.0.0.1:{port}", "--timeout", "0.5"]
    try:
        with ServeProcess([*args, "--cache-period", "200ms", "--max-stale", "30s"]):
            client = Client(port=port)
            good = client.get("/pods?fresh=1")
            assert good.status == 200 and "x-podcache-stale" not in good.headers
            assert client.get("/readyz").status == 200
            runtime.stop()
            time.sleep(0.3)  # past the period: only max_stale may answer now
            stale = client.get("/pods")
            assert stale.status == 200, stale
            assert stale.headers["x-podcache-stale"] == "true"
            assert float(stale.headers["x-podcache-age"]) > 0.2
            assert stale.json()["items"] == good.json()["items"]
            assert client.get("/pods/nope").headers["x-podcache-stale"] == "true"
            document = client.get("/openapi.json").json()
            assert (
                "X-Podcache-Stale"
                in document["paths"]["/pods"]["get"]["responses"]["200"]["headers"]
            )
            ready = client.get("/readyz")
            check_error(ready, 503)
            assert ready.headers["x-podcache-stale"] == "true"
            assert client.get("/healthz").status == 200
            # Asking for newer data is never answered with old data.
            check_error(client.get("/pods?fresh=1"), 503)
            check_error(client.get(f"/pods?newer_than={time.time() + 60:.3f}"), 503)
            check_error(client.get("/pods", x_podcache_newer_than=f"{time.time():.6f}"), 503)
            runtime = SimRuntime(5, socket=socket_path).start()  # the runtime is back
            fresh = client.get("/pods?fresh=1")
            assert fresh.status == 200, fresh
            assert "x-podcache-stale" not in fresh.headers
            assert client.get("/readyz").status == 200
            assert "x-podcache-stale" not in client.get("/pods").headers
    finally:
        runtime.stop()


def test_max_stale_ends_after_its_duration(tmp_socket_dir: Path) -> None:
    runtime = SimRuntime(5, socket=str(tmp_socket_dir / "sim.sock")).start()
    port = free_port()
    args = ["-r", runtime.endpoint, "--listen", f"127.0.0.1:{port}", "--timeout", "0.5"]
    try:
        with ServeProcess([*args, "--cache-period", "100ms", "--max-stale", "2s"]):
            client = Client(port=port)
            assert client.get("/pods?fresh=1").status == 200
            runtime.stop()
            # Order, not timing: 200s (stale once past the period), then 503 for good.
            replies = [client.get("/pods")]
            deadline = time.monotonic() + 60
            while replies[-1].status == 200:
                assert time.monotonic() < deadline, "max-stale never ended"
                time.sleep(0.02)
                replies.append(client.get("/pods"))
            check_error(replies[-1], 503)
            served = replies[:-1]
            assert served, "nothing was served from the last snapshot"  # 2 s of requests
            for reply in served:
                if float(reply.headers["x-podcache-age"]) > 0.1:
                    assert reply.headers["x-podcache-stale"] == "true"
            assert max(float(r.headers["x-podcache-age"]) for r in served) > 0.1
            check_error(client.get("/pods"), 503)
    finally:
        runtime.stop()


def test_refresh_ahead_longer_than_the_period_is_a_usage_error() -> None:
    result = run_serve(["--sim", "--cache-period", "1s", "--refresh-ahead", "2s"])
    assert result.returncode == 2
    assert "--refresh-ahead" in result.stderr and "--cache-period" in result.stderr


async def test_period_zero_answers_are_fresh_and_stale_only_from_max_stale() -> None:
    runtime = AsyncFakeRuntime()
    app = App(runtime, 0, max_stale=30.0)
    for _ in range(3):
        answer = await app.respond("GET", "/pods", "", [])
        assert answer.status == 200
        assert ("x-podcache-stale", "true") not in answer.headers
        assert (await app.respond("GET", "/readyz", "", [])).status == 200
    runtime.error = RuntimeUnavailableError("unix:///x.sock", "gone")
    stale = await app.respond("GET", "/pods", "", [])
    assert stale.status == 200 and ("x-podcache-stale", "true") in stale.headers
    assert (await app.respond("GET", "/readyz", "", [])).status == 503
    assert (await app.respond("GET", "/pods", "fresh=1", [])).status == 503
    runtime.error = None
    answer = await app.respond("GET", "/pods", "", [])
    assert answer.status == 200 and ("x-podcache-stale", "true") not in answer.headers
    await app.aclose()


def test_list_calls_failing_with_unavailable_are_answered_stale_then_fresh_again(
    tmp_socket_dir: Path,
) -> None:
    runtime = SimRuntime(5, socket=str(tmp_socket_dir / "sim.sock")).start()
    port = free_port()
    args = ["-r", runtime.endpoint, "--listen", f"127.0.0.1:{port}", "--timeout", "0.5"]
    try:
        with ServeProcess([*args, "--cache-period", "200ms"]):  # the default --max-stale 30s
            client = Client(port=port)
            assert client.get("/pods?fresh=1").status == 200
            runtime.faults.fail_rate = 1.0  # every list call: UNAVAILABLE
            time.sleep(0.3)
            stale = client.get("/pods")
            assert stale.status == 200 and stale.headers["x-podcache-stale"] == "true"
            assert "injected failure" in check_error(client.get("/readyz"), 503)["error"]
            check_error(client.get("/pods?fresh=1"), 503)
            runtime.faults.fail_rate = 0.0
            fresh = client.get("/pods?fresh=1")
            assert fresh.status == 200 and "x-podcache-stale" not in fresh.headers
    finally:
        runtime.stop()
