"""``--log-level`` of the CLI's long-running commands: ``podcache events`` and
``podcache pods -w`` say on stderr, once each, that the runtime's event stream was lost and
that it is back, naming the method, the endpoint and the cause; ``info`` adds the first
subscription; ``error`` says neither."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

from podcache.sim import SimRuntime
from tests.cli.conftest import Runner

WAIT = 30.0


class Stderr:
    """A ``podcache`` subprocess whose stderr lines are collected as they come."""

    def __init__(self, run: Runner, *args: str) -> None:
        self.process = subprocess.Popen(
            [run.exe, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=run.env(),
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def until(self, words: str) -> None:
        deadline = time.monotonic() + WAIT
        while not any(words in line for line in self.lines):
            assert self.process.poll() is None, self.lines
            assert time.monotonic() < deadline, f"never said {words!r}: {self.lines}"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(5)


@pytest.mark.parametrize("command", [["events"], ["pods", "-w"]], ids=["events", "pods -w"])
def test_a_lost_stream_and_its_return_are_said_once_each(run: Runner, command: list[str]) -> None:
    with SimRuntime(3, seed=1, churn=0.0) as sim:
        proc = Stderr(run, *command, "-r", sim.endpoint, "--period", "60s", "--log-level", "info")
        try:
            proc.until("GetContainerEvents at " + sim.endpoint + ": subscribed")
            sim.cut_event_streams()
            proc.until("subscribed again")
        finally:
            proc.stop()
    said = [line for line in proc.lines if line.startswith("podcache: warning: ")]
    assert len(said) == 2, proc.lines
    assert "stream lost" in said[0] and "stream cut" in said[0] and sim.endpoint in said[0]
    assert "GetContainerEvents" in said[1] and sim.endpoint in said[1]


def test_log_level_error_says_nothing_of_a_lost_stream(run: Runner) -> None:
    with SimRuntime(3, seed=1, churn=0.0) as sim:
        proc = Stderr(run, "events", "-r", sim.endpoint, "--period", "60s", "--log-level", "error")
        try:
            sim.wait_for_event_subscribers(1, timeout=WAIT)
            sim.cut_event_streams()
            sim.wait_for_event_subscribers(1, timeout=WAIT)
        finally:
            proc.stop()
    assert not any("GetContainerEvents" in line for line in proc.lines), proc.lines
