"""``podcache pods``: the node's pods with their containers, as a table, JSON, YAML or IDs; the
command only (lookups in ``query``, printing in ``render``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import sys
import time
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
    output_options,
    runtime_options,
    sim_churn_option,
)

if TYPE_CHECKING:
    from podcache.cache.changes import PodChange
    from podcache.cli.source import Source

__all__ = ["EVENT_WIDTH", "pods_command", "print_changes"]

EVENT_WIDTH = len("MODIFIED")
"""The EVENT column's least width: the widest change type, so a later row never shifts it."""


@click.command(
    "pods",
    short_help="List the node's pods (ready sandboxes; -a: all).",
)
@all_option("Include not-ready sandboxes and exited containers (the kubelet's GetPods(all=true)).")
@filter_options(
    name_help="Only pods whose name matches this regular expression (searched, as crictl)."
)
@output_options()
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="After the table, print one row per change as it happens, with an EVENT column "
    "(ADDED, MODIFIED, DELETED), as kubectl get -w; with -o json, the lines of "
    "GET /pods?watch=1. Until Ctrl-C; a runtime restart is followed through (said on stderr).",
)
@duration_option(
    "--period", "1s", "With -w: how often the runtime is listed to find changes.", positive=True
)
@sim_churn_option
@events_option
@log_level_option
@runtime_options
def pods_command(
    *,
    all_: bool,
    where: PodFilter,
    out: OutputOptions,
    watch: bool,
    period: float,
    sim_churn: float,
    events: str,
    runtime: RuntimeSettings,
) -> None:
    """List the node's pods, each with its containers, as the kubelet groups them.

    Without -a: pods with a ready sandbox and their running containers. Table columns: POD ID
    (the newest sandbox's ID), CREATED, STATE (Ready when a sandbox runs), NAME, NAMESPACE,
    CONTAINERS; -o wide adds IP, UID, SANDBOXES, CONTAINER NAMES, LABELS. -o json|yaml prints
    {"items": [...]} with every pod's containers and sandboxes; -q prints one ID per line that
    `podcache inspect` accepts (the newest sandbox's ID; the UID for a pod without one).
    """
    from podcache.cli.source import open_source

    if watch:
        if out.quiet or out.format == "yaml":
            raise click.UsageError(
                "-w/--watch prints a table (or -o wide, -o json), not -q or yaml"
            )
        with open_source(runtime, sim_churn=sim_churn) as source:
            print_changes(source, all_=all_, where=where, out=out, period=period, events=events)
        return
    if sim_churn:
        raise click.UsageError("--sim-churn makes changes to follow: give it with -w")
    with open_source(runtime, one_shot=True, ips=out.format != "table") as source:
        listed = source.runtime.get_pods(all_)
    # Imported once the listing came (the model with it, while the runtime answered): the
    # calls go out first (docs/architecture.md §6 rule 1).
    from podcache.cli.query import select
    from podcache.cli.render import pod_id, pods_table, print_document, print_tables
    from podcache.jsonview import pods_document

    pods = select(listed, where)
    if out.quiet:
        click.echo("".join(f"{pod_id(pod)}\n" for pod in pods), nl=False)
    elif out.format in ("json", "yaml"):
        print_document(pods_document(pods), out.format)
    else:
        print_tables([pods_table(pods, out, time.time_ns())])


def print_changes(
    source: Source,
    *,
    all_: bool,
    where: PodFilter,
    out: OutputOptions,
    period: float,
    events: str,
) -> None:
    """The pods as a table with an EVENT column (ADDED for those there at first), then one
    row per change (``pods -w``, and ``watch`` when stdout is not a terminal): each column as
    wide as its widest cell so far, EVENT as the widest type from the start."""
    from podcache.cli.follow import follow
    from podcache.cli.render import COLUMN_GAP, pods_table
    from podcache.watchjson import change_line

    widths: list[int] = []
    gap = " " * COLUMN_GAP

    def show(batch: list[PodChange]) -> None:
        nonlocal widths
        if out.format == "json":
            sys.stdout.buffer.write(b"".join(change_line(change) for change in batch))
            return
        table = pods_table([change.pod for change in batch], out, time.time_ns())
        rows = [[c.type.value, *row] for c, row in zip(batch, table.rows, strict=True)]
        if not widths:
            rows.insert(0, ["EVENT", *table.columns])
            widths = [EVENT_WIDTH] + [0] * (len(rows[0]) - 1)
        widths = [max(w, *(len(row[i]) for row in rows)) for i, w in enumerate(widths)]
        sys.stdout.write(
            "".join(
                gap.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
                for row in rows
            )
        )

    follow(source, all_=all_, period=period, where=where, show=show, events=events)
