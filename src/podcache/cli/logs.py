"""``--log-level`` of the CLI's long-running commands (``watch``, ``events``, ``pods -w``): what
the library logs (the ``podcache`` loggers: the event subscription's changes at WARNING, with
their causes) goes to stderr as ``podcache: warning: ...``. While ``watch`` draws its screen,
lines are held (the last ``HELD_MAX``), the newest shown on the screen's last line, and written
to stderr when the screen closes. Nothing else: no files, no other loggers.
"""

from __future__ import annotations

import collections
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from podcache.defaults import LOG_LEVELS

__all__ = ["HELD_MAX", "held", "log_level_option", "newest_held"]

F = TypeVar("F", bound=Callable[..., Any])

HELD_MAX = 100
"""Most log lines held while ``watch``'s screen is up (the oldest are dropped first)."""


class _StderrHandler(logging.Handler):
    """Writes each record to the ``sys.stderr`` of the moment (click's test runner swaps it),
    or holds it while a screen is up."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(_Formatter())
        self.holding: collections.deque[str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # a record that cannot be formatted is logging's to report
            self.handleError(record)
            return
        if self.holding is not None:
            self.holding.append(line)
            return
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class _Formatter(logging.Formatter):
    """``podcache: warning: MESSAGE`` (as the CLI's own errors), the traceback after it."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"podcache: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        return text


_handler = _StderrHandler()


def _configure(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Send the ``podcache`` loggers' records at ``value`` and above to stderr."""
    logger = logging.getLogger("podcache")
    logger.setLevel(value.upper())
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
    return value


def log_level_option(f: F) -> F:
    """The ``--log-level`` option; it configures logging as it is read (no parameter)."""
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default="warning",
        show_default=True,
        expose_value=False,
        callback=_configure,
        help="Least severity of the log lines written to stderr: warning says each change of "
        "the runtime's event subscription (lost, back, unsupported) with its cause; info "
        "adds its start and close; debug every failed attempt.",
    )(f)


@contextmanager
def held() -> Iterator[None]:
    """Hold log lines instead of writing them (a full-screen display is up); write them out,
    the last ``HELD_MAX``, on leaving."""
    _handler.holding = collections.deque(maxlen=HELD_MAX)
    try:
        yield
    finally:
        lines, _handler.holding = _handler.holding, None
        for line in lines:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def newest_held() -> str:
    """The newest line held, or ""."""
    holding = _handler.holding
    return holding[-1] if holding else ""
