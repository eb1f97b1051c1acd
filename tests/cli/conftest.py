"""The installed ``podcache`` console script, run as a subprocess against a simulated runtime.

``sim`` is one SimRuntime for the session (60 pods, churning); a test that compares the CLI's
output with the runtime's pods holds ``sim.pause_churn()`` around both readings, so they see
the same pods. ``podcache(...)`` runs the console script with a clean environment: no
CONTAINER_RUNTIME_ENDPOINT and a CRI_CONFIG_FILE that does not exist, so nothing on this
machine leaks in. The expected values are transcribed here from the model, independently of
the CLI's renderers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from podcache.cri import CRIRuntime
from podcache.cri.endpoint import DEFAULT_ENDPOINTS
from podcache.model import Container, Pod, PodList
from podcache.sim import SimRuntime

SIM_PODS = 60
SIM_SEED = 7
TRUNC = 13
DEFAULT_SIM_PODS = 12
RUN_TIMEOUT = 30.0


def podcache_path() -> str:
    """The console script installed next to this interpreter (``pip install -e .``)."""
    found = shutil.which("podcache", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(
            f"no podcache console script next to {sys.executable}: run ./scripts/setup "
            "(or .venv/bin/pip install -e .)"
        )
    return found


@dataclass(frozen=True)
class Result:
    """A finished ``podcache`` run."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def base_env(tmp: str) -> dict[str, str]:
    """The test process's environment without anything that selects a runtime."""
    env = {k: v for k, v in os.environ.items() if k not in ("CONTAINER_RUNTIME_ENDPOINT",)}
    env["CRI_CONFIG_FILE"] = os.path.join(tmp, "no-such-crictl.yaml")
    for name in ("NO_COLOR", "COLUMNS", "LINES"):  # the terminal's own size, in tmux
        env.pop(name, None)
    return env


@pytest.fixture(scope="session")
def scratch() -> Iterator[str]:
    """A short directory for sockets and files (unix socket paths must fit 107 bytes)."""
    path = tempfile.mkdtemp(prefix="pc-cli-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Runner:
    """``run(*args, env=..., timeout=...)``: run the console script, return its Result."""

    def __init__(self, exe: str, scratch: str) -> None:
        self.exe = exe
        self.scratch = scratch

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = base_env(self.scratch)
        env.update(extra or {})
        return env

    def __call__(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = RUN_TIMEOUT
    ) -> Result:
        began = time.monotonic()
        done = subprocess.run(
            [self.exe, *args],
            capture_output=True,
            text=True,
            env=self.env(env),
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        return Result(
            tuple(args), done.returncode, done.stdout, done.stderr, time.monotonic() - began
        )


@pytest.fixture(scope="session")
def run(scratch: str) -> Runner:
    return Runner(podcache_path(), scratch)


@pytest.fixture(scope="session")
def sim() -> Iterator[SimRuntime]:
    """A churning simulated runtime for the session; pause it to compare listings."""
    with SimRuntime(SIM_PODS, seed=SIM_SEED, churn=5.0) as runtime:
        yield runtime


@pytest.fixture(scope="session")
def runtime(sim: SimRuntime) -> Iterator[CRIRuntime]:
    with CRIRuntime(sim.endpoint) as client:
        yield client


@contextmanager
def paused(sim: SimRuntime, runtime: CRIRuntime, all: bool) -> Iterator[PodList]:
    """Hold churn; yields the runtime's pods, which stay the truth until the block ends."""
    with sim.pause_churn():
        yield runtime.get_pods(all)


def no_default_runtime() -> bool:
    """Whether none of crictl's default sockets exists on this machine."""
    return not any(os.path.exists(e.removeprefix("unix://")) for e in DEFAULT_ENDPOINTS)


# -- the expected output, transcribed from the model ---------------------------------------------


def container_json(container: Container) -> dict[str, Any]:
    return {
        "id": f"{container.id.type}://{container.id.id}",
        "name": container.name,
        "image": container.image,
        "image_id": container.image_id,
        "image_ref": container.image_ref,
        "image_runtime_handler": container.image_runtime_handler,
        "hash": container.hash,
        "state": str(container.state.value),
        "attempt": container.attempt,
    }


def pod_json(pod: Pod) -> dict[str, Any]:
    return {
        "id": pod.id,
        "name": pod.name,
        "namespace": pod.namespace,
        "created_at": pod.created_at,
        "labels": pod.label_map(),
        "ips": list(pod.ips),
        "host_network": pod.host_network,
        "containers": [container_json(c) for c in pod.containers],
        "sandboxes": [container_json(s) for s in pod.sandboxes],
    }


def newest_sandbox_id(pod: Pod) -> str:
    return pod.sandboxes[0].id.id if pod.sandboxes else pod.id


def pod_state(pod: Pod) -> str:
    return "Ready" if any(s.state.value == "running" for s in pod.sandboxes) else "NotReady"


def parse(fmt: str, text: str) -> Any:
    """A JSON or YAML document (YAML with libyaml's safe loader when there is one: fast)."""
    if fmt == "json":
        return json.loads(text)
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


COLUMN_GAP = re.compile(r" {3,}")


def table(result: Result) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a piped table (columns are 3+ spaces apart, no empty cells)."""
    lines = result.lines()
    assert lines, f"no table in {result}"
    header = COLUMN_GAP.split(lines[0])
    rows = [COLUMN_GAP.split(line) for line in lines[1:]]
    for row in rows:
        assert len(row) == len(header), f"row {row} does not match header {header}"
    return header, rows


_AGE = re.compile(r"(\d+)([smhd]) ago")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def assert_age(text: str, created_at_ns: int) -> None:
    """``text`` ("3m ago") is the pod's age, rounded down to its unit, give or take a tick."""
    match = _AGE.fullmatch(text)
    assert match, f"not an age: {text!r}"
    unit = _UNIT[match[2]]
    low = int(match[1]) * unit
    actual = (time.time_ns() - created_at_ns) / 1e9
    assert low - 2 <= actual < low + unit + 30, (text, actual)


# -- endpoints that are not CRI runtimes -------------------------------------------------------


@contextmanager
def hanging_socket(path: str) -> Iterator[threading.Event]:
    """A unix socket that accepts connections and never answers; the event is set on accept."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    accepted = threading.Event()
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)
            accepted.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()
        os.unlink(path)


@contextmanager
def http1_socket(path: str) -> Iterator[None]:
    """A tiny HTTP/1.1 server on a unix socket: answers every request with 404."""
    import http.server
    import socketserver

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    class Handler(http.server.BaseHTTPRequestHandler):
        def address_string(self) -> str:
            return "test"

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = Server(path, Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        os.unlink(path)
