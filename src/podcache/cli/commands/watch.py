"""``podcache watch``: a live table of the node's pods served from a RuntimeCache, with the
cache's age and refresh latency in its footer; the command and its screen only (keys in
``terminal``, cells in ``render``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from podcache.cli.options import (
    DURATION,
    OutputOptions,
    PodFilter,
    RuntimeSettings,
    events_option,
    filter_options,
    runtime_options,
    sim_churn_option,
)

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from podcache.cache import RuntimeCache
    from podcache.cli.source import Source
    from podcache.model import Pod, PodList

__all__ = ["watch_command"]

_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_QUIT_KEYS = frozenset("qQ\x03\x04")  # q, Ctrl-C and Ctrl-D typed in cbreak mode
_CHROME_LINES = 6  # header, blank, table header, blank, footer, status


@click.command("watch", short_help="Watch the node's pods live, served from the runtime cache.")
@click.option(
    "-a", "--all", "all_", is_flag=True, help="Include not-ready sandboxes and exited containers."
)
@click.option(
    "--period",
    type=DURATION,
    default="1s",
    show_default=True,
    help="Cache period: the runtime is asked again once the pods are older than this.",
)
@click.option(
    "--interval",
    type=DURATION,
    default="250ms",
    show_default=True,
    help="Redraw interval (each redraw reads the cache; most reads are hits).",
)
@sim_churn_option
@filter_options(name_help="Only pods whose name matches this regular expression (searched).")
@click.option("--no-trunc", is_flag=True, help="Show full IDs.")
@events_option
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

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # SIGTERM and SIGHUP (the terminal closed) end it as Ctrl-C does: the terminal restored,
    # a simulated runtime stopped and its directory removed.
    previous = {signum: signal.signal(signum, on_term) for signum in _ENDING_SIGNALS}
    try:
        with open_source(runtime, sim_churn=sim_churn) as source:
            if events == "on":
                require_events(source)
            if not sys.stdout.isatty():
                _lines(
                    source, all_=all_, period=period, where=where, no_trunc=no_trunc, events=events
                )
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
    from podcache.cli.terminal import KeyReader

    cache = RuntimeCache(listing(source, all_, events), period, stats=True, events=events)
    screen = _Screen(cache, source, period=period, where=where, out=out)
    # The first read fails the command (exit 1, like every other command); later failures are
    # shown in the footer and retried, over the last pods read.
    pods = cache.get_pods()
    with (
        cache,
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
            live.update(screen.draw(pods, problem), refresh=True)
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
        """The whole screen for ``pods``, with ``problem`` (if any) on its last line."""
        from rich.console import Group
        from rich.text import Text

        from podcache.cli.query import select

        header = Text.assemble(
            ("podcache watch", "bold"), f" · {self._origin} · {time.strftime('%H:%M:%S')}"
        )
        chosen = select(pods, self._where)
        return Group(
            header,
            Text(""),
            self._table(chosen),
            Text(""),
            self._footer(len(chosen)),
            Text(problem, style="red"),
        )

    def _table(self, chosen: Sequence[Pod]) -> Table | Group:
        """The table of as many pods as the terminal has room for, and how many did not fit."""
        from rich.console import Group
        from rich.text import Text

        from podcache.cli.render import pods_table, rich_table

        room = max(1, self.console.size.height - _CHROME_LINES)
        table = rich_table(
            pods_table(chosen[:room], self._out, time.time_ns()), self.console.size.width
        )
        if len(chosen) <= room:
            return table
        return Group(table, Text(f"… and {len(chosen) - room} more", style="dim"))

    def _footer(self, total: int) -> Text:
        from rich.text import Text

        stats = self._cache.stats()
        age = "-" if stats.age is None else f"{stats.age:.1f}s"
        latency = (
            "-"
            if stats.last_refresh_duration is None
            else f"{stats.last_refresh_duration * 1e3:.1f} ms"
        )
        return Text(
            f"{total} pods · cache age {age} (period {self._period:g}s) · refresh latency "
            f"{latency} · refreshes {stats.refreshes} · hits {stats.hits} · errors "
            f"{stats.errors} · events {stats.events_state} ({stats.events_received}) · "
            "q or Ctrl-C to quit",
            style="dim",
        )
