"""``--log-level`` of the CLI's long-running commands (``watch``, ``events``, ``pods -w``): what
the library logs (the ``podcache`` loggers: the event subscription's changes at WARNING, with
their causes) goes to stderr as ``podcache: warning: ...``. While ``watch`` draws its screen,
lines are held (the last ``HELD_MAX``), the newest shown on the screen's last line, and written
to stderr when the screen closes. Nothing else: no files, no other loggers.

The option only records the level; ``install()``, called when a command starts following the
runtime (``follow.listing``), imports ``logging`` and sets the handler up, so a one-shot command
(``podcache pods`` without ``-w``) pays nothing for it at start-up.
"""

# ruff: noqa: PLC0415 -- logging is imported when a command starts following: start-up stays fast

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from podcache.defaults import LOG_LEVELS

if TYPE_CHECKING:
    import logging

__all__ = ["HELD_MAX", "held", "install", "log_level_option", "newest_held"]

F = TypeVar("F", bound=Callable[..., Any])

HELD_MAX = 100
"""Most log lines held while ``watch``'s screen is up (the oldest are dropped first)."""


class _Sink:
    """Where formatted lines go: the ``sys.stderr`` of the moment (click's test runner swaps
    it), or ``holding`` while a screen is up."""

    def __init__(self) -> None:
        self.level = "warning"
        self.holding: collections.deque[str] | None = None
        self.handler: logging.Handler | None = None

    def write(self, line: str) -> None:
        if self.holding is not None:
            self.holding.append(line)
            return
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


_sink = _Sink()


def _record_level(ctx: click.Context, param: click.Parameter, value: str) -> str:
    _sink.level = value.lower()
    return value


def log_level_option(f: F) -> F:
    """The ``--log-level`` option; it records the level (``install`` applies it)."""
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default="warning",
        show_default=True,
        expose_value=False,
        callback=_record_level,
        help="Least severity of the log lines written to stderr: warning says each change of "
        "the runtime's event subscription (lost, back, unsupported) with its cause; info "
        "adds its start and close; debug every failed attempt.",
    )(f)


def install() -> None:
    """Send the ``podcache`` loggers' records at the recorded level and above to stderr (or to
    the held lines), as ``podcache: warning: MESSAGE``. Idempotent."""
    import logging

    if _sink.handler is None:

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    text = f"podcache: {record.levelname.lower()}: {record.getMessage()}"
                    if record.exc_info:
                        text = f"{text}\n{logging.Formatter().formatException(record.exc_info)}"
                except Exception:  # a record that cannot be formatted is logging's to report
                    self.handleError(record)
                    return
                _sink.write(text)

        _sink.handler = Handler()
    logger = logging.getLogger("podcache")
    logger.setLevel(_sink.level.upper())
    if _sink.handler not in logger.handlers:
        logger.addHandler(_sink.handler)


@contextmanager
def held() -> Iterator[None]:
    """Hold log lines instead of writing them (a full-screen display is up); write them out,
    the last ``HELD_MAX``, on leaving."""
    _sink.holding = collections.deque(maxlen=HELD_MAX)
    try:
        yield
    finally:
        lines, _sink.holding = _sink.holding, None
        for line in lines:
            _sink.write(line)


def newest_held() -> str:
    """The newest line held, or ""."""
    holding = _sink.holding
    return holding[-1] if holding else ""
