"""``podcache watch``: a live table of the node's pods served from a RuntimeCache, with the
cache's age and refresh latency in its footer; the command and its screen only (keys in
``terminal``, cells in ``render``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import click

from podcache.cli.events import events_option, require_events
from podcache.cli.options import (
    DURATION,
    OutputOptions,
    PodFilter,
    RuntimeSettings,
    filter_options,
    runtime_options,
)

if TYPE_CHECKING:
    from podcache.cli.source import Source
    from podcache.cri import ContainerEventStream, CRIRuntime
    from podcache.model import PodList

__all__ = ["watch_command"]

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
@click.option(
    "--sim-churn",
    type=click.FloatRange(min=0),
    default=0.2,
    show_default=True,
    metavar="RATE",
    help="With --sim: pods the simulated runtime replaces per second.",
)
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

    Quit with q or Ctrl-C (exit status 0); the terminal is restored.
    """
    from podcache.cli.source import open_source

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        with open_source(runtime, sim_churn=sim_churn) as source:
            if events == "on":
                require_events(source.endpoint, source.runtime.timeout)
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
        signal.signal(signal.SIGTERM, previous)


class _Listing:
    """A getter that lists with a fixed ``all`` (RuntimeCache always asks for ``all=False``)."""

    def __init__(self, runtime: CRIRuntime, all_: bool) -> None:
        self._runtime = runtime
        self._all = all_

    def get_pods(self, all: bool) -> PodList:
        return self._runtime.get_pods(self._all)

    def container_events(self) -> ContainerEventStream:
        return self._runtime.container_events()


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
    from rich.console import Console, Group
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    from podcache.cache import RuntimeCache
    from podcache.cli.query import select
    from podcache.cli.render import pods_table, rich_table
    from podcache.cli.terminal import KeyReader
    from podcache.errors import PodcacheError

    cache = RuntimeCache(_Listing(source.runtime, all_), period, stats=True, events=events)
    console = Console(highlight=False)
    kind = "simulated runtime" if source.simulated else "runtime"
    # The first read fails the command (exit 1, like every other command); later failures are
    # shown in the footer and retried, over the last pods read.
    pods = cache.get_pods()
    problem = ""

    def screen() -> Group:
        stats = cache.stats()
        header = Text.assemble(
            ("podcache watch", "bold"),
            f" · {kind} at {source.endpoint} · {time.strftime('%H:%M:%S')}",
        )
        chosen = select(pods, where)
        total = len(chosen)
        room = max(1, console.size.height - _CHROME_LINES)
        body: Table | Group = rich_table(
            pods_table(chosen[:room], out, time.time_ns()), console.size.width
        )
        if total > room:
            body = Group(body, Text(f"… and {total - room} more", style="dim"))
        age = "-" if stats.age is None else f"{stats.age:.1f}s"
        latency = (
            "-"
            if stats.last_refresh_duration is None
            else f"{stats.last_refresh_duration * 1e3:.1f} ms"
        )
        footer = Text(
            f"{total} pods · cache age {age} (period {period:g}s) · refresh latency {latency} · "
            f"refreshes {stats.refreshes} · hits {stats.hits} · errors {stats.errors} · "
            f"events {stats.events_state} ({stats.events_received}) · "
            "q or Ctrl-C to quit",
            style="dim",
        )
        return Group(header, Text(""), body, Text(""), footer, Text(problem, style="red"))

    with (
        cache,
        KeyReader() as keys,
        Live(
            screen(), console=console, screen=True, auto_refresh=False, redirect_stderr=False
        ) as live,
    ):
        while True:
            try:
                pods = cache.get_pods(timeout=interval)
                problem = ""
            except PodcacheError as e:  # before TimeoutError: a runtime deadline is both
                problem = f"error: {e} (retrying)"
            except TimeoutError:
                problem = "refreshing… (the runtime has not answered yet)"
            live.update(screen(), refresh=True)
            typed = keys.wait(interval)
            if typed and _QUIT_KEYS.intersection(typed):
                return
