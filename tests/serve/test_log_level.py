"""What a real ``podcache serve`` tells its operator on stderr about the event subscription:
a lost stream and its return are one WARNING line each, naming the method, the
endpoint and the cause, at the default ``--log-level``; ``info`` adds the first subscription;
every failure is counted in ``/metrics``."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from podcache.sim import SimRuntime
from tests.serve.conftest import Client, ServeProcess, free_port, run_serve, settle_subscription

WAIT = 30.0


def metric(client: Client, name: str) -> float:
    text = client.get("/metrics").body.decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def until(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def warnings(server: ServeProcess) -> list[str]:
    return [line for line in server.stderr_lines if ": WARNING: " in line]


@pytest.mark.parametrize("level", [None, "info"])
def test_a_lost_stream_and_its_return_are_warnings_naming_method_endpoint_and_cause(
    level: str | None,
) -> None:
    with SimRuntime(5, seed=5) as sim:
        port = free_port()
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
        with ServeProcess(args + (["--log-level", level] if level else [])) as server:
            client = Client(port=port)
            settle_subscription(client)
            assert warnings(server) == []  # a healthy start says nothing at WARNING
            said_subscribed = any("GetContainerEvents" in x for x in server.stderr_lines)
            assert said_subscribed is (level == "info")
            assert metric(client, "podcache_event_stream_failures_total") == 0
            sim.cut_event_streams()
            until(lambda: len(warnings(server)) >= 2, "the loss and the return were not said")
            assert metric(client, "podcache_event_stream_failures_total") == 1
    lost, back = warnings(server)[:2]
    for line in (lost, back):
        assert "GetContainerEvents" in line and sim.endpoint in line, line
    assert "stream lost" in lost and "stream cut" in lost, lost  # the cause
    assert "subscribed again after 1 failed attempt" in back, back


def test_log_level_takes_the_levels_and_refuses_others() -> None:
    done = run_serve(["--sim", "--log-level", "loud"])
    assert done.returncode == 2 and "--log-level" in done.stderr
    helped = run_serve(["--help"])
    assert "--log-level" in helped.stdout and "/ips/{ip}" in helped.stdout


def test_a_runtime_without_events_is_one_warning_naming_method_and_endpoint() -> None:
    with SimRuntime(5, seed=5, unimplemented={"GetContainerEvents"}) as sim:
        port = free_port()
        with ServeProcess(["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}"]) as server:
            client = Client(port=port)
            until(lambda: warnings(server), "the runtime without events was not said")
            assert metric(client, "podcache_event_stream_failures_total") >= 1
    (said,) = warnings(server)
    assert "GetContainerEvents" in said and "UNIMPLEMENTED" in said and sim.endpoint in said


def test_a_runtime_that_goes_away_and_comes_back_is_said_and_counted(
    tmp_socket_dir: Path,
) -> None:
    """The runtime stopped (nothing listens: every attempt fails at once and is counted), then
    started again on the same socket."""
    path = str(tmp_socket_dir / "cri.sock")
    sim = SimRuntime(5, seed=5, socket=path).start()
    port = free_port()
    try:
        args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
        with ServeProcess(args) as server:
            client = Client(port=port)
            settle_subscription(client)
            sim.stop()
            until(lambda: len(warnings(server)) >= 1, "the loss was not said")
            until(
                lambda: metric(client, "podcache_event_stream_failures_total") >= 3,
                "the failed attempts were not counted",
            )
            sim = SimRuntime(5, seed=5, socket=path).start()
            until(lambda: len(warnings(server)) >= 2, "the return was not said")
    finally:
        sim.stop()
    lost, back = warnings(server)[:2]
    assert "stream lost" in lost and sim.endpoint in lost, lost
    assert "subscribed again" in back and sim.endpoint in back, back
