"""Which runtime ``podcache`` reads, as crictl finds it: -r before or after the command, the
environment, the crictl config file (endpoint and timeout), --sim and --sim-fallback."""

from __future__ import annotations

import re
import subprocess

import pytest

from podcache.cri import CRIRuntime
from podcache.sim import SimRuntime
from tests.cli.conftest import (
    DEFAULT_SIM_PODS,
    RUN_TIMEOUT,
    Runner,
    hanging_socket,
    newest_sandbox_id,
    no_default_runtime,
    parse,
    paused,
    pod_json,
)

SIM_MESSAGE = re.compile(
    r"^podcache: (no container runtime configured or found; )?using the built-in simulated "
    r"runtime \((\d+) pods, seed 0\) at unix:///\S+$",
    re.MULTILINE,
)


def test_runtime_options_work_before_and_after_the_command(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, False) as pods:
        before = run("-r", sim.endpoint, "pods", "-q")
        after = run("pods", "-q", "-r", sim.endpoint)
        overridden = run("-r", "/nonexistent/x.sock", "pods", "-q", "-r", sim.endpoint)
    expected = [newest_sandbox_id(p) for p in pods]
    for result in (before, after, overridden):
        assert result.returncode == 0, result
        assert result.lines() == expected


def test_endpoint_from_the_environment(run: Runner, sim: SimRuntime, runtime: CRIRuntime) -> None:
    with paused(sim, runtime, False) as pods:
        result = run("pods", "-q", env={"CONTAINER_RUNTIME_ENDPOINT": sim.endpoint})
    assert result.returncode == 0, result
    assert result.lines() == [newest_sandbox_id(p) for p in pods]


@pytest.mark.parametrize("how", ["--config", "CRI_CONFIG_FILE"])
def test_endpoint_from_the_crictl_config_file(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, scratch: str, how: str
) -> None:
    config = f"{scratch}/crictl-{how}.yaml"
    with open(config, "w") as f:
        f.write(f"runtime-endpoint: {sim.endpoint}\nimage-endpoint: {sim.endpoint}\ntimeout: 5\n")
    with paused(sim, runtime, False) as pods:
        if how == "--config":
            result = run("-c", config, "pods", "-o", "json")
        else:
            result = run("pods", "-o", "json", env={"CRI_CONFIG_FILE": config})
    assert result.returncode == 0, result
    assert parse("json", result.stdout) == {"items": [pod_json(p) for p in pods]}


def test_timeout_comes_from_the_config_file_unless_given(run: Runner, scratch: str) -> None:
    path = f"{scratch}/slow.sock"
    config = f"{scratch}/crictl-timeout.yaml"
    with open(config, "w") as f:
        f.write(f"runtime-endpoint: unix://{path}\ntimeout: 1\n")
    with hanging_socket(path):
        from_config = run("pods", "-c", config)
        given = run("pods", "-c", config, "--timeout", "200ms")
    assert from_config.returncode == 1, from_config
    assert "no answer within 1 s" in from_config.stderr
    assert given.returncode == 1, given
    assert "no answer within 0.2 s" in given.stderr


def test_sim_is_reproducible_and_says_so_on_stderr(run: Runner) -> None:
    first = run("pods", "--sim", "-a", "-o", "json")
    second = run("pods", "--sim", "-a", "-o", "json")
    assert first.returncode == second.returncode == 0, (first, second)
    match = SIM_MESSAGE.search(first.stderr)
    assert match and match[1] is None and int(match[2]) == DEFAULT_SIM_PODS, first.stderr

    def without_times(document: dict[str, list[dict[str, object]]]) -> list[dict[str, object]]:
        return [{k: v for k, v in pod.items() if k != "created_at"} for pod in document["items"]]

    pods = parse("json", first.stdout)
    assert without_times(pods) == without_times(parse("json", second.stdout))
    # The same pods as a simulated runtime of that size and seed, read directly.
    with SimRuntime(DEFAULT_SIM_PODS, seed=0) as sim, CRIRuntime(sim.endpoint) as runtime:
        expected = {"items": [pod_json(p) for p in runtime.get_pods(True)]}
    assert without_times(pods) == without_times(expected)
    assert len(pods["items"]) == DEFAULT_SIM_PODS


def test_sim_pods_sets_the_size(run: Runner) -> None:
    result = run("ps", "--sim", "--sim-pods", "3", "-a", "-o", "yaml")
    assert result.returncode == 0, result
    match = SIM_MESSAGE.search(result.stderr)
    assert match and match[2] == "3", result.stderr
    assert len({item["pod"]["id"] for item in parse("yaml", result.stdout)["items"]}) == 3


@pytest.mark.skipif(not no_default_runtime(), reason="a runtime socket exists on this machine")
def test_sim_fallback_without_any_runtime_uses_the_simulation(run: Runner) -> None:
    result = run("pods", "-a", "-q", "--sim-fallback")
    assert result.returncode == 0, result
    match = SIM_MESSAGE.search(result.stderr)
    assert match and match[1], result.stderr
    assert len(result.lines()) == DEFAULT_SIM_PODS


def test_sim_fallback_prefers_a_configured_runtime(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, False) as pods:
        result = run("pods", "-q", "--sim-fallback", "-r", sim.endpoint)
    assert result.returncode == 0, result
    assert "simulated" not in result.stderr
    assert result.lines() == [newest_sandbox_id(p) for p in pods]


def test_sim_fallback_never_hides_a_failing_configured_runtime(run: Runner, scratch: str) -> None:
    result = run("pods", "--sim-fallback", "-r", f"{scratch}/down.sock")
    assert result.returncode == 1, result
    assert f"runtime at unix://{scratch}/down.sock is not reachable" in result.stderr
    assert "simulated" not in result.stderr


def test_loopback_tcp_endpoint(run: Runner) -> None:
    with SimRuntime(4, seed=3, tcp=True) as sim, CRIRuntime(sim.endpoint) as runtime:
        expected = [newest_sandbox_id(p) for p in runtime.get_pods(False)]
        result = run("pods", "-q", "-r", sim.endpoint)
    assert result.returncode == 0, result
    assert result.lines() == expected


# -- --sim-churn -----------------------------------------------------------------------------


def follow_until(run: Runner, args: list[str], wanted: re.Pattern[str]) -> tuple[str, str]:
    """Run a command that follows the runtime until a stdout line matches ``wanted``, then
    kill it: (that line, the first stderr line). SIGKILL, not SIGTERM: what is tested is what
    it prints, and `watch` can hang on SIGTERM (a KeyboardInterrupt raised by its handler
    while the main thread holds its watch's lock: 1 in about 100 under load). The simulated
    runtime's directory, which a killed command leaves, is made in ``run``'s scratch."""
    process = subprocess.Popen(
        [run.exe, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=run.env({"TMPDIR": run.scratch}),
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        notice = process.stderr.readline()
        for line in process.stdout:
            if wanted.search(line):
                return line, notice
        raise AssertionError(f"{args}: ended without a line matching {wanted.pattern}")
    finally:
        process.kill()
        process.communicate(timeout=RUN_TIMEOUT)


def test_pods_watch_takes_sim_churn_and_shows_the_simulated_changes(run: Runner) -> None:
    """The README's `podcache pods -w --sim --sim-churn 1` (it had no --sim-churn)."""
    deleted, notice = follow_until(
        run, ["pods", "-w", "--sim", "--sim-churn", "1"], re.compile(r"^DELETED ")
    )
    assert "(12 pods, seed 0, churn 1/s)" in notice, notice
    assert deleted.startswith("DELETED")


@pytest.mark.parametrize("command", [["events"], ["pods", "-w"], ["watch"]])
def test_a_followed_simulation_changes_nothing_unless_asked_and_says_so(
    run: Runner, command: list[str]
) -> None:
    """`--sim` changes nothing unless --sim-churn asks (events and watch churned 0.2/s), and
    the notice says so (the simulator is started with the rate the notice names)."""
    _, notice = follow_until(run, [*command, "--sim"], re.compile(r"ADDED"))
    assert "churn 0/s) at unix:///" in notice, notice
    assert notice.rstrip().endswith("nothing changes; --sim-churn R replaces R pods a second")


def test_sim_churn_without_watch_is_a_usage_error(run: Runner) -> None:
    result = run("pods", "--sim", "--sim-churn", "1")
    assert result.returncode == 2
    assert "--sim-churn makes changes to follow: give it with -w" in result.stderr
