"""``podcache serve`` through a real containerd restart (issue 12 section 7).

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
