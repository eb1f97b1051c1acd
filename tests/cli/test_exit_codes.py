"""Exit statuses and messages: runtime errors 1 (naming the endpoint, no traceback), usage
errors 2 (naming the flag or value), Ctrl-C 130; quick failures for unreachable endpoints."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.cli.conftest import (
    Result,
    Runner,
    hanging_socket,
    http1_socket,
    no_default_runtime,
)


def assert_clean_error(result: Result, code: int, *needles: str) -> None:
    """Exit status ``code``, nothing on stdout, no traceback, every needle in the message."""
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == "", result.stdout
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def test_missing_socket_is_exit_1_naming_the_endpoint_at_once(run: Runner, scratch: str) -> None:
    path = f"{scratch}/nothing-here.sock"
    result = run("pods", "-r", f"unix://{path}", "--timeout", "60s", timeout=90)
    assert_clean_error(
        result, 1, f"podcache: error: runtime at unix://{path} is not reachable", "does not exist"
    )
    assert result.seconds < 30  # the socket check fails long before the 60 s deadline


def test_watch_fails_at_once_when_the_first_read_fails(run: Runner, scratch: str) -> None:
    result = run("watch", "-r", f"{scratch}/gone.sock")
    assert_clean_error(result, 1, f"runtime at unix://{scratch}/gone.sock is not reachable")


def test_refused_connection_is_exit_1(run: Runner, scratch: str) -> None:
    import socket

    path = f"{scratch}/refused.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # a socket file nobody listens on
    stale.close()
    try:
        result = run("ps", "-r", path, "--timeout", "300ms")
    finally:
        os.unlink(path)
    assert_clean_error(result, 1, f"runtime at unix://{path}", "refused")


def test_http_server_on_the_socket_is_exit_1_not_cri(run: Runner, scratch: str) -> None:
    path = f"{scratch}/http.sock"
    with http1_socket(path):
        result = run("pods", "-r", f"unix://{path}", "--timeout", "500ms")
    assert_clean_error(
        result, 1, f"runtime at unix://{path} does not speak CRI runtime.v1", "HTTP/1"
    )


def test_hung_runtime_is_exit_1_after_the_timeout(run: Runner, scratch: str) -> None:
    path = f"{scratch}/hung.sock"
    with hanging_socket(path):
        result = run("inspect", "abcd", "-r", path, "--timeout", "300ms")
    assert_clean_error(result, 1, f"runtime at unix://{path} did not answer in time", "0.3 s")


@pytest.mark.skipif(not no_default_runtime(), reason="a runtime socket exists on this machine")
def test_no_runtime_anywhere_is_exit_1_listing_the_places_tried_and_suggesting_sim(
    run: Runner,
) -> None:
    result = run("pods")
    assert_clean_error(
        result,
        1,
        "no container runtime endpoint configured",
        "CONTAINER_RUNTIME_ENDPOINT (unset)",
        "unix:///run/containerd/containerd.sock (no such socket)",
        "-r/--runtime-endpoint",
        "--sim",
    )


USAGE_ERRORS: list[tuple[list[str], list[str]]] = [
    (["pods", "--bogus"], ["No such option", "--bogus"]),
    (["pods", "-o", "xml"], ["'-o' / '--output'", "'xml'"]),
    (["pods", "--timeout", "2x"], ["'--timeout'", "'2x' is not a duration"]),
    (["pods", "--timeout", "0s"], ["'--timeout'", "'0s' is not a positive duration"]),
    (["pods", "-r", "http://node:1234"], ["'-r' / '--runtime-endpoint'", "'http'"]),
    (["pods", "-r", "relative.sock"], ["'-r' / '--runtime-endpoint'", "relative"]),
    (["pods", "--name", "web("], ["'--name'", "not a regular expression"]),
    (["pods", "-l", "=web"], ["'-l' / '--label'", "the key is empty"]),
    (["pods", "-q", "-o", "json"], ["-q/--quiet", "-o"]),
    (["pods", "--sim", "-r", "/run/x.sock"], ["--sim and -r/--runtime-endpoint"]),
    (["pods", "--sim-pods", "-1"], ["'--sim-pods'", "-1"]),
    (["inspect"], ["Missing argument 'ID'"]),
    (["inspect", "abcd", "-o", "wide"], ["'-o' / '--output'", "'wide'"]),
    (["watch", "--period", "soon"], ["'--period'", "'soon'"]),
    (["completion", "tcsh"], ["'tcsh'"]),
    (["nope"], ["No such command 'nope'"]),
    (["pods", "-c", "/no/such/crictl.yaml"], ["'-c' / '--config'", "/no/such/crictl.yaml"]),
]


@pytest.mark.parametrize(
    ("args", "needles"), USAGE_ERRORS, ids=[" ".join(args) for args, _ in USAGE_ERRORS]
)
def test_bad_usage_is_exit_2_naming_the_flag_or_value(
    run: Runner, args: list[str], needles: list[str]
) -> None:
    result = run(*args)
    assert_clean_error(result, 2, *needles)


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"CONTAINER_RUNTIME_ENDPOINT": "http://x:1"}, ["CONTAINER_RUNTIME_ENDPOINT", "'http'"]),
        ({"CRI_CONFIG_FILE": "{scratch}/bad.yaml"}, ["crictl config {scratch}/bad.yaml"]),
    ],
    ids=["malformed-env", "invalid-config"],
)
def test_bad_environment_is_exit_1_naming_the_source(
    run: Runner, scratch: str, env: dict[str, str], needles: list[str]
) -> None:
    with open(f"{scratch}/bad.yaml", "w") as f:
        f.write("runtime-endpoint: [unterminated\n")
    env = {k: v.format(scratch=scratch) for k, v in env.items()}
    result = run("pods", env=env)
    assert_clean_error(result, 1, *(n.format(scratch=scratch) for n in needles))


def test_ctrl_c_while_waiting_for_the_runtime_is_exit_130(run: Runner, scratch: str) -> None:
    path = f"{scratch}/ctrl-c.sock"
    with hanging_socket(path) as accepted:
        process = subprocess.Popen(
            [run.exe, "pods", "-r", path, "--timeout", "60s"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=run.env(),
        )
        try:
            assert accepted.wait(20), "podcache never connected"
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=10)
        finally:
            process.kill()
            process.wait()
    assert process.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr
