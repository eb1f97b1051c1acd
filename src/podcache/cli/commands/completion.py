"""``podcache completion SHELL``: print click's completion script for bash, zsh or fish; the
command only (the completion itself is click's, driven by ``_PODCACHE_COMPLETE``)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

__all__ = ["completion_command"]

COMPLETE_VAR = "_PODCACHE_COMPLETE"


@click.command("completion", short_help="Print the shell completion script (bash, zsh, fish).")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> None:
    """Print the completion script for SHELL; load it with, for bash:

        eval "$(podcache completion bash)"

    or save it where your shell looks for completions (zsh: a file named _podcache on $fpath;
    fish: ~/.config/fish/completions/podcache.fish).
    """
    cls = get_completion_class(shell)
    assert cls is not None  # the choice lists only shells click knows
    root = ctx.find_root()
    completer = cls(root.command, {}, root.info_name or "podcache", COMPLETE_VAR)
    click.echo(completer.source())
