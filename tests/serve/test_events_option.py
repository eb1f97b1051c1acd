"""``podcache serve --events auto|on|off`` over the simulated runtime: the subscription and its
numbers in /metrics, and ``on`` refusing a runtime without container events."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from podcache.sim import PodShape, SimRuntime
from tests.serve.conftest import Client, ServeProcess, free_port, run_serve, settle_subscription


def metric(client: Client, name: str) -> float:
    text = client.get("/metrics").body.decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def test_auto_subscribes_and_a_change_shows_without_the_period() -> None:
    with SimRuntime(10, seed=5) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
        with ServeProcess(args) as server:
            client = Client(port=port)
            settle_subscription(client)
            assert "events auto" in server.stderr
            before = {p["id"] for p in client.get("/pods").json()["items"]}
            uid, _ = sim.population.create_pod(PodShape.RUNNING)
            deadline = time.monotonic() + 5
            while uid not in {p["id"] for p in client.get("/pods").json()["items"]}:
                assert time.monotonic() < deadline, "the new pod never showed"
                time.sleep(0.01)
            assert uid not in before
            assert metric(client, "podcache_events_received_total") >= 1
            assert metric(client, "podcache_event_refreshes_total") >= 1
            assert metric(client, "podcache_event_resubscriptions_total") == 0
            sim.cut_event_streams()
            deadline = time.monotonic() + 5
            while metric(client, "podcache_event_resubscriptions_total") < 1:
                assert time.monotonic() < deadline, "never resubscribed"
                time.sleep(0.01)
            assert metric(client, 'podcache_events_state{state="subscribed"}') == 1.0


def test_off_never_subscribes() -> None:
    with SimRuntime(5, seed=5) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--events", "off"]
        with ServeProcess(args):
            client = Client(port=port)
            client.get("/pods")
            assert metric(client, 'podcache_events_state{state="off"}') == 1.0
            assert sim.event_subscribers == 0


def sandbox_listings(sim: SimRuntime) -> int:
    calls = sim.calls()
    return calls["ListPodSandbox"] + calls["StreamPodSandboxes"]


NO_EVENTS = [
    pytest.param({"unimplemented": {"GetContainerEvents"}}, "UNIMPLEMENTED", id="unimplemented"),
    pytest.param(
        {"flavor": "crio", "pod_events": False}, "enable_pod_events = false", id="crio-no-events"
    ),
]
"""Runtimes that send no events: containerd before 1.7 (UNIMPLEMENTED), and CRI-O by default
(a stream that ends at once with OK and no event)."""


@pytest.mark.parametrize(("runtime", "said"), NO_EVENTS)
def test_auto_over_a_runtime_without_events_polls_and_says_unsupported_once(
    runtime: dict[str, Any], said: str
) -> None:
    with SimRuntime(5, seed=5, **runtime) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "50ms"]
        with ServeProcess(args) as server:
            client = Client(port=port)
            deadline = time.monotonic() + 5
            while metric(client, 'podcache_events_state{state="unsupported"}') != 1.0:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            calls = sim.event_calls
            failures = metric(client, "podcache_event_stream_failures_total")
            listed = sandbox_listings(sim)
            while sandbox_listings(sim) < listed + 10:  # ten periods polled
                assert client.get("/pods").status == 200
                time.sleep(0.02)
            assert sim.event_calls == calls  # no resubscription loop
            assert metric(client, 'podcache_events_state{state="unsupported"}') == 1.0
            assert metric(client, "podcache_event_stream_failures_total") == failures
        warnings = [
            line for line in server.stderr.splitlines() if "sends no container events" in line
        ]
        assert len(warnings) == 1 and said in warnings[0], server.stderr


@pytest.mark.parametrize(("runtime", "said"), NO_EVENTS)
def test_on_refuses_a_runtime_without_events(runtime: dict[str, Any], said: str) -> None:
    with SimRuntime(5, seed=5, **runtime) as sim:
        listen = f"127.0.0.1:{free_port()}"
        done = run_serve(["-r", sim.endpoint, "--listen", listen, "--events", "on"])
    assert done.returncode == 1
    assert "--events on" in done.stderr and said in done.stderr
    assert sim.endpoint in done.stderr


@pytest.mark.parametrize("cri_listen", [False, True], ids=["plain", "cri-listen"])
def test_both_views_follow_one_upstream_stream(tmp_socket_dir: Path, cri_listen: bool) -> None:
    """The default view's cache and the all view's (``?all=1``) share one GetContainerEvents
    stream to the runtime, with or without --cri-listen: containerd 1.7 hands each event to
    one of its subscribers, so two streams would each miss some (docs/architecture.md §7)."""
    with SimRuntime(5, seed=5) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
        args += ["--log-level", "info"]
        if cri_listen:
            args += ["--cri-listen", str(tmp_socket_dir / "cri.sock")]
        with ServeProcess(args) as server:
            client = Client(port=port)
            settle_subscription(client)
            assert client.get("/pods?all=1").status == 200  # the all view, built by now
            deadline = time.monotonic() + 30
            while "(?all=1 view): subscribed" not in server.stderr:
                assert time.monotonic() < deadline, server.stderr
                time.sleep(0.02)
            assert (sim.event_calls, sim.event_subscribers) == (1, 1)
            uid, _ = sim.population.create_pod(PodShape.RUNNING)
            for target in ("/pods", "/pods?all=1"):  # each view sees it by the shared events
                while uid not in {p["id"] for p in client.get(target).json()["items"]}:
                    assert time.monotonic() < deadline, f"{target} never showed the new pod"
                    time.sleep(0.01)
