"""The ``podcache`` click group: global options, the commands it mounts, and lazy loading of
``sim`` and ``serve`` (their modules import gRPC servers and ASGI servers, so they are imported
only when run, and listed in ``--help`` from a table here). No command logic lives here.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from podcache import __version__
from podcache.cli.commands.completion import completion_command
from podcache.cli.commands.events import events_command
from podcache.cli.commands.inspect import inspect_command
from podcache.cli.commands.pods import pods_command
from podcache.cli.commands.ps import ps_command
from podcache.cli.commands.version import version_command
from podcache.cli.commands.watch import watch_command
from podcache.cli.commands.which import which_command
from podcache.cli.exits import CLIError
from podcache.cli.options import RuntimeSettings, group_runtime_options

__all__ = ["LAZY_COMMANDS", "PodcacheGroup", "cli"]

LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "serve": (
        "podcache.serve.command",
        "serve_command",
        "Serve the node's pods over a node-local HTTP API.",
    ),
    "sim": (
        "podcache.sim.command",
        "sim_command",
        "Serve a simulated CRI runtime until interrupted.",
    ),
}
"""Commands imported on first use: name -> (module, attribute, short help for ``--help``)."""


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
    """A group whose ``LAZY_COMMANDS`` are imported only when invoked or completed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = LAZY_COMMANDS.get(cmd_name)
        if lazy is None:
            return super().get_command(ctx, cmd_name)
        module_name, attribute, _ = lazy
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            return _unavailable(cmd_name, module_name, e)
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):  # pragma: no cover - a packaging mistake
            raise TypeError(f"{module_name}.{attribute} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, with lazy commands described from the table (not imported)."""
        rows: list[tuple[str, str]] = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        for name in names:
            if name in LAZY_COMMANDS:
                rows.append((name, LAZY_COMMANDS[name][2]))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
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
    if ctx.invoked_subcommand in LAZY_COMMANDS and ctx.obj != RuntimeSettings():
        # sim and serve take their own options; silently ignoring these would mislead.
        raise click.UsageError(
            f"runtime options go after the command for 'podcache {ctx.invoked_subcommand}'"
        )


for _command in (
    pods_command,
    ps_command,
    inspect_command,
    watch_command,
    events_command,
    which_command,
    version_command,
    completion_command,
):
    cli.add_command(_command)
