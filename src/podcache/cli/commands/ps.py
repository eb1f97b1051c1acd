"""``podcache ps``: the node's containers, each with its pod, as a table, JSON, YAML or IDs; the
command only (lookups in ``query``, printing in ``render``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from podcache.cli.options import (
    OutputOptions,
    PodFilter,
    RuntimeSettings,
    all_option,
    filter_options,
    output_options,
    runtime_options,
)

if TYPE_CHECKING:
    from podcache.model import Container, Pod, PodList

__all__ = ["ps_command"]


@click.command("ps", short_help="List the node's containers with their pods (running; -a: all).")
@all_option("Include exited (and created, unknown) containers and the pods of not-ready sandboxes.")
@click.option(
    "-p",
    "--pod",
    "pod_ref",
    metavar="ID",
    help="Only this pod's containers: a pod UID, name_namespace, or a container or sandbox ID "
    "or unique prefix (as `podcache inspect`).",
)
@filter_options(
    name_help="Only containers whose name matches this regular expression (searched, as crictl)."
)
@output_options()
@runtime_options
def ps_command(
    *,
    all_: bool,
    pod_ref: str | None,
    where: PodFilter,
    out: OutputOptions,
    runtime: RuntimeSettings,
) -> None:
    """List the node's containers (not sandboxes), each with its pod.

    Without -a: running containers of ready pods. -n and -l select pods; --name selects
    containers by name. Table columns: CONTAINER, IMAGE, STATE, NAME, POD ID (the pod's newest
    sandbox), POD, NAMESPACE; -o wide adds IMAGE ID, HASH, POD UID. There is no CREATED column:
    the kubelet's pod model keeps no container creation time. -o json|yaml prints
    {"items": [...]} of containers, each with a "pod" object; -q prints container IDs.
    """
    from podcache.cli.source import open_source

    with open_source(runtime, one_shot=True, ips=False) as source:
        listed = source.runtime.get_pods(all_)
    # Imported once the listing came (the model with it, while the runtime answered): the
    # calls go out first (docs/architecture.md §6 rule 1).
    from podcache.cli.render import (
        containers_document,
        containers_table,
        print_document,
        print_tables,
    )

    rows = _chosen_containers(listed, pod_ref, where)
    if out.quiet:
        click.echo("".join(f"{container.id.id}\n" for _, container in rows), nl=False)
    elif out.format in ("json", "yaml"):
        print_document(containers_document(rows), out.format)
    else:
        print_tables([containers_table(rows, out)])


def _chosen_containers(
    listed: PodList, pod_ref: str | None, where: PodFilter
) -> list[tuple[Pod, Container]]:
    """The containers ``-p``, ``-n``, ``-l`` and ``--name`` choose, each with its pod, in the
    listing's order."""
    from podcache.cli.query import find_pod, select

    pods = select(listed, PodFilter(where.namespace, None, where.labels))
    if pod_ref is not None:
        chosen = find_pod(listed, pod_ref, param_hint="'-p' / '--pod'")
        pods = [pod for pod in pods if pod is chosen]
    name = where.name
    return [
        (pod, container)
        for pod in pods
        for container in pod.containers
        if name is None or name.search(container.name)
    ]
