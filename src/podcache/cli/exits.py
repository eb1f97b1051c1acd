"""Exit statuses of ``podcache`` and the CLI's own errors; no click commands, no runtime access.

====  ===========================================================================================
0     success (also ``watch`` left with q or Ctrl-C)
1     runtime or environment error: the runtime failed or cannot be found, a bad crictl config
      file or CONTAINER_RUNTIME_ENDPOINT; the message names the endpoint or the source (also,
      silently, output to a pipe whose reader has gone, as click does)
2     usage error: a bad option, value or argument on the command line (click's), including an
      ID prefix shorter than 4 characters and an ambiguous ID prefix (the candidates are listed)
3     not found: ``inspect`` (or ``ps --pod``) names nothing the runtime has; ``which``: a PID
      in no container or pod the runtime lists
130   interrupted by Ctrl-C (outside ``watch``)
====  ===========================================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

import click

from podcache.errors import PodcacheError

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "EXIT_USAGE",
    "AmbiguousIDError",
    "CLIError",
    "NotFoundError",
    "show_error",
]

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_INTERRUPTED = 130


def show_error(message: str, file: IO[Any] | None = None) -> None:
    """Print ``podcache: error: <message>`` on standard error (or ``file``)."""
    click.echo(f"podcache: error: {message}", file=file, err=file is None)


class CLIError(click.ClickException, PodcacheError):
    """An error the CLI reports in one message and an exit status, never with a traceback.

    ``hints`` are printed after the message, one per line, as ``podcache: hint: ...``.
    """

    exit_code = EXIT_RUNTIME

    def __init__(self, message: str, *, hints: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.hints = tuple(hints)

    def show(self, file: IO[Any] | None = None) -> None:
        show_error(self.format_message(), file)
        for hint in self.hints:
            click.echo(f"podcache: hint: {hint}", file=file, err=file is None)


class NotFoundError(CLIError):
    """The runtime has nothing matching what was asked for (exit 3)."""

    exit_code = EXIT_NOT_FOUND


class AmbiguousIDError(CLIError):
    """An ID prefix matches several containers or sandboxes (exit 2); lists the candidates."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, candidates: Sequence[str]) -> None:
        super().__init__(message)
        self.candidates = tuple(candidates)

    def show(self, file: IO[Any] | None = None) -> None:
        super().show(file)
        click.echo("candidates:", file=file, err=file is None)
        for candidate in self.candidates:
            click.echo(f"  {candidate}", file=file, err=file is None)
