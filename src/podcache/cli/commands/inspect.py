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
@click.option(
    "--departed",
    is_flag=True,
    help="When the runtime no longer lists it, ask the node's podcache serve (--server) for "
    "a pod that left in its last departed-for window, and say when it left.",
)
@click.option(
    "--server",
    metavar="URL",
    envvar="PODCACHE_SERVER",
    default="http://127.0.0.1:10260",
    show_default=True,
    help="podcache serve to ask with --departed: http://HOST:PORT or unix:PATH "
    "(env PODCACHE_SERVER).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Its bearer token, for a server that asks for one.",
)
@output_options(quiet=False, formats=("json", "yaml", "table"))
@runtime_options
def inspect_command(
    *,
    ident: str,
    departed: bool,
    server: str,
    token_file: str | None,
    out: OutputOptions,
    runtime: RuntimeSettings,
) -> None:
    """Show the pod that ID names, with all its containers and sandboxes (exited ones too).

    ID is tried as: a container or sandbox ID as type://id; a pod UID; name_namespace; a bare
    container or sandbox ID or a unique prefix of it (at least 4 characters). Pods are looked up
    among all of the runtime's pods, ready or not. Prints the pod as JSON (default, the shape of
    one item of `podcache pods -o json`, with "matched"), YAML, or a table.

    Which container or sandbox an ID matched is said: "matched" in JSON and YAML ({"kind":
    "container" or "sandbox", "id": type://id, "name", "attempt"}; null when ID is a UID or
    name_namespace), a "Matched:" line in the table, whose row of it is marked "*".

    With --departed, an ID the runtime no longer lists is asked of the node's podcache serve,
    which remembers the pods that left (a whole container or sandbox ID, or a pod UID): the
    pod is printed with "departed_at", when it left.

    Exit status 3 when nothing matches; 2 for an ambiguous prefix (the candidates are listed on
    stderr) or a prefix shorter than 4 characters.
    """
    from podcache.cli.exits import NotFoundError
    from podcache.cli.query import find
    from podcache.cli.render import matched_document, pod_detail, print_document, print_tables
    from podcache.cli.source import open_source
    from podcache.jsonview import pod_to_json

    started = time.monotonic()  # --timeout bounds the whole command, the listing included
    with open_source(runtime) as source:
        pods = source.runtime.get_pods(True)
    try:
        pod, matched = find(pods, ident)
    except NotFoundError:
        if not departed:
            raise
        _print_departed(ident, server, token_file, out, runtime.timeout, started=started)
        return
    if out.format == "table":
        print_tables(pod_detail(pod, out, time.time_ns(), matched))
    else:
        print_document(pod_to_json(pod) | {"matched": matched_document(pod, matched)}, out.format)


def _print_departed(
    ident: str,
    server: str,
    token_file: str | None,
    out: OutputOptions,
    timeout: float | None,
    *,
    started: float,
) -> None:
    """The departed pod ``ident`` names, as podcache serve remembers it; exit 3 if none."""
    from pathlib import Path

    from podcache.cli.departed import ask_departed
    from podcache.cli.exits import NotFoundError
    from podcache.cli.render import print_document

    token = Path(token_file).read_text().strip() if token_file else None
    budget = 10.0 if timeout is None else timeout
    document = ask_departed(server, ident, token, budget, since=started)
    if document is None:
        raise NotFoundError(f"no pod or container {ident}, listed or departed (asked {server})")
    item = {**document["pod"], "departed_at": document.get("departed_at")}
    if "container" in document:
        item["departed_container"] = document["container"]
    if out.format == "table":
        when = item["departed_at"] or "still listed by podcache serve"
        click.echo(f"{item.get('name', '')}_{item.get('namespace', '')}  UID {item.get('id')}")
        click.echo(f"Departed: {when}")
        for container in item.get("containers", []):
            click.echo(f"  {container.get('name', '')}  {container.get('id', '')}")
    else:
        print_document(item, out.format)
