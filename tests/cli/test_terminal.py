"""``podcache`` in a real terminal (tmux): ``watch``'s live table and footer appear, q and
Ctrl-C quit it with status 0 and the terminal is restored (cbreak off, alternate screen left);
``pods`` draws its table with rich, cut to the terminal's width."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podcache.cri import CRIRuntime
from podcache.sim import SimRuntime
from tests.cli.conftest import TRUNC, Runner, newest_sandbox_id

WIDTH, HEIGHT = 160, 40
CHROME_LINES = 6  # header, blank, table header, blank, footer, status line
FOOTER = re.compile(
    r"(\d+) pods · cache age \d+\.\ds \(period 1s\) · refresh latency \d+\.\d ms · "
    r"refreshes \d+ · hits \d+ · errors 0 · events (subscribed|reconnecting) \(\d+\) · "
    r"q or Ctrl-C to quit"
)

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Terminal:
    """A private tmux server (its socket in ``workdir``) with one detached WIDTHxHEIGHT
    session running a script."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = str(workdir / "tmux.sock")

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
            env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")},
        )
        return done.stdout

    def start(self, command: list[str], env: dict[str, str]) -> None:
        script = self.workdir / "session.sh"
        exports = "".join(
            f"export {k}={shlex.quote(v)}\n"
            for k, v in env.items()
            if k not in ("TERM", "TMUX", "TMUX_PANE")  # the pane's own terminal, not ours
        )
        script.write_text(
            "#!/bin/sh\n"
            "unset COLUMNS LINES\n"  # pytest sets them; the pane has its own size
            "trap : INT\n"  # Ctrl-C is for podcache; this script goes on to record its status
            f"{exports}"
            f"{shlex.join(command)}\n"
            f'echo "exit=$?" > {self.workdir}/rc.tmp\n'
            # The terminal settings are recorded before rc appears: a test reads both once it does.
            f"stty -a > {self.workdir}/stty.txt\n"
            f"mv {self.workdir}/rc.tmp {self.workdir}/rc\n"
            'echo "the command has ended"\n'
            "sleep 60\n"
        )
        script.chmod(0o755)
        self.tmux(
            "new-session", "-d", "-s", "watch", "-x", str(WIDTH), "-y", str(HEIGHT), str(script)
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "watch")

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if pattern.search(screen):
                return screen
            if time.monotonic() > deadline:
                pytest.fail(f"{pattern.pattern!r} never appeared; the screen:\n{screen}")
            time.sleep(0.1)

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "watch", *keys)

    def exit_status(self, timeout: float = 15.0) -> str:
        rc = self.workdir / "rc"
        deadline = time.monotonic() + timeout
        while not rc.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"watch did not exit; the screen:\n{self.screen()}")
            time.sleep(0.05)
        return rc.read_text().strip()

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, check=False)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path)
    try:
        yield term
    finally:
        term.close()


def assert_restored(terminal: Terminal) -> None:
    settings = (terminal.workdir / "stty.txt").read_text().split()
    assert "icanon" in settings and "echo" in settings, settings  # cbreak mode was undone
    screen = terminal.wait_for(re.compile("the command has ended"))
    assert "cache age" not in screen and "POD ID" not in screen  # the alternate screen is gone


def test_watch_sim_shows_table_and_footer_and_quits_on_q(run: Runner, terminal: Terminal) -> None:
    terminal.start([run.exe, "watch", "--sim", "--interval", "100ms"], run.env())
    screen = terminal.wait_for(FOOTER)
    lines = screen.splitlines()
    assert lines[0].startswith("podcache watch · simulated runtime at unix:///")
    assert re.match(r"POD ID\s+CREATED\s+STATE\s+NAME\s+NAMESPACE\s+CONTAINERS", lines[2])
    assert re.match(r"[0-9a-f]{13}\s+\d+[smhd] ago\s+Ready\s+\S+", lines[3])
    terminal.send("q")
    assert terminal.exit_status() == "exit=0"
    assert_restored(terminal)


def test_watch_shows_the_runtimes_pods_and_quits_on_ctrl_c(
    run: Runner, terminal: Terminal, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with sim.pause_churn():
        pods = runtime.get_pods(False)
        terminal.start([run.exe, "watch", "-r", sim.endpoint, "--interval", "100ms"], run.env())
        screen = terminal.wait_for(FOOTER)
        terminal.send("C-c")
        status = terminal.exit_status()
    lines = screen.splitlines()
    room = HEIGHT - CHROME_LINES
    rows = lines[3 : 3 + min(room, len(pods))]
    assert [row.split()[0] for row in rows] == [newest_sandbox_id(p)[:TRUNC] for p in pods][:room]
    match = FOOTER.search(screen)
    assert match and int(match[1]) == len(pods)
    if len(pods) > room:
        assert f"… and {len(pods) - room} more" in screen
    assert status == "exit=0"
    assert_restored(terminal)


def test_pods_on_a_narrow_terminal_cuts_cells_to_fit(
    run: Runner, terminal: Terminal, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with sim.pause_churn():
        pods = [p for p in runtime.get_pods(False) if p.namespace == "default"]
        command = [run.exe, "pods", "-r", sim.endpoint, "-o", "wide", "-n", "default"]
        terminal.start(command, run.env())
        assert terminal.exit_status() == "exit=0"
    screen = terminal.wait_for(re.compile("the command has ended"))
    lines = screen.splitlines()
    assert re.match(
        r"POD ID\s+CREATED\s+STATE\s+NAME\s+NAMESPACE\s+CONTAINERS\s+IP\s+UID", lines[0]
    )
    assert max(len(line) for line in lines) <= WIDTH  # cut to fit, never wrapped
    rows = [line.split() for line in lines[1 : 1 + len(pods)]]
    # IDs and names keep their width; the flexible columns (labels, names) are cut instead.
    assert [row[0] for row in rows] == [newest_sandbox_id(p)[:TRUNC] for p in pods]
    assert [row[4] for row in rows] == [p.name for p in pods]  # row[1:3]: "4m ago"
    # The IP keeps its width too (kubectl's -o wide column).
    assert [row[7] for row in rows] == [
        "host" if p.host_network else (p.ips[0] if p.ips else "-") for p in pods
    ]
    assert any(row[-1].endswith("…") for row in rows)
