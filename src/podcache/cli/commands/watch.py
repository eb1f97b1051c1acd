"""``podcache watch``: a live table of the node's pods served from a RuntimeCache, with the
cache's age and refresh latency in its footer; the command and its screen only (keys in
``terminal``, cells in ``render``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import click

from podcache.cli.logs import log_level_option
from podcache.cli.options import (
    OutputOptions,
    PodFilter,
    RuntimeSettings,
    all_option,
    duration_option,
    events_option,
    filter_options,
    runtime_options,
    sim_churn_option,
)

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

    from podcache.cache import RuntimeCache
    from podcache.cli.source import Source
    from podcache.model import Pod, PodList

__all__ = ["footer_lines", "table_rows", "watch_command"]

_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_QUIT_KEYS = frozenset("qQ\x03\x04")  # q, Ctrl-C and Ctrl-D typed in cbreak mode
_CHROME_LINES = 5
"""Lines of the screen besides the footer's and the pods': header, blank, the table's header,
blank, status."""


@click.command("watch", short_help="Watch the node's pods live, served from the runtime cache.")
@all_option("Include not-ready sandboxes and exited containers.")
@duration_option(
    "--period",
    "1s",
    "Cache period: the runtime is asked again once the pods are older than this.",
    positive=True,
)
@duration_option(
    "--interval",
    "250ms",
    "Redraw interval (each redraw reads the cache; most reads are hits).",
    positive=True,
)
@sim_churn_option
@filter_options(name_help="Only pods whose name matches this regular expression (searched).")
@click.option("--no-trunc", is_flag=True, help="Show full IDs.")
@events_option
@log_level_option
@runtime_options
def watch_command(
    *,
    all_: bool,
    period: float,
    interval: float,
    sim_churn: float,
    where: PodFilter,
    no_trunc: bool,
    events: str,
    runtime: RuntimeSettings,
) -> None:
    """Show the node's pods in a live table, redrawn every --interval from a RuntimeCache with
    a --period cache period; the footer shows the cache's age, the last refresh's latency and
    its counters. A runtime that fails the first read ends the command (exit status 1); later
    failures are shown in the footer and retried, the last pods staying on screen.

    Quit with q or Ctrl-C (exit status 0); the terminal is restored. When standard output
    is not a terminal (a pipe, a file), prints what `pods -w` prints instead: the table, then
    one row per change, until Ctrl-C or SIGTERM (exit status 0), a runtime restart followed
    through as `pods -w` follows it (said on stderr).
    """
    from podcache.cli.follow import require_events
    from podcache.cli.source import open_source

    with _ended_as_by_ctrl_c(), open_source(runtime, sim_churn=sim_churn) as source:
        if events == "on":
            require_events(source)
        if not sys.stdout.isatty():
            _lines(source, all_=all_, period=period, where=where, no_trunc=no_trunc, events=events)
            return
        _run(
            source,
            events=events != "off",
            all_=all_,
            period=period,
            interval=interval,
            where=where,
            out=OutputOptions("table", False, no_trunc),
        )


@contextlib.contextmanager
def _ended_as_by_ctrl_c() -> Iterator[None]:
    """Ctrl-C ends the block quietly, and so do SIGTERM and SIGHUP (the terminal closed):
    whatever the block opened is closed on the way out (the terminal restored, a simulated
    runtime stopped and its directory removed); the signals' handlers are restored after."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, on_term) for signum in _ENDING_SIGNALS}
    try:
        yield
    except KeyboardInterrupt:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _lines(
    source: Source, *, all_: bool, period: float, where: PodFilter, no_trunc: bool, events: str
) -> None:
    """The fallback without a terminal to draw on: ``pods -w``'s lines."""
    from podcache.cli.commands.pods import print_changes

    click.echo(
        "podcache watch: standard output is not a terminal: printing the table, then a row "
        "per change (as podcache pods -w)",
        err=True,
    )
    out = OutputOptions("table", False, no_trunc)
    print_changes(source, all_=all_, where=where, out=out, period=period, events=events)


def _run(
    source: Source,
    *,
    events: bool,
    all_: bool,
    period: float,
    interval: float,
    where: PodFilter,
    out: OutputOptions,
) -> None:
    from rich.live import Live

    from podcache.cache import RuntimeCache
    from podcache.cli.follow import listing
    from podcache.cli.logs import held, newest_held
    from podcache.cli.terminal import KeyReader

    cache = RuntimeCache(listing(source, all_, events), period, stats=True, events=events)
    screen = _Screen(cache, source, period=period, where=where, out=out)
    # The first read fails the command (exit 1, like every other command); later failures are
    # shown in the footer and retried, over the last pods read.
    pods = cache.get_pods()
    with (
        cache,
        held(),  # log lines on the screen's last line while it is up, on stderr after
        KeyReader() as keys,
        Live(
            screen.draw(pods, ""),
            console=screen.console,
            screen=True,
            auto_refresh=False,
            redirect_stderr=False,
        ) as live,
    ):
        while True:
            read, problem = _read(cache, interval)
            pods = read if read is not None else pods
            live.update(screen.draw(pods, problem or newest_held()), refresh=True)
            typed = keys.wait(interval)
            if typed and _QUIT_KEYS.intersection(typed):
                return


def _read(cache: RuntimeCache, interval: float) -> tuple[PodList | None, str]:
    """The cache's pods, waiting at most ``interval``; else None and what to say in red."""
    from podcache.errors import PodcacheError

    try:
        return cache.get_pods(timeout=interval), ""
    except PodcacheError as e:  # before TimeoutError: a runtime deadline is both
        return None, f"error: {e}; reconnecting (the pods shown stay as they were)"
    except TimeoutError:
        return None, "refreshing… (the runtime has not answered yet)"


class _Screen:
    """What ``watch`` draws: a header, the pods that fit the terminal, the cache's figures."""

    def __init__(
        self,
        cache: RuntimeCache,
        source: Source,
        *,
        period: float,
        where: PodFilter,
        out: OutputOptions,
    ) -> None:
        from rich.console import Console

        self.console = Console(highlight=False)
        self._cache = cache
        kind = "simulated runtime" if source.simulated else "runtime"
        self._origin = f"{kind} at {source.endpoint}"
        self._period = period
        self._where = where
        self._out = out

    def draw(self, pods: PodList, problem: str) -> Group:
        """The whole screen for ``pods``, with ``problem`` (if any) on its last line. It fits
        the terminal: every line is cut to its width (the footer is wrapped between its
        figures), and the table gets the rows left over (``table_rows``)."""
        from rich.console import Group
        from rich.text import Text

        from podcache.cli.query import select

        width, height = self.console.size
        header = Text.assemble(
            ("podcache watch", "bold"), f" · {time.strftime('%H:%M:%S')} · {self._origin}"
        )
        header.truncate(width, overflow="ellipsis")
        chosen = select(pods, self._where)
        footer = footer_lines(self._figures(len(chosen)), width)
        status = Text(problem, style="red")
        status.truncate(width, overflow="ellipsis")
        return Group(
            header,
            Text(""),
            self._table(chosen, table_rows(height, len(footer), len(chosen))),
            Text(""),
            *(Text(line, style="dim") for line in footer),
            status,
        )

    def _table(self, chosen: Sequence[Pod], rows: int) -> Table | Group:
        """The table of the first ``rows`` pods, and a line saying how many did not fit."""
        from rich.console import Group
        from rich.text import Text

        from podcache.cli.render import pods_table, rich_table

        table = rich_table(
            pods_table(chosen[:rows], self._out, time.time_ns()), self.console.size.width
        )
        if len(chosen) <= rows:
            return table
        return Group(table, Text(f"… and {len(chosen) - rows} more", style="dim"))

    def _figures(self, total: int) -> list[str]:
        """The footer's figures, in order: the pods, the cache's age, latency and counters."""
        stats = self._cache.stats()
        age = "-" if stats.age is None else f"{stats.age:.1f}s"
        latency = (
            "-"
            if stats.last_refresh_duration is None
            else f"{stats.last_refresh_duration * 1e3:.1f} ms"
        )
        return [
            f"{total} pods",
            f"cache age {age} (period {self._period:g}s)",
            f"refresh latency {latency}",
            f"refreshes {stats.refreshes}",
            f"hits {stats.hits}",
            f"errors {stats.errors}",
            f"events {stats.events_state} ({stats.events_received})",
            "q or Ctrl-C to quit",
        ]


_SEPARATOR = " · "


def footer_lines(figures: Sequence[str], width: int) -> list[str]:
    """``figures`` joined by `` · `` into as few lines of at most ``width`` characters as
    they fill in order (a line breaks between two figures; a figure wider than the terminal
    is cut)."""
    lines: list[str] = []
    for given in figures:
        figure = given if len(given) <= width else given[: max(width - 1, 0)] + "…"
        if lines and len(lines[-1]) + len(_SEPARATOR) + len(figure) <= width:
            lines[-1] += _SEPARATOR + figure
        else:
            lines.append(figure)
    return lines


def table_rows(height: int, footer: int, pods: int) -> int:
    """How many pods the table shows on a terminal ``height`` lines high, with ``footer``
    footer lines: what is left after the chrome (header, blank, the table's header, blank,
    the footer, the status line), less one for "… and N more" when ``pods`` do not all fit;
    at least one."""
    room = height - (_CHROME_LINES + footer)
    if pods > room:
        room -= 1  # the "… and N more" line
    return max(1, room)
