"""How the console script starts and ends fast (docs/architecture.md §6 rule 1): the cyclic
garbage collector paused while it imports and parses, and an exit without the interpreter's
teardown; nothing here changes what a command does or prints.

- ``pause_collection()`` (``main()``, before click and the commands are imported) turns the
  cyclic GC off: start-up allocates tens of thousands of long-lived objects (modules, classes,
  click's options) and collecting them, which frees none, took about a tenth of a one-shot
  command's time. ``resume_collection()`` turns it back on, and only if ``pause_collection``
  turned it off: the group's callback, before any command but those that read once and end
  (``app.COMMANDS``' ``reads_once``: ``pods``, ``ps``, ``which``, ``inspect``, ``version``,
  ``completion``), and ``source.open_source`` for a command that follows the runtime
  (``pods -w``), so that a command that keeps running has its collector as ever.
- ``exit_without_teardown(status)`` ends the process with ``os._exit`` once stderr is
  flushed, when the teardown has nothing to do but free memory: no thread but the main one
  and no ``atexit`` callback (coverage, a library's cleanup, a ``weakref.finalize``).
  Freeing every module and object takes a one-shot command about a fifth of its time.

Deliberately not here: anything for a caller of ``run()`` in Python (a test, a program that
embeds the CLI): only the console script's ``main()`` pauses or exits.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

__all__ = ["exit_without_teardown", "pause_collection", "resume_collection"]

_paused = False


def pause_collection() -> None:
    """Turn the cyclic GC off for start-up, if it is on."""
    global _paused  # one flag for the process
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collection() -> None:
    """Turn the cyclic GC back on if ``pause_collection`` turned it off."""
    global _paused  # one flag for the process
    if _paused:
        _paused = False
        gc.enable()


def exit_without_teardown(status: int) -> None:
    """End the process now with ``status`` if the interpreter's teardown would only free
    memory (module rules); else return, for ``sys.exit``."""
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
