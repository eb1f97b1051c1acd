"""``podcache events`` and ``podcache pods -w`` as subprocesses over a private simulated
runtime: -o json parsed back into the runtime's state, the words of the table, Ctrl-C (130),
a runtime process killed and restarted (followed through, said on stderr, with ``watch`` into a
pipe), and both commands in a real terminal (tmux)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podcache.cri import CRIRuntime
from podcache.sim import SimRuntime
from tests.cli.conftest import Runner, pod_json
from tests.cli.test_terminal import Terminal

PERIOD = "100ms"


@pytest.fixture
def own_sim() -> Iterator[SimRuntime]:
    """A simulated runtime of 6 pods that changes only when a test says so."""
    with SimRuntime(6, seed=3, churn=0.0) as runtime:
        yield runtime


class Running:
    """A ``podcache`` subprocess whose stdout lines are collected as they come."""

    def __init__(
        self, run: Runner, *args: str, merged: bool = False, sigint_ignored: bool = False
    ) -> None:
        """``merged``: stderr goes to the same pipe as stdout (its lines are collected too).
        ``sigint_ignored``: started as a non-interactive shell starts a background job."""
        ignoring = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"] if sigint_ignored else []
        self.process = subprocess.Popen(
            [*ignoring, run.exe, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=run.env(),
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_until(self, check: Callable[[list[str]], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not check(list(self.lines)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"never happened; stdout: {self.lines[-20:]}, stderr: {self.stderr}")
            time.sleep(0.05)

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.wait()

    def wait(self, timeout: float = 15.0) -> int:
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    @property
    def stderr(self) -> str:
        if self.process.poll() is None:
            return "(running)"
        if self.process.stderr is None:
            return "(merged into stdout)"
        return self.process.stderr.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _rebuild(lines: list[str]) -> dict[str, Any]:
    """The state (UID -> pod JSON) a client rebuilds from the lines, checking each line."""
    state: dict[str, Any] = {}
    revision = 0
    for line in lines:
        item = json.loads(line)
        assert list(item) == ["type", "revision", "object"], item
        assert item["revision"] >= revision
        revision = item["revision"]
        uid = item["object"]["id"]
        if item["type"] == "DELETED":
            assert state.pop(uid) is not None
        elif item["type"] == "ADDED":
            assert uid not in state
            state[uid] = item["object"]
        else:
            assert item["type"] == "MODIFIED" and uid in state
            state[uid] = item["object"]
    return state


def _truth(runtime: CRIRuntime) -> dict[str, Any]:
    return {pod.id: pod_json(pod) for pod in runtime.get_pods(True)}


def test_events_json_rebuilds_the_runtimes_pods(run: Runner, own_sim: SimRuntime) -> None:
    population = own_sim.population
    # --events off: polled, each step below is one change; with events a refresh may also land
    # between the container stops of one pod (real intermediate states, more MODIFIED lines).
    args = ("-o", "json", "-r", own_sim.endpoint, "--period", PERIOD, "--events", "off")
    proc = Running(run, "events", *args)
    try:
        with CRIRuntime(own_sim.endpoint) as runtime:
            proc.wait_until(lambda lines: _rebuild(lines) == _truth(runtime))
            uids = population.pod_uids()
            population.stop_pod(uids[0])
            population.remove_pod(uids[1])
            population.create_pod()
            proc.wait_until(lambda lines: _rebuild(lines) == _truth(runtime))
            types = [json.loads(line)["type"] for line in proc.lines]
        assert types.count("ADDED") == 7 and types.count("DELETED") == 1
        # The stop is one MODIFIED; a poll that fell between a listing's two calls (sandboxes,
        # then containers) while one of the three steps ran adds one more for that step.
        assert 1 <= types.count("MODIFIED") <= 4, types
        assert proc.interrupt() == 130
    finally:
        proc.stop()


def test_events_table_says_what_changed(run: Runner, own_sim: SimRuntime) -> None:
    population = own_sim.population
    # --events off: a line per poll that saw a change (events could also show each container's
    # stop on its own line)
    proc = Running(run, "events", "-r", own_sim.endpoint, "--period", PERIOD, "--events", "off")
    try:
        proc.wait_until(lambda lines: len(lines) == 7)  # the header and six pods
        assert re.fullmatch(r"TIME\s+TYPE\s+POD\s+NAMESPACE\s+CHANGE", proc.lines[0])
        uids = population.pod_uids()
        with CRIRuntime(own_sim.endpoint) as runtime:
            stopped = next(p for p in runtime.get_pods(True) if p.id == uids[0])
        population.stop_pod(uids[0])
        # A poll between the listing's two calls (sandboxes, then containers) sees the
        # containers exited beside a sandbox still ready: the stop may take two MODIFIED lines.
        expected = ["the sandbox became not ready"] + [
            f"container {container.name} exited"
            for container in stopped.containers
            if container.state.value == "running"
        ]
        proc.wait_until(lambda lines: all(want in " ".join(lines[7:]) for want in expected))
        changes = [re.split(r" {3,}", line, maxsplit=4) for line in proc.lines[7:]]
        assert 1 <= len(changes) <= 2, changes
        for time_, kind, name, namespace, _ in changes:
            assert re.fullmatch(r"\d\d:\d\d:\d\d", time_)
            assert (kind, name, namespace) == ("MODIFIED", stopped.name, stopped.namespace)
        seen = len(proc.lines)
        population.remove_pod(uids[0])
        proc.wait_until(lambda lines: any(" DELETED " in line for line in lines[seen:]))
        rows = [re.split(r" {3,}", line)[1:] for line in proc.lines[seen:]]
        assert rows[-1] == ["DELETED", stopped.name, stopped.namespace, "pod removed"]
        assert [row[:3] for row in rows[:-1]] in (
            [],
            [["MODIFIED", stopped.name, stopped.namespace]],  # a split poll: containers first
        )
        assert proc.interrupt() == 130
    finally:
        proc.stop()


def test_events_filters_by_namespace(run: Runner, own_sim: SimRuntime) -> None:
    with CRIRuntime(own_sim.endpoint) as runtime:
        pods = runtime.get_pods(True)
    namespace = pods[0].namespace
    proc = Running(
        run, "events", "-o", "json", "-n", namespace, "-r", own_sim.endpoint, "--period", PERIOD
    )
    try:
        wanted = {pod.id: pod_json(pod) for pod in pods if pod.namespace == namespace}
        proc.wait_until(lambda lines: _rebuild(lines) == wanted)
        assert proc.interrupt() == 130
    finally:
        proc.stop()


class SimProcess:
    """``podcache sim`` in a process of its own on a fixed socket: killed with SIGKILL (as a
    runtime that crashes) and started again on the same path."""

    def __init__(self, run: Runner, path: str, seed: int) -> None:
        self.run = run
        self.path = path
        self.endpoint = f"unix://{path}"
        self.process: subprocess.Popen[str] | None = None
        self.start(seed)

    def start(self, seed: int) -> None:
        self.process = subprocess.Popen(
            [self.run.exe, "sim", "--socket", self.path, "--pods", "3", "--seed", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=self.run.env(),
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == self.endpoint  # it listens now

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()


RESTART_COMMANDS = {
    "events": ("events",),
    "pods-w": ("pods", "-w"),
    "watch-into-a-pipe": ("watch",),
}


@pytest.mark.parametrize("events", ["auto", "off"])
@pytest.mark.parametrize("command", list(RESTART_COMMANDS))
def test_a_runtime_restart_is_followed_through_and_said_on_stderr(
    run: Runner, command: str, events: str
) -> None:
    """The runtime (a process) is killed and started again on its socket, with other pods:
    the command says it is reconnecting, then that it is back, then prints the changes, and
    runs on until Ctrl-C. stdout and stderr share one pipe, so their order is the order of
    the writes."""
    path = tempfile.mktemp(prefix="pc-restart-", suffix=".sock", dir="/tmp")
    sim = SimProcess(run, path, seed=1)
    args = (*RESTART_COMMANDS[command], "-r", sim.endpoint, "--period", PERIOD, "--events", events)
    proc = Running(run, *args, merged=True)
    try:
        proc.wait_until(lambda lines: sum(" ADDED " in f" {line} " for line in lines) == 3)
        sim.kill()
        proc.wait_until(lambda lines: any("reconnecting" in line for line in lines))
        sim.start(seed=2)  # other pods: the three there die, three others come
        proc.wait_until(lambda lines: sum(" DELETED " in f" {line} " for line in lines) == 3)
        lines = proc.lines
        lost = [i for i, line in enumerate(lines) if "reconnecting" in line]
        back = [i for i, line in enumerate(lines) if "reconnected" in line]
        deleted = [i for i, line in enumerate(lines) if " DELETED " in f" {line} "]
        added = [i for i, line in enumerate(lines) if " ADDED " in f" {line} "]
        assert len(lost) == 1 and len(back) == 1, "\n".join(lines)  # one line each, per outage
        assert max(added[:3]) < lost[0] < back[0] < min(deleted), "\n".join(lines)
        assert len(added) == 6 and min(added[3:]) > back[0], "\n".join(lines)
        assert lines[lost[0]].startswith("podcache: the runtime failed (")
        assert f"reconnecting to {sim.endpoint}" in lines[lost[0]]
        assert lines[back[0]] == (
            f"podcache: reconnected to {sim.endpoint}; following its changes again"
        )
        assert proc.process.poll() is None  # still running
        assert proc.interrupt() == (0 if command == "watch-into-a-pipe" else 130)
    finally:
        proc.stop()
        sim.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def test_pods_watch_prints_the_table_then_a_row_per_change(
    run: Runner, own_sim: SimRuntime
) -> None:
    args = ("-r", own_sim.endpoint, "--period", PERIOD, "--events", "off")  # one row per step
    proc = Running(run, "pods", "-w", *args)
    try:
        proc.wait_until(lambda lines: len(lines) == 7)
        header = re.split(r" {3,}", proc.lines[0])
        assert header == [
            "EVENT",
            "POD ID",
            "CREATED",
            "STATE",
            "NAME",
            "NAMESPACE",
            "ATTEMPT",
            "CONTAINERS",
        ]
        assert all(line.startswith("ADDED ") for line in proc.lines[1:])
        uid, _ = own_sim.population.create_pod()
        proc.wait_until(lambda lines: len(lines) >= 8)  # a MODIFIED may follow (a split poll)
        with CRIRuntime(own_sim.endpoint) as runtime:
            pod = next(p for p in runtime.get_pods(False) if p.id == uid)
        row = re.split(r" {3,}", proc.lines[7])
        assert row[0] == "ADDED" and row[4] == pod.name and row[5] == pod.namespace
        assert proc.interrupt() == 130
    finally:
        proc.stop()


def column_starts(line: str) -> list[int]:
    """Where each cell of a table line begins (cells are three or more spaces apart)."""
    return [0, *(match.end() for match in re.finditer(r" {3,}", line))]


def test_events_table_keeps_its_columns_when_a_deleted_row_comes(
    run: Runner, own_sim: SimRuntime
) -> None:
    proc = Running(run, "events", "-r", own_sim.endpoint, "--period", PERIOD, "--events", "off")
    try:
        proc.wait_until(lambda lines: len(lines) == 7)  # the header and six ADDED
        own_sim.population.remove_pod(own_sim.population.pod_uids()[0])
        # A poll between the listing's two calls may show a MODIFIED row before the DELETED.
        proc.wait_until(lambda lines: any(line.split()[1] == "DELETED" for line in lines[7:]))
        assert [line.split()[1] for line in proc.lines[7:]] in (
            ["DELETED"],
            ["MODIFIED", "DELETED"],
        )
        pod_columns = {tuple(column_starts(line)[:3]) for line in proc.lines}
        assert len(pod_columns) == 1, "\n".join(proc.lines)  # TIME, TYPE and POD line up
        assert proc.interrupt() == 130
    finally:
        proc.stop()


def test_pods_watch_keeps_its_columns_when_a_modified_row_comes(
    run: Runner, own_sim: SimRuntime
) -> None:
    args = ("-r", own_sim.endpoint, "--period", PERIOD, "--events", "off")
    proc = Running(run, "pods", "-w", "-a", *args)
    try:
        proc.wait_until(lambda lines: len(lines) == 7)
        own_sim.population.stop_pod(own_sim.population.pod_uids()[0])
        proc.wait_until(lambda lines: len(lines) >= 8)
        assert proc.lines[7].split()[0] == "MODIFIED"
        assert len({column_starts(line)[1] for line in proc.lines[:8]}) == 1, "\n".join(proc.lines)
        assert proc.interrupt() == 130
    finally:
        proc.stop()


def test_watch_into_a_pipe_prints_the_rows_of_pods_w(run: Runner, own_sim: SimRuntime) -> None:
    args = ("-r", own_sim.endpoint, "--period", PERIOD, "--events", "off")
    proc = Running(run, "watch", *args)  # stdout is a pipe
    try:
        proc.wait_until(lambda lines: len(lines) == 7)
        header = re.split(r" {3,}", proc.lines[0])
        assert header == [
            "EVENT",
            "POD ID",
            "CREATED",
            "STATE",
            "NAME",
            "NAMESPACE",
            "ATTEMPT",
            "CONTAINERS",
        ]
        assert all(line.startswith("ADDED ") for line in proc.lines[1:])
        own_sim.population.create_pod()
        proc.wait_until(lambda lines: len(lines) >= 8)
        assert proc.lines[7].startswith("ADDED ")
        assert proc.interrupt() == 0  # watch's Ctrl-C, as in a terminal
        assert "standard output is not a terminal" in proc.stderr
    finally:
        proc.stop()


# -- a real terminal ---------------------------------------------------------------------------

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path)
    try:
        yield term
    finally:
        term.close()


@needs_tmux
def test_events_in_a_terminal_and_ctrl_c(
    run: Runner, terminal: Terminal, own_sim: SimRuntime
) -> None:
    terminal.start([run.exe, "events", "-r", own_sim.endpoint, "--period", PERIOD], run.env())
    terminal.wait_for(re.compile(r"TIME\s+TYPE\s+POD\s+NAMESPACE\s+CHANGE"))
    uid = own_sim.population.pod_uids()[0]
    own_sim.population.remove_pod(uid)
    terminal.wait_for(re.compile(r"DELETED\s+\S+\s+\S+\s+pod removed"))
    terminal.send("C-c")
    assert terminal.exit_status() == "exit=130"


@needs_tmux
def test_pods_watch_in_a_terminal_and_ctrl_c(
    run: Runner, terminal: Terminal, own_sim: SimRuntime
) -> None:
    terminal.start([run.exe, "pods", "-w", "-r", own_sim.endpoint, "--period", PERIOD], run.env())
    terminal.wait_for(re.compile(r"EVENT\s+POD ID\s+CREATED\s+STATE\s+NAME"))
    with CRIRuntime(own_sim.endpoint) as runtime:
        pod = runtime.get_pods(False)[0]
    own_sim.population.stop_pod(pod.id)  # not ready: gone from the list without -a
    # DELETED shows the pod as it last was.
    terminal.wait_for(re.compile(rf"DELETED\s+[0-9a-f]{{13}}\s+\S+ ago\s+Ready\s+{pod.name}"))
    terminal.send("C-c")
    assert terminal.exit_status() == "exit=130"


@pytest.mark.parametrize("command", [("events", "-o", "json"), ("pods", "-w", "-o", "json")])
def test_with_events_a_change_shows_long_before_the_period(
    run: Runner, own_sim: SimRuntime, command: tuple[str, ...]
) -> None:
    """--events auto (the default) over a runtime with container events: a 10-minute period,
    so only the runtime's event can make the new pod appear within the wait."""
    proc = Running(run, *command, "-r", own_sim.endpoint, "--period", "10m")
    try:
        proc.wait_until(lambda lines: len(lines) >= 6)  # the pods there at first
        uid, _ = own_sim.population.create_pod()
        proc.wait_until(lambda lines: any(uid in line for line in lines), timeout=20.0)
        assert proc.interrupt() == 130
    finally:
        proc.stop()


@pytest.mark.parametrize(
    "runtime",
    [
        pytest.param({"unimplemented": {"GetContainerEvents"}}, id="unimplemented"),
        pytest.param({"flavor": "crio", "pod_events": False}, id="crio-no-events"),
    ],
)
@pytest.mark.parametrize("command", [("events",), ("pods", "-w")])
def test_events_on_over_a_runtime_without_events_is_status_1(
    run: Runner, command: tuple[str, ...], runtime: dict[str, Any]
) -> None:
    with SimRuntime(2, seed=1, churn=0.0, **runtime) as sim:
        result = subprocess.run(
            [run.exe, *command, "-r", sim.endpoint, "--events", "on"],
            check=False,
            capture_output=True,
            text=True,
            env=run.env(),
            timeout=30,
        )
    assert result.returncode == 1, result
    assert "--events on" in result.stderr and sim.endpoint.removeprefix("unix://") in result.stderr


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("events", "-o", "json"), 130),
        (("pods", "-w"), 130),
        (("watch",), 0),  # into a pipe: pods -w's rows; Ctrl-C ends it cleanly
    ],
    ids=["events", "pods -w", "watch-into-a-pipe"],
)
def test_sigint_stops_a_follower_started_with_sigint_ignored(
    run: Runner, own_sim: SimRuntime, args: tuple[str, ...], status: int
) -> None:
    proc = Running(run, *args, "-r", own_sim.endpoint, sigint_ignored=True)
    try:
        proc.wait_until(lambda lines: len(lines) >= 2)  # following: the first rows are out
        assert proc.interrupt() == status
    finally:
        proc.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_watch_into_a_pipe_ends_on_every_signal_however_it_lands(
    run: Runner, own_sim: SimRuntime, signum: int
) -> None:
    """The signal lands wherever the main thread is, also inside a lock: ``watch`` hung there
    (``cli.stopping``). Each of a series of runs must end, with status 0."""
    for _ in range(8):
        proc = Running(run, "watch", "-r", own_sim.endpoint, "--period", PERIOD)
        try:
            proc.wait_until(lambda lines: len(lines) >= 2)
            proc.process.send_signal(signum)
            assert proc.wait(30) == 0
        finally:
            proc.stop()
