"""``podcache pods``: the node's pods with their containers, as a table, JSON, YAML or IDs; the
command only (lookups in ``query``, printing in ``render``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import time

import click

from podcache.cli.options import (
    OutputOptions,
    PodFilter,
    RuntimeSettings,
    filter_options,
    output_options,
    runtime_options,
)

__all__ = ["pods_command"]


@click.command(
    "pods",
    short_help="List the node's pods (ready sandboxes; -a: all).",
)
@click.option(
    "-a",
    "--all",
    "all_",
    is_flag=True,
    help="Include not-ready sandboxes and exited containers (the kubelet's GetPods(all=true)).",
)
@filter_options(
    name_help="Only pods whose name matches this regular expression (searched, as crictl)."
)
@output_options()
@runtime_options
def pods_command(
    *, all_: bool, where: PodFilter, out: OutputOptions, runtime: RuntimeSettings
) -> None:
    """List the node's pods, each with its containers, as the kubelet groups them.

    Without -a: pods with a ready sandbox and their running containers. Table columns: POD ID
    (the newest sandbox's ID), CREATED, STATE (Ready when a sandbox runs), NAME, NAMESPACE,
    CONTAINERS; -o wide adds UID, SANDBOXES, CONTAINER NAMES, LABELS. -o json|yaml prints
    {"items": [...]} with every pod's containers and sandboxes; -q prints one ID per line that
    `podcache inspect` accepts (the newest sandbox's ID; the UID for a pod without one).
    """
    from podcache.cli.query import select
    from podcache.cli.render import pod_id, pods_table, print_document, print_tables
    from podcache.cli.source import open_source
    from podcache.jsonview import pods_document

    with open_source(runtime) as source:
        pods = select(source.runtime.get_pods(all_), where)
    if out.quiet:
        click.echo("".join(f"{pod_id(pod)}\n" for pod in pods), nl=False)
    elif out.format in ("json", "yaml"):
        print_document(pods_document(pods), out.format)
    else:
        print_tables([pods_table(pods, out, time.time_ns())])
