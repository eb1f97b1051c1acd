"""The real containerds for tests: one per version (1.6, 1.7 and 2.1) and session, started by
scripts/containerd-up, torn down by scripts/containerd-down; tests may SIGKILL one and start it
again on the same state.

Every test that uses the ``containerd`` fixture runs against every version (test IDs end in
``[1.6]`` / ``[1.7]`` / ``[2.1]``); a test about some versions only says so with
``@pytest.mark.parametrize("containerd", EVENT_VERSIONS, indirect=True)`` (or a list of its
own). 1.6 lacks GetContainerEvents (UNIMPLEMENTED), 1.7 and 2.1 have it. The instances run one
after the other: pytest groups the tests by version and tears each instance down before the
next comes up.

Skip rules: a machine that cannot run it (not Linux, not root, the packages cannot be
installed, no package registry) skips these tests with the reason in the summary (``-ra``);
with ``CI=true`` the same reasons fail them instead, so CI never passes by skipping. Anything
else that goes wrong (the daemon does not come up) is an error, never a skip.

Environment: ``CONTAINERD_TEST_DIR`` (default /tmp/podcache-containerd) is the base directory;
each version's instance lives in its own subdirectory (``DIR/1.6``, ``DIR/1.7``, ``DIR/2.1``).
A daemon already running there is reused and left running; ``CONTAINERD_TEST_KEEP=1`` keeps
one this session started. Sessions that share a directory take turns (a lock file).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, NoReturn

import grpc
import pytest

from podcache.cri.proto import api_pb2, services
from tests.containerd.harness import CRIHarness

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "scripts" / "containerd-up"
DOWN = REPO / "scripts" / "containerd-down"
DEFAULT_DIR = "/tmp/podcache-containerd"
VERSIONS = ("1.6", "1.7", "2.1")
"""containerd minor versions the suite runs against: 1.6 (no events), 1.7 and 2.1 (events)."""
EVENT_VERSIONS = ("1.7", "2.1")
"""The versions with GetContainerEvents."""
UP_TIMEOUT = 240.0  # a fresh machine installs packages first (about 10 s here)
LOCK_WAIT = 90.0
EXIT_CANNOT_RUN = 2  # scripts/containerd-up: this machine cannot run containerd
EXIT_NO_PACKAGES = 3  # scripts/containerd-up: containerd/runc cannot be installed


def cannot_run(reason: str) -> NoReturn:
    """Skip with ``reason``; fail instead under CI=true, where a skip would hide the tests."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"containerd tests cannot run, and CI=true forbids skipping: {reason}")
    pytest.skip(f"containerd tests cannot run here: {reason}")


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a SIGKILLed daemon nobody reaped yet is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def cri_answers(socket_path: str, timeout: float = 1.0) -> bool:
    """Version and ListPodSandbox answer on a fresh channel (no reconnect backoff involved).

    The channel keeps its own subchannel: gRPC otherwise shares one per target across the
    process, and this probe would wait out the reconnect backoff of the client under test.
    """
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel("unix://" + socket_path, options=options) as channel:
        stub = services.stub(channel)
        try:
            stub.Version(api_pb2.VersionRequest(version="0.1.0"), timeout=timeout)
            stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=timeout)
        except grpc.RpcError:
            return False
    return True


class Containerd:
    """A private containerd: where it listens, its pid, and kill()/start() for fault tests."""

    def __init__(self, directory: Path, endpoint: str, version: str) -> None:
        self.directory = directory
        self.endpoint = endpoint
        self.version = version
        """The minor version asked of scripts/containerd-up: one of ``VERSIONS``."""
        self.socket_path = str(directory / "containerd.sock")
        self.config_path = directory / "config.toml"
        self.pid_path = directory / "containerd.pid"
        self.log_path = directory / "containerd.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        """The daemon's pid (from its pid file; it may be dead)."""
        return int(self.pid_path.read_text().strip())

    def alive(self) -> bool:
        try:
            return _alive(self.pid)
        except (OSError, ValueError):
            return False

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the daemon and wait until it is gone. Its shims and containers live on."""
        pid = self.pid
        os.kill(pid, signal.SIGKILL)
        if self._proc is not None and self._proc.pid == pid:
            self._proc.wait(timeout)
            self._proc = None
            return
        deadline = time.monotonic() + timeout
        while _alive(pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"containerd (pid {pid}) still alive {timeout} s after SIGKILL")
            time.sleep(0.01)

    def start(self, timeout: float = 20.0) -> None:
        """Start the daemon again on the same config and state; return once CRI answers."""
        if self.alive():
            raise RuntimeError(f"containerd is already running (pid {self.pid})")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)  # left behind by the SIGKILLed daemon
        if self._log is None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in close())
        env = self.env()
        binary = shutil.which("containerd", path=env["PATH"])
        if binary is None:
            raise RuntimeError(f"no containerd binary on {env['PATH']}")
        self._proc = subprocess.Popen(
            [binary, "--config", str(self.config_path)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid_path.write_text(f"{self._proc.pid}\n")
        self.wait_ready(timeout)

    def env(self) -> dict[str, str]:
        """The environment to run this instance's binaries with: a privately fetched containerd
        (DIR/bin-dir, written by scripts/containerd-up) first on PATH, for it and its shims."""
        env = dict(os.environ)
        try:
            bin_dir = (self.directory / "bin-dir").read_text().strip()
        except FileNotFoundError:
            bin_dir = ""
        if bin_dir:
            env["PATH"] = f"{bin_dir}:{env.get('PATH', os.defpath)}"
        return env

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until CRI answers; fail with the log's tail if the daemon dies or stays mute."""
        deadline = time.monotonic() + timeout
        while not cri_answers(self.socket_path, timeout=1.0):
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"containerd did not come up on {self.socket_path}:\n{self.log_tail()}"
                )
            time.sleep(0.01)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def close(self) -> None:
        """Reap a daemon this object started once it has stopped; one still running is left."""
        if self._proc is not None:
            self._proc.poll()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _run(
    script: Path,
    directory: Path,
    version: str,
    timeout: float,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        CONTAINERD_TEST_DIR=str(directory),
        CONTAINERD_VERSION=version,
        PODCACHE_PYTHON=sys.executable,
        **(extra_env or {}),
    )
    return subprocess.run(
        [str(script)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].removeprefix("containerd-up: ") if lines else "(no output)"


@contextlib.contextmanager
def _session_lock(directory: Path) -> Iterator[None]:
    """Sessions sharing an instance take turns: one at a time brings it up and tears it down."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".session.lock", "w") as lock:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    cannot_run(
                        f"another test session has used {directory} for more than "
                        f"{LOCK_WAIT:.0f} s (set CONTAINERD_TEST_DIR to use another directory)"
                    )
                time.sleep(0.2)
        yield


@pytest.fixture(scope="session", params=VERSIONS)
def containerd(request: pytest.FixtureRequest) -> Iterator[Containerd]:
    """The session's containerd of one version (brought up once, or reused); torn down after."""
    version: str = request.param
    if not sys.platform.startswith("linux"):
        cannot_run(f"containerd needs Linux, this is {sys.platform}")
    if os.geteuid() != 0:
        cannot_run(f"containerd needs root, tests run as uid {os.geteuid()}")
    directory = Path(os.environ.get("CONTAINERD_TEST_DIR") or DEFAULT_DIR) / version
    with _session_lock(directory):
        runtime = Containerd(directory, "unix://" + str(directory / "containerd.sock"), version)
        reused = runtime.alive()
        started = time.monotonic()
        try:
            up = _run(UP, directory, version, UP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"scripts/containerd-up did not finish in {UP_TIMEOUT:.0f} s")
        if up.returncode in (EXIT_CANNOT_RUN, EXIT_NO_PACKAGES):
            cannot_run(_last_line(up.stderr))
        if up.returncode != 0:
            log = runtime.log_tail()
            if not reused:  # leave nothing half-started behind
                _run(DOWN, directory, version, 120.0)
            pytest.fail(
                f"scripts/containerd-up failed (exit {up.returncode}):\n{up.stderr[-3000:]}"
                f"\ncontainerd.log:\n{log}"
            )
        runtime.endpoint = _last_line(up.stdout)
        sys.stderr.write(
            f"\n[containerd {version}] {runtime.endpoint} up in {time.monotonic() - started:.2f} s "
            f"({'reused' if reused else 'started'}, pid {runtime.pid})\n"
        )
        try:
            yield runtime
        finally:
            keep = reused or os.environ.get("CONTAINERD_TEST_KEEP", "") not in ("", "0")
            down = None if keep else _run(DOWN, directory, version, 120.0)
            runtime.close()
            if down is not None and down.returncode != 0:
                pytest.fail(
                    f"scripts/containerd-down failed (exit {down.returncode}):\n"
                    f"{down.stderr[-3000:]}"
                )


@pytest.fixture(scope="session")
def cri_harness(containerd: Containerd) -> Iterator[CRIHarness]:
    """A kubelet-like CRI client on the session's containerd (raw stubs, no podcache)."""
    with CRIHarness(containerd.socket_path) as h:
        yield h
