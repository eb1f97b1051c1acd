"""``podcache which PID|IP...``: the container and pod of each process, read from ``/proc`` and
matched against the runtime's pods through a ``RuntimeCache`` (``pod_of_pid``), and the pod
holding each IP (``PodList.by_ip``); the command and its table only (the rules are in
``podcache.procs``, ``podcache.cache.pids`` and ``podcache.model``)."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import time
from typing import Any, NamedTuple

import click

from podcache.cli.early import PID_MAX, which_argument
from podcache.cli.options import OutputOptions, RuntimeSettings, output_options, runtime_options

__all__ = ["ONE_SHOT_PERIOD", "which_command"]

ONE_SHOT_PERIOD = 3600.0
"""The command's cache period: one listing serves every PID (a PID newer than it refreshes)."""


IP_MISS_REASON = "no_pod"
"""``"reason"`` of an IP no pod the runtime lists holds now."""


class _PIDOrIP(click.ParamType[int | str, Any]):
    """A process ID as ps shows it (digits), or an IP address (anything ``ipaddress`` takes,
    kept in ``ipaddr.normalise_ip``'s canonical text: ``::ffff:10.0.0.7`` is ``10.0.0.7``);
    anything else is a usage error that says what is taken."""

    name = "PID|IP"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | str:
        text = str(value).strip()
        argument = which_argument(text)
        if argument is not None:
            return argument
        self.fail(
            f"{text[:40]!r} is not a PID or an IP address: which takes process IDs, whole "
            f"numbers from 1 to {PID_MAX:,} (as ps shows them; e.g. podcache which "
            "$(pgrep nginx)), and pod IPs (10.244.1.7, fd00::7)",
            param,
            ctx,
        )


class _Row(NamedTuple):
    """One PID's answer: the process found (``podcache.cache.pids.PodProcess``) or why not
    (``problem`` in words, ``reason`` one of ``jsonview.PID_MISS_REASONS``'s values)."""

    pid: int | str
    process: Any
    problem: str | None
    reason: str | None = None


@click.command("which", short_help="Show the pod of processes (by PID) and of pod IPs.")
@click.argument("pids", metavar="PID|IP...", nargs=-1, required=True, type=_PIDOrIP())
@click.option(
    "--proc-root",
    default="/proc",
    show_default=True,
    metavar="PATH",
    help="Where to read processes (the host's /proc when run in a container).",
)
@output_options(quiet=False, formats=("table", "json"))
@runtime_options
def which_command(
    *, pids: tuple[int | str, ...], proc_root: str, out: OutputOptions, runtime: RuntimeSettings
) -> None:
    """Show, for each PID, the container (or sandbox) it runs in and that container's pod;
    for each IP address, the pod holding it now.

    A process's container is read from /proc/PID/cgroup and looked up among the runtime's
    running containers and ready sandboxes; a process newer than that listing makes it list
    again once. Table columns: PID, CONTAINER, POD, NAMESPACE, STATE (the container's); a
    process in a pod's cgroup but in none of its containers (CRI-O's conmon) shows the pod and
    "-" for the container. -o json prints {"items": [{"pid", "pod", "container"}]} (the shapes
    of `podcache inspect` and the HTTP API; null where nothing was found), with "reason" null
    for a process found, else why not: "no_process", "not_in_container" (its cgroup names no
    container or pod) or "container_unknown" (it names one the runtime does not list), as
    /pids/{pid} answers 404.

    An argument that parses as an IP address (IPv4 or IPv6, any spelling) is an IP: its row
    shows the pod whose newest ready sandbox has that address (host-network pods have none of
    their own), "-" for the container and state; in -o json its item is {"ip", "pod",
    "container": null, "reason"} with the IP in canonical text and "reason" "no_pod" when no
    pod holds it.

    Exit status 3 when any PID is not in a container or pod the runtime lists, or no pod holds
    an IP (each one is named on stderr), 1 when the runtime or /proc cannot be read.
    """
    from podcache.cli.exits import EXIT_NOT_FOUND, show_error
    from podcache.cli.source import open_source

    with open_source(runtime, one_shot=True, ips=_ips_asked(pids, out)) as source:
        cache = _lookups(source.runtime, pids)
        rows = [
            _find_ip(cache, pid) if isinstance(pid, str) else _find(cache, pid, proc_root)
            for pid in pids
        ]
    _print(rows, out)
    missing = [row for row in rows if row.problem is not None]
    for row in missing:
        what = "IP" if isinstance(row.pid, str) else "process"
        show_error(f"{what} {row.pid} {row.problem}")
    if missing:
        click.get_current_context().exit(EXIT_NOT_FOUND)


def _ips_asked(pids: tuple[int | str, ...], out: OutputOptions) -> bool | frozenset[str]:
    """Whether the pods' IPs are asked for: when shown (JSON carries the pod) or looked up
    (an IP argument); with IP arguments only, those IPs, until each is found (the pods shown
    are the ones found)."""
    if all(isinstance(pid, str) for pid in pids):
        return frozenset(str(pid) for pid in pids)
    return out.format == "json" or any(isinstance(p, str) for p in pids)


class _OneListing:
    """``get_pods()`` of one listing, made on first need and kept: the lookups of IPs alone
    need no cache (and skip importing it)."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime
        self._pods: Any = None

    def get_pods(self) -> Any:
        if self._pods is None:
            self._pods = self._runtime.get_pods(False)
        return self._pods


def _lookups(runtime: Any, pids: tuple[int | str, ...]) -> Any:
    """What the PIDs and IPs are looked up in: a RuntimeCache when there is a PID (a process
    newer than the listing makes it list again), else one listing."""
    if all(isinstance(pid, str) for pid in pids):
        return _OneListing(runtime)
    from podcache.cache.threaded import RuntimeCache

    return RuntimeCache(runtime, ONE_SHOT_PERIOD)  # on time.monotonic


def _find(cache: Any, pid: int, proc_root: str) -> _Row:
    """A PID's row (``/proc`` is read, and the pid lookup imported, only for a PID)."""
    from podcache.cache.pids import lookup_pod
    from podcache.cli.exits import CLIError
    from podcache.jsonview import PID_MISS_REASONS
    from podcache.procs import ProcFormatError

    try:
        result = lookup_pod(cache, time.monotonic, pid, proc_root=proc_root)
    except ProcessLookupError:
        return _Row(pid, None, f"does not exist (in {proc_root})", PID_MISS_REASONS["no_process"])
    except (ProcFormatError, OSError) as e:
        raise CLIError(f"cannot read process {pid} in {proc_root}: {e}") from None
    if result.process is not None:
        return _Row(pid, result.process, None)
    reason = PID_MISS_REASONS[result.outcome]
    if result.outcome == "not_in_container":
        return _Row(pid, None, "is in no container (its cgroup names none)", reason)
    return _Row(pid, None, "is in a container or pod the runtime does not list", reason)


def _find_ip(cache: Any, ip: str) -> _Row:
    """The pod holding ``ip`` in the cache's current snapshot (the one the PIDs use)."""
    pod = cache.get_pods().by_ip(ip)
    if pod is None:
        return _Row(ip, None, "is held by no pod the runtime lists", IP_MISS_REASON)
    return _Row(ip, _PodOnly(pod), None)


class _PodOnly(NamedTuple):
    """An IP's answer: a pod and no container (the shape of ``procs.PodProcess``)."""

    pod: Any
    container: None = None


def _item(row: _Row) -> dict[str, Any]:
    from podcache.jsonview import container_to_json, pod_to_json

    found = row.process
    return {
        "ip" if isinstance(row.pid, str) else "pid": row.pid,
        "pod": None if found is None else pod_to_json(found.pod),
        "container": None
        if found is None or found.container is None
        else container_to_json(found.container),
        "reason": row.reason,
    }


def _first_column(rows: list[_Row]) -> str:
    kinds = {isinstance(row.pid, str) for row in rows}
    return "PID/IP" if len(kinds) > 1 else ("IP" if True in kinds else "PID")


def _print(rows: list[_Row], out: OutputOptions) -> None:
    from podcache.cli.render import TableData, print_document, print_tables

    if out.format == "json":
        print_document({"items": [_item(row) for row in rows]}, "json")
        return
    table = TableData([_first_column(rows), "CONTAINER", "POD", "NAMESPACE", "STATE"])
    for row in rows:
        table.add(str(row.pid), *_found_cells(row.process, out.no_trunc))
    print_tables([table])


def _found_cells(found: Any, no_trunc: bool) -> tuple[str, str, str, str]:
    """The CONTAINER, POD, NAMESPACE and STATE cells of what was found ("-": nothing)."""
    from podcache.cli.render import short_id

    if found is None:
        return "-", "-", "-", "-"
    pod, container = found.pod, found.container
    if container is None:
        return "-", pod.name or "-", pod.namespace or "-", "-"
    state = container.state.value.capitalize()
    return short_id(container.id.id, no_trunc), pod.name or "-", pod.namespace or "-", state
