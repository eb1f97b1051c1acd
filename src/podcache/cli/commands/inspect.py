"""``podcache inspect ID``: one pod, found by UID, name_namespace, or a container's or sandbox's
ID or unique prefix, printed whole; the command only (lookup rules in ``query``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import time

import click

from podcache.cli.options import OutputOptions, RuntimeSettings, output_options, runtime_options

__all__ = ["inspect_command"]


@click.command("inspect", short_help="Show one pod by UID, name_namespace, or container ID.")
@click.argument("ident", metavar="ID")
@output_options(quiet=False, formats=("json", "yaml", "table"))
@runtime_options
def inspect_command(*, ident: str, out: OutputOptions, runtime: RuntimeSettings) -> None:
    """Show the pod that ID names, with all its containers and sandboxes (exited ones too).

    ID is tried as: a container or sandbox ID as type://id; a pod UID; name_namespace; a bare
    container or sandbox ID or a unique prefix of it (at least 4 characters). Pods are looked up
    among all of the runtime's pods, ready or not. Prints the pod as JSON (default, the shape of
    one item of `podcache pods -o json`), YAML, or a table.

    Exit status 3 when nothing matches; 2 for an ambiguous prefix (the candidates are listed on
    stderr) or a prefix shorter than 4 characters.
    """
    from podcache.cli.query import find_pod
    from podcache.cli.render import pod_detail, print_document, print_tables
    from podcache.cli.source import open_source
    from podcache.jsonview import pod_to_json

    with open_source(runtime) as source:
        pods = source.runtime.get_pods(True)
    pod = find_pod(pods, ident)
    if out.format == "table":
        print_tables(pod_detail(pod, out, time.time_ns()))
    else:
        print_document(pod_to_json(pod), out.format)
