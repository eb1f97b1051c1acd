"""``podcache events``: one line per change of the node's pods as it happens (time, type, pod,
namespace, and what changed in words), or the HTTP watch stream's JSON lines; the command and
its line format only (following in ``follow``, the words in ``changes``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from podcache.cli.logs import log_level_option
from podcache.cli.options import (
    PodFilter,
    RuntimeSettings,
    duration_option,
    events_option,
    filter_options,
    runtime_options,
    sim_churn_option,
)

if TYPE_CHECKING:
    from podcache.cache.changes import PodChange

__all__ = ["EventLines", "events_command"]

_COLUMNS = ("TIME", "TYPE", "POD", "NAMESPACE", "CHANGE")
_FIXED = (len("00:00:00"), len("MODIFIED"))
"""TIME and TYPE are as wide as their widest value from the start: a later row (a DELETED
among the first ADDED ones, a MODIFIED) never shifts the columns after them."""
_GAP = "   "


class EventLines:
    """The table's lines, written a batch of changes at a time: TIME and TYPE as wide as their
    widest values (``_FIXED``), POD and NAMESPACE as wide as their widest cell so far (the
    header's and the first batch's at first), columns three spaces apart, no empty cells
    ("-"); the header comes with the first batch."""

    def __init__(self) -> None:
        self.widths: list[int] | None = None

    def batch(self, changes: list[PodChange], clock: float) -> str:
        """The lines of ``changes``, seen at unix time ``clock`` (and the header, the first
        time)."""
        from podcache.cli.changes import describe

        stamp = time.strftime("%H:%M:%S", time.localtime(clock))
        rows = [
            (stamp, c.type.value, c.pod.name or "-", c.pod.namespace or "-", describe(c))
            for c in changes
        ]
        if self.widths is None:
            self.widths = [
                max(len(column), _FIXED[i] if i < len(_FIXED) else 0)
                for i, column in enumerate(_COLUMNS[:-1])
            ]
            rows.insert(0, _COLUMNS)
        for row in rows:
            self.widths = [max(w, len(c)) for w, c in zip(self.widths, row, strict=False)]
        return "".join(f"{self._line(row)}\n" for row in rows)

    def _line(self, cells: tuple[str, ...]) -> str:
        assert self.widths is not None
        padded = [cell.ljust(width) for cell, width in zip(cells, self.widths, strict=False)]
        return _GAP.join([*padded, cells[-1]])


@click.command("events", short_help="Print the node's pod changes as they happen.")
@filter_options(name_help="Only pods whose name matches this regular expression (searched).")
@click.option(
    "-o",
    "--output",
    type=click.Choice(("table", "json"), case_sensitive=False),
    default="table",
    show_default=True,
    help="table: one line per change; json: the lines of GET /pods?watch=1 (no bookmarks).",
)
@duration_option(
    "--period", "1s", "How often the runtime is listed to find changes.", positive=True
)
@sim_churn_option
@events_option
@log_level_option
@runtime_options
def events_command(
    *,
    where: PodFilter,
    output: str,
    period: float,
    sim_churn: float,
    events: str,
    runtime: RuntimeSettings,
) -> None:
    """Print one line per change of the node's pods, as it happens: TIME, TYPE (ADDED,
    MODIFIED, DELETED), POD, NAMESPACE and what changed in words (a container started,
    exited, was added or removed; the sandbox became not ready). The pods there are when it
    starts come first, as ADDED. Pods are listed as with `pods -a` (exited containers and
    not-ready sandboxes included), every --period and, with --events auto|on, at once on
    every container event of the runtime.

    -o json prints each change as GET /pods?watch=1 streams it:
    {"type": ..., "revision": r, "object": <the pod as in /pods>}.

    Runs until Ctrl-C (exit status 130). A runtime that fails the first read ends it with
    status 1; after that a runtime restart (or outage) is followed through: a line on stderr
    says it is reconnecting, another when the runtime answers again, and the changes made
    meanwhile follow.
    """
    from podcache.cli.follow import follow
    from podcache.cli.source import open_source
    from podcache.watchjson import change_line

    lines = EventLines()
    out = sys.stdout

    def show(batch: list[PodChange]) -> None:
        if output == "json":
            out.buffer.write(b"".join(change_line(change) for change in batch))
            out.buffer.flush()
            return
        out.write(lines.batch(batch, time.time()))

    with open_source(runtime, sim_churn=sim_churn) as source:
        follow(source, all_=True, period=period, where=where, show=show, events=events)
