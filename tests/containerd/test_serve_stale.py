"""``podcache serve`` through a real containerd restart.

While containerd is SIGKILLed, /pods keeps answering 200 from the last good snapshot, marked
``X-Podcache-Stale: true`` with its age, /readyz answers 503, and a request for newer data
(``?fresh=1``) gets 503; once containerd is back, fresh data is answered again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.containerd.conftest import Containerd
from tests.containerd.harness import CRIHarness, SandboxRecord
from tests.serve.conftest import Client, ServeProcess, free_port

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(120)]

PERIOD = 0.2


@pytest.fixture
def one_pod(cri_harness: CRIHarness) -> Iterator[SandboxRecord]:
    sandbox = cri_harness.run_pod("stale-0", "serve", labels={"app": "stale"})
    yield sandbox
    cri_harness.remove_all([sandbox.id])


def _uids(reply_json: dict[str, list[dict[str, str]]]) -> set[str]:
    return {pod["id"] for pod in reply_json["items"]}


def test_serve_answers_stale_while_containerd_is_killed_and_fresh_once_it_is_back(
    containerd: Containerd, one_pod: SandboxRecord
) -> None:
    port = free_port()
    args = ["-r", containerd.endpoint, "--listen", f"127.0.0.1:{port}", "--timeout", "1s"]
    with ServeProcess([*args, "--cache-period", f"{PERIOD}s", "--max-stale", "30s"]) as server:
        client = Client(port=port)
        good = client.get("/pods?fresh=1")
        assert good.status == 200, good
        assert one_pod.uid in _uids(good.json())
        assert "x-podcache-stale" not in good.headers
        containerd.kill()
        try:
            time.sleep(PERIOD + 0.1)  # the snapshot is past its period
            stale = client.get("/pods")
            assert stale.status == 200, stale
            assert stale.headers["x-podcache-stale"] == "true"
            assert float(stale.headers["x-podcache-age"]) > PERIOD
            assert _uids(stale.json()) == _uids(good.json())
            ready = client.get("/readyz")
            assert ready.status == 503, ready
            assert containerd.socket_path in ready.json()["error"]
            fresh = client.get("/pods?fresh=1")
            assert fresh.status == 503, fresh
            assert client.get("/healthz").status == 200
        finally:
            containerd.start()
        back = client.get("/pods?fresh=1")
        assert back.status == 200, back
        assert "x-podcache-stale" not in back.headers
        assert one_pod.uid in _uids(back.json())
        assert client.get("/readyz").status == 200
    assert "Traceback" not in server.stderr, server.stderr


IDLE_PERIOD = 0.2
IDLE_MAX_STALE = 2.0


def _metric(client: Client, name: str) -> float | None:
    """The value of an unlabelled metric in /metrics (None when absent); /metrics reads no
    snapshot: scraping it is not a reader."""
    for line in client.get("/metrics").body.decode().splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


@pytest.mark.parametrize("containerd", ["2.1"], indirect=True)
def test_an_idle_serve_answers_stale_through_a_restart_as_a_busy_one_does(
    containerd: Containerd, cri_harness: CRIHarness
) -> None:
    """Nobody reads for longer than period + max-stale while events relist a pod
    torn down in the kubelet's order; containerd is then SIGKILLed: /pods still answers the
    current content, marked stale, with an age within the bound (before: 503)."""
    staying = cri_harness.run_pod("idle-stays", "serve", labels={"app": "idle"})
    leaving = cri_harness.run_pod("idle-leaves", "serve", labels={"app": "idle"})
    container = cri_harness.create_container(leaving, "app")
    port = free_port()
    args = ["-r", containerd.endpoint, "--listen", f"127.0.0.1:{port}", "--timeout", "1s"]
    limit = IDLE_PERIOD + IDLE_MAX_STALE
    try:
        with ServeProcess(
            [*args, "--cache-period", f"{IDLE_PERIOD}s", "--max-stale", f"{IDLE_MAX_STALE}s"]
        ) as server:
            client = Client(port=port)
            good = client.get("/pods?fresh=1")
            assert {staying.uid, leaving.uid} <= _uids(good.json())
            last_read = time.time()
            # Nobody reads from here on (/metrics is no reader); the teardown's events relist.
            torn_down = time.time()
            cri_harness.stop_container(container)
            cri_harness.stop_pod(leaving)
            cri_harness.remove_container(container)
            cri_harness.remove_pod(leaving)
            while time.time() < last_read + limit + IDLE_PERIOD:
                time.sleep(0.05)
            listed_at = _metric(client, "podcache_last_full_listing_timestamp_seconds")
            assert listed_at is not None and listed_at > last_read  # listed while idle
            event_at = _metric(client, "podcache_last_event_timestamp_seconds")
            assert event_at is not None and event_at >= torn_down
            containerd.kill()
            try:
                stale = client.get("/pods")
                while "x-podcache-stale" not in stale.headers:  # until past its period
                    assert stale.status == 200, stale
                    time.sleep(0.02)
                    stale = client.get("/pods")
                assert stale.status == 200, stale
                assert stale.headers["x-podcache-stale"] == "true"
                assert float(stale.headers["x-podcache-age"]) <= limit
                assert staying.uid in _uids(stale.json())
                assert leaving.uid not in _uids(stale.json())
                assert client.get("/readyz").status == 503
                age = _metric(client, "podcache_snapshot_age_seconds")
                assert age is not None and age <= limit
            finally:
                containerd.start()
            back = client.get("/pods?fresh=1")
            assert back.status == 200 and "x-podcache-stale" not in back.headers
        assert "Traceback" not in server.stderr, server.stderr
    finally:
        cri_harness.remove_all([staying.id])
