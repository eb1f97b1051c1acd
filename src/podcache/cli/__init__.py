"""The ``podcache`` command line (crictl's conventions); ``main()`` is the console script.

``main`` runs the click group from ``app`` and owns the exit status (see ``exits``): podcache's
own errors become one ``podcache: error: ...`` line on stderr, never a traceback. Commands live
in ``commands/``, option parsing in ``options``, the runtime in ``source``, printing in
``render``. Nothing here is a library API.

Start-up and exit (docs/architecture.md §6 rule 1, ``startup``): importing this package
imports neither click nor a command; the console script's ``main()`` pauses the cyclic GC
before ``run`` imports them, and ends the process without the interpreter's teardown when
that would only free memory.
"""

# ruff: noqa: PLC0415 -- click and the commands are imported by run(): start-up stays fast

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from podcache.cli.early import begin
from podcache.cli.startup import exit_without_teardown, pause_collection

__all__ = ["main", "run", "take_back_sigint"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``podcache`` with ``argv`` (default: ``sys.argv[1:]``) and exit with its status (as
    the console script, ``argv`` None: at once, when nothing is left to run at exit)."""
    if argv is None:
        take_back_sigint()
        pause_collection()  # start-up; the group's callback resumes it (``startup``)
        begin(sys.argv[1:])  # a read that can start before click is imported (``early``)
    status = run(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        status = _closed_pipe()
    if argv is None:
        exit_without_teardown(status)
    sys.exit(status)


def take_back_sigint() -> None:
    """SIGINT stops podcache however it was started. A non-interactive shell starts its
    background jobs with SIGINT ignored, and an ignored signal is inherited: Python would keep
    ignoring it, and ``events``, ``pods -w`` or ``watch`` would never stop on Ctrl-C or a
    supervisor's SIGINT. Go's ``signal.Notify`` (crictl's) takes an ignored SIGINT back the
    same way: a command that asks for SIGINT gets it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _closed_pipe() -> int:
    """The reader went away (``podcache pods | head -1``): stop quietly with status 1, as click
    does, and keep the interpreter from complaining when it flushes stdout at exit."""
    from podcache.cli.exits import EXIT_RUNTIME

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_RUNTIME


def _aborted(abort: Exception) -> int:
    """The status of a command click aborted: interrupted by Ctrl-C (said nothing), or by
    click itself (said so)."""
    import click

    from podcache.cli.exits import EXIT_INTERRUPTED, EXIT_RUNTIME

    if isinstance(abort.__cause__, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    click.echo("Aborted!", err=True)
    return EXIT_RUNTIME


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``podcache`` with ``argv`` and return the exit status instead of exiting."""
    import click

    from podcache.cli.app import cli
    from podcache.cli.exits import EXIT_INTERRUPTED, EXIT_RUNTIME, show_error
    from podcache.errors import PodcacheError

    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="podcache",
            standalone_mode=False,
        )
    except click.ClickException as e:
        e.show()
        status = e.exit_code
    except click.exceptions.Exit as e:
        status = e.exit_code
    except click.Abort as e:
        status = _aborted(e)
    except KeyboardInterrupt:
        click.echo(err=True)
        status = EXIT_INTERRUPTED
    except PodcacheError as e:
        show_error(str(e))
        status = EXIT_RUNTIME
    except BrokenPipeError:
        status = _closed_pipe()
    else:
        status = result if isinstance(result, int) else 0
    return status
