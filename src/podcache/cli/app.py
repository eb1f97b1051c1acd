"""The ``podcache`` click group: global options, the table of its commands, and their lazy
loading. Every command's module is imported only when that command runs (or is completed, or
shows its own help): ``podcache pods`` imports ``commands/pods.py`` and no other command's
module, and ``sim`` and ``serve`` (gRPC and ASGI servers) only when run. ``podcache --help``
lists every command from the table here, imported by none (a test holds each row's help text
to its command's). No command logic lives here.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import click

from podcache import __version__
from podcache.cli.exits import CLIError
from podcache.cli.options import RuntimeSettings, group_runtime_options
from podcache.cli.startup import resume_collection

__all__ = ["COMMANDS", "LAZY_COMMANDS", "CommandEntry", "PodcacheGroup", "cli"]


class CommandEntry(NamedTuple):
    """Where a command lives and what ``--help`` says of it before it is imported."""

    module: str
    attribute: str
    short_help: str
    own_options: bool = False
    """It takes no runtime options before its name and may be missing from an installation
    (``sim``, ``serve``: their servers' packages)."""
    reads_once: bool = False
    """It ends once it has printed (``pods -w`` aside, which resumes the collector when it
    opens its runtime): start-up's pause of the cyclic GC lasts to its end (``startup``)."""


COMMANDS: dict[str, CommandEntry] = {
    "completion": CommandEntry(
        "podcache.cli.commands.completion",
        "completion_command",
        "Print the shell completion script (bash, zsh, fish).",
        reads_once=True,
    ),
    "events": CommandEntry(
        "podcache.cli.commands.events",
        "events_command",
        "Print the node's pod changes as they happen.",
    ),
    "inspect": CommandEntry(
        "podcache.cli.commands.inspect",
        "inspect_command",
        "Show one pod by UID, name_namespace, or container ID.",
        reads_once=True,
    ),
    "pods": CommandEntry(
        "podcache.cli.commands.pods",
        "pods_command",
        "List the node's pods (ready sandboxes; -a: all).",
        reads_once=True,
    ),
    "ps": CommandEntry(
        "podcache.cli.commands.ps",
        "ps_command",
        "List the node's containers with their pods (running; -a: all).",
        reads_once=True,
    ),
    "serve": CommandEntry(
        "podcache.serve.command",
        "serve_command",
        "Serve the node's pods over a node-local HTTP API.",
        own_options=True,
    ),
    "sim": CommandEntry(
        "podcache.sim.command",
        "sim_command",
        "Serve a simulated CRI runtime until interrupted.",
        own_options=True,
    ),
    "version": CommandEntry(
        "podcache.cli.commands.version",
        "version_command",
        "Show podcache's and the runtime's versions.",
        reads_once=True,
    ),
    "watch": CommandEntry(
        "podcache.cli.commands.watch",
        "watch_command",
        "Watch the node's pods live, served from the runtime cache.",
    ),
    "which": CommandEntry(
        "podcache.cli.commands.which",
        "which_command",
        "Show the pod of processes (by PID) and of pod IPs.",
        reads_once=True,
    ),
}
"""Every command: name -> where it lives and its one line in ``podcache --help``."""

LAZY_COMMANDS: dict[str, CommandEntry] = {
    name: entry for name, entry in COMMANDS.items() if entry.own_options
}
"""The commands with options of their own (``sim``, ``serve``)."""


def _unavailable(name: str, module: str, error: ImportError) -> click.Command:
    """A stand-in for a lazy command whose module cannot be imported: it fails with exit 1."""

    def fail() -> None:
        raise CLIError(f"'podcache {name}' is not available: cannot import {module} ({error})")

    return click.Command(
        name,
        callback=fail,
        help=f"Not available in this installation: cannot import {module} ({error}).",
        short_help="(not available in this installation)",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )


class PodcacheGroup(click.Group):
    """A group whose ``COMMANDS`` are imported only when invoked or completed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return super().get_command(ctx, cmd_name)
        try:
            module = importlib.import_module(entry.module)
        except ImportError as e:
            if not entry.own_options:
                raise
            return _unavailable(cmd_name, entry.module, e)
        command = getattr(module, entry.attribute)
        if not isinstance(command, click.Command):  # pragma: no cover - a packaging mistake
            raise TypeError(f"{entry.module}.{entry.attribute} is not a click command")
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, with "did you mean" suggestions drawn from the table (click draws them
        from the commands added to the group, of which there are none): the commands that
        take the group's runtime options, as when they were added eagerly."""
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as e:
            if e.possibilities is not None:  # pragma: no cover - a command added by hand
                raise
            raise click.exceptions.NoSuchCommand(
                e.command_name,
                possibilities=[n for n, entry in COMMANDS.items() if not entry.own_options],
                ctx=ctx,
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, described from the table (no command is imported)."""
        rows: list[tuple[str, str]] = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        for name in names:
            entry = COMMANDS.get(name)
            if entry is not None:
                rows.append((name, entry.short_help))
                continue
            command = super().get_command(ctx, name)  # pragma: no cover - added by hand
            if command is not None and not command.hidden:  # pragma: no cover
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=PodcacheGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=(
        "Exit status: 0 ok; 1 runtime or environment error; 2 usage error (also an ambiguous "
        "ID prefix); 3 not found; 130 interrupted. Runtime options may also follow the command."
    ),
)
@click.version_option(__version__, "-V", "--version", prog_name="podcache")
@group_runtime_options
def cli(**kwargs: Any) -> None:
    """podcache: the pods on this node as the kubelet sees them, read over CRI, in crictl's
    conventions.

    The runtime is found as crictl finds it: -r/--runtime-endpoint, else
    $CONTAINER_RUNTIME_ENDPOINT, else runtime-endpoint in the crictl config file (-c, else
    $CRI_CONFIG_FILE, else /etc/crictl.yaml), else the first existing of
    unix:///run/containerd/containerd.sock, unix:///run/crio/crio.sock and
    unix:///var/run/cri-dockerd.sock. --sim reads a built-in simulated runtime instead;
    --sim-fallback uses it only when no runtime is configured or found.
    """
    ctx = click.get_current_context()
    entry = COMMANDS.get(ctx.invoked_subcommand or "")
    if entry is None or not entry.reads_once:
        resume_collection()  # before a command that keeps running (cli.startup)
    if ctx.invoked_subcommand in LAZY_COMMANDS and ctx.obj != RuntimeSettings():
        # sim and serve take their own options; silently ignoring these would mislead.
        raise click.UsageError(
            f"runtime options go after the command for 'podcache {ctx.invoked_subcommand}'"
        )
