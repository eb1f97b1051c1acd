"""``podcache`` in a real terminal (tmux): ``watch``'s live table and footer appear, q and
Ctrl-C quit it with status 0 and the terminal is restored (cbreak off, alternate screen left);
``pods`` draws its table with rich, cut to the terminal's width."""

from __future__ import annotations

import io
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from podcache.cli.commands.watch import footer_lines, table_rows
from podcache.cli.render import TableData, fit_widths, rich_table, terminal_lines
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
    """A private tmux server (its socket in ``workdir``) with one detached session of
    ``width`` x ``height`` (default WIDTHxHEIGHT) running a script."""

    def __init__(self, workdir: Path, width: int = WIDTH, height: int = HEIGHT) -> None:
        self.workdir = workdir
        self.socket = str(workdir / "tmux.sock")
        self.width = width
        self.height = height

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
            "new-session",
            "-d",
            "-s",
            "watch",
            "-x",
            str(self.width),
            "-y",
            str(self.height),
            str(script),
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
    assert re.match(r"podcache watch · \d\d:\d\d:\d\d · simulated runtime at unix:///", lines[0])
    assert re.match(r"POD ID\s+CREATED\s+STATE\s+NAME\s+NAMESPACE\s+ATTEMPT\s+CONTAINERS", lines[2])
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
    if len(pods) > room:
        room -= 1  # the "… and N more" line
    rows = lines[3 : 3 + min(room, len(pods))]
    assert [row.split()[0] for row in rows] == [newest_sandbox_id(p)[:TRUNC] for p in pods][:room]
    match = FOOTER.search(screen)
    assert match and int(match[1]) == len(pods)
    if len(pods) > room:
        assert f"… and {len(pods) - room} more" in screen
    assert status == "exit=0"
    assert_restored(terminal)


def test_pods_on_a_narrow_terminal_cuts_cells_to_fit(run: Runner, terminal: Terminal) -> None:
    # A node of its own, that fits the terminal's height: the session's simulator grows as
    # tests add pods to it, and a table taller than the terminal scrolls its header away.
    with SimRuntime(24, seed=5) as sim, CRIRuntime(sim.endpoint) as runtime:
        pods = [p for p in runtime.get_pods(False) if p.namespace == "default"]
        command = [run.exe, "pods", "-r", sim.endpoint, "-o", "wide", "-n", "default"]
        terminal.start(command, run.env())
        assert terminal.exit_status() == "exit=0"
    assert 2 <= len(pods) < HEIGHT - 2
    screen = terminal.wait_for(re.compile("the command has ended"))
    lines = screen.splitlines()
    assert re.match(
        r"POD ID\s+CREATED\s+STATE\s+NAME\s+NAMESPACE\s+ATTEMPT\s+CONTAINERS\s+IP\s+UID",
        lines[0],
    )
    assert max(len(line) for line in lines) <= WIDTH  # cut to fit, never wrapped
    rows = [line.split() for line in lines[1 : 1 + len(pods)]]
    # IDs and names keep their width; the flexible columns (labels, names) are cut instead.
    assert [row[0] for row in rows] == [newest_sandbox_id(p)[:TRUNC] for p in pods]
    assert [row[4] for row in rows] == [p.name for p in pods]  # row[1:3]: "4m ago"
    # The IP keeps its width too (kubectl's -o wide column).
    assert [row[8] for row in rows] == [
        "host" if p.host_network else (p.ips[0] if p.ips else "-") for p in pods
    ]
    assert any(row[-1].endswith("…") for row in rows)


SMALL_WIDTH, SMALL_HEIGHT = 80, 20
FOOTER_PARTS = re.compile(
    r"(\d+) pods · cache age \d+\.\ds \(period 1s\) · refresh latency \d+\.\d ms · "
    r"refreshes \d+\n"
    r"hits \d+ · errors 0 · events (subscribed|reconnecting) \(\d+\) · q or Ctrl-C to quit\n"
)


def test_watch_fits_an_80_by_20_terminal_with_its_footer(run: Runner, tmp_path: Path) -> None:
    """Every line of the screen within 80 columns, none wrapped: the header whole on its first
    line, the footer's figures on two lines broken between figures, the pods that fit, and a
    line for those that do not, all within 20 lines."""
    terminal = Terminal(tmp_path, SMALL_WIDTH, SMALL_HEIGHT)
    try:
        terminal.start(
            [run.exe, "watch", "--sim", "--sim-pods", "40", "--interval", "100ms"], run.env()
        )
        screen = terminal.wait_for(FOOTER_PARTS)
        terminal.send("q")
        assert terminal.exit_status() == "exit=0"
    finally:
        terminal.close()
    lines = screen.split("\n")[:SMALL_HEIGHT]
    assert max(len(line) for line in lines) <= SMALL_WIDTH
    assert re.match(r"podcache watch · \d\d:\d\d:\d\d · simulated runtime at unix:///", lines[0])
    assert re.match(r"POD ID\s+CREATED\s+STATE\s+NAME\s+NAMESPACE\s+ATTEMPT", lines[2])
    match = FOOTER_PARTS.search(screen)
    assert match is not None
    footer_at = screen[: match.start()].count("\n")
    assert footer_at == SMALL_HEIGHT - 3  # two footer lines, then the (empty) status line
    rows = [line for line in lines[3:footer_at] if re.match(r"[0-9a-f]{10}…\s", line)]
    more = [line for line in lines if line.startswith("… and ")]
    assert more == [f"… and {int(match[1]) - len(rows)} more"]
    assert len(rows) == SMALL_HEIGHT - 5 - 2 - 1  # chrome, footer, the "more" line


# -- the screen's arithmetic, for any terminal (no terminal needed) ----------------------------


@given(
    st.lists(st.text(alphabet="ab()0", min_size=1, max_size=30), min_size=1, max_size=10),
    st.integers(1, 200),
)
def test_footer_lines_fit_and_keep_every_figure_in_order(figures: list[str], width: int) -> None:
    lines = footer_lines(figures, width)
    assert all(len(line) <= width for line in lines)
    if all(len(figure) <= width for figure in figures):
        assert " · ".join(lines) == " · ".join(figures)  # broken between figures only
    for first, second in itertools.pairwise(lines):  # as few lines as the figures fill
        assert len(first) + 3 + len(second.split(" · ")[0]) > width


@pytest.mark.parametrize(
    ("height", "footer", "pods", "rows"),
    [
        (20, 2, 40, 12),  # 5 chrome + 2 footer + the "more" line
        (20, 2, 13, 13),  # they fit: no "more" line
        (20, 2, 14, 12),
        (40, 1, 60, 33),
        (40, 1, 0, 34),
        (5, 3, 9, 1),  # never less than one row
    ],
)
def test_table_rows_leave_room_for_the_chrome_footer_and_more_line(
    height: int, footer: int, pods: int, rows: int
) -> None:
    assert table_rows(height, footer, pods) == rows


# -- one-shot tables on a terminal: drawn without rich, as rich draws them ---------------------

_CELLS = st.text(alphabet="abcxyz-=,.0123", min_size=1, max_size=24)


@st.composite
def tables(draw: st.DrawFn) -> TableData:
    columns = draw(
        st.lists(
            st.sampled_from(["POD ID", "STATE", "NAME", "LABELS", "IMAGE", "UID"]),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    table = TableData(columns)
    for _ in range(draw(st.integers(0, 4))):
        table.add(*(draw(st.sampled_from(["Ready", "NotReady"]) | _CELLS) for _ in columns))
    return table


@given(tables(), st.integers(20, 200))
def test_terminal_lines_are_what_rich_draws(table: TableData, width: int) -> None:
    """``pods``, ``ps`` and ``inspect`` draw tables without rich; ``watch`` draws them with
    rich: the same text wherever the columns' minimums fit the width, and never a line wider
    than the terminal."""
    ours = terminal_lines(table, width, color=False)
    assert all(len(line) <= width for line in ours)
    shown = [table.columns, *table.rows]
    natural = [max(len(row[i]) for row in shown) for i in range(len(table.columns))]
    fitted = fit_widths(natural, [c in table.flexible for c in table.columns], width)
    if sum(fitted) + 3 * (len(fitted) - 1) <= width:
        buffer = io.StringIO()
        Console(file=buffer, width=width, color_system=None, highlight=False).print(
            rich_table(table, width)
        )
        assert ours == [line.rstrip() for line in buffer.getvalue().splitlines()]


def test_colours_are_rich_s_codes() -> None:
    table = TableData(["NAME", "STATE"])
    table.add("web", "Ready")
    assert terminal_lines(table, 80, color=True) == [
        "\x1b[1mNAME   STATE\x1b[0m",
        "web    \x1b[32mReady\x1b[0m",
    ]


def test_pods_draws_its_table_in_a_terminal_without_rich(
    run: Runner, terminal: Terminal, sim: SimRuntime
) -> None:
    script = (
        "import sys; from podcache.cli import run; status = run(sys.argv[1:]); "
        "print('rich imported:', 'rich' in sys.modules, 'status', status)"
    )
    terminal.start([sys.executable, "-c", script, "pods", "-r", sim.endpoint], run.env())
    assert terminal.exit_status() == "exit=0"
    screen = terminal.wait_for(re.compile("the command has ended"))
    assert re.search(r"[0-9a-f]{13}\s+\d+[smhd] ago\s+Ready\s+\S+", screen)  # the rows (scrolled)
    assert "rich imported: False status 0" in screen
