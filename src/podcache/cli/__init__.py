"""The ``podcache`` command line (crictl's conventions); ``main()`` is the console script.

``main`` runs the click group from ``app`` and owns the exit status (see ``exits``): podcache's
own errors become one ``podcache: error: ...`` line on stderr, never a traceback. Commands live
in ``commands/``, option parsing in ``options``, the runtime in ``source``, printing in
``render``. Nothing here is a library API.

Start-up and exit (docs/architecture.md §6 rule 1): the console script's ``main()`` ends the
process with ``os._exit`` once stdout and stderr are flushed, when the interpreter's teardown
has nothing to do but free memory (no thread but the main one, no ``atexit`` callback): freeing
every module and object takes a one-shot command about a fifth of its time.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Sequence

import click

from podcache.cli.app import cli
from podcache.cli.exits import EXIT_INTERRUPTED, EXIT_RUNTIME, show_error
from podcache.errors import PodcacheError

__all__ = ["main", "run"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``podcache`` with ``argv`` (default: ``sys.argv[1:]``) and exit with its status (as
    the console script, ``argv`` None: at once, when nothing is left to run at exit)."""
    status = run(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        status = _closed_pipe()
    if argv is None:
        _exit_without_teardown(status)
    sys.exit(status)


def _exit_without_teardown(status: int) -> None:
    """End the process now with ``status`` if the interpreter's teardown would only free
    memory: no other thread is alive and no ``atexit`` callback is registered (coverage, a
    library's cleanup, a ``weakref.finalize``); else return, for ``sys.exit``."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    if atexit._ncallbacks():  # CPython's count of the registered callbacks
        return
    try:
        sys.stderr.flush()
    except OSError:
        return
    os._exit(status)


def _closed_pipe() -> int:
    """The reader went away (``podcache pods | head -1``): stop quietly with status 1, as click
    does, and keep the interpreter from complaining when it flushes stdout at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_RUNTIME


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``podcache`` with ``argv`` and return the exit status instead of exiting."""
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
        if isinstance(e.__cause__, KeyboardInterrupt):
            status = EXIT_INTERRUPTED
        else:
            click.echo("Aborted!", err=True)
            status = EXIT_RUNTIME
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
