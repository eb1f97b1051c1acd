"""The ``podcache sim`` command: serve a simulated runtime until SIGINT/SIGTERM; click only.

The ``podcache`` CLI mounts ``sim_command``; ``cli_main(argv)`` runs it on its own and
returns the exit status. It holds no simulation logic (see ``runtime``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click

from podcache.sim.addresses import DEFAULT_POD_CIDR
from podcache.sim.flavor import CONTAINERD, FLAVORS
from podcache.sim.population import DEFAULT_HOST_NETWORK, DEFAULT_NAMESPACES
from podcache.sim.runtime import SimRuntime
from podcache.sim.server import DEFAULT_STREAM_ITEMS

__all__ = ["cli_main", "sim_command"]


@click.command(
    "sim",
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
    help=(
        "Serve a simulated CRI runtime (a churning population of pods) until interrupted. "
        "Prints the endpoint on the first line of standard output."
    ),
)
@click.option(
    "--socket",
    metavar="PATH",
    help="Unix socket to listen on (default: a fresh temporary path).",
)
@click.option("--tcp", is_flag=True, help="Listen on 127.0.0.1, on a free port, instead.")
@click.option("--pods", type=click.IntRange(min=0), default=100, help="Pods on the node.")
@click.option(
    "--churn",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Pods replaced per second.",
)
@click.option("--seed", type=int, default=0, help="Seed of the population.")
@click.option(
    "--latency",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="SECONDS",
    help="Delay added to every call.",
)
@click.option(
    "--fail-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Fraction of list calls failing with UNAVAILABLE.",
)
@click.option(
    "--stats-file",
    "stats_file",
    metavar="PATH",
    help=(
        "Write the call counts (calls and answer bytes per list and status RPC, filtered "
        "and unfiltered; messages per streaming list RPC) as JSON to PATH on SIGUSR1 and on "
        "exit."
    ),
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NAME",
    help=f"Namespace for pods (repeatable; default: {', '.join(DEFAULT_NAMESPACES)}).",
)
@click.option(
    "--pod-cidr",
    default=DEFAULT_POD_CIDR,
    callback=lambda ctx, param, value: _network(value),
    metavar="CIDR",
    help="Network pod IPs are given from (IPv4 or IPv6; freed IPs are reused first).",
)
@click.option(
    "--host-network",
    type=click.FloatRange(0, 1),
    default=DEFAULT_HOST_NETWORK,
    metavar="FRACTION",
    help="Fraction of pods on the host network.",
)
@click.option(
    "--bad-ip",
    "bad_ips",
    multiple=True,
    metavar="TEXT",
    help="A hostile IP string every sandbox status carries (repeatable; a fault for tests).",
)
@click.option(
    "--no-streaming",
    is_flag=True,
    help=(
        "Answer the streaming list calls (StreamPodSandboxes, StreamContainers; CRI list "
        "streaming, KEP-5825) UNIMPLEMENTED, as containerd 1.6-2.1."
    ),
)
@click.option(
    "--stream-items",
    type=click.IntRange(min=1),
    default=DEFAULT_STREAM_ITEMS,
    metavar="N",
    help="Most items of one streamed list message (each message's count is drawn by seed).",
)
@click.option(
    "--annotation-bytes",
    type=click.IntRange(min=0),
    default=0,
    metavar="N",
    help=(
        "A last-applied-configuration annotation of N bytes on every sandbox and container "
        "(1,000 pods at 16384 pass gRPC's 16 MiB list limit)."
    ),
)
@click.option(
    "--flavor",
    type=click.Choice(list(FLAVORS)),
    default=CONTAINERD.name,
    help=(
        "The runtime to behave like: crio chunks streamed lists by 3,000 items, sends no "
        "event for a removed pod (a container removed alone has its DELETED), labels "
        "sandboxes io.kubernetes.container.name=POD, answers statuses as CRI-O (its verbose "
        "info, NOT_FOUND details, a sandbox's containers and time with events on; events "
        "carry the pod's containers) and says cri-o 1.36.3 (--stream-items does not apply: "
        "3,000 a message)."
    ),
)
@click.option(
    "--no-events",
    is_flag=True,
    help=(
        "GetContainerEvents ends at once with OK and no event, as CRI-O with "
        "enable_pod_events = false (its default)."
    ),
)
def sim_command(
    *,
    namespaces: tuple[str, ...],
    stats_file: str | None,
    no_streaming: bool,
    no_events: bool,
    **runtime: Any,
) -> None:
    """Serve a simulated CRI runtime until SIGINT, SIGTERM or SIGHUP (then remove its
    socket and directory); ``runtime``: the options named as ``SimRuntime`` takes them."""
    if runtime["socket"] is not None and runtime["tcp"]:
        raise click.UsageError("--socket and --tcp are mutually exclusive")
    stop = threading.Event()
    on_stats = _StatsOnSignal(stats_file)
    with _signals_handled(stop, on_stats):
        sim = on_stats.sim = SimRuntime(
            namespaces=namespaces or DEFAULT_NAMESPACES,
            streaming=not no_streaming,
            pod_events=not no_events,
            **runtime,
        )
        _serve_until(stop, sim, _banner(sim, runtime["seed"], no_streaming), stats_file)


class _StatsOnSignal:
    """SIGUSR1's handler: the call counts written to ``--stats-file`` (when given), once the
    runtime exists."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.sim: SimRuntime | None = None

    def __call__(self) -> None:
        if self.sim is not None and self.path is not None:
            write_stats(self.sim, self.path)


@contextmanager
def _signals_handled(stop: threading.Event, on_stats: Callable[[], None]) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP set ``stop``, SIGUSR1 calls ``on_stats``, until the block
    ends (then the previous handlers are back); only the main thread may set handlers."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def on_stats_signal(signum: int, frame: FrameType | None) -> None:
        on_stats()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, on_signal)
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_stats_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _banner(sim: SimRuntime, seed: int, no_streaming: bool) -> str:
    """The line said on start: what is simulated (the runtime imitated when not containerd,
    events when there are none)."""
    streams = "no list streaming" if no_streaming else "list streaming"
    banner = (
        f"podcache sim: {len(sim.population)} pods, churn {sim.churn}/s, seed {seed}, {streams}"
    )
    if sim.flavor is not CONTAINERD:
        banner += f", as {sim.flavor.name}"
    return banner if sim.pod_events else banner + ", no events"


def _network(text: str) -> str:
    """A ``--pod-cidr`` that is a network (host bits clear), else a usage error naming it."""
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pod-cidr") from None
    return text


def _serve_until(
    stop: threading.Event, sim: SimRuntime, banner: str, stats_file: str | None
) -> None:
    """Start ``sim``, print its endpoint, serve until ``stop`` is set, then stop it (and write
    the stats file one last time)."""
    try:
        sim.start()
    except OSError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        click.echo(sim.endpoint)
        sys.stdout.flush()
        click.echo(f"{banner} on {sim.endpoint}; stop with Ctrl-C", err=True)
        while not stop.wait(0.2):
            pass
    finally:
        sim.stop()
        if stats_file is not None:
            write_stats(sim, stats_file)


def write_stats(sim: SimRuntime, path: str) -> None:
    """Replace ``path`` with the sim's call counts, atomically (readers never see half a file):
    ``{"pods": n, "generation": g, "calls": {method: {"filtered"|"unfiltered": {...}}},
    "stream_messages": {method: n}}``."""
    document = {
        "pods": len(sim.population),
        "generation": sim.population.generation,
        "calls": sim.call_counts(),
        "stream_messages": sim.stream_messages(),
    }
    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as out:
            json.dump(document, out)
        os.replace(partial, path)
    except OSError as exc:
        click.echo(f"podcache sim: cannot write the stats file {path!r}: {exc}", err=True)


def cli_main(argv: Sequence[str] | None = None) -> int:
    """Run ``podcache sim`` with these arguments; returns the exit status (2: usage error)."""
    try:
        result = sim_command.main(
            args=list(argv) if argv is not None else None,
            prog_name="podcache sim",
            standalone_mode=False,
        )
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    return result if isinstance(result, int) else 0
