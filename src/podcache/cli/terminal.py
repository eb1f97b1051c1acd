"""Single keys from the terminal for ``podcache watch``: cbreak mode on a tty (restored on exit)
and a wait-for-a-key-or-timeout; it knows nothing of pods or rendering.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from typing import IO, Any

__all__ = ["KeyReader"]


class KeyReader:
    """``with KeyReader() as keys: typed = keys.wait(0.25)`` -- keys typed, or None on timeout.

    On a terminal, input is switched to cbreak mode (keys arrive unbuffered and unechoed; Ctrl-C
    still raises KeyboardInterrupt) and the previous mode is restored on exit, however the block
    ends. Without a terminal, ``wait`` only sleeps.
    """

    def __init__(self, stream: IO[Any] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdin
        self._fd: int | None = None
        self._saved: list[Any] | None = None

    def __enter__(self) -> KeyReader:
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            return self
        if not os.isatty(fd):
            return self
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd, termios.TCSANOW)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None and self._saved is not None:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._fd = self._saved = None

    def wait(self, timeout: float) -> str | None:
        """The keys typed (at least one) if any arrive within ``timeout`` seconds, else None."""
        fd = self._fd
        if fd is None:
            time.sleep(timeout)
            return None
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return None
        data = os.read(fd, 32)
        if not data:  # the terminal went away
            time.sleep(timeout)
            return None
        return data.decode("utf-8", "replace")
